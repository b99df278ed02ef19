"""Lazy package exports: a package's public names imported on first use (PEP 562).

A package such as `workbench.tasks` gathers modules of which some import torch. Its
`__init__` names where each public name lives and imports that module only when the name is
first read, so importing one light module of the package (the task format, a registry) does
not import torch, and `from workbench.tasks import Task` works as before.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable


def lazy_package(namespace: dict, modules: dict[str, str]) -> tuple[Callable, Callable, list]:
    """`(__getattr__, __dir__, __all__)` for a package whose `modules` map each of its
    modules (relative to it) to the public names it defines, space-separated."""
    package = namespace["__name__"]
    exports = {name: f"{package}.{module}" for module, names in modules.items()
               for name in names.split()}
    return (*lazy_exports(namespace, exports), sorted(exports))


def import_all(package: str) -> None:
    """Import every module of `package` (the plug-in folders: each module registers itself
    when imported)."""
    folder = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(folder.__path__), key=lambda i: i.name):
        importlib.import_module(f"{package}.{info.name}")


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
