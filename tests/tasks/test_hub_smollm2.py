"""Every hub task on a real pretrained LM (SmolLM2-135M): the ids fed are its own tokenizer's,
and the answer log-probabilities equal Hugging Face's own forward on the same weights."""

from __future__ import annotations

import pytest
import torch

from tests.tasks.test_hub_files import TASK_NAMES
from tests.tolerances import bound
from workbench import encode_task, evaluate, load_task

pytestmark = pytest.mark.slow

MODEL = "smollm2-135m"  # its bounds: tests/tolerances.py, measured by bench/real_spread.py
N_SAMPLE = 2  # examples per task and split compared with HF's forward (CI time)


@pytest.fixture(scope="module")
def smol(smollm2):
    """SmolLM2-135M as `load_model("smollm2-135m")` gives it (the conftest fixture)."""
    return smollm2


@pytest.fixture(scope="module")
def smol_hf(smollm2_hf):
    """transformers' own model on the same weights (its reading of the same GGUF file)."""
    return smollm2_hf[0]


@pytest.fixture(scope="module")
def own_tokenizer(smollm2_hf):
    """SmolLM2's own tokenizer, as transformers reads it from the GGUF file (TransformerLens's
    `model.tokenizer` is a copy that always adds BOS)."""
    return smollm2_hf[1]


@pytest.fixture(scope="module")
def batches(smol):
    return {name: encode_task(smol, load_task(name)) for name in TASK_NAMES}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_ids_are_the_tokenizers(smol, own_tokenizer, batches, name):
    hf = own_tokenizer
    batch = batches[name]
    assert len(hf("The capital of France is")["input_ids"]) == 5  # SmolLM2 adds no BOS
    assert batch.prepend_bos is False
    for i, ex in enumerate(batch.task.examples):
        n = int(batch.lengths[i])
        ids = hf(ex.prompt)["input_ids"]
        assert batch.tokens[i, :n].tolist() == ids, ex.id
        if batch.counterfactual_tokens is not None:
            assert batch.counterfactual_tokens[i, :n].tolist() == hf(ex.counterfactual)[
                "input_ids"
            ], ex.id
        # The first answer token is what the tokenizer writes after the prompt's tokens.
        full = hf(ex.prompt + ex.answers[0])["input_ids"]
        assert full[:n] == ids and batch.answer_ids[i, 0] == full[n], ex.id
        assert smol.to_tokens(ex.prompt)[0].tolist() == ids, ex.id


def _sample(batch) -> list[int]:
    idx = []
    for split in ("select", "heldout"):
        rows = [i for i, e in enumerate(batch.task.examples) if e.split == split]
        idx += rows[:: max(1, len(rows) // N_SAMPLE)][:N_SAMPLE]
    return idx


def _hf_scores(hf_model, batch, i: int) -> tuple[float, float | None]:
    """HF's log-prob of the example's answer set at the answer position, and (multi-token)
    the teacher-forced log-prob of its answers, log-sum-exp over answers."""
    n = int(batch.lengths[i])
    prompt = batch.tokens[i, :n].tolist()
    with torch.no_grad():
        logp = hf_model(torch.tensor([prompt])).logits[0, -1].double().log_softmax(-1)
    answers = [int(a) for a in batch.answer_ids[i] if a >= 0]
    first = float(logp[answers].logsumexp(0))
    if batch.answer_seqs is None:
        return first, None
    seq = []
    for ans in batch.answer_seqs[i]:
        with torch.no_grad():
            lp = hf_model(torch.tensor([prompt + ans])).logits[0].double().log_softmax(-1)
        seq.append(sum(float(lp[n - 1 + k, t]) for k, t in enumerate(ans)))
    return first, float(torch.tensor(seq).logsumexp(0))


def answer_logprob_gaps(model, hf_model, batch, idx: list[int]) -> list[dict]:
    """Per example of `batch` at `idx`: |workbench - HF| of the answer's first-token log-prob
    (`first`) and, for multi-token answers, of the teacher-forced sequence log-prob
    (`sequence`), with the example's id and HF's first-token log-prob (`logprob`)."""
    df = evaluate(model, batch.rows(idx))
    first_col = "first_logprob" if batch.answer_seqs is not None else "logprob"
    gaps = []
    for row, i in enumerate(idx):
        first, seq = _hf_scores(hf_model, batch, i)
        gap = {"task": batch.task.name, "id": batch.task.examples[i].id, "logprob": first,
               "first": abs(float(df[first_col].iloc[row]) - first)}
        if seq is not None:
            gap["sequence"] = abs(float(df["logprob"].iloc[row]) - seq)
        gaps.append(gap)
    return gaps


def test_answer_logprobs_equal_hf_on_every_hub_task(smol, smol_hf, batches):
    worst = {"first": 0.0, "sequence": 0.0}
    for name in TASK_NAMES:
        for gap in answer_logprob_gaps(smol, smol_hf, batches[name], _sample(batches[name])):
            for key in worst:
                worst[key] = max(worst[key], gap.get(key, 0.0))
            assert gap["first"] <= bound(MODEL, "hub_first"), gap
            assert gap.get("sequence", 0.0) <= bound(MODEL, "hub_sequence"), gap
    print(f"max |workbench - HF| answer log-prob over hub tasks: {worst}")
