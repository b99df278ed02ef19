"""The workbench checkpoint format: how the project saves and ships its own models.

A checkpoint is a folder with three files:

- `workbench_config.json`: `{"format": "workbench-checkpoint", "version": 1, "cfg": {...},
  "meta": {...}}`, where `cfg` holds the `HookedTransformerConfig` fields needed to rebuild
  the model (JSON types only) and `meta` is free-form provenance (seed, training script, ...);
- `model.safetensors`: the `HookedTransformer` state dict;
- `tokenizer.json`: a `WordTokenizer` description (`{"kind": "word", "vocab": [...]}`).

The config also records `weights_sha256`, the hash of `model.safetensors`, so a damaged or
partly overwritten weights file is refused on loading instead of giving garbage scores.

A loaded model carries the vocabulary twice, with the same ids: as `model.word_tokenizer` (the
workbench's `WordTokenizer`) and as `model.tokenizer`, a Hugging Face tokenizer built from the
stored vocabulary (`workbench.tasks.tokenizer.word_level_hf_tokenizer`) that puts the BOS first, so
TransformerLens's `to_tokens`, `to_str_tokens`, `model("text")` and `generate` work on it.

The file name `workbench_config.json` (not `config.json`) keeps such a folder from being
mistaken for a Hugging Face model folder.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.errors import WorkbenchError
from workbench.loading.shipped import embedded_path
from workbench.results.fingerprint import file_digest
from workbench.tasks.tokenizer import WordTokenizer, word_level_hf_tokenizer

CONFIG_FILE = "workbench_config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
_FORMAT = "workbench-checkpoint"

# Config fields that only make sense on the machine that made the model, or are derived.
_SKIP_FIELDS = {
    "device",
    "n_devices",
    "dtype",
    "tokenizer_name",
    "checkpoint_index",
    "checkpoint_label_type",
    "checkpoint_value",
    "initializer_range",
}


def _cfg_to_json(cfg: HookedTransformerConfig) -> dict:
    out = {}
    for f in dataclasses.fields(cfg):
        if not f.init or f.name in _SKIP_FIELDS:
            continue
        value = getattr(cfg, f.name)
        if value is None or isinstance(value, (bool, int, float, str)):
            out[f.name] = value
        elif isinstance(value, (list, tuple)) and all(
            isinstance(v, (bool, int, float, str)) for v in value
        ):
            out[f.name] = list(value)
    return out


def is_checkpoint(path: str | Path) -> bool:
    """True when `path` is a folder holding a workbench checkpoint."""
    return (Path(path) / CONFIG_FILE).is_file()


def save_checkpoint(
    model: HookedTransformer, tokenizer: WordTokenizer, path: str | Path, meta: dict | None = None
) -> Path:
    """Save `model` and its tokenizer as a workbench checkpoint folder (written atomically).

    Args:
        model: the model; its weights are saved in float32 unless already lower precision.
        tokenizer: the vocabulary the model was trained with (`len(tokenizer) == d_vocab`).
        path: the folder to create or replace.
        meta: provenance stored under `meta` in the config (seed, script, metrics, ...).
    """
    if len(tokenizer) != model.cfg.d_vocab:
        raise WorkbenchError(
            f"tokenizer has {len(tokenizer)} words but the model's d_vocab is {model.cfg.d_vocab}"
        )
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(tmp / WEIGHTS_FILE))
    config = {"format": _FORMAT, "version": 1, "cfg": _cfg_to_json(model.cfg), "meta": meta or {},
              "weights_sha256": file_digest(tmp / WEIGHTS_FILE)}
    (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=1, sort_keys=True))
    tokenizer.save(tmp / TOKENIZER_FILE)
    if path.exists():
        for child in path.iterdir():
            child.unlink()
        path.rmdir()
    tmp.rename(path)
    return path


def load_checkpoint(
    path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
) -> HookedTransformer:
    """Load a workbench checkpoint as a `HookedTransformer` with `model.word_tokenizer` set.

    Also sets `model.tokenizer` (the same vocabulary as a Hugging Face tokenizer, see
    `attach_word_tokenizer`) and `model.workbench_meta` to the checkpoint's `meta` dict.
    """
    path = Path(path)
    if not is_checkpoint(path):
        raise WorkbenchError(f"{str(path)!r} is not a workbench checkpoint (no {CONFIG_FILE})")
    try:
        config = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"{path / CONFIG_FILE} is not valid JSON: {e}") from None
    if config.get("format") != _FORMAT or "cfg" not in config:
        raise WorkbenchError(
            f"{path / CONFIG_FILE} has format {config.get('format')!r}; expected {_FORMAT!r} "
            "with a 'cfg' entry"
        )
    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise WorkbenchError(f"checkpoint {str(path)!r} has no {WEIGHTS_FILE}")
    expected = config.get("weights_sha256")
    if expected is not None and file_digest(weights) != expected:
        raise WorkbenchError(
            f"checkpoint {str(path)!r} is damaged: {WEIGHTS_FILE} does not match the hash "
            f"recorded in {CONFIG_FILE} (truncated, overwritten or from another model)"
        )
    cfg_dict = dict(config["cfg"])
    cfg_dict["device"] = str(device)
    if dtype is not None:
        cfg_dict["dtype"] = dtype
    try:
        cfg = HookedTransformerConfig(**cfg_dict)
    except (TypeError, ValueError, AssertionError) as e:
        raise WorkbenchError(f"{path / CONFIG_FILE} has an invalid model config: {e}") from None
    model = HookedTransformer(cfg)
    try:
        state = load_file(str(weights))
    except (SafetensorError, OSError, ValueError) as e:
        raise WorkbenchError(
            f"checkpoint {str(path)!r}: {WEIGHTS_FILE} cannot be read ({e}); the file is damaged"
        ) from None
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatches
        first = str(e).strip().splitlines()[-1].strip()
        raise WorkbenchError(
            f"checkpoint weights do not match its config: {first}"
        ) from None
    real_missing = [k for k in missing if not k.endswith(("IGNORE", "mask"))]
    if real_missing or unexpected:
        raise WorkbenchError(
            f"checkpoint weights do not match its config: missing {real_missing[:5]}, "
            f"unexpected {list(unexpected)[:5]}"
        )
    params = dict(model.named_parameters())  # buffers such as IGNORE hold -inf on purpose
    bad = [k for k in params if k in state and not torch.isfinite(state[k]).all()]
    if bad:
        raise WorkbenchError(
            f"checkpoint {str(path)!r} has non-finite weights in {bad[:3]}; the file is damaged"
        )
    model.to(device)
    if dtype is not None:
        model.to(dtype)
    model.eval()
    attach_word_tokenizer(model, WordTokenizer.load(path / TOKENIZER_FILE))
    model.workbench_meta = config.get("meta", {})
    return model


def attach_word_tokenizer(model: HookedTransformer, word: WordTokenizer) -> HookedTransformer:
    """Give `model` its word vocabulary as `model.word_tokenizer` and, with the same ids, as a
    Hugging Face `model.tokenizer` that prepends the BOS (`cfg.default_prepend_bos` True, as
    the project's models were trained), so TransformerLens's string methods work on it."""
    if len(word) != model.cfg.d_vocab:
        raise WorkbenchError(
            f"tokenizer has {len(word)} words but the model's d_vocab is {model.cfg.d_vocab}"
        )
    model.word_tokenizer = word
    model.cfg.default_prepend_bos = True
    model.set_tokenizer(word_level_hf_tokenizer(word), default_padding_side="right")
    return model


def load_embedded(name: str, device: torch.device, dtype) -> HookedTransformer:
    """A member of the embedded family, from its shipped checkpoint folder."""
    path = embedded_path(name)
    if not is_checkpoint(path):
        raise WorkbenchError(
            f"the embedded model {name!r} is not on disk ({str(path)!r}); train it with "
            f"python -m workbench.zoo.train --arch {name}"
        )
    return load_checkpoint(path, device=device, dtype=dtype)
