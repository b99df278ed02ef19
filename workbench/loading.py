"""Loading models as TransformerLens `HookedTransformer`s, from the hub or from disk.

Three sources, one entry point (`load_model`):

- a TransformerLens official name (`"gpt2"`, `"pythia-70m"`, ...): `from_pretrained` with
  `fold_value_biases=False`. Folding moves each head's value bias `b_V` into the shared
  output bias `b_O`; zeroing `hook_z` would then leave the head's bias contribution in place,
  which is not removing the head.
- a local Hugging Face folder (`config.json` + weights): TransformerLens 3.9 cannot load one
  offline through `from_pretrained`, so we run its own helpers on the folder: the config is
  converted from a copy placed under a neutral folder name (TransformerLens picks some
  architectures by substrings of the name, e.g. "llama"), the weights are converted from the
  Hugging Face model, and `load_and_process_state_dict` applies the usual processing.
- a workbench checkpoint folder (see `workbench.checkpoint`), or a name of
  `workbench.zoo.EMBEDDED_FAMILY` (`"embedded"`, `"embedded_llama"`, `"embedded_neox"`) for
  the models the project trains and ships. Any other name starting with `embedded` that is not
  a folder is refused with the list of known names, rather than sent to the hub.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.utilities import softcap_enabled

from workbench.checkpoint import is_checkpoint, load_checkpoint
from workbench.errors import WorkbenchError
from workbench.zoo import EMBEDDED_FAMILY, embedded_path

EMBEDDED_NAME = "embedded"


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
        name_or_path: a name of `workbench.zoo.EMBEDDED_FAMILY` (`"embedded"`,
            `"embedded_llama"`, `"embedded_neox"`), a workbench checkpoint folder, a local
            Hugging Face folder, or a TransformerLens official model name.
        device: `"auto"` (cuda, then mps, then cpu) or any torch device.
        dtype: `"auto"` (bfloat16 on CUDA GPUs that support it, float16 on older ones,
            float32 on CPU and MPS), `"float32"`, `"bfloat16"`, `"float16"` (or their short
            names), a `torch.dtype`, or None for the source's default (float32 for hub names
            and Hugging Face folders).
        **kwargs: passed on to `HookedTransformer.from_pretrained` for hub names.

    Returns:
        The model in eval mode on `device`. Value biases are never folded into `b_O`, so
        zeroing a head's `hook_z` removes the head's whole output.
    """
    dev = resolve_device(device)
    dt = _resolve_dtype(dtype, dev)
    name = str(name_or_path)
    if name in EMBEDDED_FAMILY:
        return _load_embedded(name, dev, dt)
    path = Path(name).expanduser()
    if path.exists():
        if is_checkpoint(path):
            return load_checkpoint(path, device=dev, dtype=dt)
        if (path / "config.json").is_file():
            return _load_hf_folder(path, dev, dt, **kwargs)
        raise WorkbenchError(
            f"{str(path)!r} exists but holds neither a workbench checkpoint "
            "(workbench_config.json) nor a Hugging Face model (config.json)"
        )
    if name.startswith(EMBEDDED_NAME):
        raise WorkbenchError(
            f"unknown embedded model {name!r}; expected one of {list(EMBEDDED_FAMILY)} "
            "(or the path of a workbench checkpoint folder)"
        )
    return _load_official(name, dev, dt, **kwargs)


def _load_embedded(name: str, device: torch.device, dtype) -> HookedTransformer:
    path = embedded_path(name)
    if not is_checkpoint(path):
        raise WorkbenchError(
            f"the embedded model {name!r} is not on disk ({str(path)!r}); train it with "
            f"python -m workbench.zoo.train --arch {name}"
        )
    return load_checkpoint(path, device=device, dtype=dtype)


def _load_official(name: str, device: torch.device, dtype, **kwargs) -> HookedTransformer:
    from transformer_lens.loading_from_pretrained import get_official_model_name

    try:
        official = get_official_model_name(name)
    except ValueError:
        raise WorkbenchError(
            f"{name!r} is neither a local folder nor a TransformerLens model name. Use an "
            "official name such as 'gpt2', 'pythia-70m' or 'Qwen/Qwen2.5-0.5B', the path of a "
            f"local Hugging Face folder or workbench checkpoint, or {EMBEDDED_NAME!r}."
        ) from None
    kwargs.setdefault("fold_value_biases", False)
    if kwargs["fold_value_biases"]:
        raise WorkbenchError(
            "fold_value_biases=True moves each head's value bias into b_O, so ablating hook_z "
            "would not remove the head; load_model always uses fold_value_biases=False"
        )
    try:
        model = HookedTransformer.from_pretrained(
            official, device=str(device), dtype=dtype or torch.float32, **kwargs
        )
    except OSError as e:  # offline hub, missing files, no permission
        raise WorkbenchError(
            f"could not fetch {official!r} from the Hugging Face hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200]}). Without internet, download the model elsewhere "
            "and load it with load_model('/path/to/local/folder')."
        ) from None
    model.eval()
    return model


def _neutral_config_dir(hf_config, workdir: Path) -> Path:
    """Write `hf_config` under a folder name that matches none of TransformerLens's
    name-based architecture branches, filling fields that transformers 5 dropped."""
    if getattr(hf_config, "model_type", None) == "gpt2" and not hasattr(hf_config, "n_ctx"):
        hf_config.n_ctx = hf_config.n_positions
    target = workdir / "local_model"
    target.mkdir()
    cfg = hf_config.to_dict()
    if "n_ctx" not in cfg and hasattr(hf_config, "n_ctx"):
        cfg["n_ctx"] = hf_config.n_ctx
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


def _load_hf_folder(path: Path, device: torch.device, dtype, **kwargs) -> HookedTransformer:
    from transformer_lens.loading_from_pretrained import (
        get_pretrained_model_config,
        get_pretrained_state_dict,
    )
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
    if any(
        (path / f).exists()
        for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    ):
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    arch = (hf_model.config.architectures or ["?"])[0]
    if arch in _LOCAL_CONFIGS:
        build_config, official = _LOCAL_CONFIGS[arch]
        cfg = build_config(hf_model.config, device, load_dtype)
        cfg.model_name = path.name
        state_dict = get_pretrained_state_dict(official, cfg, hf_model=hf_model, dtype=load_dtype)
        return _process(cfg, state_dict, tokenizer, device)
    with tempfile.TemporaryDirectory(prefix="wb") as tmp:
        neutral = _neutral_config_dir(hf_model.config, Path(tmp))
        try:
            with _rope_fields_on(type(hf_model.config)):
                cfg = get_pretrained_model_config(
                    str(neutral), fold_ln=True, device=str(device), dtype=load_dtype
                )
        except (KeyError, NotImplementedError, ValueError, AttributeError) as e:
            raise WorkbenchError(
                f"TransformerLens cannot convert architecture {arch!r} from {str(path)!r}: {e}"
            ) from None
        cfg.model_name = path.name
        cfg.tokenizer_name = None  # the neutral copy is gone; a local tokenizer is passed below
        state_dict = get_pretrained_state_dict(
            str(neutral), cfg, hf_model=hf_model, dtype=load_dtype
        )
    return _process(cfg, state_dict, tokenizer, device)


def _process(cfg, state_dict, tokenizer, device: torch.device) -> HookedTransformer:
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
