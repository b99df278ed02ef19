"""A low-precision search, exact where it counts: the passes that only rank heads in bfloat16.

Screening and the search's knockouts only *rank* heads: which join the pool, which are
candidates, which become finalists. The sets the search then compares (every set among the
finalists), and every number a run reports about a chosen set (the held-out confirmation, the
random baselines, the side effects, the trade-off table, the explanation), decide the answer.
So the ranking passes may run at a lower precision, and the comparisons keep the model's own:
near-ties between sets are broken as the model's own precision breaks them.
`CELConfig.search_dtype="bfloat16"` (`--search-dtype bfloat16`) does that with a **bfloat16
copy of the model** (`search_model`), built when screening starts and dropped when the search
ends; the copy shares the tokenizer, and its parameters are cast one at a time (no second
float32 copy in memory). bfloat16 keeps float32's range, so nothing overflows; its 8-bit
mantissa moves a logit by about 2^-9 of its size (docs/speed.md gives the measured spread of
screening and knockout scores against float32). `"auto"` picks bfloat16 where it pays
(`auto_search_dtype`); the default stays float32, since on the planted models a bfloat16
screening found fewer planted triples than float32 (docs/speed.md).

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

from workbench.hooked import HookedModel
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
            "and the search's knockouts will be slower than in float32; the results are as "
            "valid")


# `auto` picks bfloat16 only for models at least this wide: a pass must be matmul-bound for
# bfloat16's faster matmuls to pay. Measured on this 2-core AMD EPYC with AVX-512 BF16
# (docs/speed.md): 576-wide SmolLM2 screened and searched 2.3x faster, 640-wide Gemma-3 1.7x,
# while the planted 40-wide models ran 1.1-1.2x slower (their passes are launch overhead).
AUTO_MIN_D_MODEL = 512


def auto_search_dtype(model: HookedModel, distributed: bool = False,
                      flags: set[str] | None = None) -> tuple[SearchDtype, str]:
    """`(dtype, why)` for `search_dtype="auto"`: bfloat16 on a float32 (or float64) model at
    least `AUTO_MIN_D_MODEL` wide on a device with native bfloat16 matmuls (`fast_bf16`;
    `flags`: the CPU's, read from /proc/cpuinfo when None), else float32; `why` says which in
    one line. Under torch.distributed it is float32, since ranks on different machines could
    decide differently and every rank must screen alike."""
    cfg = model.cfg
    device = torch.device(cfg.device)
    own = str(cfg.dtype).removeprefix("torch.")
    if distributed:
        return SearchDtype.FLOAT32, "float32 (auto): under torch.distributed every rank alike"
    if cfg.dtype.itemsize <= 2:
        return SearchDtype.FLOAT32, f"the model's own {own}"
    if device.type == "cpu" and flags is None:  # /proc/cpuinfo read once
        flags = cpu_flags()
    if not fast_bf16(device, flags):
        return SearchDtype.FLOAT32, f"float32 (auto): no native bfloat16 on {device}"
    if cfg.d_model < AUTO_MIN_D_MODEL:
        return SearchDtype.FLOAT32, (f"float32 (auto): the model is {cfg.d_model} wide, below "
                                     f"the {AUTO_MIN_D_MODEL} where bfloat16 passes pay")
    where = ("this CPU has " + " and ".join(f for f in CPU_BF16_FLAGS if f in flags)
             if device.type == "cpu" else f"{device} has native bfloat16")
    return SearchDtype.BFLOAT16, (
        f"bfloat16 (auto: {where}, the model is {cfg.d_model} wide) for screening and the "
        f"knockouts; the sets are compared, and every number is reported, in {own}")


def resolved(model: HookedModel, search_dtype, distributed: bool = False) -> SearchDtype:
    """`search_dtype` itself, or what `auto` picks for `model` (`auto_search_dtype`)."""
    dtype = SearchDtype.parse(search_dtype)
    if dtype is SearchDtype.AUTO:
        dtype = auto_search_dtype(model, distributed)[0]
    return dtype


def lowers(model: HookedModel, search_dtype) -> bool:
    """Whether `search_dtype` is below the model's own precision (a float32 or float64 model
    searched in bfloat16): only then do screening and search run on a copy."""
    dtype = TORCH_DTYPES[resolved(model, search_dtype)]
    return dtype != torch.float32 and model.cfg.dtype.itemsize > dtype.itemsize


def search_model(model: HookedModel, search_dtype):
    """The model that screens and searches: `model` itself when `search_dtype` is float32 or
    the model is already at that precision or below it (a bfloat16 or float16 model), else a
    copy of `model` in that dtype that shares its tokenizers (`SlowSearchWarning` where the
    device has no fast bfloat16, `slow_search_note`).

    The copy's parameters and floating buffers are cast one at a time while it is built, so
    memory peaks at the model plus half of it, not twice the model."""
    if not lowers(model, search_dtype):
        return model
    dtype = TORCH_DTYPES[resolved(model, search_dtype)]
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
