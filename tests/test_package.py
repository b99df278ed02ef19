"""The package's top level (`workbench/__init__.py`): `__all__` is exactly the names it
imports on first use, each the object its module defines."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from workbench.lazy import typing_imports


def test_package_exports_load_lazily():
    """`__all__` names exactly the lazily imported names, each the object its module
    defines."""
    import workbench

    exports = typing_imports(Path(workbench.__file__), "workbench")
    assert set(workbench.__all__) == {*exports, "WorkbenchError"}
    for name, module in exports.items():
        assert getattr(workbench, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        workbench.nope  # noqa: B018


LAZY_PACKAGES = sorted(
    p.parent.name for p in (Path(__file__).resolve().parents[1] / "workbench").glob("*/__init__.py")
    if "lazy_package(globals())" in p.read_text())


def test_lazy_packages_are_found():
    """The check below covers the packages that list their names lazily."""
    assert {"metrics", "tasks", "results", "search"} <= set(LAZY_PACKAGES)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_package_names_are_their_modules_objects(package):
    """A sub-package's `__all__` is exactly its `if TYPE_CHECKING:` imports (what a reader and
    an IDE follow), and each name read from the package is the object its module defines."""
    pkg = importlib.import_module(f"workbench.{package}")
    exports = typing_imports(Path(pkg.__file__), pkg.__name__)
    assert exports and sorted(exports) == pkg.__all__
    for name, module in exports.items():
        assert getattr(pkg, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pkg.nope  # noqa: B018


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_no_lazy_name_is_a_submodule_name(package):
    """Importing a package's submodule sets the package's attribute of that name to the
    module, so an exported function named like a submodule (`results.compare`) would read
    as the module once anything imported it: such a name is exported from its module only."""
    import pkgutil

    pkg = importlib.import_module(f"workbench.{package}")
    submodules = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
    assert not set(pkg.__all__) & submodules


def test_typing_imports_reads_relative_and_aliased_imports(tmp_path):
    """Relative imports resolve against the package; an alias is the exported name; an import
    outside `TYPE_CHECKING` is not an export."""
    init = tmp_path / "__init__.py"
    init.write_text(
        "from typing import TYPE_CHECKING\n"
        "from os import path\n"
        "if TYPE_CHECKING:\n"
        "    from .a import f, g as h\n"
        "    from ..b import C\n"
        "    from workbench.c import d\n")
    assert typing_imports(init, "workbench.pkg") == {
        "f": "workbench.pkg.a", "h": "workbench.pkg.a", "C": "workbench.b", "d": "workbench.c"}


# ---- the public API's signatures, pinned ----------------------------------------------

SNAPSHOT = Path(__file__).resolve().parent / "api_signatures.txt"
# settings types the public functions take, not exported themselves: `run_cel(**settings)`
# takes any `CELConfig` or `Compute` field and an `Output`, `screen_heads` a `Stats`,
# `Compute`, `ScreenRace` and `ScreenScope`, `explain_heads` a `TableSizes`
SETTINGS = {"CELConfig": "workbench.config", "Compute": "workbench.compute",
            "Stats": "workbench.stats", "ScreenRace": "workbench.screening.screen",
            "ScreenScope": "workbench.screening.screen", "Output": "workbench.pipeline",
            "TableSizes": "workbench.explain.explanation"}


def api_lines() -> list[str]:
    """One line per public callable of `workbench.__all__`: each function's signature, each
    class's constructor, its public methods and properties (an enum's members), and the old
    keywords a function still accepts (`workbench.deprecation.renamed_keywords`)."""
    import dataclasses
    import enum
    import importlib
    import inspect

    import workbench

    def sig(obj) -> str:
        try:
            return str(inspect.signature(obj))
        except (TypeError, ValueError):
            return "(...)"

    lines = [f"__version__ = {workbench.__version__!r}"]
    public = {name: getattr(workbench, name) for name in sorted(workbench.__all__)}
    settings = {f"{module}.{name}": getattr(importlib.import_module(module), name)
                for name, module in SETTINGS.items()}
    for name, obj in {**public, **settings}.items():
        if not inspect.isclass(obj):
            lines.append(f"{name}{sig(obj)}")
            moved = getattr(obj, "renamed_keywords", {})
            lines += [f"{name}: old keyword {old} -> {new}" for old, new in sorted(moved.items())]
            continue
        if issubclass(obj, enum.Enum):
            lines.append(f"class {name}({', '.join(b.__name__ for b in obj.__bases__)})")
            lines += [f"{name}.{m.name} = {m.value!r}" for m in obj]
            continue
        lines.append(f"class {name}{sig(obj)}")
        fields = ({f.name for f in dataclasses.fields(obj)} if dataclasses.is_dataclass(obj)
                  else set())
        for attr, value in vars(obj).items():
            if attr.startswith("_") or attr in fields:
                continue
            if isinstance(value, property):
                lines.append(f"{name}.{attr} (property)")
            elif isinstance(value, (classmethod, staticmethod)):
                kind = type(value).__name__
                lines.append(f"{name}.{attr}{sig(getattr(obj, attr))} ({kind})")
            elif callable(value):
                lines.append(f"{name}.{attr}{sig(value)}")
            else:
                lines.append(f"{name}.{attr} = {value!r}")
    return lines


def test_public_signatures_match_the_snapshot():
    """Every signature of the public API equals `tests/api_signatures.txt`: a change to one
    (a keyword removed, renamed or reordered, a default changed) fails here until the
    snapshot is rewritten (`python -m tests.test_package`), which a reviewer sees in the diff
    and CHANGELOG.md must explain; a keyword that moves keeps working for one minor version
    (`workbench.deprecation.renamed_keywords`)."""
    want = SNAPSHOT.read_text().splitlines()
    got = api_lines()
    assert got == want, "\n".join(
        [f"- {line}" for line in want if line not in got]
        + [f"+ {line}" for line in got if line not in want])


def test_the_snapshot_catches_a_changed_signature(monkeypatch):
    """The comparison above can fail: a keyword dropped from a public function shows."""
    import workbench

    def summarize(scores):  # `by` dropped
        return scores

    monkeypatch.setattr(workbench, "summarize", summarize)
    assert "summarize(scores)" in api_lines()
    assert api_lines() != SNAPSHOT.read_text().splitlines()


def test_version_equals_pyproject():
    """`workbench.__version__` is pyproject.toml's version (tomllib is Python 3.11+)."""
    import re

    import workbench

    text = (SNAPSHOT.parent.parent / "pyproject.toml").read_text()
    project = text[text.index("[project]"):].split("\n[", 1)[0]
    assert re.findall(r'^version = "([^"]+)"$', project, re.M) == [workbench.__version__]


if __name__ == "__main__":  # rewrite the snapshot after a deliberate change
    SNAPSHOT.write_text("\n".join(api_lines()) + "\n")
    print(f"wrote {SNAPSHOT}")


def test_the_readme_lists_every_public_name():
    """The README's "Public API" table names exactly `workbench.__all__`."""
    import workbench

    text = (SNAPSHOT.parent.parent / "README.md").read_text()
    table = text[text.index("## Public API"):].split("\n## ")[0]
    named = set()
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip().startswith("`"):
            named |= {n.strip().strip("`") for n in cells[1].split(",")}
    assert named == set(workbench.__all__)
