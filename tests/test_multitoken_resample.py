"""Multi-token answers (teacher-forced sequence log-prob, greedy exact match) and resample
ablation, each against a naive reference: one unbatched forward per step, or a hand-written
`hook_z` replacement from `run_with_cache`."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
import torch

from tests.helpers import assert_close
from workbench import WorkbenchError, encode_task, evaluate
from workbench.ablation import ablation_hooks, compute_resample_z, mask_hooks
from workbench.metrics.scores import answer_logits, sequence_scores
from workbench.tasks.task import Example, Task


def _greedy(model, ids: list[int], n: int) -> list[int]:
    """Naive greedy decoding: one full forward per new token."""
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([out]))[0, -1].argmax()))
    return out[len(ids) :]


def _naive_seq_logprob(model, ids: list[int], answer: list[int]) -> float:
    with torch.no_grad():
        logp = model(torch.tensor([ids + answer]))[0].log_softmax(-1)
    return sum(float(logp[len(ids) - 1 + k, t]) for k, t in enumerate(answer))


@pytest.fixture(scope="module")
def multi_task(attn_model):
    tok = attn_model.word_tokenizer
    prompts = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w0 w11", "w12 w3 w5", "w13 w14 w1"]
    examples = []
    for i, p in enumerate(prompts):
        greedy = tok.str_tokens(_greedy(attn_model, tok.encode(p, prepend_bos=True), 3))
        if i % 2 == 0:  # the model's own greedy continuation: exact match expected
            answers = (" ".join(greedy),)
        else:  # the same with the last token changed, plus a 2-token alternative
            last = "w19" if greedy[-1] != "w19" else "w18"
            answers = (" ".join(greedy[:2] + [last]), "w17 w16")
        examples.append(
            Example(id=f"m{i}", prompt=p, answers=answers, wrong=("w15",), split="select")
        )
    return Task(name="multi", examples=examples, answer_tokens="multi", metric="logit_diff")


def test_sequence_scores_match_naive_decoding(attn_model, multi_task):
    tok = attn_model.word_tokenizer
    scores = evaluate(attn_model, multi_task, batch_size=4)
    for i, ex in enumerate(multi_task.examples):
        ids = tok.encode(ex.prompt, prepend_bos=True)
        seqs = [tok.encode(a) for a in ex.answers]
        logps = torch.tensor([_naive_seq_logprob(attn_model, ids, s) for s in seqs])
        assert_close(scores["logprob"].iloc[i], logps.logsumexp(0))
        greedy = _greedy(attn_model, ids, 3)
        assert scores["correct"].iloc[i] == int(any(greedy[: len(s)] == s for s in seqs))
        # First-token metrics score each answer's first token at the prompt's last position.
        with torch.no_grad():
            last = attn_model(torch.tensor([ids]))[0, -1]
        firsts = sorted({s[0] for s in seqs})
        assert_close(scores["first_logprob"].iloc[i], last.log_softmax(-1)[firsts].logsumexp(0))
        assert scores["first_correct"].iloc[i] == int(int(last.argmax()) in firsts)
    assert scores["correct"].tolist() == [1, 0, 1, 0, 1, 0]


def test_single_token_answers_score_the_same_as_a_multi_task(attn_model, tiny_task):
    single = evaluate(attn_model, tiny_task)
    multi = evaluate(attn_model, replace(tiny_task, answer_tokens="multi"))
    assert (multi["first_correct"] == single["correct"]).all()
    assert (multi["first_logprob"] == single["logprob"]).all()  # bit-identical first token
    # For one-token answers the sequence is the first token (batched vs unbatched forwards).
    assert_close(multi["logprob"].to_numpy(), single["logprob"].to_numpy())
    assert (multi["correct"] == single["correct"]).all()


def test_multi_answers_sharing_a_first_token_with_a_wrong_one_are_refused(attn_model):
    ex = Example(id="c", prompt="w1", answers=("w2 w3",), wrong=("w2 w4",), split="select")
    task = Task(name="c", examples=[ex], answer_tokens="multi")
    with pytest.raises(WorkbenchError, match="example 'c': an answer and a wrong answer both"):
        encode_task(attn_model, task)
    with pytest.raises(WorkbenchError, match="not a multi-token task"):
        sequence_scores(
            attn_model,
            encode_task(
                attn_model,
                replace(
                    task,
                    examples=[replace(ex, answers=("w2",), wrong=("w4",))],
                    answer_tokens="single",
                ),
            ),
        )


# ---------------------------------------------------------------------------------------------
# Resample ablation


@pytest.fixture(scope="module")
def cf_task():
    g = torch.Generator().manual_seed(3)
    examples = []
    for i in range(12):
        n = 3 + i % 4
        words = [f"w{int(j)}" for j in torch.randint(0, 20, (n,), generator=g)]
        cf = [f"w{int(j)}" for j in torch.randint(0, 20, (n,), generator=g)]
        examples.append(
            Example(
                id=f"r{i}",
                prompt=" ".join(words),
                answers=(words[0],),
                wrong=(cf[0],) if cf[0] != words[0] else ("w19" if words[0] != "w19" else "w18",),
                split="select",
                counterfactual=" ".join(cf),
            )
        )
    return Task(name="cf", examples=examples, metric="logit_diff")


def _replace_z(z, hook, head, new):
    z = z.clone()
    z[:, :, head] = new
    return z


@pytest.mark.parametrize("heads", [["L0H1"], ["L0H2", "L1H3"]])
def test_resample_ablation_equals_patching_z_from_the_counterfactual_run(
    gpt2_like_model, cf_task, heads
):
    model = gpt2_like_model
    scores = evaluate(model, cf_task, heads=heads, kind="resample", batch_size=5)
    batch = encode_task(model, cf_task)
    # Naive: cache the counterfactual run, then write each head's cached z into the clean run.
    hook_names = {f"blocks.{l}.attn.hook_z" for l in range(model.cfg.n_layers)}
    with torch.no_grad():
        _, cache = model.run_with_cache(
            batch.counterfactual_tokens, names_filter=lambda n: n in hook_names
        )
        hooks = []
        for spec in heads:
            layer, head = int(spec[1]), int(spec[3])
            name = f"blocks.{layer}.attn.hook_z"
            hooks.append((name, partial(_replace_z, head=head, new=cache[name][:, :, head])))
        logits = model.run_with_hooks(batch.tokens, fwd_hooks=hooks)
    rows = torch.arange(len(batch))
    at = logits[rows, batch.lengths - 1]
    expected = at[rows, batch.answer_ids[:, 0]] - at[rows, batch.wrong_ids[:, 0]]
    assert_close(scores["logit_diff"].to_numpy(), expected)
    clean = evaluate(model, cf_task)
    assert (scores["logit_diff"] - clean["logit_diff"]).abs().max() > 1e-3  # it did something


def test_resample_in_tiled_masks_equals_one_set_at_a_time(gpt2_like_model, cf_task):
    model = gpt2_like_model
    batch = encode_task(model, cf_task)
    resample = compute_resample_z(model, batch)
    sets = [["L0H1"], ["L0H2", "L1H3"], []]
    masks = torch.zeros(len(sets), model.cfg.n_layers, model.cfg.n_heads)
    for m, s in enumerate(sets):
        for spec in s:
            masks[m, int(spec[1]), int(spec[3])] = 1.0
    k = len(sets)  # mask-major tiling, as MaskScorer does
    tiled = replace(batch, tokens=batch.tokens.repeat(k, 1), lengths=batch.lengths.repeat(k))
    with torch.no_grad():
        got = answer_logits(model, tiled, mask_hooks(model, masks, "resample", resample=resample))
        for m, s in enumerate(sets):
            hooks = ablation_hooks(model, s or None, "resample", resample=resample)
            want = answer_logits(model, batch, hooks)
            assert_close(got[m * len(batch) : (m + 1) * len(batch)], want)


def test_resample_errors_are_clear(gpt2_like_model, tiny_task, cf_task):
    with pytest.raises(WorkbenchError, match="has no counterfactual prompts"):
        evaluate(gpt2_like_model, tiny_task, heads=["L0H1"], kind="resample")
    batch = encode_task(gpt2_like_model, cf_task)
    with pytest.raises(WorkbenchError, match="resample ablation needs the counterfactual run"):
        ablation_hooks(gpt2_like_model, ["L0H1"], "resample")
    short = compute_resample_z(gpt2_like_model, batch.rows(slice(0, 3)))
    with pytest.raises(WorkbenchError, match=r"resample activations are \[batch=3"):
        evaluate(gpt2_like_model, batch, heads=["L0H1"], kind="resample", resample=short)
    bad = replace(cf_task.examples[0], counterfactual="w1 w2 w3 w4 w5 w6 w7 w8")
    with pytest.raises(WorkbenchError, match="example 'r0': the counterfactual prompt is 9"):
        encode_task(gpt2_like_model, replace(cf_task, examples=[bad]))


def test_exact_screening_over_all_answer_positions(attn_model, multi_task):
    """MaskScorer with `multi_token_metric` equals `evaluate` with each mask's heads removed."""
    from workbench.metrics.scores import multi_token_metric
    from workbench.scoring.scorer import MaskScorer, masks_of

    batch = encode_task(attn_model, multi_task)
    sets = [["L0H1"], ["L0H0", "L1H2"], ["L1H3"]]
    scorer = MaskScorer(attn_model, batch, metric=multi_token_metric)
    got = scorer.score(masks_of(attn_model, sets))
    clean = evaluate(attn_model, multi_task)
    assert_close(scorer.clean()["logprob"], clean["logprob"].to_numpy())
    for m, heads in enumerate(sets):
        want = evaluate(attn_model, multi_task, heads=heads)
        assert_close(got["logprob"][m], want["logprob"].to_numpy())
        assert got["accuracy"][m].tolist() == want["correct"].astype(float).tolist()
        assert_close(got["logit_diff"][m], want["logit_diff"].to_numpy())


def test_multi_token_scores_of_a_slice_equal_the_full_scores_columns(attn_model, multi_task):
    """Racing scores slices of rows: with `multi_token_metric` the slice runs alone (its cost is
    its share of a pass) and gives the full pass's numbers for those rows."""
    from workbench.metrics.scores import multi_token_metric
    from workbench.scoring.scorer import MaskScorer, masks_of

    batch = encode_task(attn_model, multi_task)
    masks = masks_of(attn_model, [["L0H1"], ["L0H0", "L1H2"], []])
    scorer = MaskScorer(attn_model, batch, metric=multi_token_metric)
    full = scorer.score(masks)
    rows = torch.tensor([len(batch) - 1, 0])
    calls = []

    def counting(model, data):
        calls.append(len(data))
        return multi_token_metric(model, data)

    sliced = MaskScorer(attn_model, batch, metric=counting)
    sliced.clean()
    calls.clear()
    got = sliced.score(masks, rows=rows)
    assert calls == [2, 2, 2]  # each mask ran on the 2 rows alone
    for name in ("logprob", "accuracy", "logit_diff", "prob_diff"):
        assert_close(got[name], full[name][:, rows])


def test_attribution_on_a_multi_token_task_is_the_derivative_of_the_exact_scores(
    attn_model, multi_task
):
    """Attribution with `multi_token_metric` counts every forward an example makes (its answers'
    rows): each head's estimate equals the finite difference of the exact scores when that head's
    z moves a small step towards its ablated value (zero ablation: z -> (1 - eps) z)."""
    from workbench.metrics.scores import multi_token_metric
    from workbench.screening.attribution import attribution_effects

    batch = encode_task(attn_model, multi_task)
    clean, est = attribution_effects(attn_model, batch, metric=multi_token_metric)
    eps = 1e-3
    H = attn_model.cfg.n_heads

    def shrink(z, hook, head):
        z = z.clone()
        z[:, :, head] *= 1 - eps
        return z

    with torch.no_grad():
        base = multi_token_metric(attn_model, batch)
        assert_close(clean["logprob"], base["logprob"])
        for layer in range(attn_model.cfg.n_layers):
            for head in range(H):
                hooks = [(f"blocks.{layer}.attn.hook_z", partial(shrink, head=head))]
                with attn_model.hooks(fwd_hooks=hooks):
                    moved = multi_token_metric(attn_model, batch)
                for name in ("logprob", "logit_diff"):
                    fd = (moved[name] - base[name]) / eps
                    got = est[name][layer * H + head]
                    # float32 finite differences: second-order term ~eps and rounding ~1e-7/eps
                    torch.testing.assert_close(got, fd, rtol=2e-2, atol=2e-3)
    assert torch.isnan(est["accuracy"]).all()  # exact match has no derivative


def test_attribution_refuses_custom_data_whose_metric_runs_several_forwards(attn_model):
    from workbench.screening.attribution import attribution_effects

    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])

    def two_passes(model, data):
        return model(data[:1])[:, -1, 0] + model(data[1:])[:, -1, 0]

    with pytest.raises(WorkbenchError, match="needs one forward over the data's 1 rows"):
        attribution_effects(attn_model, tokens, metric=two_passes)


def test_attribution_on_a_multi_token_accuracy_task_has_a_pool_baseline(attn_model):
    """Attribution has no estimate of exact match, so the log-prob decides the search pool
    (`search_pool(..., second=)`), and the held-out headline gets its pool baseline."""
    from workbench.pipeline import run_cel
    from workbench.search.candidates import search_pool

    examples = [
        Example(id=f"e{i}", prompt=f"w{i % 20} w{(3 * i) % 20} w{(7 * i + 1) % 20}",
                answers=(f"w{(i + 5) % 19} w{(2 * i) % 20}",), wrong=("w19",),
                split="select" if i % 2 else "heldout")
        for i in range(40)
    ]
    task = Task(name="multi_acc", examples=examples, answer_tokens="multi", metric="accuracy")
    result = run_cel(attn_model, task, method="attribution", check_attribution=False,
                     strategy=["exhaustive"], max_size=2, top_m=3, n_random=20, n_boot=100,
                     progress=False)
    assert result.heads["d_accuracy_hi"].isna().all()
    pool = search_pool(result.heads, "accuracy", second="logprob")
    assert pool == search_pool(result.heads, "logprob") and pool
    assert result.confirmation["pool_percentile"].notna().all()


def test_a_one_forward_custom_metric_gets_length_buckets_and_the_same_estimates(
    gpt2_like_model, tiny_task
):
    """A custom metric declared `one_forward` runs once per length bucket under attribution,
    not once per example, and its estimates equal the one-example-at-a-time ones."""
    from workbench import one_forward
    from workbench.metrics.scores import answer_logits, score_logits
    from workbench.screening.attribution import attribution_effects

    calls = []

    def logprob(model, batch):
        calls.append(len(batch))
        return score_logits(answer_logits(model, batch), batch)["logprob"]

    batch = encode_task(gpt2_like_model, tiny_task)
    assert len(set(batch.lengths.tolist())) > 1  # several buckets' worth of lengths
    clean_slow, slow = attribution_effects(gpt2_like_model, batch, metric=logprob)
    assert calls == [1] * len(batch)
    calls.clear()
    clean_fast, fast = attribution_effects(gpt2_like_model, batch, metric=one_forward(logprob))
    assert 1 <= len(calls) < len(batch) and sum(calls) == len(batch)
    assert_close(clean_fast["metric"], clean_slow["metric"])
    assert_close(fast["metric"], slow["metric"])


def test_a_declared_one_forward_metric_that_runs_several_is_refused(attn_model, multi_task):
    from workbench import one_forward
    from workbench.metrics.scores import multi_token_metric
    from workbench.screening.attribution import attribution_effects

    batch = encode_task(attn_model, multi_task)
    with pytest.raises(WorkbenchError, match="declared `one_forward`, but on"):
        attribution_effects(attn_model, batch, metric=one_forward(
            lambda model, b: multi_token_metric(model, b)))
