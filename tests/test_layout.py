"""The package's layout rules, read from the source with `ast`: no import circles
(imports inside functions count: they are deferred, not absent), no private name imported
from another module, modules of a readable size, public functions with few parameters."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "workbench"
MAX_MODULE_LINES = 400  # "no module over 400 lines"
MAX_PUBLIC_PARAMS = 10  # "no public function over 10 parameters" (self and cls not counted)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _exports() -> dict[str, str]:
    """`workbench/__init__.py`'s lazy exports: public name -> defining module."""
    from workbench.lazy import typing_imports

    return typing_imports(PACKAGE / "__init__.py", "workbench")


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks (never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(name: str, path: Path, modules: dict[str, Path], exports: dict[str, str]):
    """`(target module, imported names, line)` for every workbench import in `path`."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "workbench":
                    yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "workbench":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    yield sub, [], node.lineno
                elif base == "workbench" and alias.name in exports:
                    yield exports[alias.name], [alias.name], node.lineno
                else:
                    yield base, [alias.name], node.lineno


def _graph() -> dict[str, set[str]]:
    modules, exports = _modules(), _exports()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(name, path, modules, exports):
            if target in modules and target != name:
                graph[name].add(target)
                # importing `a.b.c` runs `a.b`'s `__init__` first: an edge to it too, unless
                # the importer is inside `a.b` (its `__init__` is then already running)
                parts = target.split(".")
                for k in range(2, len(parts)):
                    package = ".".join(parts[:k])
                    if package in modules and not name.startswith(package + "."):
                        graph[name].add(package)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    """The check below could fail: a planted two-module circle is reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_import_circles():
    """A package's `__init__` importing its own modules is not a circle of the design (it is
    how a package re-exports), so edges into a package's `__init__` from inside it are left
    out; every other import, at module level or inside a function, counts."""
    graph = _graph()
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    assert _cycles(graph) == []


# Package pairs that import each other (counting imports inside functions): none.
MUTUAL_PACKAGES: set[tuple[str, str]] = set()


def _package_pairs(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Pairs of packages (or top-level modules) each of which imports the other."""
    unit = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    edges = {(unit(a), unit(b)) for a, targets in graph.items() for b in targets}
    edges = {(a, b) for a, b in edges if a != b and "workbench" not in (a, b)}
    return {(a, b) for a, b in edges if (b, a) in edges and a < b}


def test_the_pair_finder_finds_a_pair():
    graph = {"workbench.a.x": {"workbench.b.y"}, "workbench.b.y": {"workbench.a.z"},
             "workbench.c": {"workbench.a.x"}}
    assert _package_pairs(graph) == {("workbench.a", "workbench.b")}


def test_packages_form_layers():
    """No two packages import each other."""
    assert _package_pairs(_graph()) == MUTUAL_PACKAGES


def test_no_private_name_is_imported_from_another_module():
    modules, exports = _modules(), _exports()
    found = []
    for path in [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "bench").glob("*.py"))]:
        name = _module_name(path)
        for target, names, line in _imports(name, path, modules, exports):
            found += [f"{path.relative_to(ROOT)}:{line} {target}.{n}" for n in names
                      if n.startswith("_") and target != name]
    assert found == []


def test_modules_are_of_a_readable_size():
    sizes = {m: p.read_text().count("\n") for m, p in _modules().items()}
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_public_functions_take_few_parameters():
    wide = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name.startswith("_"):
                continue
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            n = len(params) + bool(a.vararg) + bool(a.kwarg)
            n -= bool(params) and params[0].arg in ("self", "cls")
            if n > MAX_PUBLIC_PARAMS:
                wide[f"{name}.{node.name}"] = n
    assert wide == {}


def _readme_layout() -> dict[str, str]:
    """The README's layout table: each path named in a row's first cell -> the row's text."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Layout"):].split("\n## ")[0]
    rows = {}
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`"):
            continue
        for path in cells[1].replace("`", "").split(","):
            rows[path.strip()] = line
    return rows


def _missing_from_layout(rows: dict[str, str], modules) -> list[str]:
    """The modules of `workbench/` (paths relative to the repository) that the layout table
    names neither as a path nor, in the row of the nearest package above them, as
    `` `module` `` (a package's `__init__` as `` `package/` `` or `` `package` ``)."""
    missing = []
    for path in modules:
        rel = path.relative_to(ROOT)
        if str(rel) in rows or (rel.name == "__init__.py" and f"{rel.parent}/" in rows):
            continue
        parts = rel.with_suffix("").parts  # ("workbench", "search", "strategies", "gates")
        name = parts[-2] if rel.name == "__init__.py" else parts[-1]
        forms = (f"`{name}`", f"`{name}/`")
        named = False
        for k in range(len(parts) - 1, 1, -1):  # the nearest package with a row
            row = rows.get("/".join(parts[:k]) + "/")
            if row is not None:
                named = any(form in row for form in forms)
                break
        if not named:
            missing.append(str(rel))
    return missing


def test_every_module_is_in_the_readme_layout_table():
    rows = _readme_layout()
    assert _missing_from_layout(rows, sorted(PACKAGE.rglob("*.py"))) == []
    # the check can fail: a module the table does not name is reported
    ghost = PACKAGE / "search" / "strategies" / "annealing.py"
    assert _missing_from_layout(rows, [ghost]) == ["workbench/search/strategies/annealing.py"]
