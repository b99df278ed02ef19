"""Sweeps over models with different vocabularies: each model's own tasks, and cells whose task
does not fit a model's tokenizer skipped with the reason (`workbench.sweep`)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.sweep import run_sweep, sweep_cells
from workbench.tasks.names import hub_task_names
from workbench.zoo import DEFAULT_TASK, SIDE_TASKS

FAST = dict(n_random=10, n_boot=50, max_size=2, top_m=4, progress=False, plot=False)


def test_without_tasks_each_model_runs_its_own_tasks_with_its_own_side_tasks():
    cells = sweep_cells(["smollm2-135m", "embedded"], None, ["zero", "mean"])
    hub = hub_task_names()
    assert len(hub) == 12 and "ioi" in hub and not any(t.startswith("embedded") for t in hub)
    real = [c for c in cells if c.model == "smollm2-135m"]
    assert [(c.task, c.kind) for c in real] == [(t, k) for t in hub for k in ("zero", "mean")]
    for c in real:
        assert c.others == tuple(t for t in hub if t != c.task)
    emb = [c for c in cells if c.model == "embedded"]
    assert [(c.task, c.kind, c.others) for c in emb] == [
        (DEFAULT_TASK, k, tuple(SIDE_TASKS)) for k in ("zero", "mean")
    ]
    assert cells[-1].name == f"embedded__{DEFAULT_TASK}__mean"


def test_the_cli_passes_no_tasks_when_none_are_named():
    import workbench.cli.commands as commands
    import workbench.cli.parser as cli

    args = cli.build_parser().parse_args(["sweep", "--models", "smollm2-135m", "embedded"])
    assert commands.sweep_inputs(args) == (["smollm2-135m", "embedded"], None, None)


@pytest.mark.slow
def test_a_task_that_does_not_fit_the_model_is_skipped_and_left_out_of_side_effects(tmp_path):
    """The demo model's word vocabulary cannot encode IOI's English: its cell is skipped with the
    tokenizer's reason, IOI is left out of the other cells' side effects, and those cells equal a
    sweep that never named IOI."""
    from workbench.cli.demo import write_demo

    model_dir, main, side = write_demo(tmp_path)
    models = [str(model_dir)]
    table = run_sweep(models, [str(main), str(side), "ioi"], out=tmp_path / "with", **FAST)
    ref = run_sweep(models, [str(main), str(side)], out=tmp_path / "without", **FAST)
    assert list(table["status"]) == ["done", "done", "skipped"]
    skipped = table.iloc[2]
    assert skipped["task"] == "ioi" and pd.isna(skipped["gain"])
    assert "does not fit this model's tokenizer" in skipped["note"]
    assert "not in the vocabulary" in skipped["note"]
    for note in table["note"][:2]:
        assert note == "side tasks left out (they do not fit the tokenizer): ioi"
    numbers = ["best", "size", "gain", "gain_lo", "gain_hi", "percentile", "side_worst",
               "side_worst_task", "side_mean"]
    pd.testing.assert_frame_equal(table[numbers][:2], ref[numbers], check_exact=True)
    assert list(ref["status"]) == ["done", "done"] and not ref["note"].fillna("").any()


def test_a_finished_cell_must_match_every_config_option_the_sweep_gives():
    """`_mismatch` compares every CELConfig field a sweep's options set (cluster included),
    options given as types or strings alike; the command line's defaults match a default run."""
    from types import SimpleNamespace

    import workbench.cli.commands as commands
    import workbench.cli.parser as cli
    from workbench.config import CELConfig
    from workbench.options import ClusterMode
    from workbench.sweep import SweepCell, _mismatch

    done = SimpleNamespace(config=CELConfig(model="m", task="t", kind="mean", cluster="group"))
    cell = SweepCell("m", "t", "mean")
    same = dict(cluster=ClusterMode.GROUP, method="exact", strategy="interaction")
    assert _mismatch(done, cell, same) == []
    other = dict(cluster="auto", method="exact", strategies=["beam"])
    assert sorted(_mismatch(done, cell, other)) == ["cluster", "strategies"]
    assert _mismatch(done, SweepCell("m", "t", "zero"), same) == ["kind"]
    assert _mismatch(done, cell, {**same, "max_examples": 10}) == ["max_examples"]
    default = SimpleNamespace(config=CELConfig(model="m", task="t", kind="mean"))
    args = cli.build_parser("sweep").parse_args(["sweep"])
    assert _mismatch(default, cell, commands.run_options(args)) == []
    assert _mismatch(done, cell, commands.run_options(args)) == ["cluster"]


def test_the_printed_table_is_the_shown_columns_with_short_names():
    from workbench.sweep import COLUMNS, SHOWN_COLUMNS, shown_table

    assert [c for c in COLUMNS if c in SHOWN_COLUMNS] == list(SHOWN_COLUMNS)
    table = pd.DataFrame([{c: 1 for c in COLUMNS} | {"model": "/a/b/ckpt", "task": "x/t.jsonl"}])
    shown = shown_table(table)
    assert list(shown.columns) == list(SHOWN_COLUMNS)
    assert (shown.loc[0, "model"], shown.loc[0, "task"]) == ("ckpt", "t.jsonl")


def test_an_unknown_split_is_refused_before_anything_runs(tmp_path):
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match=r"split 'cell' is unknown; expected one of "
                       r"\['auto', 'cells', 'masks'\] \(did you mean 'cells'\?\)"):
        run_sweep(["embedded"], ["embedded_map"], out=tmp_path / "s", split="cell")
    assert not (tmp_path / "s").exists()


def test_run_sweep_loads_its_models_on_the_given_threads(tmp_path, monkeypatch):
    """`threads` reaches a sweep's model loading (a GGUF conversion is heavy), not only
    run_cel's Compute, and torch's setting is restored after."""
    import torch

    import workbench.loading.model
    from workbench.cli.demo import write_demo
    from workbench.errors import WorkbenchError

    model_dir, main, _ = write_demo(tmp_path / "demo")
    seen = []

    def load(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise RuntimeError("stopped after loading")

    monkeypatch.setattr(workbench.loading.model, "load_model", load)
    before = torch.get_num_threads()
    for threads in (before + 1, None):
        with pytest.raises(WorkbenchError, match="stopped after loading"):
            run_sweep([str(model_dir)], [str(main)], out=tmp_path / f"out{threads}",
                      progress=False, plot=False, threads=threads)
        assert torch.get_num_threads() == before
    assert seen == [before + 1, before]
