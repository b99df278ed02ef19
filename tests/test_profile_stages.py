"""`bench/profile_stages.py`: each py-spy sample is counted under the part of the run its stack
is in, by the marked calls of this checkout's sources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("profile_stages",
                                                  ROOT / "bench" / "profile_stages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stack(*frames: tuple[str, str, int]) -> str:
    return ";".join(["<module> (workbench:8)",
                     *(f"{fn} (/x/workbench/{path}:{line})" for fn, path, line in frames),
                     "forward (torch/nn/modules/module.py:1)"])


def test_samples_are_counted_under_the_marked_calls():
    bench = _bench()
    marks = bench.source_lines(ROOT)
    search = ("search_stage", "search/stage.py", 1)
    inter = "search/strategies/interaction.py"
    base = "confirmation/baseline.py"
    confirm = [("confirm_stage", "confirmation/stage.py", 1),
               ("confirm_size", "confirmation/confirm.py", 1)]
    cases = {
        _stack(search, ("interaction", inter, marks["search: knockouts"])): "search: knockouts",
        _stack(search, ("interaction", inter, marks["search: finalists"])): "search: finalists",
        _stack(search, ("interaction", inter, 1)): "search: other",
        _stack(*confirm, ("random_baselines", base,
                          marks["confirm: random baselines, pool"])):
            "confirm: random baselines, pool",
        _stack(*confirm, ("random_baselines", base,
                          marks["confirm: random baselines, all heads"])):
            "confirm: random baselines, all heads",
        _stack(("explain_folder", "explain/report.py", 1),
               ("removal_table", "explain/removal.py", 1)): "explain: removal passes",
        _stack(("explain_stage", "explain/stage.py", 1),
               ("explanation_of", "explain/report.py", 1)): "explain: other",
        _stack(("load_model", "loading/model.py", 1)): "load, setup, writing",
    }
    for stack, part in cases.items():
        assert bench.part_of(bench.frames(stack), marks) == part, stack
    # the marks are the calls themselves, in this checkout
    source = (ROOT / "workbench" / inter).read_text().splitlines()
    assert "space.evaluate(sets" in source[marks["search: knockouts"] - 1]
    assert marks["confirm: random baselines, all heads"] < marks["confirm: random baselines, pool"]
