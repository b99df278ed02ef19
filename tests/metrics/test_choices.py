"""Multiple-choice scoring (`workbench.metrics.choices`): lm-eval's definitions against a numpy
reference written from lm-eval's `process_results`, the shared-context path against the
one-pass-per-choice loop and against full forwards, with and without an ablation, and
attribution through a 0/1 score's companion."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import assert_close
from workbench.ablation import ablation_hooks, compute_head_means
from workbench.metric_records import metric_names, registered
from workbench.metrics.choices import (
    CHOICE_SCORES,
    choice_logliks,
    choice_metric,
    choice_scores,
    gold_and_lengths,
)
from workbench.metrics.scores import evaluate, summarize, task_metric
from workbench.screening.attribution import attribution_effects
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task

CHOICES = ["w1", "w2 w3", "w4 w5 w6", "w7", "w8 w9 w10 w11"]


def mc_task(n: int = 12, name: str = "mc") -> Task:
    """Prompts of 2-5 words, 2-5 choices of 1-4 words each, gold cycling over them."""
    rows = []
    for i in range(n):
        prompt = " ".join(f"w{(i * 3 + k) % 20}" for k in range(2 + i % 4))
        choices = CHOICES[i % 3:][: 2 + i % 4] if i % 3 < 2 else CHOICES[: 2 + i % 4]
        rows.append({"id": f"q{i}", "prompt": prompt, "choices": choices,
                     "gold": i % len(choices), "split": "select" if i % 2 else "heldout"})
    return Task.from_records(rows, name=name)


def lm_eval_reference(lls: list[list[float]], golds: list[int], choices: list[list[str]]):
    """lm-eval 0.4's `process_results` for `multiple_choice`, per document, in numpy."""
    out = {k: [] for k in CHOICE_SCORES}
    for ll, gold, ch in zip(lls, golds, choices, strict=True):
        ll = np.array(ll)
        completion_len = np.array([float(len(c)) for c in ch])
        out["acc"].append(1.0 if np.argmax(ll) == gold else 0.0)
        out["acc_norm"].append(1.0 if np.argmax(ll / completion_len) == gold else 0.0)
        out["logprob"].append(ll[gold])
        out["ll_margin"].append(ll[gold] - max(v for i, v in enumerate(ll) if i != gold))
        norm = ll / completion_len
        out["acc_norm_margin"].append(norm[gold] - max(v for i, v in enumerate(norm)
                                                       if i != gold))
    return {k: np.array(v) for k, v in out.items()}


def test_scores_follow_lm_eval_definitions_ties_included():
    # ties: doc 0 ties choices 0 and 2 with gold 2 (np.argmax picks 0: acc 0); doc 1's
    # acc and acc_norm disagree because its choices differ in length
    lls = [[-1.0, -3.0, -1.0], [-2.0, -3.0, -9.0], [-4.0, -1.5, -7.0]]
    golds = [2, 1, 1]
    choices = [["a", "bb", "c"], ["x", "yyyyyy", "z"], ["p", "q", "r"]]
    ref = lm_eval_reference(lls, golds, choices)
    chars = torch.tensor([[float(len(c)) for c in ch] for ch in choices])
    got = choice_scores(torch.tensor(lls), torch.tensor(golds), chars)
    assert list(got) == list(CHOICE_SCORES)
    for name in CHOICE_SCORES:
        assert_close(got[name], ref[name], msg=name)
    assert got["acc"].tolist() == [0.0, 0.0, 1.0]
    assert got["acc_norm"].tolist() == [0.0, 1.0, 1.0]


def test_records_keep_one_name_one_definition():
    assert metric_names("multiple-choice") == (
        "logprob", "acc", "acc_norm", "ll_margin", "acc_norm_margin")
    assert "acc" not in metric_names("next-token") and "accuracy" not in metric_names(
        "multiple-choice")
    acc, margin = registered("acc"), registered("ll_margin")
    assert (acc.differentiable, acc.guards, acc.coarse, acc.companion) == (
        False, True, True, "ll_margin")
    assert margin.difference and margin.differentiable and not margin.guards
    assert registered("acc_norm").companion == "acc_norm_margin"


@pytest.mark.parametrize("which", ["attn_model", "gpt2_like_model"])
def test_shared_context_matches_one_pass_per_choice_and_full_forwards(which, request):
    model = request.getfixturevalue(which)
    batch = encode_task(model, mc_task())
    means = compute_head_means(model, batch.tokens, batch.lengths)
    for hooks in ([], ablation_hooks(model, [(0, 1), (1, 2)], "zero"),
                  ablation_hooks(model, [(0, 3), (1, 0)], "mean", means)):
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            shared = choice_logliks(model, batch, shared=True)
            naive = choice_logliks(model, batch, shared=False)
            full = _full_forward_logliks(model, batch)
        # measured gap 9.5e-7 (float32, a few layers): the helpers' 1e-5
        assert_close(shared, naive)
        assert_close(naive, full)
        assert torch.equal(shared.argmax(-1), naive.argmax(-1))
        assert torch.isinf(shared).tolist() == torch.isinf(naive).tolist()


def _full_forward_logliks(model, batch) -> torch.Tensor:
    """The independent reference: `model(prompt + choice)` logits, one row at a time."""
    out = torch.full((len(batch), max(len(c) for c in batch.choice_seqs)), float("-inf"))
    for i, seqs in enumerate(batch.choice_seqs):
        n = int(batch.lengths[i])
        for j, seq in enumerate(seqs):
            tokens = torch.cat([batch.tokens[i, :n], torch.tensor(seq)])[None]
            logp = model(tokens)[0].log_softmax(-1)
            out[i, j] = sum(float(logp[n - 1 + k, t]) for k, t in enumerate(seq))
    return out


def test_evaluate_and_summarize_a_multiple_choice_task(attn_model):
    task = mc_task()
    df = evaluate(attn_model, task, heads=[(0, 1)])
    batch = encode_task(attn_model, task)
    with torch.no_grad(), attn_model.hooks(
            fwd_hooks=ablation_hooks(attn_model, [(0, 1)], "zero")):
        ll = choice_logliks(attn_model, batch, shared=False)
    exs = task.examples
    lls = [row[: len(e.choices)].tolist() for row, e in zip(ll, exs, strict=True)]
    ref = lm_eval_reference(lls, [e.gold for e in exs], [list(e.choices) for e in exs])
    assert list(df.columns) == ["id", "split", "group", *CHOICE_SCORES, "prediction",
                                "prediction_norm"]
    assert df["acc"].tolist() == ref["acc"].astype(int).tolist()
    assert df["acc_norm"].tolist() == ref["acc_norm"].astype(int).tolist()
    assert_close(df["ll_margin"].to_numpy(), ref["ll_margin"])
    summary = summarize(df)
    assert summary.loc[0, "acc"] == pytest.approx(ref["acc"].mean())
    assert "accuracy" not in summary and "logit_diff" not in summary


def test_task_metric_scores_each_kind_in_its_own_metric(attn_model, tiny_task):
    mc = encode_task(attn_model, mc_task())
    plain = encode_task(attn_model, tiny_task)
    assert task_metric(None, mc) is choice_metric
    assert task_metric(choice_metric, plain) is None  # ioi-like side task of an MC run
    assert task_metric(None, plain) is None


def test_attribution_estimates_acc_through_its_margin(attn_model):
    batch = encode_task(attn_model, mc_task())
    clean, est = attribution_effects(attn_model, batch, "zero", metric=choice_metric)
    assert set(est) == set(CHOICE_SCORES)
    for name in CHOICE_SCORES:
        assert torch.isfinite(est[name]).all(), name
    # acc's estimate is the flip of ll_margin's sign under ll_margin's linear estimate
    m = clean["ll_margin"]
    flips = (m[None] + est["ll_margin"] > 0).float() - (m > 0).float()[None]
    assert torch.equal(est["acc"], flips)
    gold, chars = gold_and_lengths(batch)
    assert torch.equal(clean["acc"], choice_scores(
        choice_logliks(attn_model, batch).detach(), gold, chars)["acc"])
