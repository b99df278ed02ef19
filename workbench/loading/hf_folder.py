"""Local Hugging Face folders (`config.json` + weights), converted offline.

TransformerLens 3.9 cannot load a local folder offline through `from_pretrained`, so we run
its own helpers: the config is converted from a copy placed under a neutral folder name
(TransformerLens picks some architectures by substrings of the name, e.g. "llama"), the
weights are converted from the Hugging Face model, and `load_and_process_state_dict` applies
the usual processing (`build_hooked`). Gemma, Gemma-2 and Gemma-3, which TransformerLens
configures only for official names, get their config from `tl_configs` (TransformerLens's table
for the family, with the sizes read from the Hugging Face config).
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from transformer_lens import HookedTransformer
from transformer_lens.utilities import softcap_enabled

from workbench.errors import WorkbenchError
from workbench.loading.tl_configs import FAMILIES, local_config


def _neutral_config_dir(hf_config, arch: str, workdir: Path) -> Path:
    """Write `hf_config` under a folder name that matches none of TransformerLens's
    name-based architecture branches, filling fields that transformers 5 dropped and the
    architecture (`arch`), which configs read from GGUF files lack."""
    if getattr(hf_config, "model_type", None) == "gpt2" and not hasattr(hf_config, "n_ctx"):
        hf_config.n_ctx = hf_config.n_positions
    target = workdir / "local_model"
    target.mkdir()
    cfg = hf_config.to_dict()
    if "n_ctx" not in cfg and hasattr(hf_config, "n_ctx"):
        cfg["n_ctx"] = hf_config.n_ctx
    # A GGUF-loaded model says it is quantised; its tensors are already plain floats.
    cfg.pop("quantization_config", None)
    cfg["architectures"] = [arch]
    (target / "config.json").write_text(json.dumps(cfg))
    return target


def _rope_field(name: str):
    def read(self):
        value = (self.__dict__.get("rope_parameters") or {}).get(name)
        if value is None:
            raise AttributeError(name)
        return value

    return property(read)


@contextmanager
def _rope_fields_on(config_class):
    """transformers 5 moved `partial_rotary_factor` into `config.rope_parameters`, where
    TransformerLens 3.9 does not look (its Phi branch reads `config.partial_rotary_factor`).
    For the duration of the conversion only, the config class answers that name from
    `rope_parameters`; nothing is changed once the block exits."""
    added = []
    for name in ("partial_rotary_factor",):
        if name not in vars(config_class):
            setattr(config_class, name, _rope_field(name))
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            delattr(config_class, name)


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def load_hf_folder(path: Path, device: torch.device, dtype) -> HookedTransformer:
    """The Hugging Face model in the folder `path` (and its tokenizer, if the folder has one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    load_dtype = dtype or torch.float32
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=load_dtype
        )
    except (OSError, ValueError) as e:
        raise WorkbenchError(
            f"could not load the Hugging Face model in {str(path)!r}: {str(e).splitlines()[0]}"
        ) from None
    tokenizer = None
    if any((path / f).exists() for f in _TOKENIZER_FILES):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return convert_hf_model(hf_model, tokenizer, path.name, device, load_dtype)


def convert_hf_model(
    hf_model, tokenizer, name: str, device: torch.device, dtype: torch.dtype
) -> HookedTransformer:
    """An in-memory Hugging Face causal LM (and its tokenizer, or None) as a processed
    `HookedTransformer` named `name`, on `device`.

    With a tokenizer, `cfg.default_prepend_bos` follows what that tokenizer does
    (`tokenizer_adds_bos`), so `model.to_tokens(s)` gives exactly `tokenizer(s)`'s ids.
    """
    cfg, state_dict = convert_config_and_weights(hf_model, name, device, dtype)
    return build_hooked(cfg, state_dict, tokenizer, device)


def convert_config_and_weights(hf_model, name: str, device: torch.device, dtype: torch.dtype):
    """TransformerLens's `(HookedTransformerConfig, state dict)` for an in-memory Hugging Face
    causal LM, before processing (`build_hooked` folds the norms and centres the weights)."""
    from transformer_lens.loading_from_pretrained import (
        get_pretrained_model_config,
        get_pretrained_state_dict,
    )

    arch = (hf_model.config.architectures or [type(hf_model).__name__])[0]
    if arch in FAMILIES:
        cfg = local_config(hf_model.config, arch, device, dtype)
        cfg.model_name = name
        official = FAMILIES[arch].official  # picks the weight converter, downloads nothing
        state_dict = get_pretrained_state_dict(official, cfg, hf_model=hf_model, dtype=dtype)
        return cfg, state_dict
    with tempfile.TemporaryDirectory(prefix="wb") as tmp:
        neutral = _neutral_config_dir(hf_model.config, arch, Path(tmp))
        try:
            with _rope_fields_on(type(hf_model.config)):
                cfg = get_pretrained_model_config(
                    str(neutral), fold_ln=True, device=str(device), dtype=dtype
                )
        except (KeyError, NotImplementedError, ValueError, AttributeError) as e:
            raise WorkbenchError(
                f"TransformerLens cannot convert architecture {arch!r} from {name!r}: {e}"
            ) from None
        cfg.model_name = name
        cfg.tokenizer_name = None  # the neutral copy is gone; a local tokenizer is passed below
        state_dict = get_pretrained_state_dict(str(neutral), cfg, hf_model=hf_model, dtype=dtype)
    return cfg, state_dict


def tokenizer_adds_bos(tokenizer) -> bool:
    """Whether `tokenizer(text)` starts with the tokenizer's BOS id (and that id is not
    simply the first token of the text: the same text without special tokens does not)."""
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    with_special = tokenizer("x")["input_ids"]
    plain = tokenizer("x", add_special_tokens=False)["input_ids"]
    return bool(with_special) and with_special[0] == bos and plain[:1] != [bos]


def build_hooked(cfg, state_dict, tokenizer, device: torch.device) -> HookedTransformer:
    """A `HookedTransformer` from a converted config and state dict, with TransformerLens's
    usual processing (norms folded, weights centred) and the tokenizer's own BOS rule."""
    if tokenizer is not None:
        # TransformerLens's configs prepend BOS for most families whatever the tokenizer does;
        # a model then sees a token its own tokenizer never gives it.
        cfg.default_prepend_bos = tokenizer_adds_bos(tokenizer)
    cfg.init_weights = False  # every weight comes from the state dict
    w_u = state_dict.get("unembed.W_U")
    transposed = w_u is not None and not w_u.is_contiguous() and w_u.T.is_contiguous()
    model = HookedTransformer(
        cfg,
        tokenizer=tokenizer,
        move_to_device=False,
        default_padding_side="right" if tokenizer is not None else None,
    )
    model.load_and_process_state_dict(
        state_dict,
        fold_ln=True,
        center_writing_weights=cfg.normalization_type in ("LN", "LNPre"),
        center_unembed=False,  # below, in place
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    # Centring the unembedding adds a constant to each position's logits, which a soft-cap
    # (tanh) does not ignore; from_pretrained turns it off there too. Done in place, as
    # TransformerLens's center_unembed computes it: that one copies the whole state dict
    # first (for Gemma-3's 262k x 640 unembedding, 1.7 GB more at the conversion's peak). The
    # mean is summed over the converter's memory layout (a transposed view of the HF head),
    # as TransformerLens sums it, so the bits are the same as before (entries already cached
    # and the model fingerprints recorded from them stay valid).
    if not softcap_enabled(cfg.output_logits_soft_cap):
        with torch.no_grad():
            w_u = model.unembed.W_U
            w_u.sub_((w_u.T.contiguous().T if transposed else w_u).mean(-1, keepdim=True))
            model.unembed.b_U.sub_(model.unembed.b_U.mean())
    model.to(device)
    model.eval()
    return model
