"""Greedy generation under a head set on the real models against Hugging Face's `generate`
with the heads' `o_proj` input columns zeroed (`bench/generation_hf.py`, whose full run and
figures are in docs/generation.md): token for token, the only allowed difference a first
different token where Hugging Face's top two logits are within `NEAR_TIE` (none occurred in
the measured runs). Two prompts of different lengths (decoded as one left-padded batch on the
workbench side), 16 new tokens, a single head and a three-head set per model; and the two
sets decoded together (`greedy_generate_masks`) write what each writes alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import load_script

pytestmark = pytest.mark.slow

BENCH = load_script(Path(__file__).resolve().parents[2] / "bench" / "generation_hf.py")
TOKENS = 16


def _check(model, hf, name: str) -> None:
    from workbench.tasks.tokenizer import get_tokenizer

    tok = get_tokenizer(model)
    prompts = [tok.encode_prompt(p)[0] for p in BENCH.PROMPTS[:2]]
    assert len(prompts[0]) != len(prompts[1])
    sets = BENCH.HEAD_SETS[name][1::2]  # one head, then three
    alone = []
    for heads in sets:
        rows = BENCH.compare(model, hf, prompts, heads, TOKENS)
        assert all(BENCH.allowed(r) for r in rows), (heads, rows)
        assert sum(r["steps"] for r in rows) >= TOKENS  # the rows really were compared
        alone.append([r["ours"] for r in rows])
    assert BENCH.joint_tokens(model, prompts, sets, TOKENS) == alone  # decoded together


def test_smollm2_generates_as_hugging_face_with_the_heads_removed(smollm2, smollm2_hf):
    _check(smollm2, smollm2_hf[0], "smollm2-135m")


def test_gemma3_generates_as_hugging_face_with_the_heads_removed(gemma3, gemma3_hf):
    _check(gemma3, gemma3_hf[0], "gemma-3-270m")
