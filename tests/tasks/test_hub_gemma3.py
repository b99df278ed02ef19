"""Every hub task on Gemma-3-270m, the second real family: the ids fed are exactly its own
tokenizer's (which adds `<bos>`), the answers are fitted to its tokenizer, and the answer
log-probabilities equal transformers' forward on the same weights
(tests/tasks/test_hub_smollm2.py does the same for SmolLM2, whose tokenizer adds nothing)."""

from __future__ import annotations

import pytest

from tests.tasks.test_hub_files import TASK_NAMES
from tests.tasks.test_hub_smollm2 import _sample, answer_logprob_gaps
from tests.tolerances import bound
from workbench import encode_task, load_task

pytestmark = pytest.mark.slow

MODEL = "gemma-3-270m"  # its bounds: tests/tolerances.py, measured by bench/real_spread.py
# Gemma-3's tokenizer writes years digit by digit: greater-than asks for the end year's decade.
DECADE_TASKS = {"greater_than"}
# The log-prob check runs one held-out example of each format: the five hand-built tasks
# (greater-than by decade, addition's digits as a multi-token answer) and one of the seven
# function-vector tasks, which share one few-shot format (each costs ~10 s on a busy core).
LOGPROB_TASKS = ("ioi", "greater_than", "capitals", "addition", "induction", "antonyms")


@pytest.fixture(scope="module")
def batches(gemma3):
    return {name: encode_task(gemma3, load_task(name)) for name in TASK_NAMES}


@pytest.mark.parametrize("name", TASK_NAMES)
def test_ids_are_gemmas_own(gemma3, gemma3_hf, batches, name):
    hf = gemma3_hf[1]
    batch = batches[name]
    bos = hf.bos_token_id
    assert batch.prepend_bos is True  # what Gemma's tokenizer does
    for i, ex in enumerate(batch.task.examples):
        n = int(batch.lengths[i])
        ids = hf(ex.prompt)["input_ids"]
        assert ids[0] == bos and ids[1:2] != [bos], ex.id
        assert batch.tokens[i, :n].tolist() == ids, ex.id
        if batch.counterfactual_tokens is not None:
            cf = hf(ex.counterfactual)["input_ids"]
            assert batch.counterfactual_tokens[i, : len(cf)].tolist() == cf, ex.id
        # the first answer token is what the tokenizer writes after the prompt's tokens
        full = hf(ex.prompt + ex.answers[0])["input_ids"]
        assert full[:n] == ids and batch.answer_ids[i, 0] == full[n], ex.id
        assert gemma3.to_tokens(ex.prompt)[0].tolist() == ids, ex.id
    if name in DECADE_TASKS:
        assert {e.meta["formulation"] for e in batch.task.examples} == {"decade"}


def test_answer_logprobs_equal_hf_on_every_hub_task(gemma3, gemma3_hf, batches):
    worst = {"first": 0.0, "sequence": 0.0}
    for name in LOGPROB_TASKS:
        idx = _sample(batches[name])[-1:]  # one held-out example per task (CI time)
        for gap in answer_logprob_gaps(gemma3, gemma3_hf[0], batches[name], idx):
            for key in worst:
                worst[key] = max(worst[key], gap.get(key, 0.0))
            assert gap["first"] <= bound(MODEL, "hub_first"), gap
            assert gap.get("sequence", 0.0) <= bound(MODEL, "hub_sequence"), gap
    print(f"max |workbench - HF| answer log-prob over hub tasks: {worst}")
