"""`run_cel` and `workbench cel` on multiple-choice tasks: the main job end to end, side tasks
of either kind each in its own metric, custom 0/1 metrics and their companions, the one-line
warnings before a search, and bad choice files refused with exit 2 before the model loads."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest
import torch

import workbench.cli.parser as cli
import workbench.loading.model
from tests.metrics.test_choices import mc_task
from workbench.errors import TaskWarning, WorkbenchError
from workbench.metric_records import Metric, declare
from workbench.pipeline import run_cel

FAST = dict(n_random=20, n_boot=100, progress=False, max_size=2)


@pytest.fixture(scope="module")
def mc_run(attn_model, tiny_task, tmp_path_factory):
    out = tmp_path_factory.mktemp("mc") / "run"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run_cel(attn_model, mc_task(24), others=[tiny_task], out_dir=out,
                         method="attribution", **FAST)
    return result, out, [w for w in caught if issubclass(w.category, TaskWarning)]


def test_a_multiple_choice_run_searches_acc_and_scores_side_tasks_in_their_own(mc_run):
    result, out, _ = mc_run
    assert (result.config.objective, result.config.secondary) == ("acc", "logprob")
    heads = result.heads
    assert heads["d_acc"].notna().all() and heads["d_ll_margin"].notna().all()
    assert {"d_accuracy", "d_logit_diff"}.isdisjoint(result.confirmation.columns)
    assert {"d_acc", "d_acc_norm", "d_ll_margin", "d_logprob"} <= set(result.confirmation)
    side = result.side_effects
    assert set(side["task"]) == {"tiny"}
    assert side["d_accuracy"].notna().all() and "d_acc" not in side
    for csv in out.glob("*.csv"):  # no empty or 1-byte table
        assert csv.stat().st_size > 1 and len(csv.read_text().splitlines()) >= 2, csv.name


def test_a_run_at_chance_says_so_in_one_line_per_split(mc_run):
    notes = [str(w.message) for w in mc_run[2]]
    assert notes and all("\n" not in n and "task 'mc'" in n for n in notes)
    assert any("at or below chance" in n or "at its floor" in n for n in notes)


def test_a_next_token_run_scores_a_multiple_choice_side_task_in_acc(attn_model, tiny_task):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TaskWarning)
        result = run_cel(attn_model, tiny_task, others=[mc_task(24)], **FAST)
    assert result.config.objective == "accuracy"
    side = result.side_effects
    assert set(side["task"]) == {"mc"}
    assert side["d_acc"].notna().all() and side["d_ll_margin"].notna().all()
    assert "d_accuracy" not in side


def _acc_only(model, batch):
    from workbench.metrics.choices import choice_logliks, gold_and_lengths

    gold, _ = gold_and_lengths(batch)
    return {"my_acc": (choice_logliks(model, batch).argmax(-1) == gold.to(
        batch.tokens.device)).float()}


def test_a_custom_0_1_metric_without_companion_is_refused_before_the_folder(attn_model,
                                                                            tmp_path):
    def declared(model, batch):
        return _acc_only(model, batch)

    metric = declare(Metric("my_acc", differentiable=False, coarse=True))(declared)
    out = tmp_path / "run"
    with pytest.raises(WorkbenchError, match="no gradient and no differentiable companion"):
        run_cel(attn_model, mc_task(24), metric=metric, out_dir=out, method="attribution",
                **FAST)
    assert not out.exists()
    # undeclared, it is refused in one line when attribution finds no gradient
    with pytest.raises(WorkbenchError, match="has no gradient, so attribution cannot"):
        run_cel(attn_model, mc_task(24), metric=_acc_only, method="attribution", **FAST)


def test_a_custom_0_1_metric_ranks_by_its_declared_companion(attn_model):
    from workbench.metrics.choices import choice_metric

    def metric(model, batch):
        s = choice_metric(model, batch)
        return {"my_acc": s["acc"], "my_margin": s["ll_margin"]}

    metric = declare(Metric("my_acc", differentiable=False, coarse=True,
                            companion="my_margin"),
                     Metric("my_margin", difference=True))(metric)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TaskWarning)
        result = run_cel(attn_model, mc_task(24), metric=metric, method="attribution", **FAST)
    assert result.config.objective == "my_acc"
    assert torch.isfinite(torch.tensor(result.heads["d_my_acc"].to_numpy())).all()


def test_position_dependent_ablations_are_refused_on_choices(attn_model):
    with pytest.raises(WorkbenchError, match="per-position mean ablation replaces each"):
        run_cel(attn_model, mc_task(24), kind="mean", per_position=True, **FAST)


def test_multi_token_answers_with_wrong_answers_say_what_accuracy_is(attn_model, multi_task):
    with pytest.warns(TaskWarning, match="greedy exact match .* the wrong answers are not "
                                         "compared"):
        from workbench.pipeline import prepare_run

        examples = [replace(e, split="heldout" if i % 2 else "select")
                    for i, e in enumerate(multi_task.examples)]
        prepare_run(attn_model, replace(multi_task, examples=examples), **FAST)


BAD_CHOICES = [
    ({"choices": ["A"], "gold": 0}, "needs at least 2"),
    ({"choices": ["A", "B"], "gold": 2}, "'gold' must be an int index into the 2 choices"),
    ({"choices": ["A", "B"], "gold": "1"}, "'gold' must be an int index"),
    ({"choices": ["A", ""], "gold": 0}, "choice 1 is empty"),
    ({"choices": ["A", "A"], "gold": 0}, "lists 'A' twice"),
    ({"choices": ["A", "B"], "gold": 0, "answer": " A"}, "not ['answer']"),
]


@pytest.mark.parametrize(("fields", "words"), BAD_CHOICES)
def test_bad_choices_are_one_line_and_exit_2_before_the_model_loads(
        fields, words, tmp_path, capsys, monkeypatch):
    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded before the run was refused")

    monkeypatch.setattr(workbench.loading.model, "load_model", loader)
    path = tmp_path / "bad.jsonl"
    good = {"id": "ok", "prompt": "Q: 2+2?\nAnswer:", "choices": ["3", "4"], "gold": 1}
    path.write_text("\n".join(json.dumps(r) for r in (
        {"task": {"name": "bad", "target_delimiter": " "}}, good,
        {"id": "x", "prompt": "Q: 1+1?\nAnswer:", **fields})) + "\n")
    assert cli.main(["cel", "--model", "embedded", "--task", str(path),
                     "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: ") and words in err[0], err
    assert "bad.jsonl line 3, example 'x'" in err[0]
