"""lm-eval as the judge of the workbench's own multiple-choice scores.

On the same documents of a local lm-eval task (`tests.lm_eval.tasks.word_task`: 30 documents,
2-4 choices of 1-3 words), lm-eval scoring `HookedLM` and the workbench scoring the task lm-eval
built (`load_task` on the YAML, `evaluate`) must agree: `acc` and `acc_norm` counts exactly, the
gold choice's log-likelihood within the shared `assert_close` tolerance (1e-5 absolute + 1e-5
relative; lm-eval's HFLM against `HookedLM` measured 4.8e-6 at most on these log-likelihoods,
`tests/lm_eval/test_model.py`), clean and with heads removed. The heads move the gold
log-likelihoods by far more than the tolerance, so the comparison could fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import assert_close, save_tiny_gpt2
from tests.lm_eval.tasks import word_task

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")

from lm_eval.tasks import TaskManager  # noqa: E402

from workbench import evaluate, load_model, load_task  # noqa: E402
from workbench.lm_eval import HookedLM  # noqa: E402


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    model = load_model(str(save_tiny_gpt2(tmp_path_factory.mktemp("gpt2"))), device="cpu")
    folder = tmp_path_factory.mktemp("lm_eval_tasks")
    yaml = word_task(folder)
    return model, yaml, TaskManager(include_path=str(folder), include_defaults=False)


def _lm_eval_scores(model, manager, heads):
    """Per document (by `doc_id`): lm-eval's acc, acc_norm and the gold choice's ll."""
    out = lm_eval.simple_evaluate(model=HookedLM(model, heads=heads), tasks=["tiny_mc"],
                                  task_manager=manager, num_fewshot=0, log_samples=True)
    rows = {}
    for s in out["samples"]["tiny_mc"]:
        gold = int(s["target"])
        rows[int(s["doc_id"])] = (s["acc"], s["acc_norm"], float(s["resps"][gold][0][0]))
    return rows


@pytest.mark.parametrize("heads", [None, ["L0H1"], ["L0H3", "L1H2"]],
                         ids=["clean", "L0H1", "L0H3+L1H2"])
def test_lm_evals_scores_equal_the_workbenchs_on_the_same_documents(setting, heads):
    model, yaml, manager = setting
    judged = _lm_eval_scores(model, manager, heads)
    task = load_task(str(yaml))
    assert task.metric == "acc_norm" and len(task) == len(judged) == 30
    ours = evaluate(model, task, heads=heads)
    doc = {e.id: int(e.meta["doc_id"]) for e in task.examples}
    ours["doc_id"] = ours["id"].map(doc)
    ours = ours.sort_values("doc_id")
    want = [judged[d] for d in ours["doc_id"]]
    assert int(ours["acc"].sum()) == int(sum(w[0] for w in want))
    assert int(ours["acc_norm"].sum()) == int(sum(w[1] for w in want))
    assert ours["acc"].tolist() == [w[0] for w in want]
    assert ours["acc_norm"].tolist() == [w[1] for w in want]
    assert_close(ours["logprob"].to_numpy(), np.array([w[2] for w in want]))
    if heads is not None:  # the heads move what is compared far beyond the tolerance
        clean = _lm_eval_scores(model, manager, None)
        assert max(abs(clean[d][2] - judged[d][2]) for d in judged) > 0.05
