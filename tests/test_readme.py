"""The README's Python example runs as written, and its printed output is what the command
prints."""

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


# ---- the main command's printed output ----------------------------------------------------

OUTPUT_AFTER = "On the embedded model, `.venv/bin/workbench` prints"


def readme_output() -> str:
    """The README's block of what `.venv/bin/workbench` prints on the embedded model."""
    text = README.read_text()
    m = re.search(r"```\n(.*?)```", text[text.index(OUTPUT_AFTER):], re.DOTALL)
    assert m is not None, f"a ``` block must follow {OUTPUT_AFTER!r}"
    return m.group(1)


def command_output(folder: Path, out: Path = Path("cel_results")) -> str:
    """What `workbench cel` prints after its run for the results folder `folder`, written to
    `out`: the lines the command itself prints (`workbench.cli.commands`), so a change to
    them or to the numbers shows here."""
    from workbench.results.cost import cost_line
    from workbench.results.headline import explained_line, result_lines, results_line
    from workbench.results.result import CELResult

    result = CELResult.load(folder)
    lines = result_lines(result)
    explained = result.best or result.top_candidate
    if explained:
        lines.append(explained_line(",".join(explained), out))
    if result.cost:  # a folder written since runs record their cost (the golden copies predate it)
        lines.append(cost_line(result.cost))
    lines.append(results_line(out))
    return "\n".join(lines).lstrip("\n") + "\n"


def output_problems(readme: str, printed: str) -> list[str]:
    """The lines where the README's block and the printed output differ."""
    a, b = readme.splitlines(), printed.splitlines()
    problems = [f"line {i + 1}: README {x!r}, printed {y!r}"
                for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y]
    if len(a) != len(b):
        problems.append(f"README has {len(a)} lines, the command prints {len(b)}")
    return problems


def test_readme_output_is_what_the_main_job_prints():
    """The README's printed output of the main job equals what the command prints for the
    frozen golden run of the same command (`tests/golden/embedded_main_job`, which
    `tests/test_golden.py` keeps equal to a fresh run): a changed number, column or line in
    either fails here. Fix it by pasting the printed block into the README."""
    from tests.golden import GOLDEN_DIR, MAIN_JOB

    printed = command_output(GOLDEN_DIR / MAIN_JOB)
    assert output_problems(readme_output(), printed) == [], "printed:\n" + printed


def test_readme_output_check_catches_drift():
    """The comparison can fail: the README's old random means (0.047, 0.092, 0.141 where
    every run gives 0.042, 0.097, 0.138) and a changed best-set line are both reported."""
    from tests.golden import GOLDEN_DIR, MAIN_JOB

    printed = command_output(GOLDEN_DIR / MAIN_JOB)
    assert "0.042" in printed
    drifted = printed.replace("0.042", "0.047", 1)
    assert len(output_problems(drifted, printed)) == 1
    best = next(line for line in printed.splitlines() if line.startswith("best set:"))
    longer = printed.replace(best, best + "; collapses embedded_copy")
    assert output_problems(printed, longer) == [
        f"line {printed.splitlines().index(best) + 1}: README {best!r}, printed "
        f"{best + '; collapses embedded_copy'!r}"]
