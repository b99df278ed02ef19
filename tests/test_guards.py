"""Guards (`workbench.guards`): their specs and defaults, the rules against a naive reading of
each set's per-example changes, the search over feasible sets only, the held-out safety test
against sign-flip p-values computed by hand, the frontier against brute force, and the
command line's bad input."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from tests.helpers import micro_cel
from workbench import WorkbenchError, evaluate
from workbench.guards import (
    Guard,
    GuardRule,
    check_guards,
    decide,
    default_guards,
    parse_guards,
    task_metrics,
    with_defaults,
)
from workbench.metric_records import Metric, declare
from workbench.pipeline import run_cel
from workbench.results.frontier import frontier_table
from workbench.results.headline import best_line, collapsed
from workbench.stats import holm, sign_flip_pvalue
from workbench.tasks.task import load_task

REPO = Path(__file__).resolve().parent.parent
FAST = dict(max_size=2, top_m=4, n_random=10, n_boot=100, progress=False, plots=False,
            objective="logit_diff")
Z = NormalDist().inv_cdf(0.975)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    folder = tmp_path_factory.mktemp("micro")
    model, main, side = micro_cel(folder)
    return model, load_task(main), load_task(side), folder


@pytest.mark.parametrize("spec,guard", [
    ("main:accuracy", Guard("main", "accuracy", 0.0)),
    ("induction:accuracy:0.02", Guard("induction", "accuracy", 0.02)),
    ("main:logprob:0.5", Guard("main", "logprob", 0.5)),
])
def test_a_guard_parses_from_its_spec_and_back(spec, guard):
    assert Guard.parse(spec) == guard and Guard.parse(guard.label) == guard


@pytest.mark.parametrize("spec,message", [
    ("accuracy", r"is not TASK:METRIC\[:TOLERANCE\]"),
    ("main:accu", r"metric 'accu' is unknown; expected one of \['accuracy'"),
    ("main:accuracy:lots", r"the tolerance 'lots' is not a number"),
    ("main:accuracy:-1", r"the tolerance must be a number >= 0; got -1.0"),
    ("a:b:c:d", r"is not TASK:METRIC"),
])
def test_bad_guard_specs_are_one_line(spec, message):
    with pytest.raises(WorkbenchError, match=message):
        Guard.parse(spec)


def test_the_defaults_come_from_the_metric_records():
    names = ["accuracy", "logprob", "logit_diff", "prob_diff"]
    assert default_guards("logit_diff", names) == (Guard("main", "accuracy"),
                                                   Guard("main", "logprob"))
    assert default_guards("prob_diff", names) == default_guards("logit_diff", names)
    assert default_guards("accuracy", names) == () == default_guards("logprob", names)

    @declare(Metric("margin", difference=True), Metric("hit", guards=True, coarse=True))
    def custom(model, data):
        raise AssertionError

    assert default_guards("margin", ["margin", "hit"], custom) == (Guard("main", "hit"),)
    defaults = default_guards("logit_diff", names)
    assert with_defaults((), defaults) == defaults
    assert with_defaults((Guard("side", "accuracy", 0.02),), defaults) == (
        *defaults, Guard("side", "accuracy", 0.02))
    assert with_defaults((Guard("side", "accuracy"), Guard("main", "accuracy", 0.1)),
                         defaults) == (Guard("main", "accuracy", 0.1), Guard("main", "logprob"),
                                       Guard("side", "accuracy"))
    with pytest.raises(WorkbenchError, match=r"guards \['main:accuracy'\] are given more than"):
        parse_guards(["main:accuracy", "main:accuracy:0.1"])


def test_a_guard_must_name_a_task_and_a_metric_it_can_compute(micro):
    _, main, side, _ = micro
    bare = dataclasses.replace(side, name="bare",
                               examples=[dataclasses.replace(e, wrong=()) for e in side.examples])
    tasks = {"main": task_metrics(main), "bare": task_metrics(bare)}
    assert "logit_diff" in tasks["main"] and "logit_diff" not in tasks["bare"]
    check_guards([Guard("main", "logit_diff"), Guard("bare", "accuracy")], tasks)
    with pytest.raises(WorkbenchError, match=r"names task 'induction', which is not in this "
                       r"run; expected 'main' or a side task \(\['bare'\]\)"):
        check_guards([Guard("induction", "accuracy")], tasks)
    with pytest.raises(WorkbenchError, match=r"task 'bare' cannot compute 'logit_diff'; "
                       r"expected one of \['accuracy', 'logprob'\]"):
        check_guards([Guard("bare", "logit_diff")], tasks)


@pytest.mark.parametrize("rule,mean,lo,hi,tol,passes", [
    ("not_worse", 0.1, 0.01, 0.2, 0.0, True),
    ("not_worse", 0.1, -0.01, 0.2, 0.0, False),
    ("not_worse", 0.1, -0.01, 0.2, 0.02, True),
    ("no_fall", -0.01, -0.1, 0.1, 0.0, False),
    ("no_fall", -0.01, -0.1, 0.1, 0.02, True),
    ("no_significant_fall", -0.05, -0.1, 0.01, 0.0, True),
    ("no_significant_fall", -0.05, -0.1, -0.01, 0.0, False),
    ("not_worse", math.nan, math.nan, math.nan, 0.0, True),
])
def test_the_rules(rule, mean, lo, hi, tol, passes):
    assert decide(rule, mean, lo, hi, tol) is passes


def test_the_config_records_the_guards_and_refuses_other_ones_on_resume(micro, tmp_path):
    model, main, side, _ = micro
    out = tmp_path / "run"
    result = run_cel(model, main, others=[side], out_dir=out, **FAST)
    assert result.config.guards == ("main:accuracy", "main:logprob")
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["guards"] == ["main:accuracy", "main:logprob"]
    assert saved["guard_rule"] == "not_worse"
    with pytest.raises(WorkbenchError, match=r"different config \(differs in \['guards', "):
        run_cel(model, main, others=[side], out_dir=out, guards=(), **FAST)
    with pytest.raises(WorkbenchError, match=r"differs in \['guards'\]"):
        run_cel(model, main, others=[side], out_dir=out,
                guards=["main:accuracy", f"{side.name}:accuracy:0.1"], **FAST)
    # a named guard adds to the defaults (its own tolerance wins for the same task and metric),
    # and the same names resume the folder they made
    side_out = tmp_path / "side"
    named = [f"{side.name}:accuracy:0.1", "main:logprob:0.5"]
    guarded = run_cel(model, main, others=[side], out_dir=side_out, guards=named, **FAST)
    assert guarded.config.guards == ("main:accuracy", "main:logprob:0.5",
                                     f"{side.name}:accuracy:0.1")
    again = run_cel(model, main, others=[side], out_dir=side_out, guards=named, **FAST)
    assert again.config.guards == guarded.config.guards
    # an objective that is not a difference gets no guards, and writes no such key
    plain = run_cel(model, main, out_dir=tmp_path / "acc", **{**FAST, "objective": "accuracy"})
    assert plain.config.guards == ()
    assert "guards" not in json.loads((tmp_path / "acc" / "config.json").read_text())["config"]


@pytest.mark.parametrize("rule", GuardRule.values())
@pytest.mark.parametrize("adaptive", [False, True])
def test_feasibility_is_the_rule_on_each_sets_own_changes(micro, rule, adaptive):
    """Every set scored on every selection example is feasible exactly when the rule passes
    on its naive per-example changes (one `evaluate` per set), and the best set of each size
    is the best feasible one."""
    model, main, _, _ = micro
    result = run_cel(model, main, guard_rule=rule, adaptive=adaptive, **FAST)
    combos = result.combos
    clean = evaluate(model, main, split="select")
    full = combos[combos["n"] == combos.groupby("size")["n"].transform("max")]
    assert len(full) and "feasible" in combos
    for row in full.drop_duplicates("heads").itertuples():
        ablated = evaluate(model, main, row.heads.split(","), split="select")
        ok = True
        for metric, column in (("accuracy", "correct"), ("logprob", "logprob")):
            d = (ablated[column] - clean[column]).to_numpy(dtype=float)
            mean, se = d.mean(), d.std(ddof=1) / math.sqrt(len(d))
            assert abs(mean - getattr(row, f"d_{metric}")) < 1e-5
            # the normal interval, clipped at the smallest and largest per-example change
            lo, hi = max(mean - Z * se, d.min()), min(mean + Z * se, d.max())
            ok &= decide(rule, mean, lo, hi, 0.0)
        assert bool(row.feasible) is ok, row.heads
    feasible = full[full["feasible"].astype(bool)]
    confirmed = dict(zip(result.confirmation["size"], result.confirmation["heads"],
                         strict=True))
    for size, heads in confirmed.items():
        mine = feasible[feasible["size"] == size]
        top = mine[mine["d_logit_diff"] == mine["d_logit_diff"].max()]
        assert heads in set(top["heads"]), (size, heads)
    for size in {1, 2} - set(confirmed):
        assert feasible[feasible["size"] == size].empty
        assert str(size) in result.summary["infeasible"]


def _guard_p(changes, tolerance: float) -> float:
    """The naive safety test of one guard: 0 when no example falls below -tolerance (a float
    slack of 1e-5), else the one-sided sign-flip p-value of the shifted changes."""
    changes = np.asarray(changes, dtype=float)
    if (changes[~np.isnan(changes)] >= -tolerance - 1e-5).all():
        return 0.0
    return sign_flip_pvalue(changes + tolerance)


def test_the_safety_test_is_an_intersection_union_of_sign_flip_tests(micro):
    model, main, side, _ = micro
    result = run_cel(model, main, others=[side],
                     guards=["main:accuracy", "main:logprob:0.05", f"{side.name}:accuracy:0.5"],
                     guard_rule="no_significant_fall", **FAST)
    c = result.confirmation
    assert len(c)
    clean = evaluate(model, main, split="heldout")
    side_clean = evaluate(model, side)
    for row in c.itertuples():
        heads = row.heads.split(",")
        held = evaluate(model, main, heads, split="heldout")
        ps = {"main_accuracy": _guard_p(held["correct"] - clean["correct"], 0.0),
              "main_logprob": _guard_p(held["logprob"] - clean["logprob"], 0.05)}
        s = evaluate(model, side, heads)
        rows = (side_clean["split"] == "heldout").to_numpy()
        if not rows.any():
            rows[:] = True
        ps[f"{side.name}_accuracy"] = _guard_p(
            (s["correct"] - side_clean["correct"]).to_numpy()[rows], 0.5)
        for key, p in ps.items():
            assert getattr(row, f"guard_p_{key}") == pytest.approx(p, abs=1e-12), key
        assert row.guarded_p == max(row.p_value, *ps.values())
        assert int(row.fixes) == int(((held["correct"] - clean["correct"]) > 0).sum())
        assert int(row.breaks) == int(((held["correct"] - clean["correct"]) < 0).sum())
    np.testing.assert_allclose(c["guarded_p_holm"], holm(c["guarded_p"]))


def test_the_frontier_is_the_pareto_front():
    rng = np.random.default_rng(0)
    combos = pd.DataFrame({"heads": [f"L0H{i}" for i in range(40)], "size": 1, "n": 10,
                           "d_logit_diff": rng.normal(size=40), "d_accuracy": rng.normal(size=40),
                           "feasible": True})
    combos.loc[0, "n"] = 5  # a set raced out on a slice is no point of the frontier
    table = frontier_table(combos, "logit_diff", ["main:accuracy"])
    full = combos[combos["n"] == 10]
    front = {h for h, a, b in zip(full["heads"], full["d_logit_diff"], full["d_accuracy"],
                                  strict=True)
             if not ((full["d_logit_diff"] > a) & (full["d_accuracy"] > b)).any()}
    assert set(table["heads"]) == front and "L0H0" not in set(table["heads"])
    assert table["guard_change"].is_monotonic_decreasing
    assert table["gain"].is_monotonic_increasing


def test_the_best_line_names_costs_collapses_and_what_failed(micro):
    model, main, side, _ = micro
    result = run_cel(model, main, others=[side], guards=["main:accuracy:1"], **FAST)
    assert result.best
    heads = ",".join(result.best)
    row = result.confirmation[result.confirmation["best"]].iloc[0]
    assert f"fixes {int(row.fixes)} held-out examples, breaks {int(row.breaks)}" in \
        best_line(result)
    side_effects = pd.DataFrame([{"heads": heads, "task": "induction", "clean_accuracy": 0.47,
                                  "d_accuracy": -0.47, "d_accuracy_p_holm": 0.001}])
    assert collapsed(side_effects, heads, 0.05) == ["induction (accuracy 0.47 -> 0.00)"]
    assert collapsed(side_effects.assign(d_accuracy=-0.2), heads, 0.05) == []
    # no set passes: the line names the closest set, the guard it failed, and what to try
    strict = run_cel(model, main, guards=["main:logprob"], guard_rule="not_worse",
                     **{**FAST, "objective": "prob_diff"})
    if not strict.best and strict.summary.get("infeasible"):
        line = best_line(strict)
        assert "no set passes the guards; closest:" in line and "fails main:logprob" in line
        assert "--ablation mean" in line and "--objective logprob" in line


@pytest.mark.slow
@pytest.mark.parametrize("flags,message", [
    (["--guard", "main:accu"], "metric 'accu' is unknown"),
    (["--guard", "main:acc"], "cannot compute 'acc'"),  # a multiple-choice metric
    (["--guard", "nosuch:accuracy"], "names task 'nosuch', which is not in this run"),
    (["--guard", "main:accuracy:x"], "the tolerance 'x' is not a number"),
    (["--guard", "embedded_add:logit_diff"], "task 'embedded_add' cannot compute 'logit_diff'"),
    (["--guard", "main:accuracy", "--no-guard"], "--guard and --no-guard contradict"),
    (["--guard-rule", "strict"], "invalid choice: 'strict'"),
])
def test_bad_guard_flags_are_refused_before_the_model_loads(flags, message, tmp_path):
    code = ("import sys, json\nfrom workbench.cli import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "print(json.dumps([rc, 'torch' in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code, "cel", "--out", str(tmp_path / "o"),
                           "--objective", "logit_diff", *flags], capture_output=True, text=True,
                          cwd=REPO, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    rc, torch_loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rc == 2 and message in proc.stderr, proc.stderr
    assert not torch_loaded  # refused before the model (and torch) loaded
    assert not (tmp_path / "o").exists()


def test_guards_change_nothing_for_an_objective_that_is_not_a_difference(micro):
    """Accuracy objective: no guards, and the very same tables as with `--no-guard`."""
    model, main, _, _ = micro
    a = run_cel(model, main, **{**FAST, "objective": "accuracy"})
    b = run_cel(model, main, guards=(), **{**FAST, "objective": "accuracy"})
    pd.testing.assert_frame_equal(a.combos, b.combos)
    pd.testing.assert_frame_equal(a.confirmation, b.confirmation)
    assert "feasible" not in a.combos and "guarded_p_holm" not in a.confirmation
