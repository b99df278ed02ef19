"""Exactness on a real pretrained model: SmolLM2-135M-Instruct (Llama, 30 layers x 9 query
heads sharing 3 key/value heads) as `load_model("smollm2-135m")` gives it (fixture `smollm2`),
against Hugging Face's own forward on the same weights: transformers' reading of the same GGUF
file (fixture `smollm2_hf`).

The checks are those of the architecture matrix (`tests/test_architectures.py`), on the real
model and a handful of prompts: logits; zero ablation of a head == `o_proj` with that head's
input columns zeroed; mean ablation == the same plus the head's mean output folded into the
projection's bias; exact screening == one full forward per head on a subset of heads (all 9
query heads of layer 14, so every key/value group, and heads of the first and last layers);
and attribution's precision and recall against exact screening, reported.
Run `python -m tests.test_real_model` for the numbers in docs/real-model-loading.md.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import hf_checks_batch, loop_head_effects, measure_logits
from tests.helpers import measure_ablations as ablation_gaps
from tests.tolerances import bound
from workbench.screening.screen import screen_heads
from workbench.stats import Stats, helpful_agreement
from workbench.tables import table_to_matrix

pytestmark = pytest.mark.slow

# (prompt, answer, wrong answer): each answer one SmolLM2 token after its prompt.
# Few and short (5-8 tokens): a forward of SmolLM2 on them takes ~0.3 s on a busy CPU core.
EXAMPLES = [
    ("The capital of France is", " Paris", " London"),
    ("One, two, three, four,", " five", " six"),
    ("A B C D E F", " G", " H"),
    ("The opposite of hot is", " cold", " warm"),
]
O_PROJ = "model.layers.{l}.self_attn.o_proj"
D_HEAD = 64
# Every query head of the middle layer (3 per key/value head), and heads of the first and
# last layers from each key/value group.
SUBSET = [(14, h) for h in range(9)] + [(0, 0), (0, 4), (29, 3), (29, 7)]
ABLATED = [(0, 4), (29, 7)]
MODEL = "smollm2-135m"  # its bounds: tests/tolerances.py, measured by bench/real_spread.py


@pytest.fixture(scope="module")
def batch(smollm2_hf):
    return hf_checks_batch(smollm2_hf[1], EXAMPLES, "smollm2_checks")


@pytest.fixture(scope="module")
def exact_table(smollm2, batch):
    return screen_heads(smollm2, batch, split=None, heads=SUBSET, stats=Stats(n_boot=10))


def measure_ablations(model, hf, batch, hf_heads=None) -> dict[str, float]:
    """`tests.helpers.measure_ablations` on `ABLATED` (HF removes `hf_heads` instead)."""
    return ablation_gaps(model, hf, batch, ABLATED, O_PROJ, D_HEAD, hf_heads)


def _rows(table: pd.DataFrame, heads) -> pd.DataFrame:
    return table.set_index(["layer", "head"]).loc[list(heads)].reset_index()


def attribution_agreement(model, batch, exact: pd.DataFrame, heads) -> dict[str, dict]:
    """`helpful_agreement` of attribution screening against exact screening on `heads`, per
    metric (zero ablation)."""
    attribution = screen_heads(model, batch, split=None, method="attribution",
                               stats=Stats(n_boot=10))
    return {
        m: helpful_agreement(_rows(attribution, heads), _rows(exact, heads), m)
        for m in ("logprob", "logit_diff")
    }


def test_smollm2_tokenizes_as_its_own_tokenizer(smollm2, smollm2_hf):
    tokenizer = smollm2_hf[1]
    assert smollm2.cfg.default_prepend_bos is False
    assert (smollm2.cfg.n_layers, smollm2.cfg.n_heads, smollm2.cfg.n_key_value_heads) == (30, 9, 3)
    for text in [p for p, _, _ in EXAMPLES] + ["  two spaces", "x", "émigré 1732"]:
        assert smollm2.to_tokens(text)[0].tolist() == tokenizer(text)["input_ids"], text


def test_smollm2_logits_match_hugging_face(smollm2, smollm2_hf, batch):
    d = measure_logits(smollm2, smollm2_hf[0], batch)
    print(d)
    assert d["logits"] <= bound(MODEL, "logits"), d
    assert abs(d["p_paris"] - d["p_paris_hf"]) <= bound(MODEL, "p_paris"), d


def test_smollm2_head_ablation_matches_hf_o_proj_edits(smollm2, smollm2_hf, batch):
    d = measure_ablations(smollm2, smollm2_hf[0], batch)
    print(d)
    assert d["zero"] <= bound(MODEL, "zero_ablation"), d
    assert d["mean"] <= bound(MODEL, "mean_ablation"), d
    assert d["head_effect"] > 1e-2, d


def test_smollm2_exact_screening_matches_the_loop(smollm2, batch, exact_table):
    loop = loop_head_effects(smollm2, batch, heads=SUBSET)
    rows = tuple(np.array(SUBSET).T)
    for m in ("logprob", "logit_diff", "accuracy"):
        exact = table_to_matrix(exact_table, f"d_{m}")
        assert np.isnan(np.delete(exact.ravel(), np.ravel_multi_index(rows, exact.shape))).all()
        np.testing.assert_allclose(exact[rows], loop[m][rows],
                                   atol=bound(MODEL, "screening_vs_loop"), rtol=0, err_msg=m)
    assert np.abs(loop["logprob"][rows]).max() > 1e-2  # the heads move the answer


def test_smollm2_attribution_precision_recall_are_reported(smollm2, batch, exact_table):
    agreement = attribution_agreement(smollm2, batch, exact_table, SUBSET)
    print({m: {k: round(v, 3) for k, v in a.items()} for m, a in agreement.items()})
    for m, a in agreement.items():
        # the counts behind precision and recall are the helpful heads of these two tables
        assert a["n_exact"] == int((_rows(exact_table, SUBSET)[f"d_{m}"] > 0).sum())
        assert a["n_exact"] + a["n_estimated"] > 0, m
        for key in ("precision", "recall"):
            assert np.isnan(a[key]) or 0.0 <= a[key] <= 1.0


if __name__ == "__main__":
    import time

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from workbench import load_model
    from workbench.loading.shipped import REAL_MODELS

    path = REAL_MODELS["smollm2-135m"].path()

    kw = dict(gguf_file=path.name, local_files_only=True)
    hf = AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kw).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, **kw)
    model = load_model("smollm2-135m", device="cpu")
    b = hf_checks_batch(tokenizer, EXAMPLES, "smollm2_checks")
    print("logits", measure_logits(model, hf, b))
    print("ablations", measure_ablations(model, hf, b))
    every = [(layer, head) for layer in range(30) for head in range(9)]
    t = time.time()
    exact = screen_heads(model, b, split=None, stats=Stats(n_boot=10))
    print(f"exact screening of all 270 heads: {time.time() - t:.1f} s")
    for name, heads in (("subset", SUBSET), ("all 270 heads", every)):
        for m, a in attribution_agreement(model, b, exact, heads).items():
            print(name, m, {k: round(v, 3) for k, v in a.items()})
