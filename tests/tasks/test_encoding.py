"""`encode_task` (`workbench.tasks.encoding`): the errors of encoding an example for a model
name the example (too many answer tokens, a prompt past the context, a word outside the
vocabulary, roles that do not match, multi-token answers sharing a first token with a wrong
one)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers import write_lines
from workbench import WorkbenchError, encode_task, load_task
from workbench.metrics.scores import sequence_scores
from workbench.tasks.task import Example, Task


def test_encoding_errors_name_the_example(tmp_path, attn_model):
    multi = load_task(
        write_lines(tmp_path / "m.jsonl", [{"id": "a", "prompt": "w1", "answer": "w2 w3"}])
    )
    with pytest.raises(WorkbenchError, match=r"example 'a': answer 'w2 w3' is 2 tokens"):
        encode_task(attn_model, multi)
    long = load_task(
        write_lines(
            tmp_path / "l.jsonl", [{"id": "b", "prompt": " ".join(["w1"] * 40), "answer": "w2"}]
        )
    )
    with pytest.raises(WorkbenchError, match=r"example 'b': the prompt is 41 tokens .* is 32"):
        encode_task(attn_model, long)
    oov = load_task(
        write_lines(tmp_path / "o.jsonl", [{"id": "c", "prompt": "w1 zebra", "answer": "w2"}])
    )
    with pytest.raises(WorkbenchError, match="'zebra' is not in the vocabulary"):
        encode_task(attn_model, oov)
    roles = load_task(
        write_lines(
            tmp_path / "r.jsonl", [{"id": "d", "prompt": "w1 w2", "answer": "w2", "roles": ["x"]}]
        )
    )
    with pytest.raises(WorkbenchError, match="1 roles for 2 prompt tokens"):
        encode_task(attn_model, roles)


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
