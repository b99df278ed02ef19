"""The fast paths on a CUDA device against the slow obvious ones on the same device, and the
GPU's numbers against the CPU's. Every test skips where `torch.cuda.is_available()` is False
(CI, the 2-core machine); `bench/gpu.sh` runs them on a lent GPU.

Tolerances: float32 everywhere (PyTorch's default matmul on CUDA does not use TF32), so
the GPU and the CPU differ only in reduction order. The tiny models' checks keep
`tests.helpers.ATOL`'s bound, the real model's keep SmolLM2's bounds in
`tests/tolerances.py`; each test prints the spread it measured, and docs/speed.md's GPU
section records them.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from tests.helpers import assert_close, loop_head_effects, tiny_model, w_o_zeroed
from workbench import ablated, compute_head_means
from workbench.screening.screen import screen_heads
from workbench.stats import Stats
from workbench.tables import table_to_matrix
from workbench.tasks.encoding import encode_task

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
METRICS = ("logprob", "logit_diff", "accuracy")


def _on(batch, device):
    """`batch` with its tensors on `device` (a real-model check batch is built on the CPU)."""
    moved = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    for name, value in moved.items():
        if isinstance(value, torch.Tensor):
            moved[name] = value.to(device)
    return type(batch)(**moved)


@pytest.fixture(scope="module")
def cuda_model():
    return tiny_model(attn_only=False, seed=1, device="cuda")


@pytest.mark.parametrize("heads", [["L0H1"], [(0, 0), (0, 2), (1, 1)]])
def test_cuda_hook_zero_equals_w_o_zero(cuda_model, heads):
    tokens = torch.randint(0, cuda_model.cfg.d_vocab, (3, 9), device=CUDA)
    with torch.no_grad():
        with ablated(cuda_model, heads):
            hooked = cuda_model(tokens)
        expected = w_o_zeroed(cuda_model, heads)(tokens)
    assert hooked.device.type == "cuda"
    print("hook vs W_O max |diff|", float((hooked - expected).abs().max()))
    assert_close(hooked, expected)
    assert (hooked - cuda_model(tokens)).abs().max() > 1e-3


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_cuda_exact_screening_equals_the_loop_and_the_cpu(cuda_model, tiny_task, kind):
    batch = encode_task(cuda_model, tiny_task, "select")
    assert batch.tokens.device.type == "cuda"
    means = compute_head_means(cuda_model, batch.tokens, batch.lengths) if kind == "mean" else None
    table = screen_heads(cuda_model, batch, kind=kind, split=None, means=means,
                         stats=Stats(n_boot=10))
    loop = loop_head_effects(cuda_model, batch, kind=kind, means=means)
    cpu_model = tiny_model(attn_only=False, seed=1, device="cpu")
    cpu_batch = encode_task(cpu_model, tiny_task, "select")
    cpu_means = (compute_head_means(cpu_model, cpu_batch.tokens, cpu_batch.lengths)
                 if kind == "mean" else None)
    cpu = screen_heads(cpu_model, cpu_batch, kind=kind, split=None, means=cpu_means,
                       stats=Stats(n_boot=10))
    for m in METRICS[:2]:
        got = table_to_matrix(table, f"d_{m}")
        gap_loop = float(np.abs(got - loop[m]).max())
        gap_cpu = float(np.abs(got - table_to_matrix(cpu, f"d_{m}")).max())
        print(f"{kind} {m}: cuda screening vs cuda loop {gap_loop:.2e}, vs cpu {gap_cpu:.2e}")
        np.testing.assert_allclose(got, loop[m], atol=1e-5, rtol=0, err_msg=m)
        np.testing.assert_allclose(got, table_to_matrix(cpu, f"d_{m}"), atol=1e-4, rtol=0)
    assert np.abs(loop["logprob"]).max() > 1e-2  # some head moves the answer


def test_cuda_cel_run_finds_what_the_cpu_finds(tiny_task):
    """A whole small CEL run on the GPU: same candidates and best sets as on the CPU, the
    confirmed gains within 1e-4."""
    from workbench.pipeline import run_cel

    results = {}
    for device in ("cpu", "cuda"):
        model = tiny_model(attn_only=False, seed=1, device=device)
        results[device] = run_cel(model, tiny_task, n_random=20, n_boot=50, plots=False,
                                  progress=False)
    cpu, gpu = results["cpu"], results["cuda"]
    cand = {d: r.heads.loc[r.heads["candidate"], ["layer", "head"]].values.tolist()
            for d, r in results.items()}
    assert cand["cuda"] == cand["cpu"]
    objective = cpu.config.objective
    col = f"d_{objective}"
    assert gpu.confirmation["heads"].tolist() == cpu.confirmation["heads"].tolist()
    gap = float(np.abs(gpu.confirmation[col].to_numpy() - cpu.confirmation[col].to_numpy()).max())
    print(f"confirmed {col} cuda vs cpu max |diff| {gap:.2e}")
    assert gap <= 1e-4


def test_cuda_bf16_search_scores_within_the_cpus_bound_and_confirms_in_float32(tiny_task):
    """`search_dtype="bfloat16"` on the GPU: the copy's screening within `BF16_SHARE` of the
    run's scale of float32's (the CPU's measured bound), and the confirmation of a bfloat16
    search equal to a float32 run's on the same GPU when the sets agree."""
    from tests.test_precision import BF16_SHARE
    from workbench.pipeline import run_cel
    from workbench.precision import fast_bf16

    print("fast bfloat16 on this GPU:", fast_bf16("cuda"))
    model = tiny_model(attn_only=False, seed=1, device="cuda")
    runs = {dt: run_cel(model, tiny_task, n_random=20, n_boot=50, plots=False, progress=False,
                        search_dtype=dt) for dt in ("float32", "bfloat16")}
    f32, bf16 = runs["float32"], runs["bfloat16"]
    obj = f32.config.objective
    from workbench.scoring.scorer import MaskScorer

    clean = MaskScorer(model, encode_task(model, tiny_task, "select")).clean()[obj]
    scale = float(clean.abs().max())
    same_n = f32.heads[f"d_{obj}_n"] == bf16.heads[f"d_{obj}_n"]  # racing may stop apart
    gap = float(np.abs(bf16.heads.loc[same_n, f"d_{obj}"]
                       - f32.heads.loc[same_n, f"d_{obj}"]).max())
    print(f"bf16 vs float32 screening d_{obj} on cuda: {gap:.2e} (bound "
          f"{BF16_SHARE * scale:.2e})")
    assert gap <= BF16_SHARE * scale
    assert bf16.confirmation["heads"].tolist() == f32.confirmation["heads"].tolist()
    col = f"d_{obj}"
    assert np.array_equal(bf16.confirmation[col].to_numpy(), f32.confirmation[col].to_numpy())


def test_cuda_smollm2_matches_hugging_face_on_the_gpu(smollm2, smollm2_hf):
    """SmolLM2 on the GPU against Hugging Face's forward of the same weights on the GPU:
    logits and zero/mean head ablation against `o_proj` edits."""
    from tests.helpers import hf_checks_batch
    from tests.test_real_model import EXAMPLES, MODEL, measure_ablations, measure_logits
    from tests.tolerances import bound

    model = copy.deepcopy(smollm2).to(CUDA)
    hf = copy.deepcopy(smollm2_hf[0]).to(CUDA)
    batch = _on(hf_checks_batch(smollm2_hf[1], EXAMPLES, "smollm2_checks"), CUDA)
    d = {**measure_logits(model, hf, batch), **measure_ablations(model, hf, batch)}
    print("smollm2 on cuda vs HF on cuda", d)
    assert d["logits"] <= bound(MODEL, "logits"), d
    assert d["zero"] <= bound(MODEL, "zero_ablation"), d
    assert d["mean"] <= bound(MODEL, "mean_ablation"), d
    assert d["head_effect"] > 1e-2, d
