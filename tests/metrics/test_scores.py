"""The per-example scores (`workbench.metrics.scores`): each metric against a reference
computed by hand from the logits or a naive forward, `evaluate` with heads removed,
`summarize`, and multi-token answers (teacher-forced sequence log-prob, greedy exact match)
against one unbatched forward per step."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import assert_close, greedy_decode, write_lines
from workbench import ablated, encode_task, evaluate, load_task, summarize
from workbench.metric_records import METRIC_RECORDS, scored_names
from workbench.metrics.choices import CHOICE_SCORES
from workbench.metrics.generation import GENERATION_SCORES
from workbench.metrics.scores import METRICS, get_metric
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import METRIC_NAMES, NEEDS_WRONG, Example, Task


def test_task_metric_names_are_the_registered_metrics():
    assert set(METRIC_NAMES) == set(METRICS) | {m.name for m in METRIC_RECORDS if m.base} | set(
        CHOICE_SCORES) | set(GENERATION_SCORES)
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


def test_metrics_match_a_naive_forward(attn_model, tiny_task):
    scores = evaluate(attn_model, tiny_task)
    batch = encode_task(attn_model, tiny_task)
    tok = attn_model.word_tokenizer
    for i, ex in enumerate(tiny_task.examples):  # one unpadded forward per example
        ids = torch.tensor([tok.encode(ex.prompt, prepend_bos=True)])
        logits = attn_model(ids)[0, -1]
        answer, wrong = tok.token_id(ex.answers[0]), tok.token_id(ex.wrong[0])
        row = scores.iloc[i]
        assert row["id"] == ex.id
        assert_close(row["logprob"], logits.log_softmax(-1)[answer])
        assert_close(row["logit_diff"], logits[answer] - logits[wrong])
        assert row["correct"] == int(logits.argmax() == answer)
        assert row["prediction"] == row["prediction_vocab"] == tok.vocab[int(logits.argmax())]
    assert len(batch) == len(tiny_task)


def test_candidate_accuracy_takes_argmax_over_candidates(tmp_path, attn_model):
    lines = [{"task": {"answer_scope": "candidates"}}] + [
        {"id": f"e{i}", "prompt": f"w{i} w{i + 1}", "answer": "w3", "wrong": ["w5", "w7"]}
        for i in range(10)
    ]
    task = load_task(write_lines(tmp_path / "c.jsonl", lines))
    scores = evaluate(attn_model, task)
    tok = attn_model.word_tokenizer
    for i, ex in enumerate(task.examples):
        logits = attn_model(torch.tensor([tok.encode(ex.prompt, prepend_bos=True)]))[0, -1]
        cands = [tok.token_id(w) for w in ("w3", "w5", "w7")]
        expected = int(cands[int(logits[cands].argmax())] == tok.token_id("w3"))
        assert scores["correct"].iloc[i] == expected


def test_prediction_is_the_candidate_that_correct_scores(tmp_path, attn_model):
    # A multiple-choice task whose four options never hold the vocabulary's argmax: the
    # `prediction` column is the option `correct` scores, not the vocabulary's token.
    tok = attn_model.word_tokenizer
    prompts = [f"w{i} w{(3 * i + 1) % 20}" for i in range(8)]
    lines = [{"task": {"answer_scope": "candidates"}}]
    naive = []
    for i, prompt in enumerate(prompts):
        with torch.no_grad():
            logits = attn_model(torch.tensor([tok.encode(prompt, prepend_bos=True)]))[0, -1]
        top = int(logits.argmax())
        words = [f"w{k}" for k in range(20) if tok.token_id(f"w{k}") != top]
        options = words[i % 4 :: 4][:4]  # four options, none the vocabulary's argmax
        lines.append({"id": f"e{i}", "prompt": prompt, "answer": options[0], "wrong": options[1:]})
        ids = [tok.token_id(w) for w in options]
        naive.append((options[int(logits[ids].argmax())], options[0], tok.vocab[top]))
    scores = evaluate(attn_model, load_task(write_lines(tmp_path / "mc.jsonl", lines)))
    for i, (picked, answer, vocab_top) in enumerate(naive):
        row = scores.iloc[i]
        assert row["prediction"] == picked != vocab_top
        assert row["prediction_vocab"] == vocab_top
        assert row["correct"] == int(picked == answer)
    assert set(scores["correct"]) == {0, 1}  # both outcomes checked


def test_evaluate_with_heads_equals_ablated_forward(gpt2_like_model, tiny_task):
    heads = ["L0H2", "L1H1"]
    scores = evaluate(gpt2_like_model, tiny_task, heads=heads, batch_size=7)
    batch = encode_task(gpt2_like_model, tiny_task)
    with ablated(gpt2_like_model, heads):
        logits = gpt2_like_model(batch.tokens)[torch.arange(len(batch)), batch.lengths - 1]
    expected = logits.log_softmax(-1).gather(1, batch.answer_ids).squeeze(1)
    assert_close(scores["logprob"].to_numpy(), expected)
    held = evaluate(gpt2_like_model, tiny_task, heads=heads, split="heldout")
    assert set(held["split"]) == {"heldout"}
    assert_close(
        held["logprob"].to_numpy(), scores.set_index("id").loc[held["id"], "logprob"].to_numpy()
    )


def test_summarize_by_group():
    df = pd.DataFrame(
        {
            "id": list("abcd"),
            "split": ["select"] * 4,
            "group": ["x", "x", "y", "y"],
            "correct": [1, 0, 1, 1],
            "logprob": [-1.0, -3.0, -0.5, -0.5],
            "logit_diff": [1.0, np.nan, 2.0, 4.0],
            "prediction": list("pqrs"),
        }
    )
    s = summarize(df).set_index("subset")
    assert s.loc["all", "accuracy"] == 0.75 and s.loc["all", "n"] == 4
    assert s.loc["x", "logprob"] == -2.0
    assert_close(s.loc["x", "logprob_se"], np.std([-1.0, -3.0], ddof=1) / np.sqrt(2))
    assert s.loc["all", "logit_diff"] == pytest.approx(7 / 3)  # NaN ignored


def _naive_seq_logprob(model, ids: list[int], answer: list[int]) -> float:
    with torch.no_grad():
        logp = model(torch.tensor([ids + answer]))[0].log_softmax(-1)
    return sum(float(logp[len(ids) - 1 + k, t]) for k, t in enumerate(answer))


def test_sequence_scores_match_naive_decoding(attn_model, multi_task):
    tok = attn_model.word_tokenizer
    scores = evaluate(attn_model, multi_task, batch_size=4)
    for i, ex in enumerate(multi_task.examples):
        ids = tok.encode(ex.prompt, prepend_bos=True)
        seqs = [tok.encode(a) for a in ex.answers]
        logps = torch.tensor([_naive_seq_logprob(attn_model, ids, s) for s in seqs])
        assert_close(scores["logprob"].iloc[i], logps.logsumexp(0))
        greedy = greedy_decode(attn_model, ids, 3)
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
