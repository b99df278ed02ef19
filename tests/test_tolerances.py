"""The real-model bounds of `tests/tolerances.py`: each keeps its headroom over the spread
measured across CPU kernel paths, and each comparison still fails a real change.

The real changes: the unembedding `W_U` scaled by 1 + 1e-3 (one weight matrix; Gemma-3
normalises each block's output, so a block's own weights scaled by a constant move its logits
by less than rounding, while the unembedding's scale reaches every logit), and another head
than the reference's ablated or screened."""

from __future__ import annotations

import numpy as np
import pytest

from bench.golden_spread import VARIANTS
from tests.helpers import hf_checks_batch, scaled_weight
from tests.tolerances import BOUNDS, HEADROOM, QUANTITIES, bound

REAL_CHANGE = ("unembed.W_U", 1 + 1e-3)


def test_every_bound_keeps_its_headroom_over_the_measured_spread():
    assert set(BOUNDS) == set(QUANTITIES)
    for model, bounds in BOUNDS.items():
        assert set(bounds) == set(QUANTITIES[model]), model
        for quantity, b in bounds.items():
            where = (model, quantity, b)
            assert b.measured > 0 and b.path in VARIANTS, where
            assert b.value >= HEADROOM * b.measured, where


def _real_model(request, name: str):
    """(test module, workbench model, HF model, the exactness checks' batch) for `name`."""
    import tests.test_gemma as gemma
    import tests.test_real_model as smol

    module, fixture, bos = {"smollm2-135m": (smol, "smollm2", False),
                            "gemma-3-270m": (gemma, "gemma3", True)}[name]
    model = request.getfixturevalue(fixture)
    hf, tokenizer = request.getfixturevalue(f"{fixture}_hf")
    batch = hf_checks_batch(tokenizer, module.EXAMPLES, f"{fixture}_checks", prepend_bos=bos)
    return module, model, hf, batch


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_logit_comparison_fails_a_scaled_unembedding(request, name):
    module, model, hf, batch = _real_model(request, name)
    with scaled_weight(model, *REAL_CHANGE):
        d = module.measure_logits(model, hf, batch)
    print(name, d)
    assert d["logits"] > bound(name, "logits"), d
    assert abs(d["p_paris"] - d["p_paris_hf"]) > bound(name, "p_paris"), d


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_ablation_comparison_fails_another_head(request, name):
    module, model, hf, batch = _real_model(request, name)
    n_heads = model.cfg.n_heads
    others = [(layer, (head + 1) % n_heads) for layer, head in module.ABLATED]
    d = module.measure_ablations(model, hf, batch, hf_heads=others)
    print(name, d)
    assert d["zero"] > bound(name, "zero_ablation"), d
    assert d["mean"] > bound(name, "mean_ablation"), d


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_screening_comparison_fails_another_head(request, name):
    from tests.helpers import loop_head_effects
    from workbench.screening.screen import screen_heads
    from workbench.stats import Stats
    from workbench.tables import table_to_matrix

    module, model, hf, batch = _real_model(request, name)
    heads = [h for h in module.SUBSET if h[0] == module.SUBSET[0][0]]  # one layer's heads
    exact = screen_heads(model, batch, split=None, heads=heads, stats=Stats(n_boot=10))
    loop = loop_head_effects(model, batch, heads=heads)
    layer, rows = heads[0][0], [h for _, h in heads]
    for m in ("logprob", "logit_diff"):
        got = table_to_matrix(exact, f"d_{m}")[layer, rows]
        swapped = loop[m][layer, np.roll(rows, 1)]  # each head against its neighbour's loop
        gap = float(np.abs(got - swapped).max())
        print(name, m, gap)
        assert gap > bound(name, "screening_vs_loop"), (m, gap)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_hub_logprob_comparison_fails_a_scaled_unembedding(request, name):
    """On the hub tests' own examples of one single-token and one multi-token task."""
    from tests.tasks.test_hub_smollm2 import _sample, answer_logprob_gaps
    from workbench import encode_task, load_task

    _, model, hf, _ = _real_model(request, name)
    gaps = []
    with scaled_weight(model, *REAL_CHANGE):
        for task in ("antonyms", "addition"):
            batch = encode_task(model, load_task(task))
            idx = _sample(batch) if name == "smollm2-135m" else _sample(batch)[-1:]
            gaps += answer_logprob_gaps(model, hf, batch, idx)
    first = [g["first"] for g in gaps]
    sequence = [g["sequence"] for g in gaps if "sequence" in g]
    print(name, {"first": first, "sequence": sequence})
    assert max(first) > bound(name, "hub_first"), first
    assert sequence and max(sequence) > bound(name, "hub_sequence"), sequence


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_gguf_comparison_fails_a_scaled_unembedding(tmp_path, monkeypatch, family):
    import tests.loading.test_gguf as g
    from workbench import load_model
    from workbench.loading.shipped import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    tokenizer, tied = next((t, tied) for f, t, tied in g.CASES if f == family)
    path = g.write_tiny_gguf(tmp_path / f"{family}.gguf", family, tokenizer, tied)
    hf, hf_tokenizer = g.transformers_reading(path)
    model = load_model(path, device="cpu")
    with scaled_weight(model, *REAL_CHANGE):
        gap, _ = g.logsoftmax_gap(model, hf, hf_tokenizer)
    print(family, gap)
    assert gap > bound("tiny", "gguf_files"), gap
