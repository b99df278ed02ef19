"""The results folder's modules import one way: no cycle, no private name across modules.

`workbench.results` (the run's tables), `workbench.report` (its `report.md`),
`workbench.plots`, `workbench.store` and `workbench.explain` form no import cycle, counting
imports inside functions and the package `__init__` that importing a submodule runs; and
none of them imports another module's underscore name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "workbench"
CHECKED = ("workbench.results", "workbench.report", "workbench.plots", "workbench.store",
           "workbench.explain")


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, those inside functions too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def _graph() -> dict[str, set[str]]:
    """module -> the workbench modules importing it runs (a submodule's packages included,
    except the importer's own packages and `workbench`, whose `__init__` imports lazily)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in _imports(path):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for name in names:
                parts = name.split(".")
                for k in range(2, len(parts) + 1):
                    target = ".".join(parts[:k])
                    if target in mods and target != m and not m.startswith(target + "."):
                        graph[m].add(target)
    return graph


def _checked(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in CHECKED)


def test_no_import_cycle_through_the_results_modules():
    graph = _graph()
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        for nxt in sorted(graph[m]):
            if nxt == path[0]:
                cycles.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its least module
                visit(nxt, [*path, nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert not [c for c in cycles if any(_checked(m) for m in c)]


@pytest.mark.parametrize("module", sorted(m for m in _modules() if _checked(m)))
def test_no_private_name_is_imported_from_another_module(module):
    private = [
        f"from {node.module} import {a.name}"
        for node in _imports(_modules()[module])
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("workbench")
        for a in node.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]
    assert not private
