"""`load_model`: a model from any source, as a `HookedTransformer` on the chosen device and dtype
(the sources: `workbench.loading.sources`; the package docstring says what each loads)."""

from __future__ import annotations

import os
import warnings

import torch
from transformer_lens import HookedTransformer

from workbench.environment import check_transformer_lens
from workbench.errors import WorkbenchError
from workbench.loading.sources import HUB, find_source, refusal
from workbench.options import DTYPE_NAMES, check_dtype_name
from workbench.progress import stdout_off

# TransformerLens 3's warnings that HookedTransformer (and its from_pretrained) is deprecated
_DEPRECATED = r"HookedTransformer(\.from_pretrained)? is deprecated"


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """`"auto"` (or None) picks cuda, then mps, then cpu; anything else is checked and returned."""
    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise WorkbenchError(
            f"device {device!r} is not a torch device; expected 'auto', 'cpu', 'cuda', 'cuda:0', "
            "'mps'"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise WorkbenchError(f"device {device!r} asked for, but CUDA is not available here")
    if dev.type == "mps" and not (
        getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    ):
        raise WorkbenchError(f"device {device!r} asked for, but MPS is not available here")
    return dev


def auto_dtype(device: torch.device) -> torch.dtype:
    """What `dtype="auto"` picks: bfloat16 on a CUDA GPU that supports it (half the memory of
    float32 and float32's range), float16 on older CUDA GPUs, float32 elsewhere (CPUs and MPS
    run bfloat16 slowly or not at all)."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _resolve_dtype(dtype, device: torch.device | None = None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if str(dtype) == "auto":
        return auto_dtype(device if device is not None else resolve_device("auto"))
    check_dtype_name(dtype)
    return getattr(torch, DTYPE_NAMES[str(dtype)])


def load_model(
    name_or_path: str | os.PathLike,
    device: str | torch.device = "auto",
    dtype: torch.dtype | str | None = None,
    **kwargs,
) -> HookedTransformer:
    """Load a model as a `HookedTransformer` ready for head ablation.

    Args:
        name_or_path: a name of `shipped_names()` (`"embedded"`, `"embedded_llama"`,
            `"embedded_neox"`, `"smollm2-135m"`, `"gemma-3-270m"`), a `.gguf` file, a
            workbench checkpoint folder, a local Hugging Face folder, or a TransformerLens
            official model name.
        device: `"auto"` (cuda, then mps, then cpu) or any torch device.
        dtype: `"auto"` (bfloat16 on CUDA GPUs that support it, float16 on older ones,
            float32 on CPU and MPS), `"float32"`, `"bfloat16"`, `"float16"` (or their short
            names), a `torch.dtype`, or None for the source's default (float32 for hub names,
            Hugging Face folders and GGUF files).
        **kwargs: passed on to `HookedTransformer.from_pretrained` for hub names.

    Returns:
        The model in eval mode on `device`. Value biases are never folded into `b_O`, so
        zeroing a head's `hook_z` removes the head's whole output. Loading prints nothing on
        stdout (TransformerLens's `Moving model to device` goes nowhere), and TransformerLens
        3's warning that `HookedTransformer` is deprecated is not shown: the workbench builds
        one on purpose (the README says why it runs on TransformerLens 3).
    """
    check_transformer_lens()
    dev = resolve_device(device)
    dt = _resolve_dtype(dtype, dev)
    name = str(name_or_path)
    source = find_source(name)
    if source is None:
        why = refusal(name)
        if why is not None:
            raise WorkbenchError(why)
        source = HUB  # TransformerLens's own lookup says what it cannot find
    with warnings.catch_warnings(), stdout_off():
        warnings.filterwarnings("ignore", _DEPRECATED, DeprecationWarning)
        return source.open(name, dev, dt, **kwargs)
