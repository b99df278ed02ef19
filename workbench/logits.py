"""Logits at the answer position: a forward over right-padded prompts, read at one position
per row.

Prompts are right-padded, so with causal attention the pads after a prompt's last real
position cannot change it, and a forward needs no attention mask (`forward_kwargs`). Only the
answer positions are scored, so from the last block's `hook_resid_mid` on each row keeps that
position alone (`answer_only_hooks`): the last MLP, the final norm and the unembedding then
run on one position per row (`unembed_at`; `unembed` is the model's unembedding without
TransformerLens's per-call copy of `W_U`). A TransformerBridge runs Hugging Face's forward,
which has no separate final residual (`stop_at_layer=n_layers` returns logits): its answer
positions are kept at the unembedding's input, and the final norm is the bridge's own
(`logits_at`). `answer_logits` is the forward every metric, scorer and decoder reads.

This module sits below the task metrics, the mask scorers and the decoder, which all read
logits through it; it imports neither of them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.components import Unembed
from transformer_lens.utilities import apply_softcap

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel

if TYPE_CHECKING:
    from workbench.tasks.encoding import TaskBatch


def gather_positions(resid: Float[Tensor, "batch pos d_model"], hook, pos: Tensor) -> Tensor:
    """A hook keeping one position per row, `pos[b]`, as a length-1 sequence."""
    return resid[torch.arange(resid.shape[0], device=resid.device), pos.to(resid.device)][:, None]


def answer_only_hooks(model: HookedModel, pos: Tensor) -> tuple[list, Tensor]:
    """Hooks that keep only each row's answer position from the last block's `hook_resid_mid`
    on, so that block's MLP, the final norm and the unembedding run on one position per row.

    Returns:
        `(hooks, pos_after)`: the hooks (none where the model's last block is not a sequential
        attention-then-MLP block) and the positions to read the final residual at.
    """
    cfg = model.cfg
    blocks = getattr(model, "blocks", None)
    if (
        cfg.attn_only
        or getattr(cfg, "parallel_attn_mlp", False)
        or blocks is None
        or not hasattr(blocks[-1], "hook_resid_mid")
    ):
        return [], pos
    name = f"blocks.{cfg.n_layers - 1}.hook_resid_mid"
    return [(name, partial(gather_positions, pos=pos))], torch.zeros_like(pos)


# `Unembed` module -> (W_U's identity and version, W_U.T made contiguous): TransformerLens 3.9's
# `Unembed.forward` makes that copy on every call (Gemma-3: 671 MB per call, page faults included).
_TRANSPOSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def unembed(model: HookedModel, x: Tensor) -> Tensor:
    """`model.unembed(x)`, its hook points included, with the same numbers (the same
    `F.linear` on the same contiguous transposed weight), keeping that transposed copy between
    calls until `W_U` changes (its storage or in-place version). Not for training `W_U`: the
    copy is detached. A subclassed or bridged unembedding is called as it is."""
    u = model.unembed
    if type(u) is not Unembed or u._forward_hooks or u._forward_pre_hooks:
        return u(x)
    w = u.W_U
    key = (w.data_ptr(), w._version, w.dtype, w.device)
    hit = _TRANSPOSED.get(u)
    if hit is None or hit[0] != key:
        hit = (key, w.detach().T.contiguous())
        _TRANSPOSED[u] = hit
    return u.hook_out(F.linear(u.hook_in(x), hit[1], u.b_U))


def forward_kwargs(model: HookedModel) -> dict:
    """Keyword arguments of a forward over right-padded tokens: TransformerLens builds a
    padding mask only for left-padded tokenizers, and right padding needs none."""
    return {"padding_side": "right"} if getattr(model, "tokenizer", None) is not None else {}


def is_bridge(model: HookedModel) -> bool:
    """Whether `model` is a TransformerBridge. Hugging Face's forward runs a bridge's layers, so
    a forward cannot start at a later layer (`start_at_layer` raises), and `stop_at_layer=
    n_layers` stops nowhere: it returns the logits, not the final residual stream."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def unembed_at(
    model: HookedModel, resid: Float[Tensor, "batch pos d_model"], pos: Tensor
) -> Float[Tensor, "batch d_vocab"]:
    """Final layer norm, unembedding and output soft-cap (Gemma-2's `cap * tanh(x / cap)`,
    when `cfg.output_logits_soft_cap > 0`) of the residual stream at one position per row:
    the logits a HookedTransformer's own forward returns there. (A bridge has no separate
    final residual: see `logits_at`.)"""
    if resid.shape[-1] != model.cfg.d_model:
        hint = "; on a TransformerBridge use logits_at" if is_bridge(model) else ""
        raise WorkbenchError(
            f"unembed_at takes the final residual stream, last dim d_model="
            f"{model.cfg.d_model}; got shape {tuple(resid.shape)}{hint}"
        )
    x = resid[torch.arange(resid.shape[0], device=resid.device), pos.to(resid.device)][:, None]
    if model.cfg.normalization_type is not None:
        x = model.ln_final(x)
    logits = unembed(model, x)[:, 0]  # (B, d_vocab), W_U.T copied once, not per call
    # the model's own forward applies the cap with this function
    return apply_softcap(logits, getattr(model.cfg, "output_logits_soft_cap", None))


def shortformer_kwargs(model: HookedModel, tokens: Tensor) -> dict:
    """`shortformer_pos_embed` for a forward that starts at a later layer.

    A shortformer model adds its positional embedding to every attention layer's queries and
    keys instead of to the residual stream; `model(resid, start_at_layer=l)` drops that term
    unless it is passed back in. Right-padded prompts use positions `0..pos-1`.
    """
    if getattr(model.cfg, "positional_embedding_type", None) != "shortformer":
        return {}
    return {"shortformer_pos_embed": model.pos_embed(tokens)}


def logits_at(model: HookedModel, tokens: Tensor, pos: Tensor) -> Float[Tensor, "batch d_vocab"]:
    """The logits a forward over `tokens` gives at one position per row (`model(tokens)[rows,
    pos]`), computed at those positions alone: from the last block's `hook_resid_mid` on for a
    HookedTransformer (`answer_only_hooks`), from the unembedding's input for a
    TransformerBridge (whose final norm and soft-cap are Hugging Face's own). Hooks already
    attached to the model stay active."""
    if not is_bridge(model):
        answer_hooks, pos_after = answer_only_hooks(model, pos)
        with model.hooks(fwd_hooks=answer_hooks):
            final = model(tokens, stop_at_layer=model.cfg.n_layers, **forward_kwargs(model))
        return unembed_at(model, final, pos_after)
    # a bridge without an unembedding hook returns every position's logits: read `pos` there
    keep = "unembed.hook_in" in model.hook_dict
    hooks = [("unembed.hook_in", partial(gather_positions, pos=pos))] if keep else []
    with model.hooks(fwd_hooks=hooks):
        logits = model(tokens, **forward_kwargs(model))
    return (logits if keep else gather_positions(logits, None, pos))[:, 0]  # (B, d_vocab)


def answer_logits(
    model: HookedModel,
    batch: TaskBatch,
    fwd_hooks: Sequence = (),
    resid: Tensor | None = None,
    start_at_layer: int | None = None,
) -> Float[Tensor, "batch d_vocab"]:
    """Logits at each prompt's answer position, optionally with hooks or from a cached layer.

    Args:
        model: a HookedTransformer, or a TransformerBridge in compatibility mode (which runs
            from the embedding only: `resid` is refused).
        batch: the encoded prompts.
        fwd_hooks: `(name, fn)` pairs active during the pass.
        resid: `blocks.{start_at_layer}.hook_resid_pre`, to skip the layers before it.
        start_at_layer: where `resid` enters; None runs from the embedding.
    """
    if is_bridge(model):
        if resid is not None:
            raise WorkbenchError(
                f"a TransformerBridge cannot start a forward at layer {start_at_layer} (Hugging "
                "Face's forward runs its layers); pass resid=None to run from the embedding"
            )
        with model.hooks(fwd_hooks=list(fwd_hooks)):
            return logits_at(model, batch.tokens, batch.answer_pos)
    n_layers = model.cfg.n_layers
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        if resid is None:
            final = model(batch.tokens, stop_at_layer=n_layers, **forward_kwargs(model))
        else:
            final = model(
                resid,
                start_at_layer=start_at_layer,
                stop_at_layer=n_layers,
                **shortformer_kwargs(model, batch.tokens),
            )
    return unembed_at(model, final, batch.answer_pos)
