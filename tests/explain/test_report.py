"""One name, one number: the explanation's removal effects against the confirmation and
`evaluate`.

A small pipeline (the golden tiny model and task, `tests/golden.py`) runs with its explain
stage, and the explanation's whole-set effect (`explanation/set_effect.csv`, the sentence of
`report.md`) must be the confirmation's `d_<metric>` for the same set and held-out examples:
mean, standard error, interval and `n`, exactly. Exactly, because both are means of the same
per-example changes through the same `workbench.stats.effect_summary`; measured equal to the
bit on an AMD EPYC (AVX-512) under torch's default, AVX2 and unvectorised kernels and under
MKL's and oneDNN's AVX2 paths. The per-head removal table's `d_logit_diff` is checked against
`evaluate` with that head ablated, and `d_mean_logit_diff` against the mean answer logit minus
the mean wrong logit by hand, on a four-option task where the two differ.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tests.golden import TINY, tiny_inputs
from tests.helpers import assert_close
from workbench.explain import removal_vs_dla
from workbench.explain.removal import SET_METRICS
from workbench.logits import answer_logits
from workbench.metrics.scores import evaluate
from workbench.pipeline import run_cel
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Task, load_task


@pytest.fixture(scope="module", params=["zero", "mean"])
def explained_run(request, tmp_path_factory):
    """A tiny CEL run with its explanation (mean ablation: with the run's own means)."""
    folder = tmp_path_factory.mktemp(f"explained_{request.param}")
    model, main, side = tiny_inputs(folder / "tasks")
    task = load_task(main)
    result = run_cel(model, task, others=[load_task(side)], out_dir=folder / "run",
                     **{**TINY, "explain": True, "kind": request.param, "method": "exact"})
    return model, task, result, folder / "run"


def test_the_set_effect_is_the_confirmations_number(explained_run):
    _, _, result, folder = explained_run
    effect = pd.read_csv(folder / "explanation" / "set_effect.csv").iloc[0]
    config = json.loads((folder / "explanation" / "config.json").read_text())
    explained = ",".join(result.best or result.top_candidate)
    assert effect["heads"] == config["heads"] == explained
    assert effect["kind"] == result.config.kind.value
    row = result.confirmation.set_index("heads").loc[explained]
    assert config["n_examples"] == int(row["d_accuracy_n"]) == len(result.summary["splits"]
                                                                   ["heldout"])
    compared = 0
    for m in SET_METRICS:
        for suffix in ("", "_se", "_lo", "_hi", "_n"):
            assert effect[f"d_{m}{suffix}"] == row[f"d_{m}{suffix}"], (m, suffix)
            compared += 1
    assert compared == 20
    # and the report says it with the confirmation's interval, under that name
    section = (folder / "report.md").read_text().split("## What the", 1)[1]
    shown = (f"`logit_diff` by {row['d_logit_diff']:+.3g} [{row['d_logit_diff_lo']:+.3g}, "
             f"{row['d_logit_diff_hi']:+.3g}]")
    assert shown in section
    assert "as the confirmation table measures them" in section
    assert "answer-minus-wrong logit difference" not in section


def test_the_removal_tables_logit_diff_is_the_metric(explained_run):
    """Each head alone: the removal table's `d_logit_diff` is `evaluate`'s `logit_diff` with
    the head ablated minus without, per example."""
    model, task, result, folder = explained_run
    removal = pd.read_csv(folder / "explanation" / "removal.csv")
    heldout = encode_task(model, task, "heldout")
    clean = evaluate(model, heldout)
    from workbench.explain.removal import default_means

    means = default_means(model, task, result.config.kind, None)
    for name, part in removal.groupby("head_name"):
        ablated = evaluate(model, heldout, heads=[name], kind=result.config.kind, means=means)
        assert list(part["id"]) == list(clean["id"])
        assert_close(part["d_logit_diff"], ablated["logit_diff"] - clean["logit_diff"],
                     atol=1e-6)
        # one answer and one wrong answer per example: the two differences coincide
        assert_close(part["d_mean_logit_diff"], part["d_logit_diff"], atol=1e-5)


def test_mean_logit_diff_is_not_logit_diff_with_several_wrong_answers(gpt2_like_model):
    """On a four-option task `logit_diff` takes logsumexp over the three wrong letters and
    `mean_logit_diff` their mean: the removal table keeps both, each under its own name."""
    letters = ["w1", "w2", "w3", "w4"]
    rng = np.random.default_rng(0)
    records = []
    for i in range(12):
        words = [f"w{int(j)}" for j in rng.integers(5, 20, size=5)]
        answer = letters[i % 4]
        records.append({"id": f"mc{i}", "prompt": " ".join(words), "answer": answer,
                        "wrong": [x for x in letters if x != answer], "split": "heldout"})
    task = Task.from_records(records, name="four_options", metric="logit_diff")
    removal = removal_vs_dla(gpt2_like_model, task, ["L1H0"], split="heldout")
    batch = encode_task(gpt2_like_model, task, "heldout")
    with torch.no_grad():
        clean = answer_logits(gpt2_like_model, batch).double()
        hooks = _zero_hook(1, 0)
        ablated = answer_logits(gpt2_like_model, batch, hooks).double()

    def by_hand(logits, reduce):
        answer = logits.gather(1, batch.answer_ids)[:, 0]
        wrong = logits.gather(1, batch.wrong_ids)
        return answer - reduce(wrong)

    lse = by_hand(ablated, lambda w: w.logsumexp(-1)) - by_hand(clean, lambda w: w.logsumexp(-1))
    mean = by_hand(ablated, lambda w: w.mean(-1)) - by_hand(clean, lambda w: w.mean(-1))
    assert_close(removal["d_logit_diff"], lse.numpy(), atol=1e-5)
    assert_close(removal["d_mean_logit_diff"], mean.numpy(), atol=1e-5)
    assert (lse - mean).abs().max() > 1e-3  # two quantities, so two names


def _zero_hook(layer: int, head: int):
    def hook(z, hook):
        z[:, :, head] = 0.0
        return z

    return [(f"blocks.{layer}.attn.hook_z", hook)]
