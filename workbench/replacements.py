"""What replaces a removed head's `z`: its mean over a reference set (`compute_head_means`,
for mean ablation) or its `z` on counterfactual prompts (`compute_resample_z`, for resample
ablation); `workbench.ablation` puts them in place at `blocks.{l}.attn.hook_z`.

Both run the reference prompts once with a cache of every layer's `hook_z` only: a
HookedTransformer's forward stops after its last block (no final norm or unembedding).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel


@dataclass(frozen=True)
class HeadMeans:
    """Mean `hook_z` per head over a reference set.

    Attributes:
        averaged: the mean over all real token positions, `[layer, head_index, d_head]`.
        per_position: the mean at each position, `[pos, layer, head_index, d_head]`, or None
            when the reference prompts differ in length.
        n_prompts: how many reference prompts the means were taken over.
    """

    averaged: Float[Tensor, "layer head_index d_head"]
    per_position: Float[Tensor, "pos layer head_index d_head"] | None
    n_prompts: int


def hook_z_name(layer: int) -> str:
    """The name of layer `layer`'s `hook_z`."""
    return f"blocks.{layer}.attn.hook_z"


def compute_head_means(
    model: HookedModel,
    tokens_or_task,
    lengths: Int[Tensor, " batch"] | None = None,
    batch_size: int = 64,
    split: str | None = None,
) -> HeadMeans:
    """Mean `hook_z` of every head over a reference set.

    Args:
        model: a hooked model.
        tokens_or_task: a `Task` or an encoded `TaskBatch` (its prompts, optionally one
            `split`) or a `[batch, pos]` token tensor.
        lengths: the real length of each row of `tokens` (right padding); all of `pos` if None.
        batch_size: prompts per forward.

    Returns:
        `HeadMeans` in float32 whatever the model's dtype (the hooks cast to `z`'s dtype);
        `per_position` is set only when every prompt has the same length.
    """
    from workbench.tasks.encoding import TaskBatch, encode_task
    from workbench.tasks.task import Task

    if isinstance(tokens_or_task, Task):
        batch = encode_task(model, tokens_or_task.subset(split) if split else tokens_or_task)
        tokens, lengths = batch.tokens, batch.lengths
    elif isinstance(tokens_or_task, TaskBatch):  # an encoded task: its prompts, as encoded
        batch = tokens_or_task
        if split:
            batch = batch.rows([i for i, e in enumerate(batch.task.examples) if e.split == split])
        tokens, lengths = batch.tokens, batch.lengths
    else:
        tokens = tokens_or_task
        if tokens.ndim != 2:
            raise WorkbenchError(f"tokens must be [batch, pos]; got shape {tuple(tokens.shape)}")
        if lengths is None:
            lengths = torch.full((tokens.shape[0],), tokens.shape[1], device=tokens.device)
    if tokens.shape[0] == 0:
        raise WorkbenchError("compute_head_means needs at least one reference prompt")
    n_layers = model.cfg.n_layers
    names = [hook_z_name(l) for l in range(n_layers)]
    sums, pos_sums, count = None, None, 0
    equal = bool((lengths == lengths[0]).all())
    with torch.no_grad():
        for start in range(0, tokens.shape[0], batch_size):
            tok, lens = tokens[start : start + batch_size], lengths[start : start + batch_size]
            _, cache = model.run_with_cache(
                tok, names_filter=lambda n: n in names, **_no_unembed(model)
            )
            # fp32 sums: fp16 overflows to inf by ~32k tokens and bf16 drifts by ~1 %.
            z = torch.stack([cache[n].float() for n in names], dim=2)  # (B, T, L, H, D)
            real = torch.arange(z.shape[1], device=z.device)[None] < lens[:, None].to(z.device)
            batch_sum = (z * real[:, :, None, None, None].to(z.dtype)).sum(dim=(0, 1))
            sums = batch_sum if sums is None else sums + batch_sum.to(sums.device)
            count += int(real.sum().item())
            if equal:
                pos_sum = z[:, : int(lengths[0])].sum(0)
                pos_sums = pos_sum if pos_sums is None else pos_sums + pos_sum.to(pos_sums.device)
    n = tokens.shape[0]
    return HeadMeans(
        averaged=sums / count, per_position=pos_sums / n if equal else None, n_prompts=n
    )


def _no_unembed(model) -> dict:
    """Stop a HookedTransformer's forward after its last block: the means need only `hook_z`,
    and the final norm and unembedding would make a `[batch, pos, d_vocab]` tensor (1.3 GB for
    64 prompts of 20 tokens at Gemma-3's 262k vocabulary). A bridge's forward stops nowhere."""
    from transformer_lens.model_bridge import TransformerBridge

    return {} if isinstance(model, TransformerBridge) else {"stop_at_layer": model.cfg.n_layers}


def compute_resample_z(
    model: HookedModel, tokens_or_batch, batch_size: int = 64
) -> Float[Tensor, "batch pos layer head_index d_head"]:
    """Every head's `hook_z` on the counterfactual prompts, for resample ablation.

    Args:
        model: a hooked model.
        tokens_or_batch: a `TaskBatch` with counterfactual prompts (its
            `counterfactual_tokens` are run) or a `[batch, pos]` token tensor to run as is.
        batch_size: prompts per forward.
    """
    from workbench.tasks.encoding import TaskBatch

    if isinstance(tokens_or_batch, TaskBatch):
        tokens = tokens_or_batch.counterfactual().tokens
    else:
        tokens = tokens_or_batch
    if tokens.ndim != 2:
        raise WorkbenchError(f"tokens must be [batch, pos]; got shape {tuple(tokens.shape)}")
    names = [hook_z_name(l) for l in range(model.cfg.n_layers)]
    parts = []
    with torch.no_grad():
        for start in range(0, tokens.shape[0], batch_size):
            _, cache = model.run_with_cache(
                tokens[start : start + batch_size],
                names_filter=lambda n: n in names,
                **_no_unembed(model),
            )
            parts.append(torch.stack([cache[n] for n in names], dim=2))  # (B, T, L, H, D)
    return torch.cat(parts)
