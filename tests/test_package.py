"""The package's top level (`workbench/__init__.py`): `__all__` is exactly the names it
imports on first use, each the object its module defines."""

from __future__ import annotations

import pytest


def test_package_exports_load_lazily():
    """`__all__` names exactly the lazily imported names, each the object its module
    defines."""
    import importlib

    import workbench

    assert set(workbench.__all__) == {*workbench._EXPORTS, "WorkbenchError"}
    for name, module in workbench._EXPORTS.items():
        assert getattr(workbench, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        workbench.nope  # noqa: B018
