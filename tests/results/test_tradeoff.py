"""The trade-off: side tasks in their own metrics, every metric of the main task,
the guard against a gamed objective, and the gain-vs-side-effect table and plot.

Every p-value is checked against `sign_flip_pvalue` on per-example differences from a plain
forward (`evaluate`) with the set ablated, and every Holm column against `holm` over the
rows it names as its family.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import assert_close, micro_cel
from workbench import compute_head_means, evaluate
from workbench.config import CELConfig
from workbench.confirmation.confirm import (
    TRADEOFF_SETS,
    ConfirmPlan,
    confirm_sets,
    pool_random_head_sets,
    random_head_sets,
)
from workbench.confirmation.tradeoff import TRADEOFF_COLUMNS, tradeoff_table
from workbench.heads import HeadSet
from workbench.pipeline import run_cel
from workbench.results.headline import best_line, clean_lines, console_lines
from workbench.results.plots import tradeoff_plot
from workbench.results.report import render_report
from workbench.results.result import CELResult, best_reasons, mark_best
from workbench.results.tradeoff import SIDE_COLUMNS, gaming_note, side_summary, side_table
from workbench.scoring.scorer import MaskScorer
from workbench.stats import Stats, holm, sign_flip_pvalue
from workbench.sweep import SHOWN_COLUMNS
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task

STATS = Stats(n_boot=200, ci=0.95, seed=0, n_flips=2000)
# evaluate's column of each metric
COLUMN = {"accuracy": "correct", "logprob": "logprob", "logit_diff": "logit_diff",
          "prob_diff": "prob_diff"}


def _write(path: Path, n: int, wrong: bool, seed: int) -> Path:
    """A task over the tiny vocabulary, with or without a wrong answer (then it has no
    `logit_diff` or `prob_diff`)."""
    rng = np.random.default_rng(seed)
    lines = [json.dumps({"task": {"name": path.stem, "metric": "logit_diff" if wrong else
                                  "accuracy"}})]
    for i in range(n):
        words = [f"w{int(j)}" for j in rng.integers(0, 20, size=int(rng.integers(3, 7)))]
        ex = {"id": f"{path.stem}{i}", "prompt": " ".join(words), "answer": words[0],
              "split": "select" if i % 2 else "heldout"}
        if wrong:
            ex["wrong"] = [f"w{(int(words[0][1:]) + 3) % 20}"]
        lines.append(json.dumps(ex))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tradeoff")
    return (load_task(_write(folder / "main.jsonl", 40, True, 1)),
            load_task(_write(folder / "recall.jsonl", 24, False, 2)),
            load_task(_write(folder / "contrast.jsonl", 24, True, 3)))


SETS = {1: ["L1H1"], 2: ["L0H2", "L1H3"]}


def _scorers(model, main, *others):
    heldout = MaskScorer(model, encode_task(model, main, "heldout"))
    return heldout, {t.name: MaskScorer(model, encode_task(model, t)) for t in others}


def _naive_diffs(model, task, heads, split=None, **ablation) -> dict[str, np.ndarray]:
    """Per-example (ablated - clean) of every metric, by a plain forward with `heads` removed
    (zeroed, or as `ablation` says)."""
    clean = evaluate(model, task, split=split)
    removed = evaluate(model, task, heads=heads, split=split, **ablation)
    return {m: removed[c].to_numpy(float) - clean[c].to_numpy(float) for m, c in COLUMN.items()}


def _confirm(model, main, *others, n_random=0):
    heldout, scorers = _scorers(model, main, *others)
    sets = {k: HeadSet.of(model, v) for k, v in SETS.items()}
    return confirm_sets(heldout, sets, ConfirmPlan("logit_diff", "logprob", 2, n_random=n_random,
                                                   stats=STATS), scorers)


def test_a_side_task_without_a_wrong_answer_has_only_its_own_metrics(attn_model, tasks):
    """Only a side task with no wrong answer: no `logit_diff`/`prob_diff` column (the
    objective's), no empty `p_value`; accuracy and log-prob each with a two-sided p-value
    equal to the sign-flip test on a plain forward's differences, and Holm across the rows."""
    main, recall, _ = tasks
    _, side = _confirm(attn_model, main, recall)
    for gone in ("d_logit_diff", "d_logit_diff_lo", "d_prob_diff_n", "clean_logit_diff",
                 "p_value", "p_holm", "d_logit_diff_p_holm"):
        assert gone not in side, gone
    assert not side.isna().any().any(), side.columns[side.isna().any()].tolist()
    for m in ("accuracy", "logprob"):
        expected = []
        for _, row in side.iterrows():
            d = _naive_diffs(attn_model, recall, row["heads"].split(","))[m]
            expected.append(sign_flip_pvalue(d, None, STATS.n_flips, STATS.seed, "two-sided"))
            assert_close(row[f"d_{m}"], d.mean())
            assert row[f"d_{m}_n"] == len(d) == 24
        assert_close(side[f"d_{m}_p"], expected)
        assert_close(side[f"d_{m}_p_holm"], holm(expected))
    long = side_table(side)
    assert sorted(set(long["metric"])) == ["accuracy", "logprob"] and len(long) == 4


def test_side_p_values_are_holm_corrected_across_all_side_rows_per_metric(attn_model, tasks):
    main, recall, contrast = tasks
    _, side = _confirm(attn_model, main, recall, contrast)
    assert len(side) == 4  # two sizes x two tasks
    # logit_diff applies to `contrast` only: its family is those two rows
    ld = side["d_logit_diff_p"].to_numpy(float)
    assert np.isnan(ld[side["task"] == "recall"]).all()
    for _, row in side[side["task"] == "contrast"].iterrows():
        d = _naive_diffs(attn_model, contrast, row["heads"].split(","))["logit_diff"]
        assert_close(row["d_logit_diff_p"],
                     sign_flip_pvalue(d, None, STATS.n_flips, STATS.seed, "two-sided"))
    assert_close(side["d_logit_diff_p_holm"], holm(ld))
    # the objective's old columns stay, equal to its per-metric ones
    assert_close(side["p_value"], side["d_logit_diff_p"])
    assert_close(side["p_holm"], side["d_logit_diff_p_holm"])
    for m in ("accuracy", "logprob", "prob_diff"):
        assert_close(side[f"d_{m}_p_holm"], holm(side[f"d_{m}_p"]))
    long = side_table(side)
    assert set(long[long["task"] == "recall"]["metric"]) == {"accuracy", "logprob"}
    assert set(long[long["task"] == "contrast"]["metric"]) == {
        "accuracy", "logprob", "logit_diff", "prob_diff"}


def test_every_metric_of_the_main_task_has_a_two_sided_holm_p_value(attn_model, tasks):
    main, recall, _ = tasks
    conf, _ = _confirm(attn_model, main, recall)
    assert "d_logit_diff_p" not in conf  # the objective keeps its one-sided p_value
    for m in ("accuracy", "logprob", "prob_diff"):
        expected = []
        for _, row in conf.iterrows():
            d = _naive_diffs(attn_model, main, row["heads"].split(","), "heldout")[m]
            assert_close(row[f"d_{m}"], d.mean())
            expected.append(sign_flip_pvalue(d, None, STATS.n_flips, STATS.seed, "two-sided"))
        assert_close(conf[f"d_{m}_p"], expected)
        assert_close(conf[f"d_{m}_p_holm"], holm(expected))


def _planted() -> CELResult:
    """A confirmation where size 2 games logit_diff: the largest, significant gain and the
    top candidate, but the answer's log-prob and accuracy fall significantly. Size 1 is an
    honest significant gain; size 3 rises with a log-prob fall that is not significant;
    size 4's objective falls along with its accuracy (a loss, not a gamed gain)."""
    c = pd.DataFrame({
        "size": [1, 2, 3, 4],
        "heads": ["L0H1", "L0H1,L1H2", "L0H1,L1H2,L1H3", "L0H0,L0H1,L1H2,L1H3"],
        "best": [False, True, False, False],
        "select_d_logit_diff": [0.5, 3.0, 0.6, -0.1],
        "d_logit_diff": [0.4, 18.0, 0.3, -0.2], "d_logit_diff_lo": [0.2, 15.0, 0.1, -0.4],
        "d_logit_diff_hi": [0.6, 21.0, 0.5, 0.0],
        "p_value": [0.001, 0.001, 0.01, 0.9], "p_holm": [0.003, 0.003, 0.02, 0.9],
        "d_accuracy": [0.05, -0.68, 0.0, -0.2], "d_accuracy_lo": [0.01, -0.72, -0.02, -0.3],
        "d_accuracy_hi": [0.09, -0.64, 0.02, -0.1], "d_accuracy_n": [300] * 4,
        "d_accuracy_p_holm": [0.04, 0.0004, 1.0, 0.001],
        "d_logprob": [0.1, -4.6, -0.05, -0.3], "d_logprob_lo": [0.05, -4.9, -0.1, -0.5],
        "d_logprob_hi": [0.15, -4.3, 0.0, -0.1], "d_logprob_n": [300] * 4,
        "d_logprob_p_holm": [0.01, 0.0004, 0.08, 0.002],
        "d_logit_diff_n": [300] * 4,
    })
    config = CELConfig(model="m", task="ioi", objective="logit_diff", secondary="logprob")
    result = CELResult(config=config, confirmation=c)
    result.confirmation = mark_best(c, "logit_diff", result.alpha)
    result.summary = {"alpha": result.alpha, "significant_sizes": [1, 2, 3],
                      "gamed_sizes": [2]}
    return result


def test_a_planted_gamed_set_is_flagged_and_never_called_best():
    result = _planted()
    c = result.confirmation
    assert c["gamed"].tolist() == [False, True, False, False]
    assert c["top_candidate"].tolist() == [False, True, False, False]
    # the top candidate is significant but gamed: best is the significant set not gamed with
    # the largest selection gain (size 3's 0.6), not size 2
    assert c["best"].tolist() == [False, False, True, False]
    assert result.best == ["L0H1", "L1H2", "L1H3"]
    note = gaming_note(c.iloc[1], "logit_diff", result.alpha)
    assert note == ("raises logit_diff by lowering both answers: accuracy -0.68 [-0.72, -0.64] "
                    "(p_holm 0.0004); logprob -4.6 [-4.9, -4.3] (p_holm 0.0004)")
    assert [gaming_note(r, "logit_diff", result.alpha) for _, r in c.iterrows()][2:] == ["", ""]
    # objective accuracy: an accuracy gain bought with the answer's log-prob is "while ... falls"
    acc = c.assign(d_accuracy=[0.05, 0.2, 0.0, -0.2])
    assert gaming_note(acc.iloc[1], "accuracy", result.alpha) == (
        "raises accuracy while logprob falls: logprob -4.6 [-4.9, -4.3] (p_holm 0.0004)")
    report = render_report(result, plots=False)
    assert ("**Gamed objective:** size 2 (L0H1,L1H2) raises logit_diff by lowering both "
            "answers: accuracy -0.68") in report
    assert ("**Best set:** L0H1,L1H2,L1H3: its held-out gain is significant (the top candidate "
            "on the selection split, L0H1,L1H2, games the objective)") in report
    table = report.split("## Best head sets")[1].split("**Headline")[0]
    # the held-out gain with its n (heldout_n)
    assert ("| 2 | L0H1,L1H2 | 3 | 18 | 15 | 21 | 300 | 0.001 | 0.003 | True | True | False |"
            in table)
    lines = console_lines(result)
    assert lines[0].startswith("gamed: size 2 (L0H1,L1H2) raises logit_diff by lowering both")
    assert best_line(result).startswith("best set: L0H1,L1H2,L1H3 ")


def test_when_every_significant_set_is_gamed_there_is_no_best():
    result = _planted()
    c = result.confirmation.copy()
    c["p_holm"] = [0.2, 0.003, 0.2, 0.9]
    result.confirmation = mark_best(c, "logit_diff", result.alpha)
    result.summary["significant_sizes"] = [2]
    assert result.best == [] and result.top_candidate == ["L0H1", "L1H2"]
    assert "**Best set:** none: every significant set games the objective" in render_report(
        result, plots=False)
    assert best_line(result).startswith(
        "best set: none: the significant set(s) of size(s) [2] game the objective")


def test_why_each_size_is_or_is_not_best():
    """`best_reasons` (view.html's `why`) names each reason `mark_best` applies."""
    result = _planted()
    why = best_reasons(result.confirmation, "logit_diff", result.alpha).tolist()
    assert why[0] == ("significant and not gamed, but size 3 has a larger selection-split "
                      "gain and is best")
    assert why[1].startswith("gamed: raises logit_diff by lowering both answers: accuracy -0.68")
    assert why[2].startswith("best: significant (p_holm 0.02 < 0.05), not gamed, the largest "
                             "selection gain among the significant sets")
    assert why[3] == "not significant (p_holm 0.9 >= 0.05)"
    # the top candidate significant and clean: the others are "not the top candidate"
    honest = result.confirmation.assign(d_logprob_p_holm=0.5, d_accuracy_p_holm=0.5)
    why = best_reasons(honest, "logit_diff", result.alpha).tolist()
    assert why[1].endswith("not gamed, the top candidate")
    assert why[0] == ("significant and not gamed, but not the top candidate (size 2, ranked "
                      "first on the selection split, is best)")
    # a guarded run's failing guard is a reason of its own (the column's hook)
    guarded = honest.assign(guarded_p_holm=[0.3, 0.01, 0.01, 0.01])
    why = best_reasons(guarded, "logit_diff", result.alpha).tolist()
    assert why[0] == "fails a guard (guarded_p_holm 0.3 >= 0.05)"


def _embedded():
    from workbench.loading.checkpoint import is_checkpoint
    from workbench.zoo import EMBEDDED_PATH

    if not is_checkpoint(EMBEDDED_PATH):
        pytest.skip(f"the embedded model is not shipped ({EMBEDDED_PATH} has no checkpoint)")
    from workbench import load_model

    return load_model("embedded", device="cpu")


# On the embedded model's map task, mean-ablating these six heads raises the held-out
# answer-minus-wrong logit difference (+1.08 nats) while the answer's log-prob falls (-0.45),
# so the wrong answer's falls further: found by a local search for that pattern (no set of at
# most three heads shows it). L1H0,L1H4,L1H6 is the honest best set of `workbench cel`.
GAMED_EMBEDDED = "L0H0,L0H3,L0H4,L0H5,L0H6,L1H5"
HONEST_EMBEDDED = "L1H0,L1H4,L1H6"


def test_the_guard_on_the_embedded_model_flags_a_set_that_lowers_both_answers():
    model = _embedded()
    task = load_task("embedded_map")
    data = encode_task(model, task, "heldout")
    means = compute_head_means(model, data.tokens, data.lengths)
    ablation = dict(kind="mean", means=means)
    heldout = MaskScorer(model, data, **ablation)
    sets = {3: HeadSet.of(model, HONEST_EMBEDDED), 6: HeadSet.of(model, GAMED_EMBEDDED)}
    conf, _ = confirm_sets(heldout, sets, ConfirmPlan("logit_diff", "logprob", best_size=6,
                                                      n_random=0, stats=STATS))
    conf = mark_best(conf, "logit_diff", 0.05)
    d = _naive_diffs(model, task, GAMED_EMBEDDED.split(","), "heldout", **ablation)
    wrong = d["logprob"] - d["logit_diff"]  # the wrong answer's log-prob change
    assert d["logit_diff"].mean() > 0 and d["logprob"].mean() < 0 and wrong.mean() < 0
    gamed_row = conf[conf["size"] == 6].iloc[0]
    assert_close(gamed_row["d_logit_diff"], d["logit_diff"].mean())
    assert_close(gamed_row["d_logprob"], d["logprob"].mean())
    p = [sign_flip_pvalue(_naive_diffs(model, task, s.split(","), "heldout", **ablation)
                          ["logprob"], None, STATS.n_flips, STATS.seed, "two-sided")
         for s in (HONEST_EMBEDDED, GAMED_EMBEDDED)]
    assert_close(conf["d_logprob_p_holm"], holm(p))
    assert conf["d_logprob_p_holm"].iloc[1] < 0.01  # not a borderline call
    assert conf["p_holm"].tolist() == pytest.approx([2 / 2001] * 2)  # both gains significant
    assert conf["gamed"].tolist() == [False, True]
    assert conf["best"].tolist() == [True, False]  # the top candidate (size 6) is gamed
    assert gaming_note(gamed_row, "logit_diff", 0.05).startswith(
        "raises logit_diff by lowering both answers: ")


def test_tradeoff_table_matches_the_confirmation_and_a_plain_forward(attn_model, tasks):
    main, recall, contrast = tasks
    heldout, scorers = _scorers(attn_model, main, recall, contrast)
    sets = {k: HeadSet.of(attn_model, v) for k, v in SETS.items()}
    pool = [(0, 1), (0, 2), (1, 1), (1, 2), (1, 3)]
    conf, side = confirm_sets(heldout, sets, ConfirmPlan("logit_diff", "logprob", 2, n_random=20,
                                                         stats=STATS, pool=pool), scorers)
    t = tradeoff_table(heldout, scorers, sets,
                       ConfirmPlan("logit_diff", stats=STATS, n_random=20, pool=pool))
    assert list(t.columns) == list(TRADEOFF_COLUMNS)
    for size in SETS:
        baseline = random_head_sets(2, 4, size, 20, STATS.seed)
        pool_sets = pool_random_head_sets(pool, size, 20, STATS.seed, reuse=baseline)
        for origin, drawn in (("random", baseline), ("pool", pool_sets)):
            part = t[(t["size"] == size) & (t["origin"] == origin)]
            names = {str(HeadSet.of(attn_model, s)) for s in drawn}
            heads = part["heads"].unique()
            assert len(heads) == min(TRADEOFF_SETS, len(drawn)) and set(heads) <= names
        # every (set, task) has accuracy and log-prob; logit_diff only on `contrast`
        per = t[t["size"] == size].groupby(["origin", "heads", "task"])["metric"].apply(set)
        for (_, _, task), metrics in per.items():
            assert metrics == ({"accuracy", "logprob", "logit_diff", "prob_diff"}
                               if task == "contrast" else {"accuracy", "logprob"})
    found = t[t["origin"] == "found"]
    for _, row in found.iterrows():
        c = conf[conf["size"] == row["size"]].iloc[0]
        s = side[(side["size"] == row["size"]) & (side["task"] == row["task"])].iloc[0]
        m = row["metric"]
        assert_close([row["gain"], row["gain_lo"], row["gain_hi"]],
                     [c["d_logit_diff"], c["d_logit_diff_lo"], c["d_logit_diff_hi"]])
        assert_close([row["side_d"], row["side_d_lo"], row["side_d_hi"], row["side_n"]],
                     [s[f"d_{m}"], s[f"d_{m}_lo"], s[f"d_{m}_hi"], s[f"d_{m}_n"]])
    # one random set against a plain forward
    row = t[(t["origin"] == "random") & (t["task"] == "recall") & (t["metric"] == "logprob")]
    row = row.iloc[-1]
    heads = row["heads"].split(",")
    assert_close(row["gain"], _naive_diffs(attn_model, main, heads, "heldout")["logit_diff"].mean())
    assert_close(row["side_d"], _naive_diffs(attn_model, recall, heads)["logprob"].mean())
    assert row["side_d_lo"] <= row["side_d"] <= row["side_d_hi"]


def test_random_sets_of_the_tradeoff_rest_on_a_seeded_sample_of_examples(attn_model, tasks):
    """With `max_examples`, a random set's numbers are the plain forward's mean over the first
    `max_examples` examples of racing's seeded order; the confirmed sets keep every example
    and the numbers of the table without a cap."""
    from workbench.racing import example_order

    main, recall, contrast = tasks
    heldout, scorers = _scorers(attn_model, main, recall, contrast)
    sets = {k: HeadSet.of(attn_model, v) for k, v in SETS.items()}
    plan = ConfirmPlan("logit_diff", stats=STATS, n_random=20)
    full = tradeoff_table(heldout, scorers, sets, plan, max_examples=None)
    t = tradeoff_table(heldout, scorers, sets, plan, max_examples=8)
    found = t["origin"] == "found"
    assert found.any() and (~found).any()
    pd.testing.assert_frame_equal(t[found].reset_index(drop=True),
                                  full[full["origin"] == "found"].reset_index(drop=True))
    # a random set that is the confirmed set of its size is scored once, as the confirmed one
    found_names = {(r["size"], r["heads"]) for _, r in t[found].iterrows()}
    sampled = ~found & ~pd.Series([(r["size"], r["heads"]) in found_names
                                   for _, r in t.iterrows()], index=t.index)
    assert sampled.sum() > 50
    assert (t.loc[sampled, "gain_n"] == 8).all() and (t.loc[sampled, "side_n"] <= 8).all()
    assert (t.loc[~sampled, "gain_n"] == 20).all()
    row = t[(t["origin"] == "random") & (t["task"] == "recall") & (t["metric"] == "logprob")]
    row = row.iloc[-1]
    heads = row["heads"].split(",")
    held = example_order(20, STATS.seed)[:8].numpy()
    side_rows = example_order(24, STATS.seed)[:8].numpy()
    gain = _naive_diffs(attn_model, main, heads, "heldout")["logit_diff"][held].mean()
    assert_close(row["gain"], gain)
    side = _naive_diffs(attn_model, recall, heads)["logprob"][side_rows]
    assert_close(row["side_d"], side.mean())
    assert row["side_n"] == 8 and row["side_d_lo"] <= row["side_d"] <= row["side_d_hi"]
    # the uncapped table's same set rests on every example, and differs
    same = full[(full["heads"] == row["heads"]) & (full["task"] == "recall")
                & (full["metric"] == "logprob") & (full["origin"] == "random")].iloc[0]
    assert same["side_n"] == 24 and same["gain_n"] == 20


def test_run_cel_saves_the_tradeoff_and_reconfirms_an_older_folder(tmp_path):
    model, main, side = micro_cel(tmp_path / "micro")
    out = tmp_path / "run"
    fast = dict(n_random=12, n_boot=100, progress=False, max_size=2)
    result = run_cel(model, load_task(main), others=[load_task(side)], out_dir=out, **fast)
    assert (out / "tradeoff.csv").is_file() and (out / "tradeoff.png").is_file()
    assert set(result.tradeoff["origin"]) == {"found", "random", "pool"}
    assert result.summary["gamed_sizes"] == []
    report = (out / "report.md").read_text()
    for heading in ("Every other metric of the main task", "## Side effects on other tasks",
                    "## The trade-off: gain here, change elsewhere", "![tradeoff](tradeoff.png)"):
        assert heading in report
    loaded = CELResult.load(out)
    pd.testing.assert_frame_equal(loaded.tradeoff, result.tradeoff, check_dtype=False)
    # a folder confirmed before tradeoff.csv existed: the confirm stage runs again, same numbers
    config = json.loads((out / "config.json").read_text())
    del config["files"]["tradeoff"]
    (out / "config.json").write_text(json.dumps(config))
    (out / "tradeoff.csv").unlink()
    again = run_cel(model, load_task(main), others=[load_task(side)], out_dir=out, **fast)
    pd.testing.assert_frame_equal(again.confirmation, result.confirmation)
    pd.testing.assert_frame_equal(again.tradeoff, result.tradeoff)
    assert (out / "tradeoff.csv").is_file()


def test_the_tradeoff_plot_draws_every_set_with_both_intervals(attn_model, tasks):
    main, recall, contrast = tasks
    heldout, scorers = _scorers(attn_model, main, recall, contrast)
    sets = {k: HeadSet.of(attn_model, v) for k, v in SETS.items()}
    t = tradeoff_table(heldout, scorers, sets, ConfirmPlan("logit_diff", stats=STATS, n_random=20))
    result = CELResult(config=CELConfig(model="m", task="main", objective="logit_diff"),
                       tradeoff=t)
    fig = tradeoff_plot(result)
    fig.savefig(io.BytesIO(), format="png")
    axes = [a for a in fig.axes if a.get_title()]
    assert len(axes) == 2 * 2  # accuracy and log-prob x two side tasks
    for ax in axes:
        task, metric = ax.get_title(), ax.get_ylabel().removeprefix("change in ")
        part = t[(t["task"] == task) & (t["metric"] == metric)]
        xs = np.concatenate([line.get_xdata() for line in ax.lines if line.get_marker()
                             not in ("None", None, "")])
        assert sorted(xs) == pytest.approx(sorted(part["gain"]))
    both = tradeoff_plot({"family A": result, "family B": result})
    assert len([a for a in both.axes if a.get_title()]) == 2 * 4
    assert {a.get_title() for a in both.axes if a.get_title()} >= {"family A: recall",
                                                                   "family B: contrast"}


def test_the_clean_line_prints_no_nan():
    summary = {"clean": {"select": {"accuracy": 0.9, "logprob": -0.4, "logit_diff": 4.96},
                         "heldout": {"accuracy": 0.89, "logprob": -0.41, "logit_diff": 4.9},
                         "induction": {"accuracy": 0.45, "logprob": -2.5,
                                       "logit_diff": float("nan")}}}
    assert clean_lines(summary, "logit_diff") == [
        "clean logit_diff: select 4.960, heldout 4.900",
        "clean induction (no logit_diff): accuracy 0.450, logprob -2.500",
    ]


def test_a_sweep_row_reports_side_tasks_in_their_own_metrics():
    side = pd.DataFrame({
        "size": [1, 1, 2], "heads": ["L0H1", "L0H1", "L0H1,L1H1"],
        "task": ["induction", "greater_than", "induction"],
        "d_accuracy": [-0.1, 0.02, -0.3], "d_accuracy_lo": [-0.15, 0.0, -0.4],
        "d_accuracy_hi": [-0.05, 0.04, -0.2], "d_accuracy_n": [300, 200, 300],
        "d_accuracy_p_holm": [0.01, 0.3, 0.001],
        "d_logprob": [-0.2, -0.5, 0.1], "d_logprob_lo": [-0.3, -0.9, 0.0],
        "d_logprob_hi": [-0.1, -0.1, 0.2], "d_logprob_n": [300, 200, 300],
        "d_logprob_p_holm": [0.002, 0.04, 0.5],
        "d_logit_diff": [np.nan, 0.3, np.nan], "d_logit_diff_lo": [np.nan, 0.1, np.nan],
        "d_logit_diff_hi": [np.nan, 0.5, np.nan], "d_logit_diff_n": [0, 200, 0],
    })
    row = side_summary(side, 1, "logit_diff", 0.05)
    assert row == {"side_worst": 0.3, "side_worst_task": "greater_than", "side_mean": 0.3,
                   "side_worst_accuracy": -0.1, "side_worst_accuracy_task": "induction",
                   "side_worst_accuracy_p_holm": 0.01, "side_worst_logprob": -0.5,
                   "side_worst_logprob_task": "greater_than", "side_worst_logprob_p_holm": 0.04,
                   "side_harmed": "induction,greater_than"}
    only_induction = side_summary(side[side["task"] == "induction"], 2, "logit_diff", 0.05)
    assert "side_worst" not in only_induction  # the objective applies to no side task
    assert only_induction["side_worst_accuracy"] == -0.3
    assert only_induction["side_harmed"] == "induction"
    assert set(SIDE_COLUMNS) == set(row) - {"side_worst", "side_worst_task", "side_mean"}
    assert "side_worst" not in SHOWN_COLUMNS and "side_worst_accuracy" in SHOWN_COLUMNS
