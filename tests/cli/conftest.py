"""Fixtures of the command-line tests: the demo model and tasks written to a folder."""

from __future__ import annotations

import pytest

from workbench.cli.demo import write_demo


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("demo"))
