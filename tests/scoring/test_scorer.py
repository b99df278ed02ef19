"""`MaskScorer` (`workbench.scoring.scorer`): tiled and chunked scoring equals one mask at a
time and one ablated forward, and multi-token scoring (`multi_token_metric`) equals `evaluate`,
on the full split and on a slice of rows."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_close, micro_cel
from workbench import Ablation, ablated, compute_head_means, evaluate
from workbench.compute import Compute
from workbench.scoring.scorer import MEMO_MASKS, MaskScorer, masks_of
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task

METRICS = ("accuracy", "logprob", "logit_diff")


def _means(model, batch):
    return compute_head_means(model, batch.tokens, batch.lengths)


@pytest.mark.parametrize("masks_per_pass,max_rows", [(3, 1024), (2, 7), (None, 5)])
def test_tiled_and_chunked_scoring_equals_one_mask_at_a_time(
    gpt2_like_model, tiny_task, masks_per_pass, max_rows
):
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    means = _means(model, batch)
    sets = [["L0H1"], ["L1H0", "L1H3"], ["L0H0", "L0H2", "L1H1"], [], ["L1H2"]]
    masks = masks_of(model, sets)
    ref = MaskScorer(model, batch, Ablation("mean", means),
                     compute=Compute(masks_per_pass=1)).score(masks)
    got = MaskScorer(
        model,
        batch,
        Ablation("mean", means),
        compute=Compute(masks_per_pass=masks_per_pass, max_rows=max_rows),
    ).score(masks)
    for m in METRICS:
        assert_close(got[m], ref[m], msg=m)
    # and against the context manager on the full model
    with ablated(model, sets[2], "mean", means), torch.no_grad():
        from workbench.logits import answer_logits
        from workbench.metrics.scores import score_logits

        direct = score_logits(answer_logits(model, batch), batch)
    assert_close(got["logprob"][2], direct["logprob"])
    assert_close(got["logprob"][3], MaskScorer(model, batch).clean()["logprob"])


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, side = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main), load_task(side)


def test_batched_set_scores_equal_one_ablated_run(micro):
    model, task, _ = micro
    batch = encode_task(model, task, "heldout")
    sets = [["L0H3"], ["L0H1", "L1H1"], ["L1H2", "L0H0", "L0H3"], ["L1H0"]]
    tiled = MaskScorer(model, batch, compute=Compute(masks_per_pass=4)).score(masks_of(model, sets))
    clean = MaskScorer(model, batch).clean()
    for i, s in enumerate(sets):
        with ablated(model, s), torch.no_grad():
            from workbench.logits import answer_logits
            from workbench.metrics.scores import score_logits

            ref = score_logits(answer_logits(model, batch), batch)
        for m in ref:
            assert_close(tiled[m][i], ref[m])
    assert (tiled["accuracy"][1] - clean["accuracy"]).sum() > 0


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


def test_a_remembered_call_returns_what_the_call_computes_without_a_forward(gpt2_like_model,
                                                                             tiny_task):
    # the confirmation and the trade-off table score each found set on every example: the
    # second call is answered from the scorer's memo, with the values a fresh call computes
    model = gpt2_like_model
    batch = encode_task(model, tiny_task, "select")
    one = masks_of(model, [["L0H1", "L1H2"]])
    scorer = MaskScorer(model, batch)
    first = scorer.score(one)
    calls = []
    real = scorer._score
    scorer._score = lambda *a: calls.append(a) or real(*a)
    again = scorer.score(one)
    assert calls == []  # no forward
    fresh = MaskScorer(model, batch).score(one)
    for m in first:
        assert torch.equal(again[m], first[m]) and torch.equal(again[m], fresh[m])
    # no masks (a rank's empty shard under torch.distributed): empty scores, not a memo lookup
    assert all(v.shape == (0, len(batch)) for v in scorer.score(one[:0]).values())
    # a slice of rows, a mask not seen, or more than MEMO_MASKS masks: computed
    scorer.score(one, rows=torch.tensor([0, 1]))
    scorer.score(masks_of(model, [["L0H0"]]))
    many = masks_of(model, [["L0H1", "L1H2"]] * (MEMO_MASKS + 1))
    got = scorer.score(many)
    assert len(calls) == 4
    for m in first:
        assert got[m].shape == (MEMO_MASKS + 1, len(batch))
        assert_close(got[m][0], first[m][0], msg=m)
