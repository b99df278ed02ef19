"""The task modules import one another in one direction (issue 31): builders <- tasks <-
example_ids <- task_fit <- encoding, with no cycle through any workbench module, counting the
imports inside functions too, and no private (underscore) name crosses a module boundary.
Read from the source with `ast`, so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "workbench"
TASK_MODULES = (
    "workbench.builders", "workbench.tasks", "workbench.example_ids", "workbench.task_fit",
    "workbench.encoding",
)  # fmt: skip


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict) -> list[tuple[str, str]]:
    """(imported module, imported name or "") for every workbench import in the file, at any
    depth (imports inside functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] == "workbench"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "workbench":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                # `from workbench import builders` imports the module, not a name.
                out.append((sub, "") if sub in modules else (base, alias.name))
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {m for m, _ in _imports(name, path, modules) if m in modules and m != name}
        for name, path in modules.items()
    }


def _reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_reader_sees_lazy_imports():
    # encoding imports tokenizer at the top; tasks imports builders at the top; cli imports
    # tasks only inside functions: all three edges are read.
    graph = _graph()
    assert "workbench.tokenizer" in graph["workbench.encoding"]
    assert "workbench.builders" in graph["workbench.tasks"]
    assert "workbench.tasks" in graph["workbench.cli"]


@pytest.mark.parametrize("module", TASK_MODULES)
def test_no_import_cycle_through_a_task_module(module):
    graph = _graph()
    cycle = sorted(m for m in _reaches(graph, module) if module in _reaches(graph, m))
    assert module not in _reaches(graph, module), f"{module} is on an import cycle via {cycle}"


def test_builders_knows_nothing_of_tasks():
    assert not _reaches(_graph(), "workbench.builders") - {"workbench.errors"}


def test_no_private_name_crosses_a_task_module_boundary():
    modules = _modules()
    crossings = []
    for name, path in modules.items():
        for source, imported in _imports(name, path, modules):
            private = imported.startswith("_") and not imported.startswith("__")
            if private and source != name and (name in TASK_MODULES or source in TASK_MODULES):
                crossings.append(f"{name} imports {source}.{imported}")
    assert not crossings, crossings
