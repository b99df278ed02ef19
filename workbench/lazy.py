"""Lazy package exports: a package's public names imported on first use (PEP 562).

A package such as `workbench.tasks` gathers modules of which some import torch. Its
`__init__` lists its public names as ordinary imports under `if TYPE_CHECKING:`, which a
reader, grep and an IDE follow, and which Python never runs. `lazy_package` reads that block
from the `__init__`'s source and imports each name's module only when the name is first read,
so importing one light module of the package (the task format, a registry) does not import
torch, and `from workbench.tasks import Task` works as before. The block is the only list of
the package's names: `__all__` is derived from it. A name may not be a submodule's name
(importing `workbench.results.compare` sets the package's attribute `compare` to that
module), so such a function is imported from its module.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path


def typing_imports(path: str | Path, package: str) -> dict[str, str]:
    """Public name -> defining module, from the `from ... import ...` statements under the
    top-level `if TYPE_CHECKING:` of the module at `path` (relative imports resolved against
    `package`)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    exports: dict[str, str] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"):
            continue
        for stmt in node.body:
            if not isinstance(stmt, ast.ImportFrom):
                raise ImportError(f"{path}: only `from ... import ...` belongs under "
                                  "TYPE_CHECKING in a lazy package")
            base = package.rsplit(".", stmt.level - 1)[0] if stmt.level > 1 else package
            module = (f"{base}.{stmt.module}" if stmt.module else base) if stmt.level \
                else stmt.module
            for alias in stmt.names:
                exports[alias.asname or alias.name] = module
    return exports


def lazy_package(namespace: dict) -> tuple[Callable, Callable, list]:
    """`(__getattr__, __dir__, __all__)` for the package whose `globals()` is `namespace`,
    exporting the names its `if TYPE_CHECKING:` block imports (module docstring)."""
    exports = typing_imports(namespace["__file__"], namespace["__name__"])
    return (*lazy_exports(namespace, exports), sorted(exports))


def lazy_exports(namespace: dict, exports: dict[str, str]) -> tuple[Callable, Callable]:
    """`(__getattr__, __dir__)` for a package whose public names `exports` maps to their
    modules; a name read once is stored in the package's `namespace` (its `globals()`)."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
