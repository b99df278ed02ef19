"""`Task` and `load_task` (`workbench.tasks.task`): seeded, disjoint, complete splits (by
example or by group), task names, duplicate ids in code, option fields stored as strings."""

from __future__ import annotations

import pytest

from tests.helpers import refusal, write_lines, write_task
from workbench import WorkbenchError, load_task
from workbench.options import AnswerScope, AnswerTokens, SplitBy
from workbench.results.fingerprint import task_fingerprint
from workbench.tasks.task import Example, Task


def test_group_splits_keep_each_group_together(tmp_path):
    lines = [{"task": {"split_by": "group"}}] + [
        {"id": f"e{i}", "prompt": "w1", "answer": "w2", "group": f"g{i % 10}"} for i in range(60)
    ]
    lines[1]["split"] = "heldout"  # an explicit split pulls its whole group along
    task = load_task(write_lines(tmp_path / "g.jsonl", lines), seed=3)
    by_group: dict[str, set] = {}
    for e in task.examples:
        by_group.setdefault(e.group, set()).add(e.split)
    assert all(len(s) == 1 for s in by_group.values())
    assert by_group["g0"] == {"heldout"}
    assert sum(s == {"heldout"} for s in by_group.values()) == 5


def test_unknown_task_name_lists_known_tasks():
    with pytest.raises(WorkbenchError, match="neither a file nor a task in .*known tasks"):
        load_task("no_such_task")


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
    fixed = load_task(write_lines(tmp_path / "f.jsonl", lines), seed=7)
    assert fixed.subset("heldout").ids == ["x0", "x1", "x2"]


def test_tasks_built_in_code_name_duplicate_ids():
    examples = [Example(id=i, prompt="w1", answers=(" x",)) for i in ("a", "b", "a", "c", "c")]
    assert refusal(lambda: Task(name="t", examples=examples)) == (
        "task 't': duplicate example ids ['a', 'c']; give each example its own id"
    )


def test_option_fields_are_validated_and_stored_as_plain_strings():
    rows = [{"prompt": f"w{i}", "answer": " x", "wrong": " y", "group": f"g{i % 3}"}
            for i in range(6)]
    as_options = Task.from_records(
        rows, name="t", answer_tokens=AnswerTokens.MULTI, split_by=SplitBy.GROUP,
        answer_scope=AnswerScope.CANDIDATES, candidates=(" x", " y"),
    )
    as_strings = Task.from_records(
        rows, name="t", answer_tokens="multi", split_by="group", answer_scope="candidates",
        candidates=[" x", " y"],
    )
    for key in ("answer_tokens", "split_by", "answer_scope"):
        assert type(getattr(as_options, key)) is str, key
    assert (as_options.answer_tokens, as_options.split_by, as_options.answer_scope) == (
        "multi", "group", "candidates"
    )
    # The fingerprint (a hash of the fields' JSON) does not depend on how options were given.
    assert task_fingerprint(as_options) == task_fingerprint(as_strings)
    direct = Task(name="t", examples=as_strings.examples, answer_tokens=AnswerTokens.MULTI)
    assert type(direct.answer_tokens) is str and direct.answer_tokens == "multi"


def test_first_per_split_of_0_1_still_works_with_a_deprecation_warning(tiny_task):
    """`Task.first_per_split`, removed for `sample_per_split`, keeps working for 0.2 with a
    warning that names its replacement: the first `n` examples of each split, in file order."""
    with pytest.warns(DeprecationWarning, match=r"use Task\.sample_per_split\(n, seed\)"):
        first = tiny_task.first_per_split(3)
    for split in ("select", "heldout"):
        want = [e.id for e in tiny_task.examples if e.split == split][:3]
        assert [e.id for e in first.examples if e.split == split] == want
