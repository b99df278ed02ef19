"""`workbench.precision`: the bfloat16 copy that screens and searches, its scores against
float32's within a bound measured on the tiny models, and the one-line note where bfloat16 is
slow (from /proc/cpuinfo's flags)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import randomize_biases, tiny_model
from workbench.errors import WorkbenchError
from workbench.options import SearchDtype
from workbench.precision import (
    AUTO_MIN_D_MODEL,
    auto_search_dtype,
    cpu_flags,
    fast_bf16,
    lowers,
    resolved,
    search_model,
    slow_search_note,
)
from workbench.scoring.scorer import MaskScorer
from workbench.tasks.encoding import encode_task

# bfloat16 screening and search effects against float32's, as a share of the run's scale (the
# largest |clean score| of the metric over the examples; an effect is a difference of such
# scores, and bfloat16 rounds each to 2^-9 of its size): over 20 tiny models (attention-only
# and with MLPs and random biases, seeds 0-9), every head alone and 30 random sets each
# (`bench/search_dtype.py --spread`), the largest share measured was 8.0e-4 (logprob), 3.6e-3
# (logit_diff) and 3.2e-3 (prob_diff); 2^-6 = 1.6e-2 is 4.3x the largest.
BF16_SHARE = 2.0 ** -6


def test_cpu_flags_are_read_from_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 sse\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(info) == {"fpu", "avx512f", "avx512_bf16", "sse"}
    assert cpu_flags(tmp_path / "missing") == set()


@pytest.mark.parametrize("flags,fast", [({"avx512_bf16", "avx512f"}, True),
                                        ({"amx_bf16", "amx_tile"}, True),
                                        ({"avx512f", "avx2"}, False), (set(), False)])
def test_a_cpu_without_bf16_flags_is_slow_and_says_so_in_one_line(flags, fast):
    assert fast_bf16("cpu", flags) is fast
    note = slow_search_note("cpu", "bfloat16", flags)
    if fast:
        assert note is None
    else:
        assert "neither AVX-512 BF16 nor AMX" in note and "slower than in float32" in note
        assert "\n" not in note
    assert slow_search_note("cpu", "float32", flags) is None  # float32 is never slow
    with pytest.raises(WorkbenchError, match="search dtype 'float8' is unknown; expected one of "
                       r"\['auto', 'float32', 'bfloat16'\]"):
        slow_search_note("cpu", "float8", flags)


def test_the_bf16_copy_leaves_the_model_alone_and_shares_its_tokenizer():
    model = tiny_model(attn_only=False, seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert search_model(model, "float32") is model and not lowers(model, "float32")
    low = search_model(model, "bfloat16")
    assert low is not model and lowers(model, "bfloat16")
    assert low.cfg.dtype == torch.bfloat16 and model.cfg.dtype == torch.float32
    assert low.word_tokenizer is model.word_tokenizer
    for name, p in low.named_parameters():
        assert p.dtype == torch.bfloat16, name
        assert torch.equal(p.float(), before[name].to(torch.bfloat16).float()), name
    for name, v in model.state_dict().items():  # the float32 model is untouched
        assert v.dtype == before[name].dtype and torch.equal(v, before[name]), name
    # a model already at bfloat16 (or below) searches as it is
    assert search_model(low, "bfloat16") is low and not lowers(low, "bfloat16")


@pytest.mark.parametrize("attn_only", [True, False])
def test_bf16_scores_are_float32_scores_within_the_measured_spread(tiny_task, attn_only):
    model = tiny_model(attn_only=attn_only, seed=5)
    if not attn_only:
        randomize_biases(model, seed=5)
    data = encode_task(model, tiny_task, "select")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    g = torch.Generator().manual_seed(0)
    masks = torch.cat([torch.eye(L * H).view(-1, L, H),  # every head alone, then sets
                       (torch.rand(20, L, H, generator=g) < 0.3).float()])
    effects = {}
    for name, m in (("float32", model), ("bfloat16", search_model(model, "bfloat16"))):
        scorer = MaskScorer(m, data)
        clean, scores = scorer.clean(), scorer.score(masks)
        effects[name] = {k: (scores[k] - clean[k][None]).mean(1) for k in ("logprob",
                                                                           "logit_diff")}
        if name == "float32":
            scale = {k: float(clean[k].abs().max()) for k in effects[name]}
    for k, want in effects["float32"].items():
        got = effects["bfloat16"][k]
        assert got.dtype == torch.float32  # scores are float32 whatever the model's dtype
        gap = float((got - want).abs().max())
        assert gap <= BF16_SHARE * scale[k], (k, gap, scale[k])
        assert gap > 0  # the copy did compute in bfloat16


class _Stub:
    """A model as `auto_search_dtype` sees it: its config's device, dtype and width."""

    def __init__(self, d_model: int, dtype=torch.float32, device: str = "cpu") -> None:
        self.cfg = type("Cfg", (), {"d_model": d_model, "dtype": dtype, "device": device})()


@pytest.mark.parametrize("d_model,dtype,flags,distributed,want,words", [
    (576, torch.float32, {"avx512_bf16"}, False, "bfloat16", "this CPU has avx512_bf16"),
    (640, torch.float32, {"amx_bf16", "avx512_bf16"}, False, "bfloat16", "576"),
    (AUTO_MIN_D_MODEL, torch.float32, {"amx_bf16"}, False, "bfloat16", "512 wide"),
    (AUTO_MIN_D_MODEL - 1, torch.float32, {"avx512_bf16"}, False, "float32", "511 wide"),
    (576, torch.float32, {"avx512f", "avx2"}, False, "float32", "no native bfloat16"),
    (576, torch.float32, {"avx512_bf16"}, True, "float32", "torch.distributed"),
    (576, torch.bfloat16, {"avx512_bf16"}, False, "float32", "the model's own bfloat16"),
])
def test_auto_picks_bfloat16_only_where_it_pays(d_model, dtype, flags, distributed, want, words):
    """`auto`: bfloat16 on a float32 model at least `AUTO_MIN_D_MODEL` wide on a device with
    native bfloat16, each other case float32, and one line saying why."""
    if words == "576":
        words = "640 wide"
    choice, why = auto_search_dtype(_Stub(d_model, dtype), distributed, flags)
    assert choice is SearchDtype(want) and words in why and "\n" not in why


def test_auto_is_resolved_when_a_run_is_prepared(monkeypatch, tmp_path):
    """`prepare_run` turns `auto` into the dtype the model searches at: float32 for the tiny
    model (too narrow) even where the CPU has AVX-512 BF16; and `resolved` passes an explicit
    dtype through."""
    from tests.golden import tiny_inputs
    from workbench.pipeline import prepare_run
    from workbench.tasks.task import load_task

    monkeypatch.setattr("workbench.precision.cpu_flags", lambda *a: {"avx512_bf16"})
    model, main, _ = tiny_inputs(tmp_path)
    run = prepare_run(model, load_task(main), search_dtype="auto", progress=False)
    assert run.config.search_dtype is SearchDtype.FLOAT32
    assert "search_dtype" not in run.config.to_dict()
    assert resolved(_Stub(576), "auto") is SearchDtype.BFLOAT16
    assert resolved(_Stub(576), "float32") is SearchDtype.FLOAT32
    assert resolved(_Stub(64), "bfloat16") is SearchDtype.BFLOAT16
