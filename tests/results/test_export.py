"""Tables that say what they rest on: every shown effect with its `n` or
the full-split value, the long export against the wide tables, one percent scale, the
renamed columns read from older folders, and the heatmap's panels and marks."""

from __future__ import annotations

import io
import json
import math
import shutil
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.golden import CASES, GOLDEN_DIR, MAIN_JOB
from workbench.results.export import TIDY_COLUMNS, single_heads, tidy, tidy_table
from workbench.results.plots import heads_heatmap, heatmap_panels
from workbench.results.result import CELConfig, CELResult
from workbench.results.store import CONFIG_FILE, TABLES, read_run_file, stage_inputs, write_table
from workbench.tables import head_name

FOLDERS = [GOLDEN_DIR / name for name in (MAIN_JOB, *CASES)]
METRICS = ("accuracy", "logprob", "logit_diff", "prob_diff")


def _naive_long(result: CELResult) -> Counter:
    """Every measured effect of the wide tables, cell by cell: (table, split, task, metric,
    heads, size, value, lo, hi, n), NaN bounds as None."""
    cfg, out = result.config, Counter()

    def add(table, split, task, metric, heads, size, value, lo, hi, n):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return
        bound = [None if b is None or math.isnan(b) else float(b) for b in (lo, hi)]
        out[(table, split, task, metric, str(heads), int(size), float(value), *bound,
             int(n))] += 1

    for _, r in result.heads.iterrows():
        for m in METRICS:
            if f"d_{m}" in r:
                add("heads", "select", cfg.task, m, r["head_name"], 1, r[f"d_{m}"],
                    r[f"d_{m}_lo"], r[f"d_{m}_hi"], r[f"d_{m}_n"])
            for t in cfg.others:
                if f"d_{m}_{t}" in r:
                    add("heads", "all", t, m, r["head_name"], 1, r[f"d_{m}_{t}"],
                        r[f"d_{m}_lo_{t}"], r[f"d_{m}_hi_{t}"], r[f"d_{m}_n_{t}"])
    for _, r in result.combos.iterrows():
        for m in METRICS:
            add("combos", "select", cfg.task, m, r["heads"], r["size"], r[f"d_{m}"], None, None,
                r["n"])
    for _, r in result.confirmation.iterrows():
        for m in METRICS:
            add("confirmation", "heldout", cfg.task, m, r["heads"], r["size"], r[f"d_{m}"],
                r[f"d_{m}_lo"], r[f"d_{m}_hi"], r[f"d_{m}_n"])
    for _, r in result.side_effects.iterrows():
        for m in METRICS:
            add("side_effects", "all", r["task"], m, r["heads"], r["size"], r[f"d_{m}"],
                r[f"d_{m}_lo"], r[f"d_{m}_hi"], r[f"d_{m}_n"])
    return out


def _as_tuples(t: pd.DataFrame) -> list[tuple]:
    return [(r.table, r.split, r.task, r.metric, r.heads, int(r.size), float(r.value),
             None if math.isnan(r.lo) else float(r.lo), None if math.isnan(r.hi) else float(r.hi),
             int(r.n)) for r in t.itertuples()]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_every_long_value_is_its_wide_cell(folder):
    """The long table holds exactly the wide tables' measured cells, each copied (equality,
    no tolerance), and its file in the folder equals the one built from the tables."""
    result = CELResult.load(folder)
    t = tidy(folder)
    assert tuple(t.columns) == TIDY_COLUMNS and (t["run"] == folder.name).all()
    assert Counter(_as_tuples(t)) == _naive_long(result)
    assert t["n"].gt(0).all() and t["value"].notna().all()
    saved = pd.read_csv(folder / "tidy.csv")  # names its run by model and task, not folder
    cfg = result.config
    assert (saved["run"] == f"{cfg.model}:{cfg.task}").all()
    pd.testing.assert_frame_equal(saved.drop(columns="run"),
                                  pd.read_csv(io.StringIO(t.to_csv(index=False))).drop(columns="run"))


def test_tidy_combines_runs_for_pandas(tmp_path):
    """Several folders stack with their run names (a name two folders share becomes the
    path); a result object and a mapping name -> run are accepted too."""
    a, b = FOLDERS[1], FOLDERS[2]
    twin = tmp_path / a.name
    shutil.copytree(a, twin)
    both = tidy(a, b)
    assert list(dict.fromkeys(both["run"])) == [a.name, b.name]
    assert len(both) == len(tidy(a)) + len(tidy(b))
    same = tidy(a, twin)
    assert set(same["run"]) == {str(a), str(twin)}
    named = tidy({"zero": CELResult.load(a), "mean": b})
    assert list(dict.fromkeys(named["run"])) == ["zero", "mean"]
    wide = named[named["table"] == "confirmation"].pivot_table(
        "value", ["run", "size"], "metric")
    conf = CELResult.load(a).confirmation
    assert wide.loc["zero"]["accuracy"].tolist() == conf["d_accuracy"].tolist()
    assert tuple(tidy_table({}, {}).columns) == TIDY_COLUMNS


def test_single_heads_of_the_main_job_carry_their_n():
    """The report's single heads: L0H4 was raced out of screening after 75 of 600 examples
    at +0.16, and the search scored it alone on all 600 at +0.263, the confirmation's
    select_d_accuracy. Exact values of the frozen main job."""
    result = CELResult.load(GOLDEN_DIR / MAIN_JOB)
    t = single_heads(result).set_index("head_name")
    assert t.loc["L0H4", "d_accuracy_n"] == 75 and t.loc["L0H4", "search_n"] == 600
    assert t.loc["L0H4", "d_accuracy"] == pytest.approx(0.16, abs=1e-7)
    assert t.loc["L0H4", "search_d_accuracy"] == pytest.approx(0.2633333, abs=1e-6)
    size1 = result.confirmation.set_index("size").loc[1]
    assert size1["heads"] == "L0H4"
    assert t.loc["L0H4", "search_d_accuracy"] == size1["select_d_accuracy"]
    # search values only where the search saw the head alone on more examples
    for name, r in t.iterrows():
        rows = result.combos[result.combos["heads"] == name]
        more = rows[rows["n"] > r["d_accuracy_n"]]
        if more.empty:
            assert np.isnan(r["search_d_accuracy"]) and pd.isna(r["search_n"])
        else:
            best = more.loc[more["n"].idxmax()]
            assert (r["search_d_accuracy"], r["search_n"]) == (best["d_accuracy"], best["n"])
    report = (GOLDEN_DIR / MAIN_JOB / "report.md").read_text()
    assert "| L0H4 | 0.16 | 0.08063 | 0.25 | 75 | 0.8357 | 0.2633 | 600 | 0 |" in report
    assert "over its `n` of the 600 selection examples" in report


def test_attribution_estimates_are_named_and_shown_beside_measured_removals():
    """A quick look's per-head table once showed attribution estimates as removals. With
    the exact check the measured `exact_d_*` stands beside each estimate; without it (the
    quick look) the search's measurement of the head alone, on as many examples; and the
    report names the numbers as estimates."""
    from workbench.results.report import render_report

    checked = CELResult.load(GOLDEN_DIR / "tiny_zero_attribution")
    t = single_heads(checked).set_index("head_name")
    assert t["exact_d_logit_diff"].tolist() == checked.heads.set_index("head_name").loc[
        t.index, "exact_d_logit_diff"].tolist()
    assert t["search_n"].isna().all()  # measured already: no second copy
    report = render_report(checked, plots=False)
    assert "## Single heads (selection split): attribution estimates, not measured" in report
    assert "**attribution estimates** of removing the head alone" in report
    # the quick look: no exact check, so the search's values of single heads, same n
    quick = CELResult.load(GOLDEN_DIR / "tiny_zero_attribution")
    quick.heads = quick.heads.drop(columns=[c for c in quick.heads if c.startswith("exact_")])
    from workbench.search.candidates import set_record

    t = single_heads(quick).set_index("head_name")
    singles = set(quick.combos.loc[quick.combos["size"] == 1, "heads"])
    shown = t.dropna(subset=["search_d_logit_diff"])
    assert set(shown.index) == singles  # every head the search measured alone, whatever n
    for name, r in shown.iterrows():
        row = set_record(quick.combos, name)
        assert (r["search_d_logit_diff"], r["search_n"]) == (row["d_logit_diff"], row["n"])
    assert "`search_d_logit_diff` is the head removed alone as the search measured it" in \
        render_report(quick, plots=False)
    # exact screening is not called an estimate
    exact = render_report(CELResult.load(GOLDEN_DIR / MAIN_JOB), plots=False)
    assert "## Single heads (selection split)\n" in exact and "estimate" not in exact


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_confirmed_selection_gain_is_the_sets_fullest_row(folder):
    """`select_d_<objective>` is the search's gain of the set over the most examples it saw
    (`select_n`), never a first-slice value of a set the search scored again later; the
    held-out gain carries `heldout_n`."""
    result = CELResult.load(folder)
    obj = result.config.objective
    table = result.summary_table()
    for _, r in table.iterrows():
        rows = result.combos[result.combos["heads"] == r["heads"]]
        full = rows.loc[rows["n"].idxmax()]
        assert r[f"select_d_{obj}"] == full[f"d_{obj}"]
        assert r["select_n"] == full["n"]
        assert r["heldout_n"] == result.summary["n_examples"]["heldout"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_percentile_and_share_are_on_one_scale(folder):
    """`percentile` and `random_pct_ge` are percents of one baseline: with `lt`, `eq`, `gt`
    of its N sets below, tied with and above the found set, percentile = 100 (lt + eq / 2)
    / N and pct_ge = 100 (eq + gt) / N, so 100 - pct_ge <= percentile <= 100 - pct_ge / 2
    (the same for the pool's pair)."""
    c = CELResult.load(folder).confirmation
    assert "random_share_ge" not in c and "pool_share_ge" not in c
    for pct, ge in (("percentile", "random_pct_ge"), ("pool_percentile", "pool_pct_ge")):
        assert c[pct].between(0, 100).all() and c[ge].between(0, 100).all(), pct
        assert (c[pct] >= 100 - c[ge] - 1e-9).all(), pct
        assert (c[pct] <= 100 - c[ge] / 2 + 1e-9).all(), pct


def _old_folder(src, dst) -> None:
    """A copy of a results folder as an older version wrote it: `random_share_ge` and
    `pool_share_ge` as shares, combos' `score`, re-recorded in config.json (the other files
    keep their bytes; their records the hashes of their new upstream files)."""
    shutil.copytree(src, dst)
    data = read_run_file(dst)
    obj = data["config"]["objective"]
    conf = pd.read_csv(dst / "confirmation.csv").rename(
        columns={"random_pct_ge": "random_share_ge", "pool_pct_ge": "pool_share_ge"})
    conf["random_share_ge"] /= 100
    conf["pool_share_ge"] /= 100
    combos = pd.read_csv(dst / "combos.csv").rename(
        columns={f"ablated_{obj}": "score"})
    files = data["files"]
    for name in TABLES:  # in pipeline order: each record's inputs hash its upstream files
        inputs = stage_inputs(name, data["config"], files)
        if name in ("combos", "confirmation"):
            df = combos if name == "combos" else conf
            files[name] = write_table(dst, name, df, inputs)
        else:
            files[name]["inputs"] = inputs
    (dst / CONFIG_FILE).write_text(json.dumps(data, indent=1, sort_keys=True))
    (dst / "tidy.csv").unlink()


def test_an_older_folder_loads_and_resumes_under_the_new_names(tmp_path):
    """A folder written with the old column names loads with the new ones (shares x 100,
    `score` as `ablated_<objective>`, same values), and the same run resumes from it
    without recomputing a stage."""
    from tests.golden import run_case

    case = "tiny_zero_exact"
    new = CELResult.load(GOLDEN_DIR / case)
    old = tmp_path / case
    _old_folder(GOLDEN_DIR / case, old)
    assert "random_share_ge" in pd.read_csv(old / "confirmation.csv")
    loaded = CELResult.load(old)
    for name in ("combos", "confirmation"):
        got, want = getattr(loaded, name), getattr(new, name)
        assert list(got.columns) == list(want.columns)
        pd.testing.assert_frame_equal(got, want, rtol=1e-12)
    before = {n: (old / f"{n}.csv").read_bytes() for n in TABLES}
    run_case(case, old)  # the same run: every stage is read back, none recomputed
    assert {n: (old / f"{n}.csv").read_bytes() for n in TABLES} == before
    assert (old / "tidy.csv").read_text() == (GOLDEN_DIR / case / "tidy.csv").read_text()
    assert "| select_d_logit_diff | select_n |" in (old / "report.md").read_text()


def _side_result(full_n: int = 8) -> CELResult:
    """A 2 x 3 result with a side task: known n's, intervals and candidates."""
    layer, head = np.divmod(np.arange(6), 3)
    names = [head_name(int(l), int(h)) for l, h in zip(layer, head, strict=True)]
    d = np.array([0.3, -0.2, 0.0, 0.1, 0.05, -0.01])
    heads = pd.DataFrame({
        "layer": layer, "head": head, "head_name": names,
        "d_accuracy": d, "d_accuracy_lo": d - [0.1, 0.1, 0.1, 0.2, 0.1, 0.0],
        "d_accuracy_hi": d + 0.05, "d_accuracy_n": [2, 2, 8, 8, 4, 8],
        "d_accuracy_side": -d, "d_accuracy_lo_side": -d - 0.01, "d_accuracy_hi_side": -d + 0.01,
        "d_accuracy_n_side": [5, 5, 5, 5, 5, 3],
        "candidate": [True, False, False, True, False, False],
    })
    return CELResult(config=CELConfig(model="m", task="main", others=("side",),
                                      objective="accuracy"),
                     heads=heads, summary={"n_examples": {"select": full_n, "side": 5}})


def _hatched(ax) -> list[tuple[int, int]]:
    return sorted((int(p.get_x() + 0.5), int(p.get_y() + 0.5)) for p in ax.patches
                  if p.get_hatch())


def _dots(ax) -> list[tuple[float, float]]:
    return sorted((round(float(x), 2), round(float(y), 2)) for line in ax.get_lines()
                  for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True))


def test_heatmap_has_a_panel_per_side_task_with_its_marks_explained():
    """One panel for the main task and one for the side task; hatching on exactly the heads
    measured on fewer examples than their split holds, a dot on exactly those whose interval
    excludes 0, outlines on the candidates (main panel), and a legend saying each."""
    result = _side_result()
    fig = heads_heatmap(result)
    fig.savefig(io.BytesIO(), format="png")
    main, side = [a for a in fig.axes if a.get_xlabel() == "head"]
    assert "main" in main.get_title() and "side" in side.get_title()
    # (head, layer): n below 8 on the main split, below 5 on the side task
    assert _hatched(main) == [(0, 0), (1, 0), (1, 1)]
    assert _hatched(side) == [(2, 1)]
    # interval above or below 0: L0H0 (0.2..0.35), L1H2 (-0.01..0.04 no), L0H1 (-0.3..-0.15)
    assert _dots(main) == [(0.3, -0.3), (1.3, -0.3)]
    assert _dots(side) == [(0.3, -0.3), (0.3, 0.7), (1.3, -0.3), (1.3, 0.7)]
    outlined = sorted((int(p.get_x() + 0.5), int(p.get_y() + 0.5)) for p in main.patches
                      if not p.get_hatch())
    assert outlined == [(0, 0), (0, 1)]
    legend = " ".join(t.get_text() for lg in fig.legends for t in lg.get_texts())
    for words in ("outlined: the 2 candidate heads", "hatched: measured on fewer examples",
                  "95 % interval excludes 0"):
        assert words in legend
    # without summary counts the full n is the largest n measured
    assert [p["full_n"] for p in heatmap_panels(_side_result(full_n=None))] == [8.0, 5]
