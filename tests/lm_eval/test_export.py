"""A workbench multiple-choice task written as an lm-eval task (`workbench.lm_eval.export`):
lm-eval's own `acc` and `acc_norm` on the written documents, clean and with heads removed,
equal the workbench's on the same examples (counts exactly: the heads change some of them, so
the comparison could fail)."""

from __future__ import annotations

import pytest

from tests.helpers import save_tiny_gpt2
from tests.lm_eval.tasks import word_task

pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from workbench import evaluate, load_model, load_task  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.lm_eval.export import write_lm_eval_task  # noqa: E402
from workbench.lm_eval.rescore import rescore  # noqa: E402


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    model = load_model(str(save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))), device="cpu")
    task = load_task(str(word_task(tmp_path_factory.mktemp("source"), n=40)))
    return model, task, tmp_path_factory.mktemp("written")


@pytest.mark.parametrize("split", ["heldout", None])
def test_lm_eval_scores_the_written_task_as_the_workbench_does(setting, split):
    model, task, folder = setting
    yaml = write_lm_eval_task(task, folder / str(split), split=split)
    n = len(task.subset(split)) if split else len(task)
    judged = rescore(model, str(yaml), heads=["L0H3", "L1H2"])
    for label, heads in (("clean", None), ("ablated", ["L0H3", "L1H2"])):
        ours = evaluate(model, task, heads=heads, split=split)
        assert len(ours) == n
        for metric in ("acc", "acc_norm"):
            assert round(judged[label][metric] * n) == int(ours[metric].sum()), (label, metric)
    clean = evaluate(model, task, split=split)
    ablated = evaluate(model, task, heads=["L0H3", "L1H2"], split=split)
    assert (clean["prediction"] != ablated["prediction"]).any()  # the heads change answers


def test_only_a_multiple_choice_task_is_written(tmp_path):
    with pytest.raises(WorkbenchError, match="'ioi' is not a multiple-choice task"):
        write_lm_eval_task(load_task("ioi"), tmp_path)


def test_lm_eval_builds_the_shipped_benchmark_task_back_to_its_examples(tmp_path):
    """Every held-out question of `mc_facts_text` (multi-line few-shot prompts, answers with
    spaces), as lm-eval renders the written documents: the same context, choices, gold and
    delimiter."""
    from workbench.lm_eval.source import build_lm_eval_task

    task = load_task("mc_facts_text")
    built = build_lm_eval_task(str(write_lm_eval_task(task, tmp_path)))
    docs = [doc for _, doc in built.doc_iterator()]
    held = task.subset("heldout").examples
    assert len(docs) == len(held) == 84
    for doc, e in zip(docs, held, strict=True):
        assert built.doc_to_text(doc) == e.prompt
        assert built.doc_to_choice(doc) == list(e.choices)
        assert built.doc_to_target(doc) == e.gold
    assert built.config.target_delimiter == " " and built.config.num_fewshot == 0
