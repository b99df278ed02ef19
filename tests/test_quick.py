"""Quick looks: the `--quick` preset, the interaction budget by the set
size searched, and the one-line estimate a long run prints before it starts."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

import workbench.cli.commands as commands
import workbench.cli.parser as cli
from workbench.cli.demo import micro_model, write_demo
from workbench.config import QUICK, CELConfig
from workbench.search.finalists import default_budget


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("demo"))


def test_the_quick_preset_is_a_valid_config():
    fields = {f.name for f in dataclasses.fields(CELConfig)}
    assert set(QUICK) <= fields
    config = CELConfig(model="m", task="t", **QUICK)
    assert config.max_examples == 40 and config.max_size == 2
    assert config.strategies == ("exhaustive",) and config.method == "attribution"


@pytest.mark.parametrize("command", ["cel", "sweep"])
def test_quick_sets_the_preset_and_a_flag_given_beside_it_wins(command):
    def options(*argv):
        args = cli.build_parser(command).parse_args([command, *argv])
        if args.quick:
            args = cli.build_parser(command, quick=True).parse_args([command, *argv])
        return commands.run_options(args)

    plain, quick = options(), options("--quick")
    for key, value in QUICK.items():
        expected = [*value] if isinstance(value, tuple) else getattr(value, "value", value)
        assert quick[key] == expected, key
    assert plain["max_examples"] is None and plain["strategies"] == ["interaction"]
    both = options("--quick", "--max-examples", "80", "--strategy", "interaction")
    assert both["max_examples"] == 80 and both["strategies"] == ["interaction"]
    assert both["top_m"] == 6 and both["side_screening"] is False


def test_quick_runs_end_to_end_and_records_the_preset(demo_files, tmp_path, capsys):
    model_dir, main, side = demo_files
    out = tmp_path / "quick"
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--others", str(side),
            "--out", str(out), "--quick", "--quiet", "--device", "cpu", "--no-explain"]
    assert cli.main(argv) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    for key, value in QUICK.items():
        expected = [*value] if isinstance(value, tuple) else getattr(value, "value", value)
        assert config[key] == expected, key
    combos = json.loads((out / "config.json").read_text())["files"]["combos"]
    assert combos["rows"] <= 6 + 15  # every set of up to 2 among the top 6


def test_the_interaction_budget_halves_for_pairs():
    """Triples need `2.5 n + 500` masks (a member's main effect is G p^2); pairs half that
    (G p): `bench/quick.py --budgets` measures both."""
    for n in (8, 144, 270, 1024):
        assert default_budget(n) == default_budget(n, 3) == 5 * n // 2 + 500
        assert default_budget(n, 4) == default_budget(n)
        assert default_budget(n, 2) == default_budget(n, 1) == (5 * n // 2 + 500) // 2


def test_the_interaction_search_spends_the_pair_budget_on_pairs():
    """On a 144-head planted model, sets of up to 2 heads: half the masks of a search for
    triples, and every mask within `default_budget(144, 2)`; the planted pair is found."""
    from bench.planted import PlantSpec, planted_model
    from workbench.screening.screen import screen_scorer
    from workbench.search.candidates import (
        best_sets,
        candidate_heads,
        search_pool,
        select_candidates,
    )
    from workbench.search.registry import strategies
    from workbench.search.space import SearchSpace

    pm = planted_model(PlantSpec(n_layers=12, n_heads=12, seed=0))
    heads = select_candidates(screen_scorer(pm.scorer("select")), "logit_diff", "logprob", 8)
    used = {}
    for max_size in (3, 2):
        space = SearchSpace(pm.scorer("select"), candidate_heads(heads), "logit_diff",
                            "logprob", max_size=max_size, seed=0,
                            pool=search_pool(heads, "logit_diff"))
        strategies()["interaction"](space)
        scored = sum(r["strategy"] == "interaction" for r in space.records)  # masks and sets
        used[max_size] = (space.notes["interaction"]["n_masks"], scored)
        assert used[max_size][0] < scored <= default_budget(144, max_size)
    assert used[2][0] == default_budget(144, 2) // 2 == used[3][0] // 2
    sets, _ = best_sets(pd.DataFrame(space.records), "logit_diff", "logprob", 2)
    assert sets[2] == pm.best[2]


def test_the_estimate_bounds_what_the_run_scores(demo_files):
    """Each stage's estimated range holds the forward-equivalents the run counts, and the
    line names every stage and the measured forward."""
    from workbench.estimate import estimate_run, stage_forwards
    from workbench.pipeline import prepare_run, run_prepared
    from workbench.tasks.task import load_task

    model_dir, main, side = demo_files
    model = micro_model()
    run = prepare_run(model, load_task(main), others=[load_task(side)], n_random=20,
                      n_boot=100, progress=False)
    forwards = stage_forwards(run)
    result = run_prepared(run)
    done = result.summary["forward_eq"]
    n = result.summary["n_examples"]
    main_name = run.select.task.name
    # each task's count is in passes over its own examples; the estimate's over the selection
    screened = sum(eq * n["select" if task == main_name else task] / n["select"]
                   for task, eq in done["screen"].items())
    low, high = forwards["screen"]
    assert low - 1e-9 <= screened <= high + 1e-9
    # the search's low end counts the knockouts only (the finalists are as many as heads show
    # a positive main effect, none at the least): both ends bound the run
    low, high = forwards["search"]
    assert low - 1e-9 <= done["search"] <= high + 1e-9
    estimate = estimate_run(run)
    assert estimate.seconds_per_forward > 0
    line = estimate.line()
    assert line.startswith("estimate: screen ") and "search " in line and "confirm " in line
    assert f"{len(run.select)} selection examples" in line
    assert estimate_run(run, done=("screen", "search")).forwards.keys() == {"confirm"}


def test_a_long_run_prints_its_estimate_first(demo_files, tmp_path, capsys, monkeypatch):
    """Above `LONG_RUN_S` the command prints the estimate before the run's first stage."""
    import workbench.estimate

    model_dir, main, _ = demo_files
    argv = ["cel", "--model", str(model_dir), "--task", str(main), "--out", str(tmp_path / "o"),
            "--n-random", "10", "--n-boot", "50", "--quiet", "--device", "cpu", "--no-explain"]
    assert cli.main(argv) == 0
    assert "estimate:" not in capsys.readouterr().out  # a few seconds: no line
    monkeypatch.setattr(workbench.estimate, "LONG_RUN_S", 0.0)
    assert cli.main([*argv[:5], "--out", str(tmp_path / "p"), *argv[7:]]) == 0
    out = capsys.readouterr().out.splitlines()
    line = next(i for i, text in enumerate(out) if text.startswith("estimate: screen "))
    assert line < next(i for i, text in enumerate(out) if text.startswith("clean "))
