"""Local Hugging Face folders (`config.json` + weights), converted offline.

TransformerLens 3.9 cannot load a local folder offline through `from_pretrained`, so we run
its own helpers: the config is converted from a copy placed under a neutral folder name
(TransformerLens picks some architectures by substrings of the name, e.g. "llama"), the
weights are converted from the Hugging Face model, and `load_and_process_state_dict` applies
the usual processing (`build_hooked`). Gemma and Gemma-2, which TransformerLens knows only as
fixed-shape official entries, get their config built from the Hugging Face config here.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.utilities import softcap_enabled

from workbench.errors import WorkbenchError


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


def _rope_theta(hf_config) -> float:
    params = getattr(hf_config, "rope_parameters", None) or {}
    return float(params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


def _gemma_fields(h, device: torch.device, dtype) -> dict:
    """`HookedTransformerConfig` fields Gemma and Gemma-2 share, read from the HF config."""
    return dict(
        d_model=h.hidden_size,
        d_head=h.head_dim,
        n_heads=h.num_attention_heads,
        d_mlp=h.intermediate_size,
        n_layers=h.num_hidden_layers,
        n_ctx=h.max_position_embeddings,
        eps=h.rms_norm_eps,
        d_vocab=h.vocab_size,
        act_fn=getattr(h, "hidden_activation", None) or h.hidden_act,
        normalization_type="RMSPre",  # folded, as get_pretrained_model_config does
        rotary_base=_rope_theta(h),
        rotary_dim=h.head_dim,
        positional_embedding_type="rotary",
        use_attn_scale=True,
        n_key_value_heads=h.num_key_value_heads,
        gated_mlp=True,
        final_rms=True,
        default_prepend_bos=True,
        device=str(device),
        dtype=dtype,
    )


def _gemma_config(hf_config, device: torch.device, dtype) -> HookedTransformerConfig:
    """Gemma (1) from its Hugging Face config. TransformerLens 3.9 has Gemma only as
    fixed-shape entries for the official sizes (picked by name); these are the same fields,
    read from the config instead."""
    return HookedTransformerConfig(
        **_gemma_fields(hf_config, device, dtype), original_architecture="GemmaForCausalLM"
    )


def _gemma2_config(hf_config, device: torch.device, dtype) -> HookedTransformerConfig:
    """Gemma-2 from its Hugging Face config: Gemma's fields plus the ones TransformerLens's
    fixed entries for the official sizes set (norms before and after each sublayer, attention
    and output soft-caps, sliding-window layers), read from the config. The attention scale
    is `query_pre_attn_scalar ** 0.5` (HF), not `d_head ** 0.5`. Which layers slide comes from
    `layer_types` (HF's default, and older configs without it: even layers slide)."""
    h = hf_config
    kinds = getattr(h, "layer_types", None) or [
        "sliding_attention" if i % 2 == 0 else "full_attention"
        for i in range(h.num_hidden_layers)
    ]
    window = getattr(h, "sliding_window", None)
    local = window is not None and "sliding_attention" in kinds
    return HookedTransformerConfig(
        **_gemma_fields(h, device, dtype),
        attn_scale=float(h.query_pre_attn_scalar) ** 0.5,
        use_local_attn=local,
        attn_types=[("local" if k == "sliding_attention" else "global") for k in kinds]
        if local
        else None,
        window_size=int(window) if local else None,
        attn_scores_soft_cap=float(h.attn_logit_softcapping or -1.0),
        output_logits_soft_cap=float(h.final_logit_softcapping or -1.0),
        use_normalization_before_and_after=True,
        original_architecture="Gemma2ForCausalLM",
    )


# Architectures TransformerLens converts only from official names: our config builder and an
# official name of the family (its weight converter is chosen by that name's architecture).
_LOCAL_CONFIGS = {
    "GemmaForCausalLM": (_gemma_config, "google/gemma-2b"),
    "Gemma2ForCausalLM": (_gemma2_config, "google/gemma-2-2b"),
}


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
    if arch in _LOCAL_CONFIGS:
        build_config, official = _LOCAL_CONFIGS[arch]
        cfg = build_config(hf_model.config, device, dtype)
        cfg.model_name = name
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
        # Centring the unembedding adds a constant to each position's logits, which a
        # soft-cap (tanh) does not ignore; from_pretrained turns it off there too.
        center_unembed=not softcap_enabled(cfg.output_logits_soft_cap),
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    model.to(device)
    model.eval()
    return model
