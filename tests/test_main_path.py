"""bench/main_path.py: the count of returns, and the trace of the main job on the micro model."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import load_script

BENCH = load_script(Path(__file__).resolve().parents[1] / "bench" / "main_path.py")


def test_returns_count_entries_into_a_unit_already_left():
    path = ["p", "p", "a", "p", "b", "b", "a", "p"]
    merged, back = BENCH.returns(path)
    assert merged == ["p", "a", "p", "b", "a", "p"]
    assert back == 3  # p, a, p again
    assert BENCH.returns(path, driver="p") == (merged, 1)  # only a again


def test_units_are_packages_or_top_level_modules():
    assert BENCH.unit("workbench.confirmation.stage") == "workbench.confirmation"
    assert BENCH.unit("workbench.pipeline") == "workbench.pipeline"
    assert BENCH.unit("workbench.search") == "workbench.search"


def test_the_trace_follows_the_run_through_every_stage(tmp_path):
    from workbench.cli.demo import micro_model, write_micro_tasks
    from workbench.pipeline import prepare_run, run_prepared

    main, side = write_micro_tasks(tmp_path)
    run = prepare_run(micro_model(), str(main), [str(side)], n_random=20, n_boot=200,
                      max_size=2, progress=False)
    path = BENCH.trace_path(run, lambda: run_prepared(run, out_dir=tmp_path / "out",
                                                      plots=False))
    units = {BENCH.unit(m) for m in path}
    assert BENCH.unit(path[0]) == "workbench.pipeline"
    assert {"workbench.screening", "workbench.search", "workbench.confirmation",
            "workbench.explain", "workbench.results"} <= units
    assert all(m.startswith("workbench") for m in path)
