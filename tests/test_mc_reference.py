"""`bench/mc_reference.py`, the independent multiple-choice scorer, on tiny models: its pair
encoding is lm-eval's own `_encode_pair`, its cached-context log-likelihoods equal one full
forward per choice, and its interval and argmax are the textbook ones."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _bench():
    spec = importlib.util.spec_from_file_location(
        "mc_reference", ROOT / "bench" / "mc_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CharTokenizer:
    """One id per character, a BOS first when `add_special_tokens` (the default), as
    Gemma's tokenizer does; `bos=False` adds none, as SmolLM2's does."""

    bos_token, bos_token_id, eos_token_id = "<s>", 1, 2

    def __init__(self, bos: bool = True):
        self.bos = bos

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1] * (self.bos and add_special_tokens) + [3 + ord(c) % 60 for c in text]

    def decode(self, ids) -> str:
        return "<s>" if ids in (1, [1]) else "?"


@pytest.mark.parametrize("bos", [True, False])
@pytest.mark.parametrize(
    ("context", "continuation"),
    [("Answer:", " A"), ("Question: x?\nAnswer:", " New Delhi"), ("ends with space ", "B")],
)
def test_encode_pair_is_lm_eval_s(bos, context, continuation):
    hf = pytest.importorskip("lm_eval.models.huggingface")
    lm = object.__new__(hf.HFLM)  # only the attributes `_encode_pair` and `tok_encode` read
    lm.tokenizer, lm.add_bos_token, lm.custom_prefix_token_id = CharTokenizer(bos), None, None
    lm.backend = "causal"
    tok = CharTokenizer(bos)
    assert _bench().encode_pair(tok, context, continuation) == lm._encode_pair(
        context, continuation
    )


def test_encode_pair_moves_trailing_spaces_into_the_continuation():
    ctx, cont = _bench().encode_pair(CharTokenizer(), "ab  ", "c")
    assert ctx == CharTokenizer().encode("ab") and cont == CharTokenizer().encode("  c")[1:]


def _tiny(family: str):
    import transformers

    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8)  # fmt: skip
    if family == "llama":
        config = transformers.LlamaConfig(**common)
        model = transformers.LlamaForCausalLM(config)
    else:  # Gemma-3: sliding-window and global layers, a hybrid cache
        config = transformers.Gemma3TextConfig(**common, sliding_window=4)
        model = transformers.Gemma3ForCausalLM(config)
    return model.float().eval()


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_cached_context_equals_one_forward_per_choice(family):
    bench, model = _bench(), _tiny(family)
    tok = CharTokenizer()
    for context in ("Question: capital of France?\nAnswer:", "Q: hot\nA:"):
        pairs = [bench.encode_pair(tok, context, " " + c) for c in ("Paris", "A", "Lima", "Oslo")]
        cached, naive = bench.choice_logliks(model, pairs), bench.naive_logliks(model, pairs)
        assert cached == pytest.approx(naive, abs=1e-5)
        assert all(ll < 0 for ll in naive)
    # One-token continuations: the context's last position scores them all.
    pairs = [bench.encode_pair(tok, "Answer:", " " + c) for c in "ABCD"]
    assert bench.choice_logliks(model, pairs) == pytest.approx(
        bench.naive_logliks(model, pairs), abs=1e-5
    )


def test_wilson_interval_and_argmax():
    bench = _bench()
    lo, hi = bench.wilson(50, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.4038, 0.5962)  # the textbook Wilson interval
    lo, hi = bench.wilson(0, 10)
    assert lo == 0.0 and round(hi, 4) == 0.2775
    assert bench.argmax([1.0, 3.0, 3.0, 2.0]) == 1  # np.argmax: the first maximum wins
