"""Each metric against a reference computed by hand from the logits."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from tests.helpers import assert_close
from workbench import ablated, encode_task, evaluate
from workbench.metrics.records import METRIC_RECORDS, scored_names
from workbench.metrics.scores import METRICS, get_metric
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import METRIC_NAMES, NEEDS_WRONG, Example, Task


def test_task_metric_names_are_the_registered_metrics():
    assert set(METRIC_NAMES) == set(METRICS) | {m.name for m in METRIC_RECORDS if m.base}
    assert set(METRICS) == set(scored_names())
    assert {"logit_diff", "prob_diff"} <= set(NEEDS_WRONG)
    assert get_metric("normalized_logit_diff") is METRICS["logit_diff"]


def _batch(answer_ids, wrong_ids, candidate_ids=None) -> TaskBatch:
    n = len(answer_ids)
    examples = [Example(id=str(i), prompt="-", answers=("-",), split="select") for i in range(n)]
    return TaskBatch(
        task=Task(name="t", examples=examples),
        tokens=torch.zeros(n, 1, dtype=torch.long),
        lengths=torch.ones(n, dtype=torch.long),
        answer_ids=torch.tensor(answer_ids),
        wrong_ids=torch.tensor(wrong_ids).reshape(n, -1),
        candidate_ids=None if candidate_ids is None else torch.tensor(candidate_ids),
        str_tokens=[[] for _ in range(n)],
        roles=None,
    )


def test_metrics_match_hand_computation():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 12, generator=g) * 3
    # Row 0: answers {2, 5}, wrong {7}; row 1: answer {1}, wrong {3, 4}; row 2: no wrong.
    batch = _batch([[2, 5], [1, -1], [9, -1]], [[7, -1], [3, 4], [-1, -1]])
    answers = [[2, 5], [1], [9]]
    wrongs = [[7], [3, 4], []]
    out = {name: fn(logits, batch) for name, fn in METRICS.items()}
    for i in range(3):
        row = logits[i].tolist()
        z = sum(math.exp(v) for v in row)
        p = [math.exp(v) / z for v in row]
        assert out["accuracy"][i].item() == float(int(np.argmax(row)) in answers[i])
        assert_close(out["logprob"][i], math.log(sum(p[a] for a in answers[i])))
        if wrongs[i]:
            lse_right = math.log(sum(math.exp(row[k]) for k in answers[i]))
            lse_wrong = math.log(sum(math.exp(row[k]) for k in wrongs[i]))
            assert_close(out["logit_diff"][i], lse_right - lse_wrong)
            expected = sum(p[a] for a in answers[i]) - sum(p[w] for w in wrongs[i])
            assert_close(out["prob_diff"][i], expected)
        else:
            assert math.isnan(out["logit_diff"][i]) and math.isnan(out["prob_diff"][i])


def test_prob_diff_is_hanna_greater_than_measure():
    # 100 two-digit candidates at ids 0..99 of a 120-token vocabulary; start year YY = 41.
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(1, 120, generator=g)
    yy = 41
    batch = _batch([list(range(yy + 1, 100))], [list(range(yy + 1))])
    p = logits.softmax(-1)[0]
    expected = p[yy + 1 : 100].sum() - p[: yy + 1].sum()
    assert_close(METRICS["prob_diff"](logits, batch)[0], expected)


def test_normalized_logit_diff_is_ablated_over_clean_mean(gpt2_like_model, tiny_task):
    heads = ["L0H1", "L1H3"]
    clean = evaluate(gpt2_like_model, tiny_task)
    assert_close(clean["normalized_logit_diff"].mean(), 1.0)
    abl = evaluate(gpt2_like_model, tiny_task, heads=heads, clean_logit_diff=None)
    assert abl["normalized_logit_diff"].isna().all()  # no clean scale known, none computed
    task = replace(tiny_task, metric="normalized_logit_diff")
    norm = evaluate(gpt2_like_model, task, heads=heads)
    # The naive reference: two full forwards, ratio of the mean logit differences.
    batch = encode_task(gpt2_like_model, tiny_task)
    rows = torch.arange(len(batch))
    a, w = batch.answer_ids[:, 0], batch.wrong_ids[:, 0]
    with torch.no_grad():
        lc = gpt2_like_model(batch.tokens)[rows, batch.lengths - 1]
        with ablated(gpt2_like_model, heads):
            la = gpt2_like_model(batch.tokens)[rows, batch.lengths - 1]
    clean_ld = (lc[rows, a] - lc[rows, w]).mean()
    assert_close(norm["normalized_logit_diff"].to_numpy(), (la[rows, a] - la[rows, w]) / clean_ld)
    assert_close(
        norm["normalized_logit_diff"].mean(), (la[rows, a] - la[rows, w]).mean() / clean_ld
    )
