"""Multiple-choice examples in the task format (`workbench.tasks.format`): choices, gold and
the target delimiter, read from a file and from records, and the rules that keep a task of
one kind with its kind's metrics."""

from __future__ import annotations

import json

import pytest

from workbench.errors import WorkbenchError
from workbench.guards import task_metrics
from workbench.metric_records import check_objective, task_kind
from workbench.tasks.task import Task, load_task


def test_a_file_with_choices_is_multiple_choice_with_its_delimiter(tmp_path):
    path = tmp_path / "mc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (
        {"task": {"name": "mc", "target_delimiter": "\n"}},
        {"id": "a", "prompt": "Q: 2+2?", "choices": ["3", "4", "five"], "gold": 1},
        {"id": "b", "prompt": "Q: 1+1?", "choices": ["2", "3"], "gold": 0})) + "\n")
    task = load_task(path)
    assert task.is_multiple_choice and task_kind(task) == "multiple-choice"
    assert (task.metric, task.answer_tokens, task.target_delimiter) == ("acc", "multi", "\n")
    a = task.examples[0]
    assert (a.choices, a.gold, a.answers, a.wrong) == (("3", "4", "five"), 1, ("\n4",),
                                                      ("\n3", "\nfive"))
    assert task_metrics(task) == ["logprob", "acc", "acc_norm", "ll_margin", "acc_norm_margin"]


def test_records_and_csv_cells_make_the_same_task():
    rows = [{"id": "a", "prompt": "Q?", "choices": "x|y|z", "gold": "2"}]
    task = Task.from_records(rows, name="mc", list_sep="|", metric="acc_norm")
    assert task.examples[0].choices == ("x", "y", "z") and task.examples[0].gold == 2
    assert task.metric == "acc_norm" and task.target_delimiter == " "


@pytest.mark.parametrize(("rows", "header", "words"), [
    ([{"prompt": "Q?", "choices": ["a", "b"], "gold": 0}, {"prompt": "Q?", "answer": " a"}],
     {}, "has .answer. .+ .wrong.. but the task is multiple-choice"),
    ([{"prompt": "Q?", "choices": ["a", "b"], "gold": 0}], {"metric": "accuracy"},
     "metric 'accuracy' is not a multiple-choice metric"),
    ([{"prompt": "Q?", "answer": " a"}], {"metric": "acc"}, "'acc' is not a next-token"),
    ([{"prompt": "Q?", "answer": " a"}], {"target_delimiter": " "},
     "target_delimiter is for multiple-choice and generation examples"),
    ([{"prompt": "Q?", "choices": ["a", "b"], "gold": 0}], {"answer_scope": "candidates"},
     "do not apply to multiple-choice examples"),
    ([{"prompt": "Q?", "choices": ["a", "b"], "gold": -1}], {}, "got -1"),
])
def test_a_task_keeps_one_kind_and_its_metrics(rows, header, words):
    with pytest.raises(WorkbenchError, match=words):
        Task.from_records(rows, name="t", **header)


def test_an_objective_of_the_other_kind_is_refused_before_the_model_loads():
    with pytest.raises(WorkbenchError, match="'acc' is not defined on next-token task 'ioi'"):
        check_objective("acc", "ioi", True, "next-token")
    with pytest.raises(WorkbenchError, match="'logit_diff' is not defined on multiple-choice"):
        check_objective("logit_diff", "mc", True, "multiple-choice")
    check_objective("ll_margin", "mc", True, "multiple-choice")
