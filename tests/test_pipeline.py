"""`run_cel` end to end (`workbench.pipeline`): held-out confirmation, splits, results
folder, stage resumption and interrupts, ablation kinds and methods, side tasks in their own
metrics, the search budget, samples of each split, and its input checks."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

import workbench.confirmation.stage as confirm_stage_module
import workbench.screening.stage as screen_stage_module
from tests.helpers import assert_close, micro_cel, write_task
from workbench import WorkbenchError, compute_head_means, evaluate, summarize
from workbench.cli.demo import HARMFUL_HEAD, REDUNDANT_PAIR
from workbench.heads import HeadSet, all_heads
from workbench.pipeline import run_cel
from workbench.results.result import CELResult
from workbench.search.registry import STRATEGIES, get_strategy
from workbench.tasks.task import Example, Task, load_task

FAST = dict(n_random=30, n_boot=200, progress=False)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, side = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main), load_task(side)


@pytest.fixture(scope="module")
def tiny_run(attn_model, tiny_task):
    return run_cel(attn_model, tiny_task, max_size=2, top_m=4, **FAST)


def _mean(model, task, heads, split, metric="logprob"):
    return summarize(evaluate(model, task, heads, split=split), by=None).loc[0, metric]


def test_confirmation_is_scored_on_the_heldout_split(attn_model, tiny_task, tiny_run):
    c = tiny_run.confirmation
    assert list(c["size"]) == [1, 2]
    for _, row in c.iterrows():
        heads = row["heads"].split(",")
        heldout = _mean(attn_model, tiny_task, heads, "heldout")
        heldout -= _mean(attn_model, tiny_task, None, "heldout")
        assert_close(row["d_logprob"], heldout)
        select = _mean(attn_model, tiny_task, heads, "select")
        select -= _mean(attn_model, tiny_task, None, "select")
        assert abs(select - heldout) > 1e-4  # the splits really differ here
        assert row["d_logprob_lo"] <= row["d_logprob"] <= row["d_logprob_hi"]
        assert 0.0 <= row["percentile"] <= 100.0


def test_selection_and_heldout_never_share_an_example(tiny_task, tiny_run):
    splits = tiny_run.summary["splits"]
    assert not set(splits["select"]) & set(splits["heldout"])
    assert sorted(splits["select"] + splits["heldout"]) == sorted(tiny_task.ids)
    assert set(splits["select"]) == set(tiny_task.subset("select").ids)


def test_selection_used_only_the_selection_split(attn_model, tiny_task, tiny_run):
    """Every recorded search score reproduces on the selection split: on all of it where the
    set saw every example (`n`), else on the first racing slice (the knockout masks)."""
    combos = tiny_run.combos
    n_select = len(tiny_task.subset("select").examples)
    complete = combos[combos["n"] == n_select]
    assert len(complete) and (combos["n"] <= n_select).all()
    for _, row in complete.head(5).iterrows():
        heads = row["heads"].split(",")
        assert_close(row["ablated_accuracy"],
                     _mean(attn_model, tiny_task, heads, "select", "accuracy"))


def test_random_baseline_percentile_against_naive(attn_model, tiny_task, tiny_run):
    """attn_model has 8 heads, so n_random=30 covers all sets of size 1 and 2: the percentile
    and the share of sets doing at least as well are checked against one evaluation per set."""
    c = tiny_run.confirmation
    obj = tiny_run.config.objective
    heads = list(all_heads(attn_model))
    clean = _mean(attn_model, tiny_task, None, "heldout", obj)
    for _, row in c.iterrows():
        size = int(row["size"])
        gains = np.array([
            _mean(attn_model, tiny_task, [f"L{l}H{h}" for l, h in combo], "heldout", obj) - clean
            for combo in itertools.combinations(heads, size)
        ])
        assert row["random_exhaustive"] and row["n_random"] == len(gains)
        found = row[f"d_{obj}"]
        below, tied = (gains < found - 1e-6).sum(), (np.abs(gains - found) <= 1e-6).sum()
        assert tied >= 1  # the found set is one of them
        assert_close(row["percentile"], 100 * (below + tied / 2) / len(gains))
        assert_close(row["random_pct_ge"], 100 * (gains >= found - 1e-6).mean())
        if row["n_random_complete"] == row["n_random"]:  # else a mean of slice estimates
            assert_close(row["random_mean"], gains.mean())


def _frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(
        a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False, atol=1e-9
    )


def test_save_load_round_trip(micro, tmp_path):
    model, task, side = micro
    result = run_cel(model, task, others=[side], **FAST)
    result.save(tmp_path / "r")
    loaded = CELResult.load(tmp_path / "r")
    assert loaded.config == result.config
    for name in ("heads", "combos", "confirmation", "side_effects"):
        _frames_equal(getattr(loaded, name), getattr(result, name))
    assert loaded.summary == json.loads(json.dumps(result.summary))
    assert loaded.best == sorted([HARMFUL_HEAD, *REDUNDANT_PAIR])
    # the headline: the sizes whose Holm-corrected p-value clears alpha; the planted triple does
    c = loaded.confirmation
    assert_close(c["p_holm"].to_numpy(), _holm_loop(c["p_value"].to_numpy()))
    significant = [int(s) for s, p in zip(c["size"], c["p_holm"], strict=True) if p < 0.05]
    assert loaded.summary["significant_sizes"] == significant and 3 in significant
    report = (tmp_path / "r" / "report.md").read_text()
    assert "**Headline:** held-out enhancement significant" in report
    files = {p.name for p in (tmp_path / "r").iterdir()}
    assert {
        "config.json",
        "heads.csv",
        "combos.csv",
        "confirmation.csv",
        "side_effects.csv",
        "report.md",
        "heads_heatmap.png",
        "gain_vs_size.png",
        "side_effects.png",
    } <= files
    assert "L0H1,L0H3,L1H1" in (tmp_path / "r" / "report.md").read_text()
    side_rows = loaded.side_effects
    assert set(side_rows["task"]) == {"micro_short"}
    assert len(side_rows) == 3


def _holm_loop(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment, written out: the k-th smallest p times (m - k), running
    maximum, capped at 1."""
    order, m = np.argsort(p), len(p)
    out, running = np.empty(m), 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out


def test_resume_and_interrupt(micro, tmp_path, monkeypatch):
    model, task, _ = micro
    out = tmp_path / "run"

    def interrupt(space, settings):
        raise KeyboardInterrupt

    interaction = get_strategy("interaction")
    with STRATEGIES.swapped(replace(interaction, run=interrupt)):
        with pytest.raises(KeyboardInterrupt):
            run_cel(model, task, out_dir=out, **FAST)
    assert get_strategy("interaction") is interaction
    names = {p.name for p in out.iterdir()}
    assert names == {"config.json", "heads.csv"}  # complete files only, no temporaries

    def no_screening(*args, **kwargs):
        raise AssertionError("the finished screening stage was recomputed")

    monkeypatch.setattr(screen_stage_module, "screen_heads", no_screening)
    result = run_cel(model, task, out_dir=out, **FAST)
    assert result.best == sorted([HARMFUL_HEAD, *REDUNDANT_PAIR])
    monkeypatch.setattr(confirm_stage_module, "confirm_size", no_screening)
    again = run_cel(model, task, out_dir=out, **FAST)  # everything loads
    _frames_equal(again.confirmation, result.confirmation)
    with pytest.raises(WorkbenchError, match="different config.*max_size"):
        run_cel(model, task, out_dir=out, max_size=2, **FAST)


def test_mean_ablation_and_attribution_runs(micro, tmp_path):
    model, task, _ = micro
    mean = run_cel(model, task, kind="mean", max_size=2, **FAST)
    # constant-output heads (L0H3 and the pair) are unchanged by mean ablation
    assert HARMFUL_HEAD not in mean.best
    att = run_cel(model, task, method="attribution", strategy=["greedy", "beam"], **FAST)
    rho = att.summary["attribution_rank_correlation"]
    assert rho["logit_diff"] > 0.9
    assert "exact_d_logprob" in att.heads
    assert att.best == sorted([HARMFUL_HEAD, *REDUNDANT_PAIR])


def test_side_effects_use_each_tasks_own_means(attn_model, tiny_task, tmp_path):
    """Mean ablation on a side task replaces z by the mean over that task's prompts, in the
    single-head screen and in the confirmed sets' side effects. Unraced, so that the per-head
    side columns rest on every example (raced they rest on the first slice:
    test_racing.test_side_task_columns_rest_on_the_first_slice)."""
    side = load_task(write_task(tmp_path / "side.jsonl", n=24, n_words=8, seed=1))
    result = run_cel(attn_model, tiny_task, others=[side], kind="mean", max_size=2, top_m=3,
                     adaptive=False, **FAST)
    own = compute_head_means(attn_model, side)
    main = compute_head_means(attn_model, tiny_task, split="select")
    for _, row in result.side_effects.iterrows():
        heads = row["heads"].split(",")
        naive = _side_gain(attn_model, side, heads, own)
        assert_close(row["d_logprob"], naive)
        assert abs(naive - _side_gain(attn_model, side, heads, main)) > 1e-3  # means matter
    for _, row in result.heads.iterrows():
        naive = _side_gain(attn_model, side, [row["head_name"]], own)
        assert_close(row[f"d_logprob_{side.name}"], naive)


def _side_gain(model, task, heads, means):
    ablated = summarize(evaluate(model, task, heads, kind="mean", means=means), by=None)
    return ablated.loc[0, "logprob"] - _mean(model, task, None, None)


def test_multi_token_task_is_scored_over_every_answer_position(attn_model):
    """A task with multi-token answers: the confirmed gains are those of the teacher-forced
    sequence log-prob (what `evaluate` reports for such tasks), not of the first token."""
    words = [f"w{i}" for i in range(15)]  # w15 is the wrong answer
    rng = np.random.default_rng(3)
    examples = [
        Example(id=f"m{i}", prompt=" ".join(rng.choice(words, 4)),
                answers=(" ".join(rng.choice(words, 2)),), wrong=("w15",),
                split="select" if i % 2 else "heldout")
        for i in range(24)
    ]
    task = Task(name="multi", examples=examples, answer_tokens="multi", metric="logprob")
    result = run_cel(attn_model, task, max_size=2, top_m=3, **FAST)
    for _, row in result.confirmation.iterrows():
        heads = row["heads"].split(",")
        naive = _mean(attn_model, task, heads, "heldout") - _mean(attn_model, task, None,
                                                                  "heldout")
        first = summarize(evaluate(attn_model, task, heads, split="heldout"), by=None)
        first = first.loc[0, "first_logprob"] - summarize(
            evaluate(attn_model, task, None, split="heldout"), by=None).loc[0, "first_logprob"]
        assert_close(row["d_logprob"], naive)
        assert abs(naive - first) > 1e-3  # the first token alone would give another number


def _multi_and_single_tasks():
    words = [f"w{i}" for i in range(15)]  # w15 is the wrong answer
    rng = np.random.default_rng(5)

    def task(name, multi):
        examples = [
            Example(id=f"{name}{i}", prompt=" ".join(rng.choice(words, 4)),
                    answers=(" ".join(rng.choice(words, 2 if multi else 1)),), wrong=("w15",),
                    split="select" if i % 2 else "heldout")
            for i in range(24)
        ]
        return Task(name=name, examples=examples, answer_tokens="multi" if multi else "single",
                    metric="logprob")

    return task("multi", True), task("single", False)


@pytest.mark.parametrize("main_is_multi", [True, False])
def test_each_task_is_scored_with_its_own_metric_as_main_or_side_task(attn_model, main_is_multi):
    """A multi-token task's side effects on a single-token task (and the other way round) are
    that task's own scores: the sequence log-prob for the multi-token task, the first answer
    token's for the single-token one, as `evaluate` reports them; and so are the per-head side
    columns of screening."""
    multi, single = _multi_and_single_tasks()
    main, side = (multi, single) if main_is_multi else (single, multi)
    result = run_cel(attn_model, main, others=[side], max_size=2, top_m=3, **FAST)
    clean = _mean(attn_model, side, None, None)
    for _, row in result.side_effects.iterrows():
        heads = row["heads"].split(",")
        assert_close(row["d_logprob"], _mean(attn_model, side, heads, None) - clean)
    h = result.heads
    scored = h[h[f"d_logprob_n_{side.name}"] > 0]
    assert len(scored)
    from workbench.racing import example_order

    for _, row in scored.iterrows():  # on the side task's first look (`workbench.racing`)
        first = example_order(len(side), 0)[: int(row[f"d_logprob_n_{side.name}"])].tolist()
        part = replace(side, examples=[side.examples[i] for i in first])
        want = _mean(attn_model, part, [row["head_name"]], None) - _mean(attn_model, part,
                                                                         None, None)
        assert_close(row[f"d_logprob_{side.name}"], want)


def test_normalized_logit_diff_task_ranks_by_logit_diff(micro):
    model, task, _ = micro
    base = run_cel(model, replace(task, metric="logit_diff"), **FAST)
    normalized = run_cel(model, replace(task, metric="normalized_logit_diff"), **FAST)
    assert normalized.config.objective == base.config.objective == "logit_diff"
    _frames_equal(normalized.confirmation, base.confirmation)


def _counterfactual_task(n: int = 24) -> Task:
    g = torch.Generator().manual_seed(3)
    examples = []
    for i in range(n):
        length = 3 + i % 4
        words = [f"w{int(j)}" for j in torch.randint(0, 20, (length,), generator=g)]
        cf = [f"w{int(j)}" for j in torch.randint(0, 20, (length,), generator=g)]
        wrong = "w19" if words[0] != "w19" else "w18"
        examples.append(Example(id=f"r{i}", prompt=" ".join(words), answers=(words[0],),
                                wrong=(wrong,), split="select" if i % 2 else "heldout",
                                counterfactual=" ".join(cf)))
    return Task(name="cf", examples=examples, metric="logprob")


def test_resample_ablation_through_run_cel(gpt2_like_model):
    """Resample ablation end to end: every screened head and every confirmed set equals
    `evaluate(kind="resample")` (which patches z from the counterfactual run)."""
    task = _counterfactual_task()
    result = run_cel(gpt2_like_model, task, kind="resample", max_size=2, top_m=3, **FAST)
    assert result.config.kind == "resample"

    def gain(heads, split):
        ablated = summarize(evaluate(gpt2_like_model, task, heads, kind="resample",
                                     split=split), by=None).loc[0, "logprob"]
        return ablated - _mean(gpt2_like_model, task, None, split)

    for _, row in result.heads.iterrows():
        assert_close(row["d_logprob"], gain([row["head_name"]], "select"))
    for _, row in result.confirmation.iterrows():
        assert_close(row["d_logprob"], gain(row["heads"].split(","), "heldout"))
    with pytest.raises(WorkbenchError, match="attribution screening supports zero and mean"):
        run_cel(gpt2_like_model, task, kind="resample", method="attribution", **FAST)


def test_search_budget_bounds_the_interaction_search(micro):
    """`search_budget` caps knockouts + exact finalist sets; the finalists are the default
    run's best ones, as many as the budget left after the knockouts allows."""
    model, task, _ = micro
    default = run_cel(model, task, max_size=2, **FAST)
    notes = default.summary["interaction"]
    k = len(notes["finalists"])
    assert k >= 2 and len(default.combos) == notes["n_masks"] + k + k * (k - 1) // 2
    tight = run_cel(model, task, max_size=2, search_budget=notes["n_masks"] + 2, **FAST)
    # 2 sets left: one finalist (1 set); two would need 3 (2 singles + 1 pair)
    assert tight.summary["interaction"]["finalists"] == notes["finalists"][:1]
    assert len(tight.combos) == notes["n_masks"] + 1
    assert tight.config.search_budget == notes["n_masks"] + 2
    with pytest.raises(WorkbenchError, match="search_budget must be an integer >= 1; got 0"):
        run_cel(model, task, search_budget=0, **FAST)


def test_max_examples_and_side_examples_run_a_seeded_sample_of_each_split(micro):
    """`max_examples` keeps N examples of each split of every task, drawn with the run's seed
    (before fitting), and `side_examples` those of the side tasks: the run equals one on tasks
    cut by hand, and the sample is spread over the file, not its first examples."""
    model, task, side = micro
    got = run_cel(model, task, others=[side], max_examples=6, side_examples=4, max_size=2,
                  seed=3, **FAST)

    def sample(t, n):
        rng = np.random.default_rng(3)
        keep = set()
        for split in sorted({e.split for e in t.examples}):
            idx = [i for i, e in enumerate(t.examples) if e.split == split]
            keep |= {idx[j] for j in rng.choice(len(idx), n, replace=False)}
        return replace(t, examples=[e for i, e in enumerate(t.examples) if i in keep])

    cut = sample(task, 6)
    assert [e.id for e in cut.examples] != [e.id for e in task.examples][:12]
    want = run_cel(model, cut, others=[sample(side, 4)], max_size=2, seed=3, **FAST)
    assert got.summary["n_examples"]["select"] == got.summary["n_examples"]["heldout"] == 6
    assert got.summary["n_examples"][side.name] == 4 * len({e.split for e in side.examples})
    assert got.config.max_examples == 6 and got.config.side_examples == 4
    _frames_equal(got.confirmation, want.confirmation)
    _frames_equal(got.side_effects, want.side_effects)
    with pytest.raises(WorkbenchError, match="max_examples must be an integer >= 1"):
        run_cel(model, task, max_examples=0, **FAST)


def test_without_side_screening_the_side_effects_are_the_same(micro):
    """`side_screening=False` drops the per-head side columns only: the sets found, their
    confirmation and their side effects are those of a run that screens the side task."""
    model, task, side = micro
    full = run_cel(model, task, others=[side], max_size=2, **FAST)
    lean = run_cel(model, task, others=[side], max_size=2, side_screening=False, **FAST)
    assert any(c.endswith(f"_{side.name}") for c in full.heads.columns)
    assert not any(c.endswith(f"_{side.name}") for c in lean.heads.columns)
    main_cols = [c for c in lean.heads.columns]
    _frames_equal(lean.heads[main_cols], full.heads[main_cols])
    _frames_equal(lean.confirmation, full.confirmation)
    _frames_equal(lean.side_effects, full.side_effects)


BEST = {1: HARMFUL_HEAD, 2: ",".join(REDUNDANT_PAIR), 3: "L0H1,L0H3,L1H1"}


def test_unknown_strategy_is_a_clear_error(micro):
    model, task, _ = micro
    with pytest.raises(WorkbenchError, match="strategy 'simulated_annealing' is unknown"):
        run_cel(model, task, strategy="simulated_annealing", progress=False)
    with pytest.raises(WorkbenchError, match="strategy"):
        get_strategy("nope")
    with pytest.raises(WorkbenchError, match="max_size"):
        run_cel(model, task, max_size=0, progress=False)
    with pytest.raises(WorkbenchError, match="objective"):
        run_cel(model, task, objective="bleu", progress=False)
    assert HeadSet.of(model, BEST[3]).names == ["L0H1", "L0H3", "L1H1"]


def test_a_task_with_few_examples_runs_and_says_so(micro, tmp_path):
    """A task with 2 selection and 2 held-out examples used to run to the end with intervals
    from n = 2, without a word. It still runs (a smoke test may want it), but warns before
    any forward (`FewExamplesWarning`), records which splits are small, and its report says
    no interval rests on enough examples; a task of 10 per split does not warn."""
    from workbench.errors import FewExamplesWarning
    from workbench.pipeline import prepare_run

    model, task, side = micro
    with pytest.warns(FewExamplesWarning, match=r"fewer than 10 examples \(select 2, heldout 2"):
        run = prepare_run(model, task, max_examples=2, **FAST)
    assert run.small == {"select": 2, "heldout": 2}
    out = tmp_path / "small"
    with pytest.warns(FewExamplesWarning) as caught:
        result = run_cel(model, task, max_examples=2, max_size=1, out_dir=out, **FAST)
    assert caught[0].filename == __file__  # attributed to the caller
    assert result.summary["few_examples"] == {"select": 2, "heldout": 2}
    report = (out / "report.md").read_text()
    assert ("**Few examples:** fewer than 10 examples (select 2, heldout 2): no interval or "
            "p-value rests on enough examples to be trusted; with 2 held-out examples the "
            "smallest one-sided sign-flip p-value is 0.25") in report
    assert "few examples" in (out / "view.html").read_text()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FewExamplesWarning)
        enough = prepare_run(model, task, max_examples=10, **FAST)
    assert enough.small == {}


@pytest.mark.parametrize("case", ["tiny_zero_exact", "tiny_mean_exact", "tiny_resample_exact",
                                  "tiny_mean_attribution", "tiny_zero_exact_guarded"])
def test_a_bf16_search_leaves_every_held_out_number_to_float32(case, tmp_path):
    """`search_dtype="bfloat16"` screens and scores the knockouts on a bfloat16 copy (its
    numbers in `heads` and in the knockout rows of `combos`, marked `ranked`: not float32's),
    and compares the finalist sets in float32 (their rows: float32's up to batching); when it
    picks float32's sets, confirmation never sees bfloat16: the confirmation, side effects and
    trade-off tables equal a float32 run's bit for bit, the selection-split gains of the
    chosen sets too (scored again on the float32 model) up to batching. The golden cases'
    model and tasks, under every ablation kind, and under guards (default ones, and the
    guarded case's own with a side-task guard): their feasibility is decided on the bfloat16
    copy (the guard metrics in `combos`), their held-out safety test in float32 (`guarded_p`
    in the confirmation, bit for bit)."""
    from tests.golden import CASES, TINY, tiny_inputs

    model, main, side = tiny_inputs(tmp_path / "tasks")
    settings = {**TINY, **CASES[case]}
    runs = {dt: run_cel(model, load_task(main), others=[load_task(side)], search_dtype=dt,
                        out_dir=tmp_path / dt, **settings) for dt in ("float32", "bfloat16")}
    f32, bf16 = runs["float32"], runs["bfloat16"]
    obj = f32.config.objective
    assert next(iter(model.parameters())).dtype == torch.float32  # the model is left alone
    assert not np.allclose(bf16.heads[f"d_{obj}"], f32.heads[f"d_{obj}"], rtol=0, atol=1e-6)
    assert list(bf16.confirmation["heads"]) == list(f32.confirmation["heads"])
    # the knockouts ranked in bfloat16, the sets compared in float32
    assert "ranked" not in f32.combos and bf16.combos["ranked"].any()
    n_ex = f32.combos["n"].max()
    for ranked in (True, False):
        b = bf16.combos[bf16.combos["ranked"] == ranked].drop_duplicates("heads", keep="last")
        f = f32.combos.drop_duplicates("heads", keep="last")
        if not ranked:  # a finalist set seen on every example in both runs
            b, f = b[b["n"] == n_ex], f[f["n"] == n_ex]
        b, f = b.set_index("heads")[f"d_{obj}"], f.set_index("heads")[f"d_{obj}"]
        common = b.index.intersection(f.index)
        assert len(common) >= 5
        if ranked:
            assert not np.allclose(b[common], f[common], rtol=0, atol=1e-6)
        else:
            assert_close(torch.tensor(b[common].to_numpy()), torch.tensor(f[common].to_numpy()))
    select = f"select_d_{obj}"
    assert_close(torch.tensor(bf16.confirmation[select].to_numpy()),
                 torch.tensor(f32.confirmation[select].to_numpy()))
    pd.testing.assert_frame_equal(bf16.confirmation.drop(columns=select),
                                  f32.confirmation.drop(columns=select), check_exact=True)
    for table in ("side_effects", "tradeoff"):
        pd.testing.assert_frame_equal(getattr(bf16, table), getattr(f32, table),
                                      check_exact=True)
    if "feasible" in f32.combos:  # guarded: chosen among sets feasible in bfloat16
        assert "feasible" in bf16.combos and "guarded_p" in bf16.confirmation
        b, f = (r.combos.drop_duplicates("heads", keep="last").set_index("heads")["d_logprob"]
                for r in (bf16, f32))  # a guard metric, per set
        common = b.index.intersection(f.index)
        assert len(common) and not np.allclose(b[common], f[common], rtol=0, atol=1e-6)
    assert bf16.config.search_dtype == "bfloat16" and "search_dtype" not in f32.config.to_dict()
    assert CELResult.load(tmp_path / "bfloat16").config == bf16.config
    # a float32 rerun into the bfloat16 folder is another config
    with pytest.raises(WorkbenchError, match=r"differs in \['search_dtype'\]"):
        run_cel(model, load_task(main), others=[load_task(side)], out_dir=tmp_path / "bfloat16",
                **settings)


def test_python_and_the_command_line_write_the_same_results_folder(tmp_path):
    """`run_cel` and `workbench cel` go through the same stages: on the same model, tasks and
    settings their folders hold the same files (the explanation, `report.md`, `view.html`,
    the plots and tables), byte for byte, apart from the timings and the environment they
    were measured on (`tests/golden.py`'s `report_text` and `config_text`), and the cost's
    seconds; the cost has the same stages but the command's `load`."""
    from tests.golden import config_text, report_text
    from workbench.cli.demo import write_demo
    from workbench.cli.parser import main
    from workbench.errors import FewExamplesWarning
    from workbench.loading.model import load_model
    from workbench.results.store import CONFIG_FILE

    model_dir, task, side = write_demo(tmp_path / "demo")
    shell, python = tmp_path / "shell" / "out", tmp_path / "python" / "out"  # view.html
    assert main(["cel", "--model", str(model_dir), "--task", str(task), "--others", str(side),
                 "--out", str(shell), "--device", "cpu", "--n-random", "20", "--n-boot", "100",
                 "--quiet"]) == 0  # names its folder
    model = load_model(str(model_dir), device="cpu")
    with pytest.warns(FewExamplesWarning):
        run_cel(model, str(task), others=[str(side)], out_dir=python, model_name=str(model_dir),
                n_random=20, n_boot=100, progress=False)

    def files(folder):
        out = {}
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name = str(path.relative_to(folder))
            out[name] = (report_text(path) if name == "report.md" else
                         config_text(path) if name == CONFIG_FILE else path.read_bytes())
        return out

    made = files(shell)
    assert {"explanation/config.json", "explanation.png", "view.html"} <= set(made)
    assert "'s heads do (heldout split" in made["report.md"]
    assert files(python) == made
    costs = [CELResult.load(f).cost["stages"] for f in (shell, python)]
    assert set(costs[0]) - set(costs[1]) == {"load"} and set(costs[1]) < set(costs[0])


def test_explain_false_leaves_the_explanation_out(micro, tmp_path):
    model, task, _ = micro
    out = tmp_path / "out"
    run_cel(model, task, out_dir=out, explain=False, **FAST)
    assert not (out / "explanation").exists() and not (out / "explanation.png").exists()
    assert (out / "report.md").is_file() and (out / "view.html").is_file()
    assert CELResult.load(out).cost["stages"]["explain"]["seconds"] < 0.5


def test_the_cost_names_the_pipelines_stages():
    """One list of stages: the cost's names are the command's load and `STAGES`, in order;
    the estimate predicts the resumable ones."""
    from workbench import estimate
    from workbench.pipeline import STAGES
    from workbench.results import cost

    assert cost.STAGES == ("load", *(s.name for s in STAGES))
    assert estimate.STAGES == tuple(s.name for s in STAGES if s.resumable)


def test_run_cels_output_keywords_still_work_with_a_deprecation_warning(monkeypatch, tmp_path):
    """`overwrite`, `plots` and `explain` moved into `out_dir=Output(...)`: the old keywords
    reach `run_prepared` as the new spelling does, and each warns, naming the move."""
    import workbench.pipeline as pipeline
    from workbench.pipeline import Output

    seen = []
    monkeypatch.setattr(pipeline, "prepare_run", lambda *a, **k: "run")
    monkeypatch.setattr(pipeline, "run_prepared", lambda run, **k: seen.append(k))
    with pytest.warns(DeprecationWarning) as caught:
        run_cel(None, "task", out_dir=tmp_path, overwrite=True, plots=False, explain=False)
    run_cel(None, "task", out_dir=Output(tmp_path, overwrite=True, plots=False, explain=False))
    assert seen[0] == seen[1] == {"out_dir": tmp_path, "plots": False, "overwrite": True,
                                  "explain": False}
    messages = [str(w.message) for w in caught]
    for keyword in ("overwrite", "plots", "explain"):
        assert any(f"run_cel(..., {keyword}=...)" in m and "Output(" in m
                   for m in messages), keyword
    run_cel(None, "task", out_dir=tmp_path)  # a folder alone: Output's defaults
    assert seen[2] == {"out_dir": tmp_path, "plots": True, "overwrite": False, "explain": True}
