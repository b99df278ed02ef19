"""The task format's rules (`workbench.tasks.format`): checked at load for files and tables
alike, each failure one line naming the example and the fix; malformed files and headers; a
byte-order mark accepted."""

from __future__ import annotations

import pytest

from tests.helpers import refusal, write_examples, write_lines
from workbench import WorkbenchError, load_task
from workbench.results.fingerprint import task_fingerprint
from workbench.tasks.task import Task


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
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(WorkbenchError, match=message):
        load_task(path)


def test_header_booleans_and_known_keys_are_read(tmp_path):
    lines = [
        {"task": {"prepend_bos": False, "meta": {"k": 1}, "answer_tokens": "multi"}},
        {"prompt": "w1", "answer": "w2"},
    ]
    task = load_task(write_lines(tmp_path / "h.jsonl", lines))
    assert task.prepend_bos is False and task.meta == {"k": 1} and task.answer_tokens == "multi"


COUNT = "Counting: eight, nine, ten,"
TRAILING = (
    "the prompt ends with whitespace ' ', which byte-level BPE tokenizers (GPT-2, SmolLM2) make "
    "a token of its own, so the answer would be predicted after a lone ' ' token; move the "
    "whitespace into the answer: prompt ending 'Counting: eight, nine, ten,', answer ' eleven' "
    "(every answer and wrong answer starts with it)"
)


@pytest.mark.parametrize("answer", [" eleven", "eleven"])
def test_a_prompt_ending_in_whitespace_is_refused_with_the_fix(tmp_path, answer):
    path = write_examples(tmp_path / "count.jsonl",
                          [{"id": "c0", "prompt": COUNT + " ", "answer": answer}])
    assert refusal(lambda: load_task(path)) == f"count.jsonl line 1, example 'c0': {TRAILING}"


def test_tables_are_held_to_the_same_rules_as_files():
    rows = [{"q": "w1 w2", "a": " w3"}, {"q": COUNT + " ", "a": " eleven"}]
    columns = {"prompt": "q", "answer": "a"}
    message = refusal(lambda: Task.from_records(rows, name="t", columns=columns))
    assert message == f"task 't' row 1, example '1': {TRAILING}"


def test_a_counterfactual_ending_in_whitespace_is_refused(tmp_path):
    cf = "Counting: a, b, c,\n"
    ex = {"id": "c0", "prompt": COUNT, "answer": " eleven", "counterfactual": cf}
    message = refusal(lambda: load_task(write_examples(tmp_path / "cf.jsonl", [ex])))
    assert message == (
        "cf.jsonl line 1, example 'c0': the counterfactual ends with whitespace '\\n', which "
        "byte-level BPE tokenizers (GPT-2, SmolLM2) make a token of its own, so the answer would "
        "be predicted after a lone '\\n' token; end the counterfactual at 'Counting: a, b, c,', "
        "as the prompt ends"
    )


@pytest.mark.parametrize(
    "examples,header,message",
    [
        (
            [{"id": i, "prompt": f"w{n}", "answer": "w2"} for n, i in enumerate("aba")],
            None,
            "t.jsonl line 3: duplicate example ids: 'a' is already the id at t.jsonl line 1; give "
            "each example its own 'id'",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": [" x", " y"], "wrong": [" y"]}],
            None,
            "t.jsonl line 1, example 'a': ' y' is both an answer and a wrong answer; keep it in "
            "one list",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": [" x", " x"]}],
            None,
            "t.jsonl line 1, example 'a': 'answer' lists ' x' twice; list it once",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": ""}],
            None,
            "t.jsonl line 1, example 'a': 'answer' must be a string or a non-empty list of "
            "strings, none of them empty; got ''",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x", "wrong": [" y", ""]}],
            None,
            "t.jsonl line 1, example 'a': 'wrong' must be a string or a non-empty list of "
            "strings, none of them empty; got [' y', '']",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"candidates": [" x", " y"]},
            "t.jsonl line 1: the header lists candidates but answer_scope is 'vocab', which "
            "ignores them; set answer_scope to 'candidates', or candidates to null",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"answer_tokens": "mutli"},
            "task 't': answer_tokens 'mutli' is unknown; expected one of ['single', 'multi'] "
            "(did you mean 'multi'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"split_by": "groups"},
            "task 't': split_by 'groups' is unknown; expected one of ['example', 'group'] "
            "(did you mean 'group'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"answer_scope": "candidate"},
            "task 't': answer_scope 'candidate' is unknown; expected one of ['vocab', "
            "'candidates'] (did you mean 'candidates'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"metric": "logit_diff"},
            "task 't': metric logit_diff needs 'wrong' answers on every example; examples ['a'] "
            "have none (add them, or use metric 'accuracy' or 'logprob')",
        ),
    ],
)
def test_each_broken_rule_is_one_line_naming_the_example_and_the_fix(
    tmp_path, examples, header, message
):
    path = write_examples(tmp_path / "t.jsonl", examples, header)
    assert refusal(lambda: load_task(path)) == message


def test_a_byte_order_mark_is_accepted(tmp_path):
    examples = [{"id": f"e{i}", "prompt": f"w{i}", "answer": " x", "split": "select"}
                for i in range(3)]
    header = {"name": "marked", "metric": "logprob"}
    with_bom = load_task(write_examples(tmp_path / "bom.jsonl", examples, header, bom=True))
    assert (tmp_path / "bom.jsonl").read_bytes()[:3] == b"\xef\xbb\xbf"
    plain = load_task(write_examples(tmp_path / "plain.jsonl", examples, header))
    # The header is still line 1 (its name and metric are read), and nothing else changes.
    assert with_bom.name == "marked" and with_bom.metric == "logprob"
    assert with_bom.examples == plain.examples
    assert task_fingerprint(with_bom) == task_fingerprint(plain)


def test_small_splits_are_named_with_the_smallest_p_value_they_allow():
    """Below `MIN_SPLIT_EXAMPLES` a split or side task is named, and the note says why: with
    n held-out examples a one-sided sign-flip p-value is at least 2^-n."""
    from workbench.tasks.format import MIN_SPLIT_EXAMPLES, small_splits, small_splits_note

    counts = {"select": 2, "heldout": 3, "side": MIN_SPLIT_EXAMPLES}
    assert small_splits(counts) == {"select": 2, "heldout": 3}
    note = small_splits_note(small_splits(counts))
    assert note.startswith("fewer than 10 examples (select 2, heldout 3)")
    assert "smallest one-sided sign-flip p-value is 0.12" in note  # 2^-3
    assert small_splits_note({}) == "" and small_splits({"select": 10, "heldout": 40}) == {}
