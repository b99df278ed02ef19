"""`workbench.results.cost`: a run's cost in forward-times, each stage's share, the CLI's
accounting of a resumed run, and one line."""

from __future__ import annotations

import pytest

from workbench.errors import WorkbenchError
from workbench.results.cost import STAGES, cost_line, run_cost, stage_seconds


def test_forward_times_and_shares_of_each_stage():
    cost = run_cost({"screen": 30.0, "load": 10.0, "search": 60.0}, forward_s=2.5)
    assert cost == {
        "forward_s": 2.5, "seconds": 100.0, "forward_times": 40.0,
        "stages": {  # in run order, not in the order given
            "load": {"seconds": 10.0, "forward_times": 4.0, "share": 0.1},
            "screen": {"seconds": 30.0, "forward_times": 12.0, "share": 0.3},
            "search": {"seconds": 60.0, "forward_times": 24.0, "share": 0.6},
        },
    }
    assert list(cost["stages"]) == [s for s in STAGES if s in cost["stages"]]
    assert cost_line(cost) == ("cost: 40.0 forward-times (1.7 min; a forward over the selection "
                               "split took 2.5 s here): load 10 %, screen 30 %, search 60 %")


def test_of_several_forward_measurements_the_fastest_counts_and_all_are_recorded():
    """A forward measured at the start (5.0 s, slowed by a burst) and at the end (2.5 s) of a
    run: the faster is the unit, both are kept; one measurement records no list."""
    cost = run_cost({"screen": 30.0, "search": 70.0}, (5.0, 2.5))
    assert cost["forward_s"] == 2.5 and cost["forward_times"] == 40.0
    assert cost["forwards_s"] == [5.0, 2.5]
    assert cost["stages"]["search"]["forward_times"] == 28.0
    assert "forwards_s" not in run_cost({"screen": 30.0}, 2.5)


@pytest.mark.parametrize("forward_s", [0.0, -1.0, float("nan"), float("inf"), (2.0, 0.0), ()])
def test_a_forward_that_is_not_a_positive_time_is_refused(forward_s):
    with pytest.raises(WorkbenchError, match="positive and finite"):
        run_cost({"screen": 1.0}, forward_s)


def test_an_unknown_stage_is_named():
    with pytest.raises(WorkbenchError, match="'warmup'"):
        run_cost({"warmup": 1.0}, 1.0)
    with pytest.raises(WorkbenchError, match="'warmup'"):
        run_cost({"screen": 1.0}, 1.0, likely={"warmup": 1.0})


def test_the_likely_cost_is_recorded_beside_what_the_stages_took():
    """The estimate's likely seconds of the stages it predicts are kept (`likely_s`) and the
    line compares their sum with those stages' measured seconds (load and explain are not
    predicted: 30 + 100 + 50 s took 180 s = 3.0 min, said 120 + 90 s = 3.5 min)."""
    took = {"load": 10.0, "screen": 30.0, "search": 100.0, "confirm": 50.0, "explain": 10.0}
    cost = run_cost(took, 2.0, likely={"screen": 120.04, "search": 60.0, "confirm": 30.0})
    assert cost["likely_s"] == {"screen": 120.0, "search": 60.0, "confirm": 30.0}
    assert cost_line(cost).endswith(
        "; screen, search, confirm took 3.0 min, the estimate said likely 3.5 min")
    assert "likely_s" not in run_cost(took, 2.0, likely=None)
    assert "said" not in cost_line(run_cost(took, 2.0))


def test_the_stages_add_up_to_the_wall_time_of_a_fresh_run():
    timings = {"setup": 2.0, "screen": 20.0, "search": 30.0, "confirm": 25.0}
    seconds = stage_seconds(timings, load=8.0, explain=5.0, wall=100.0)
    assert seconds["report"] == pytest.approx(10.0)
    assert sum(seconds.values()) == pytest.approx(100.0)


def test_a_resumed_run_counts_the_earlier_runs_stages_once():
    # the folder recorded 40 s of screening; this process ran the search and confirmation
    timings = {"setup": 2.0, "screen": 40.0, "search": 30.0, "confirm": 25.0}
    seconds = stage_seconds(timings, load=8.0, explain=5.0, wall=80.0, before=42.0)
    assert seconds["report"] == pytest.approx(80.0 - 8.0 - 5.0 - 55.0)
    assert sum(seconds.values()) == pytest.approx(80.0 + 42.0)
