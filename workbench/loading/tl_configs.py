"""TransformerLens configs for local models of families TransformerLens configures only by name.

TransformerLens 3.9 converts the weights of Gemma, Gemma-2 and Gemma-3 (text) models, but builds
their configs only for official names, from fixed tables picked by substrings of the name
("gemma-3" -> Gemma-3). A local folder or a GGUF file has no such name. Here a family's config
is TransformerLens's own table for one official size (the template: the structural switches
that are the same for every size, such as q/k norms or norms before and after each sublayer)
with every field that varies by size read from the Hugging Face config instead: widths, layer
count, heads and key/value heads, vocabulary, norm epsilon, activation, RoPE bases, attention
scale, sliding-window layers, soft-caps. A config that needs something the template cannot
express (attention biases, bidirectional attention, a RoPE scaling TransformerLens does not
implement) is refused with the field named, rather than converted into a different model.

Every other architecture TransformerLens converts (GPT-2, Llama, Mistral, Qwen2/3, Phi, Phi-3,
BLOOM, ...) has its config read from the Hugging Face config by TransformerLens itself
(`hf_folder.convert_config_and_weights`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformer_lens import HookedTransformerConfig

from workbench.errors import WorkbenchError


def _rope(hf_config, layer_type: str | None = None) -> dict:
    """The RoPE parameters of the config (transformers 5: `rope_parameters`, per layer type
    where layer types differ), with `rope_theta` filled from the older flat field."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if layer_type is not None and isinstance(params.get(layer_type), dict):
        params = dict(params[layer_type])
    elif any(isinstance(v, dict) for v in params.values()):
        params = dict(params.get("full_attention") or {})
    params.setdefault("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    params.setdefault("rope_type", "default")
    return params


def _sizes(h) -> dict:
    """The fields every Gemma generation reads the same way."""
    head_dim = getattr(h, "head_dim", None) or h.hidden_size // h.num_attention_heads
    return dict(
        d_model=h.hidden_size,
        d_head=head_dim,
        n_heads=h.num_attention_heads,
        n_key_value_heads=h.num_key_value_heads,
        d_mlp=h.intermediate_size,
        n_layers=h.num_hidden_layers,
        n_ctx=h.max_position_embeddings,
        eps=h.rms_norm_eps,
        d_vocab=h.vocab_size,
        act_fn=getattr(h, "hidden_activation", None) or h.hidden_act,
        rotary_base=float(_rope(h)["rope_theta"]),
        rotary_dim=head_dim,
    )


def _local_layers(h) -> dict:
    """Sliding-window layers from `layer_types` (older Gemma-2 configs without it: even layers
    slide, HF's default), the window, and the attention scale `query_pre_attn_scalar ** 0.5`
    (HF's; not always `d_head ** 0.5`)."""
    kinds = getattr(h, "layer_types", None) or [
        "sliding_attention" if i % 2 == 0 else "full_attention"
        for i in range(h.num_hidden_layers)
    ]
    window = getattr(h, "sliding_window", None)
    local = window is not None and "sliding_attention" in kinds
    return dict(
        attn_scale=float(h.query_pre_attn_scalar) ** 0.5,
        use_local_attn=local,
        attn_types=[("local" if k == "sliding_attention" else "global") for k in kinds]
        if local
        else None,
        window_size=int(window) if local else None,
    )


def _soft_caps(h) -> dict:
    return dict(
        attn_scores_soft_cap=float(getattr(h, "attn_logit_softcapping", None) or -1.0),
        output_logits_soft_cap=float(getattr(h, "final_logit_softcapping", None) or -1.0),
    )


def _gemma(h) -> dict:
    return _sizes(h)


def _gemma2(h) -> dict:
    return {**_sizes(h), **_local_layers(h), **_soft_caps(h)}


def _gemma3(h) -> dict:
    """Gemma-2's fields plus RoPE per layer type: global layers use `full_attention`'s base
    (and its linear scaling factor, as Gemma-3 4B and larger), local layers
    `sliding_attention`'s."""
    full, sliding = _rope(h, "full_attention"), _rope(h, "sliding_attention")
    for kind, params in (("full_attention", full), ("sliding_attention", sliding)):
        allowed = ("default", "linear") if kind == "full_attention" else ("default",)
        if params["rope_type"] not in allowed:
            raise _unmappable(h, f"rope_parameters[{kind!r}] has rope_type "
                                 f"{params['rope_type']!r}; TransformerLens implements {allowed}")
    fields = {**_sizes(h), **_local_layers(h), **_soft_caps(h)}
    fields.update(
        # transformers' Gemma-3 keeps `attn_logit_softcapping` in its config but never passes
        # it to the attention (Gemma-2 does); the model is what that forward computes.
        attn_scores_soft_cap=-1.0,
        rotary_base=float(full["rope_theta"]),
        rotary_base_local=float(sliding["rope_theta"]),
        rotary_scaling_factor=float(full.get("factor", 1.0))
        if full["rope_type"] == "linear"
        else 1.0,
    )
    return fields


def _unmappable(h, what: str) -> WorkbenchError:
    arch = (getattr(h, "architectures", None) or ["?"])[0]
    return WorkbenchError(
        f"this {arch} config does not map onto one TransformerLens knows: {what}"
    )


@dataclass(frozen=True)
class LocalFamily:
    """How a Hugging Face config of one architecture becomes a `HookedTransformerConfig`.

    Attributes:
        official: an official TransformerLens name of the family, whose table is the template
            (its structural switches are kept, every field `read` returns replaces the
            template's).
        read: the fields that vary by size, read from the Hugging Face config.
        refuse: `(attribute, value that cannot be converted)`: a config with that value is
            refused (the template has no switch for it).
    """

    official: str
    read: Callable[[object], dict]
    refuse: tuple[tuple[str, object], ...] = ()


_GEMMA_REFUSE = (("attention_bias", True), ("use_bidirectional_attention", True))
FAMILIES: dict[str, LocalFamily] = {
    "GemmaForCausalLM": LocalFamily("google/gemma-2b", _gemma, _GEMMA_REFUSE),
    "Gemma2ForCausalLM": LocalFamily("google/gemma-2-2b", _gemma2, _GEMMA_REFUSE),
    "Gemma3ForCausalLM": LocalFamily("google/gemma-3-270m", _gemma3, _GEMMA_REFUSE),
}


def local_config(hf_config, arch: str, device: torch.device, dtype) -> HookedTransformerConfig:
    """The TransformerLens config of a local `arch` model (an architecture of `FAMILIES`):
    the family's template with the Hugging Face config's sizes."""
    from transformer_lens.loading_from_pretrained import convert_hf_model_config

    family = FAMILIES[arch]
    for attribute, bad in family.refuse:
        if getattr(hf_config, attribute, None) == bad:
            raise _unmappable(hf_config, f"{attribute}={bad!r}, which TransformerLens's "
                                         f"{arch} has no switch for")
    # The template comes from TransformerLens's name-based table: no download, no hub.
    fields = convert_hf_model_config(family.official)
    fields.update(family.read(hf_config))
    for key in ("tokenizer_name", "quantization_method"):
        fields.pop(key, None)
    fields["normalization_type"] = "RMSPre"  # folded, as get_pretrained_model_config does
    fields["original_architecture"] = arch
    fields.update(device=str(device), dtype=dtype, default_prepend_bos=True)
    return HookedTransformerConfig(**fields)
