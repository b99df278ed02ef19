"""`workbench.results.compare`: results folders side by side, checked against each folder's own
CSV cells (the naive reference) and `tidy`, with runs on other tasks or objectives kept apart,
the environment block read where there is one, and bad folders refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench import compare, tidy
from workbench.errors import WorkbenchError
from workbench.results.compare import (
    COMPARE_FIGURE,
    COMPARE_FILE,
    MISSING,
    compare_lines,
    compare_plot,
    save_compare,
)
from workbench.results.result import CELResult
from workbench.tables import load_table

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NAMES = ("embedded_main_job", "tiny_zero_exact", "tiny_mean_exact", "tiny_zero_attribution")
METRICS = ("accuracy", "logprob", "logit_diff", "prob_diff")
# an environment block as `workbench cel` records it beside the config (a nested value, as a
# future field might be, is flattened too)
ENV = {"threads": 2, "threads_reason": "2 cores idle", "device": "cpu", "dtype": "float32",
       "gpu": None, "torch": "2.13.0", "transformer-lens": "3.9.0", "cpu": "AMD EPYC 7763",
       "cpu_flags": ["fma", "avx2"], "cache": {"l2": "512 KiB"},
       "note": "a value longer than forty characters stays in its own column"}


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    """Copies of four frozen runs: two tasks, two objectives, two ablations, two methods."""
    out = {}
    for name in NAMES:
        out[name] = tmp_path / name
        shutil.copytree(GOLDEN / name, out[name])
    return out


def test_each_cell_is_the_folders_own(runs):
    table = compare(*runs.values())
    assert list(dict.fromkeys(table["run"])) == list(NAMES)
    long = tidy(*runs.values())
    for name, folder in runs.items():
        conf = pd.read_csv(folder / "confirmation.csv")
        cfg = json.loads((folder / "config.json").read_text())
        obj, alpha = cfg["config"]["objective"], cfg["summary"]["alpha"]
        mine = table[table["run"] == name].reset_index(drop=True)
        assert mine["size"].tolist() == conf["size"].tolist()
        assert mine["heads"].tolist() == conf["heads"].tolist()
        assert set(mine["objective"]) == {obj} and set(mine["status"]) == {"confirmed"}
        assert set(mine["task"]) == {cfg["config"]["task"]}
        assert set(mine["kind"]) == {cfg["config"]["kind"]}
        for m in METRICS:
            for s in ("", "_lo", "_hi"):
                np.testing.assert_array_equal(mine[f"d_{m}{s}"].to_numpy(float),
                                              conf[f"d_{m}{s}"].to_numpy(float))
            assert mine[f"d_{m}_n"].tolist() == conf[f"d_{m}_n"].tolist()
            held = long[(long["run"] == name) & (long["table"] == "confirmation")
                        & (long["metric"] == m)]
            np.testing.assert_array_equal(mine[f"d_{m}"].to_numpy(float),
                                          held["value"].to_numpy(float))  # built on tidy
        assert mine["n"].tolist() == conf[f"d_{obj}_n"].tolist()
        for c in ("p_holm", "percentile", "random_pct_ge"):
            np.testing.assert_array_equal(mine[c].to_numpy(float), conf[c].to_numpy(float))
        assert mine["significant"].tolist() == (conf["p_holm"] < alpha).tolist()
        assert mine["gamed"].tolist() == conf["gamed"].tolist()
        result = CELResult.load(folder)
        assert mine.loc[mine["best"], "heads"].tolist() == (
            [",".join(result.best)] if result.best else [])
        assert mine.loc[mine["top_candidate"], "heads"].tolist() == [
            ",".join(result.top_candidate)]
    assert table["best"].sum() == 1  # only the main job has a significant set


def test_side_effects_are_the_worst_and_the_significantly_harmed(runs):
    table = compare(*runs.values())
    for name, folder in runs.items():
        side = pd.read_csv(folder / "side_effects.csv")
        alpha = json.loads((folder / "config.json").read_text())["summary"]["alpha"]
        for row in table[table["run"] == name].itertuples():
            mine = side[side["heads"] == row.heads]
            for m in ("accuracy", "logprob"):
                worst = mine.loc[mine[f"d_{m}"].idxmin()]
                assert getattr(row, f"side_worst_{m}") == worst[f"d_{m}"]
                assert getattr(row, f"side_worst_{m}_task") == worst["task"]
            hurt = [t for t, part in mine.groupby("task", sort=False)
                    if any(((part[f"d_{m}_p_holm"] < alpha) & (part[f"d_{m}"] < 0)).any()
                           for m in ("accuracy", "logprob"))]
            assert row.side_harmed == ",".join(hurt)
    main = table[table["run"] == "embedded_main_job"]
    assert main["side_harmed"].str.contains("embedded_copy").all()
    assert set(main["side_worst_accuracy_task"]) == {"embedded_copy"}


def test_tasks_and_objectives_are_never_mixed(runs):
    """Each (task, objective) is its own block, whose first value column is its objective;
    runs of one task on different examples are said to be so."""
    table = compare(*runs.values())
    lines = compare_lines(table)
    text = "\n".join(lines)
    heads = [ln for ln in lines if ln.startswith("task ")]
    assert heads == [
        "task embedded_map, objective accuracy (held out; ablated - clean): embedded_main_job",
        "task main, objective logit_diff (held out; ablated - clean): tiny_zero_exact, "
        "tiny_mean_exact, tiny_zero_attribution"]
    first, second = (text.split(h)[1].split("\n\n")[0] for h in heads)
    assert "tiny_" not in first and "embedded_main_job" not in second
    header = [ln for ln in first.splitlines() if ln.strip()][0]
    assert header.index("d_accuracy [lo, hi]") < header.index("d_logprob [lo, hi]")
    assert "d_logit_diff" not in header
    header = [ln for ln in second.splitlines() if ln.strip()][0]
    assert header.index("d_logit_diff [lo, hi]") < header.index("d_accuracy [lo, hi]")
    assert "separate blocks" in lines[-1]
    assert "used different examples" not in text
    moved = table.copy()
    moved.loc[moved["run"] == "tiny_mean_exact", "task_fingerprint"] = "0123456789abcdef"
    assert "these runs used different examples of main" in "\n".join(compare_lines(moved))
    one = compare(runs["tiny_zero_exact"], runs["tiny_mean_exact"])
    assert "separate blocks" not in "\n".join(compare_lines(one))


def test_environment_is_read_where_recorded_and_dash_elsewhere(runs):
    path = runs["tiny_mean_exact"] / "config.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "environment": ENV,
                                "timings": {"screen": 1.5, "search": 2.0, "confirm": 3.25}}))
    table = compare(*runs.values())
    mean = table[table["run"] == "tiny_mean_exact"].iloc[0]
    assert mean["env_threads"] == 2 and mean["env_threads_reason"] == "2 cores idle"
    assert mean["env_cpu_flags"] == "fma avx2" and mean["env_transformer-lens"] == "3.9.0"
    assert mean["env_cache_l2"] == "512 KiB" and mean["env_note"] == ENV["note"]
    assert mean["environment"] == ("threads 2, threads_reason 2 cores idle, device cpu, "
                                   "dtype float32, torch 2.13.0, transformer-lens 3.9.0, "
                                   "cpu AMD EPYC 7763, cpu_flags fma avx2, cache_l2 512 KiB")
    assert mean["time_s"] == 6.75
    others = table[table["run"] != "tiny_mean_exact"]
    assert set(others["environment"]) == {MISSING} and set(others["env_device"]) == {MISSING}
    assert others["time_s"].isna().all()
    text = "\n".join(compare_lines(table))
    assert "device cpu" in text and "6.75" not in text and " 7 " in text  # seconds, rounded


def test_a_result_and_its_folder_compare_alike(runs):
    folder = runs["embedded_main_job"]
    from_folder = compare(folder, runs["tiny_zero_exact"])
    from_result = compare({"embedded_main_job": CELResult.load(folder)}, runs["tiny_zero_exact"])
    pd.testing.assert_frame_equal(from_folder, from_result)


def test_an_unfinished_run_is_shown_as_such_and_a_tampered_one_refused(runs):
    folder = runs["tiny_zero_exact"]
    path = folder / "config.json"
    data = json.loads(path.read_text())
    for name in ("confirmation", "side_effects", "tradeoff"):
        data["files"].pop(name)
        (folder / f"{name}.csv").unlink()
    path.write_text(json.dumps(data))
    table = compare(folder, runs["tiny_mean_exact"])
    row = table[table["run"] == "tiny_zero_exact"]
    assert len(row) == 1 and row["status"].iloc[0] == "not confirmed yet"
    assert row["size"].isna().all() and row["d_logit_diff"].isna().all()
    assert "tiny_zero_exact: not confirmed yet" in "\n".join(compare_lines(table))
    with (runs["tiny_mean_exact"] / "heads.csv").open("a") as f:
        f.write("1,2\n")
    with pytest.raises(WorkbenchError, match="heads.csv was changed"):
        compare(runs["embedded_main_job"], runs["tiny_mean_exact"])
    with pytest.raises(WorkbenchError, match="is not a CEL results folder"):
        compare(runs["embedded_main_job"], folder.parent)


def test_the_figure_keeps_each_objective_in_its_own_panel(runs):
    table = compare(*runs.values())
    fig = compare_plot(table)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in axes] == [
        "accuracy on embedded_map", "logit_diff on main", "accuracy on each run's task",
        "worst side-task accuracy"]

    def plotted(ax) -> dict[str, np.ndarray]:
        """label -> y of each run's series (an errorbar's data line, or a plain line)."""
        out = {c.get_label(): np.asarray(c.lines[0].get_ydata(), float) for c in ax.containers}
        out.update({ln.get_label(): np.asarray(ln.get_ydata(), float) for ln in ax.get_lines()
                    if not ln.get_label().startswith("_")})
        return out

    assert list(plotted(axes[0])) == ["embedded_main_job"]
    assert list(plotted(axes[1])) == ["tiny_zero_exact", "tiny_mean_exact",
                                      "tiny_zero_attribution"]
    for name, y in plotted(axes[1]).items():
        want = table[table["run"] == name].sort_values("size")["d_logit_diff"]
        np.testing.assert_array_equal(y, want.to_numpy(float))
    assert len(plotted(axes[2])) == len(NAMES)


def test_save_compare_writes_the_table_and_the_figure(runs, tmp_path):
    table = compare(*runs.values())
    out = save_compare(table, tmp_path / "cmp")
    back = load_table(out / COMPARE_FILE)
    assert back.shape == table.shape and list(back.columns) == list(table.columns)
    np.testing.assert_array_equal(back["d_accuracy"].to_numpy(float),
                                  table["d_accuracy"].to_numpy(float))
    assert (out / COMPARE_FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(WorkbenchError, match="is a CEL results folder"):
        save_compare(table, runs["tiny_zero_exact"])
    assert compare().empty
