"""Plug-ins: records registered by name, found in a folder of modules, code named by a string.

The search strategies (`workbench.search.registry`) and the screening methods
(`workbench.screening.registry`) are each a `Registry` of records: a record has a `name`, the
built-in ones are the modules of a folder (each registers itself when imported, and the
registry imports them all on first use), and a user's module or a test registers more the same
way. A record whose code imports torch names it as a `"module:function"` string (`resolve`),
so that reading the registry imports nothing heavy: the command line lists and checks names
in a fraction of a second.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType

from workbench.errors import WorkbenchError
from workbench.options import choose


def resolve(ref: Callable | str) -> Callable:
    """`ref` itself, or the function a `"module:function"` string names (imported now)."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def import_all(package: str) -> None:
    """Import every module of `package` (each registers its plug-in when imported)."""
    folder = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(folder.__path__), key=lambda i: i.name):
        importlib.import_module(f"{package}.{info.name}")


class Registry:
    """Records by name (each has a `name` attribute, a Python identifier); the built-in ones
    are the modules of `package`, imported on first use.

    Args:
        what: how error messages name a record ("search strategy").
        package: the folder of built-in plug-in modules.
    """

    def __init__(self, what: str, package: str) -> None:
        self.what, self.package = what, package
        self._records: dict[str, object] = {}
        self._found = False

    def register(self, record):
        """Add `record` (registering the same record again changes nothing; two records may
        not share a name)."""
        name = getattr(record, "name", None)
        if not isinstance(name, str) or not name.isidentifier():
            raise WorkbenchError(f"a {self.what}'s name must be an identifier; got {name!r}")
        old = self._records.get(name)
        if old is not None and old != record:
            raise WorkbenchError(f"a {self.what} named {name!r} is already registered; "
                                 "choose another name")
        self._records[name] = record
        return record

    def unregister(self, name: str) -> None:
        """Remove a registered record (tests register toy plug-ins)."""
        self._records.pop(name, None)

    @contextmanager
    def swapped(self, record) -> Iterator[None]:
        """Stand `record` in for the record of its name while the block runs (tests)."""
        self.records()
        old = self._records.get(record.name)
        self._records[record.name] = record
        try:
            yield
        finally:
            if old is None:
                self._records.pop(record.name, None)
            else:
                self._records[record.name] = old

    def records(self) -> Mapping[str, object]:
        """Every registered record by name (read-only)."""
        if not self._found:
            import_all(self.package)
            self._found = True
        return MappingProxyType(self._records)

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self.records()))

    def get(self, name: str, among=None):
        """The record named `name` (among `among` names, default all), else one
        `WorkbenchError` listing the known names and the closest."""
        return self.records()[choose(name, list(among or self.names()), self.what)]
