"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- readme-example"


def _examples() -> list[str]:
    text = README.read_text()
    blocks = []
    for part in text.split(MARKER)[1:]:
        m = re.search(r"```python\n(.*?)```", part, re.DOTALL)
        assert m is not None, "a readme-example marker must precede a ```python block"
        blocks.append(m.group(1))
    return blocks


def test_readme_has_an_example():
    assert _examples()


@pytest.mark.parametrize("index", range(len(_examples())))
def test_readme_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_examples()[index], f"README example {index}", "exec"), namespace)
    table = namespace.get("table")
    if table is not None:  # the per-head screening table has one row per head
        model = namespace["model"]
        assert len(table) == model.cfg.n_layers * model.cfg.n_heads
        assert list(table.columns[:3]) == ["layer", "head", "head_name"]
