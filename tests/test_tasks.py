"""Tasks and metrics: loading errors, splits, metric values against naive references."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import assert_close, write_task
from workbench import WorkbenchError, ablated, encode_task, evaluate, load_task, summarize
from workbench.tables import check_head_table, head_table, load_table, save_table, table_to_matrix


def _write(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines))
    return path


@pytest.mark.parametrize(
    "lines,message",
    [
        ([], "is empty"),
        (["{not json"], "line 1 is not valid JSON"),
        ([{"prompt": "w1 w2"}], "missing field 'answer'"),
        ([{"answer": "w1"}], "missing field 'prompt'"),
        ([{"prompt": "w1", "answer": 3}], "'answer' must be a string"),
        ([{"prompt": "w1", "answer": "w2", "split": "train"}], "split 'train' is unknown"),
        ([{"task": {"name": "x"}}], "has a header but no examples"),
        ([{"task": {"metric": "f1"}}, {"prompt": "w1", "answer": "w2"}], "metric 'f1' is unknown"),
        ([{"task": {"metric": "logit_diff"}}, {"prompt": "w1", "answer": "w2"}], "needs 'wrong'"),
        (
            [{"id": 1, "prompt": "w1", "answer": "w2"}, {"id": 1, "prompt": "w3", "answer": "w2"}],
            "duplicate example ids",
        ),
        (
            [{"task": {"metirc": "accuracy"}}, {"prompt": "w1", "answer": "w2"}],
            r"unknown task header keys \['metirc'\]; known keys: \['name', 'description', 'metric'",
        ),
        (
            [{"task": {"prepend_bos": "false"}}, {"prompt": "w1", "answer": "w2"}],
            r"'prepend_bos' must be bool or null; got 'false' \(str\)",
        ),
        (
            [{"task": {"prepend_bos": 0}}, {"prompt": "w1", "answer": "w2"}],
            r"'prepend_bos' must be bool or null; got 0 \(int\)",
        ),
        ([{"task": {"metric": 3}}, {"prompt": "w1", "answer": "w2"}], "'metric' must be str"),
        (
            [{"task": {"candidates": ["w1", 2]}}, {"prompt": "w1", "answer": "w2"}],
            "'candidates' must be a list of strings",
        ),
        ([{"task": {"checks": ["nope"]}}, {"prompt": "w1", "answer": "w2"}], r"checks \['nope'\]"),
        ([{"task": {"answer_tokens": "two"}}, {"prompt": "w1", "answer": "w2"}], "answer_tokens"),
        ([{"task": {"metric": "prob_diff"}}, {"prompt": "w1", "answer": "w2"}], "needs 'wrong'"),
        ([{"task": {}, "extra": 1}, {"prompt": "w1", "answer": "w2"}], "holds only 'task'"),
        (
            [{"prompt": "w1", "answer": "w2", "wrnog": ["w3"]}],
            r"unknown example fields \['wrnog'\]; known fields",
        ),
        (
            [
                {"task": {"split_by": "group"}},
                {"prompt": "w1", "answer": "w2", "group": "g", "split": "select"},
                {"prompt": "w3", "answer": "w2", "group": "g", "split": "heldout"},
            ],
            "group 'g' is in both splits",
        ),
        (
            [{"task": {"split_by": "group"}}, {"id": "x", "prompt": "w1", "answer": "w2"}],
            r"examples \['x'\] have no 'group'",
        ),
    ],
)
def test_malformed_task_files(tmp_path, lines, message):
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(WorkbenchError, match=message):
        load_task(path)


def test_header_booleans_and_known_keys_are_read(tmp_path):
    lines = [
        {"task": {"prepend_bos": False, "meta": {"k": 1}, "answer_tokens": "multi"}},
        {"prompt": "w1", "answer": "w2"},
    ]
    task = load_task(_write(tmp_path / "h.jsonl", lines))
    assert task.prepend_bos is False and task.meta == {"k": 1} and task.answer_tokens == "multi"


def test_group_splits_keep_each_group_together(tmp_path):
    lines = [{"task": {"split_by": "group"}}] + [
        {"id": f"e{i}", "prompt": "w1", "answer": "w2", "group": f"g{i % 10}"} for i in range(60)
    ]
    lines[1]["split"] = "heldout"  # an explicit split pulls its whole group along
    task = load_task(_write(tmp_path / "g.jsonl", lines), seed=3)
    by_group: dict[str, set] = {}
    for e in task.examples:
        by_group.setdefault(e.group, set()).add(e.split)
    assert all(len(s) == 1 for s in by_group.values())
    assert by_group["g0"] == {"heldout"}
    assert sum(s == {"heldout"} for s in by_group.values()) == 5


def test_unknown_task_name_lists_known_tasks():
    with pytest.raises(WorkbenchError, match="neither a file nor a task in .*known tasks"):
        load_task("no_such_task")


def test_encoding_errors_name_the_example(tmp_path, attn_model):
    multi = load_task(
        _write(tmp_path / "m.jsonl", [{"id": "a", "prompt": "w1", "answer": "w2 w3"}])
    )
    with pytest.raises(WorkbenchError, match=r"example 'a': answer 'w2 w3' is 2 tokens"):
        encode_task(attn_model, multi)
    long = load_task(
        _write(tmp_path / "l.jsonl", [{"id": "b", "prompt": " ".join(["w1"] * 40), "answer": "w2"}])
    )
    with pytest.raises(WorkbenchError, match=r"example 'b': the prompt is 41 tokens .* is 32"):
        encode_task(attn_model, long)
    oov = load_task(
        _write(tmp_path / "o.jsonl", [{"id": "c", "prompt": "w1 zebra", "answer": "w2"}])
    )
    with pytest.raises(WorkbenchError, match="'zebra' is not in the vocabulary"):
        encode_task(attn_model, oov)
    roles = load_task(
        _write(
            tmp_path / "r.jsonl", [{"id": "d", "prompt": "w1 w2", "answer": "w2", "roles": ["x"]}]
        )
    )
    with pytest.raises(WorkbenchError, match="1 roles for 2 prompt tokens"):
        encode_task(attn_model, roles)


def test_splits_are_seeded_disjoint_and_complete(tmp_path):
    path = write_task(tmp_path / "t.jsonl", n=101)
    a, b, c = load_task(path, seed=0), load_task(path, seed=0), load_task(path, seed=1)
    sel, held = set(a.subset("select").ids), set(a.subset("heldout").ids)
    assert not sel & held and len(sel | held) == 101
    assert len(held) == 50
    assert held == set(b.subset("heldout").ids)
    assert held != set(c.subset("heldout").ids)
    # Explicit splits in the file are kept as written.
    lines = [
        {"id": f"x{i}", "prompt": "w1", "answer": "w2", "split": "heldout" if i < 3 else "select"}
        for i in range(10)
    ]
    fixed = load_task(_write(tmp_path / "f.jsonl", lines), seed=7)
    assert fixed.subset("heldout").ids == ["x0", "x1", "x2"]


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
        assert row["prediction"] == tok.vocab[int(logits.argmax())]
    assert len(batch) == len(tiny_task)


def test_candidate_accuracy_takes_argmax_over_candidates(tmp_path, attn_model):
    lines = [{"task": {"answer_scope": "candidates"}}] + [
        {"id": f"e{i}", "prompt": f"w{i} w{i + 1}", "answer": "w3", "wrong": ["w5", "w7"]}
        for i in range(10)
    ]
    task = load_task(_write(tmp_path / "c.jsonl", lines))
    scores = evaluate(attn_model, task)
    tok = attn_model.word_tokenizer
    for i, ex in enumerate(task.examples):
        logits = attn_model(torch.tensor([tok.encode(ex.prompt, prepend_bos=True)]))[0, -1]
        cands = [tok.token_id(w) for w in ("w3", "w5", "w7")]
        expected = int(cands[int(logits[cands].argmax())] == tok.token_id("w3"))
        assert scores["correct"].iloc[i] == expected


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


def test_head_table_schema_and_round_trip(tmp_path):
    values = torch.arange(6.0).reshape(2, 3)
    df = head_table({"effect": values, "other": values * 2})
    assert list(df.columns) == ["layer", "head", "head_name", "effect", "other"]
    assert df["head_name"].tolist() == ["L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"]
    assert df.loc[df.head_name == "L1H0", "effect"].item() == 3.0
    check_head_table(df)
    assert_close(table_to_matrix(df, "other"), values * 2)
    for suffix in (".csv", ".parquet"):
        path = save_table(df, tmp_path / f"t{suffix}")
        pd.testing.assert_frame_equal(load_table(path), df)
    with pytest.raises(WorkbenchError, match="expected \\(n_layers, n_heads\\)"):
        head_table({"a": torch.zeros(2, 3), "b": torch.zeros(3, 2)})
    with pytest.raises(WorkbenchError, match="starts with columns"):
        check_head_table(df[["head", "layer", "head_name"]])
