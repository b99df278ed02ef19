"""A low-precision search, exact where it counts: screening and search on a bfloat16 copy.

Screening and the search only *choose* head sets; every number a run reports about a chosen
set is measured again on examples the choice never saw (the held-out confirmation, the random
baselines, the side effects, the trade-off table, the explanation). So those two stages may
run at a lower precision as long as the sets they pick are the same, and the rest keeps the
model's own. `CELConfig.search_dtype="bfloat16"` (`--search-dtype bfloat16`) does that with a
**bfloat16 copy of the model** (`search_model`), built when screening starts and dropped when
the search ends; the copy shares the tokenizer, and its parameters are cast one at a time (no
second float32 copy in memory). bfloat16 keeps float32's range, so nothing overflows; its 8-bit
mantissa moves a logit by about 2^-9 of its size (docs/speed.md gives the measured spread of
screening and search scores against float32).

A copy rather than `torch.autocast`: measured on SmolLM2 on an AMD EPYC with AVX-512 BF16, the
copy ran a forward 1.9x faster than float32 and autocast 1.6x (autocast casts the weights, which
TransformerLens rearranges on every call, at every forward), and the copy halves the cached
residuals that exact screening restarts from.

Where bfloat16 is fast: a CUDA GPU of compute capability 8.0 or more (`torch.cuda.
is_bf16_supported`), and an x86 CPU with AVX-512 BF16 (`avx512_bf16` in /proc/cpuinfo) or AMX
(`amx_bf16`), whose matmul kernels (oneDNN) use them. Elsewhere bfloat16 matmuls are emulated
and slower than float32: `slow_search_note` says so in one line, and the run goes on.
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch

from workbench.options import SearchDtype

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of native bf16 matmuls
TORCH_DTYPES = {SearchDtype.FLOAT32: torch.float32, SearchDtype.BFLOAT16: torch.bfloat16}


class SlowSearchWarning(UserWarning):
    """`search_dtype="bfloat16"` on a device without fast bfloat16 matmuls."""


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags the kernel reports (the first `flags` line of `cpuinfo`); an
    empty set where there is no such file (macOS, Windows)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def fast_bf16(device, flags: set[str] | None = None) -> bool:
    """Whether bfloat16 matmuls run natively on `device`: a CUDA GPU that supports bfloat16, a
    CPU with one of `CPU_BF16_FLAGS` (`flags`: the CPU's, read from /proc/cpuinfo when None),
    or MPS (bfloat16 since macOS 14)."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        found = cpu_flags() if flags is None else flags
        return any(f in found for f in CPU_BF16_FLAGS)
    return device.type == "mps"


def slow_search_note(device, search_dtype, flags: set[str] | None = None) -> str | None:
    """One line when a bfloat16 search will be slow on `device` (no native bfloat16 matmuls),
    else None."""
    if SearchDtype.parse(search_dtype) is not SearchDtype.BFLOAT16 or fast_bf16(device, flags):
        return None
    where = ("this CPU has neither AVX-512 BF16 nor AMX (no avx512_bf16 or amx_bf16 in "
             "/proc/cpuinfo)" if torch.device(device).type == "cpu"
             else f"{device} has no native bfloat16")
    return (f"--search-dtype bfloat16: {where}, so bfloat16 matmuls are emulated and screening "
            "and the search will be slower than in float32; the results are as valid")


def lowers(model, search_dtype) -> bool:
    """Whether `search_dtype` is below the model's own precision (a float32 or float64 model
    searched in bfloat16): only then do screening and search run on a copy."""
    dtype = TORCH_DTYPES[SearchDtype.parse(search_dtype)]
    return dtype != torch.float32 and model.cfg.dtype.itemsize > dtype.itemsize


def search_model(model, search_dtype):
    """The model that screens and searches: `model` itself when `search_dtype` is float32 or
    the model is already at that precision or below it (a bfloat16 or float16 model), else a
    copy of `model` in that dtype that shares its tokenizers (`SlowSearchWarning` where the
    device has no fast bfloat16, `slow_search_note`).

    The copy's parameters and floating buffers are cast one at a time while it is built, so
    memory peaks at the model plus half of it, not twice the model."""
    if not lowers(model, search_dtype):
        return model
    dtype = TORCH_DTYPES[SearchDtype.parse(search_dtype)]
    note = slow_search_note(model.cfg.device, search_dtype)
    if note:
        warnings.warn(note, SlowSearchWarning, stacklevel=2)
    memo: dict[int, object] = {}
    for name in ("tokenizer", "word_tokenizer"):  # shared, never copied
        shared = getattr(model, name, None)
        if shared is not None:
            memo[id(shared)] = shared
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None and id(p) not in memo:
                cast = p.detach().to(dtype) if p.is_floating_point() else p.detach().clone()
                memo[id(p)] = torch.nn.Parameter(cast, requires_grad=p.requires_grad)
        for b in module._buffers.values():
            if b is not None and id(b) not in memo:
                memo[id(b)] = b.to(dtype) if b.is_floating_point() else b.clone()
    low = copy.deepcopy(model, memo)
    low.cfg.dtype = dtype  # the components read the dtype from the shared cfg (norm upcasts)
    return low
