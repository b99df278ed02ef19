"""Greedy decoding of many head sets at once: every (mask, prompt) pair is one row.

`greedy_generate` decodes under hooks that treat every row alike (one head set). A search
scores many sets on the same prompts, and one cached step over a few rows costs nearly what
a step over more rows costs (the weights are read once per step), so
`greedy_generate_masks` decodes the rows of several masks in the same batches: mask `m`'s
copy of prompt `i` is row `m * n_prompts + i` (mask-major, as `mask_hooks` tiles a batch).
Rows are sorted by length, grouped and dropped as they finish exactly as in
`greedy_generate`; before every forward the decoder says which rows it runs
(`decode_rows(on_rows=...)`), and a hook at `blocks.{l}.attn.hook_z` of every layer some
mask ablates keeps each row's heads by that row's mask: `z * keep + fill * (1 - keep)`,
`fill` zero or the head's averaged mean, as `mask_hooks` computes it for a tiled batch. A
row's generation is therefore the one `greedy_generate` writes for that prompt under that
mask alone (`tests/generation/test_masked.py` checks it token for token, and against
`naive_generate`).

Position-dependent ablations (per-position means, resampling) cannot follow decoded rows and
are refused, as they are for generation tasks everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch
from jaxtyping import Float, Int
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, fill_for
from workbench.errors import WorkbenchError
from workbench.generation.decode import Generation, StopRule, checked_rows, decode_rows
from workbench.hooked import HookedModel
from workbench.replacements import hook_z_name


class _RowMasks:
    """Each decoded row's kept heads, `[rows, layer, head]`, and the rows the next forward
    runs (set by the decoder through `select`)."""

    def __init__(self, keep: Tensor) -> None:
        self.keep_all = keep
        self.keep = keep

    def select(self, rows: list[int]) -> None:
        self.keep = self.keep_all[torch.tensor(rows, device=self.keep_all.device)]


def _row_mask_hook(z: Float[Tensor, "batch pos head_index d_head"], hook, state: _RowMasks,
                   layer: int, fill: Tensor | None):
    if state.keep.shape[0] != z.shape[0]:
        raise WorkbenchError(f"the decoder ran {z.shape[0]} rows but selected "
                             f"{state.keep.shape[0]}: a row-mask hook ran outside its decode")
    k = state.keep[:, layer][:, None, :, None].to(device=z.device, dtype=z.dtype)
    if fill is None:
        return z * k
    f = fill.to(device=z.device, dtype=z.dtype)[None, None]
    return z * k + f * (1 - k)


def greedy_generate_masks(
    model: HookedModel,
    prompts: Sequence[Int[Tensor, " pos"]],
    masks: Float[Tensor, "n_masks layer head_index"],
    max_new_tokens: int,
    until: Sequence[str] = (),
    ablation: Ablation | AblationKind | str | None = None,
    rows_per_pass: int | None = None,
) -> Generation:
    """Greedy continuations of every prompt under every mask, decoded together.

    Args:
        model: as for `greedy_generate`; attach no other hooks at `hook_z`.
        prompts: one 1-D id tensor per prompt, as the model is fed.
        masks: 0/1, 1 = ablated, `[n_masks, n_layers, n_heads]`.
        max_new_tokens, until, rows_per_pass: as for `greedy_generate` (`rows_per_pass`
            counts decoded rows, of any mask).
        ablation: zero (None) or mean ablation with averaged means.

    Returns:
        One `Generation` of `n_masks * len(prompts)` rows, mask-major: row `m * len(prompts)
        + i` is prompt `i` under mask `m`; `n_forwards` counts the forwards of the whole
        decode.

    Example:
        >>> gen = greedy_generate_masks(model, ids, masks_of(model, [["L3H1"], ["L5H0"]]), 16)
        >>> gen.texts[len(ids):]  # the second set's texts
    """
    ablation = Ablation.of(ablation)
    if ablation.kind is AblationKind.RESAMPLE or ablation.per_position:
        raise WorkbenchError("decoding many head sets at once takes zero or mean ablation with "
                             f"averaged means; got {ablation.kind.value}"
                             f"{' per position' if ablation.per_position else ''}")
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if masks.ndim != 3 or tuple(masks.shape[1:]) != (n_layers, n_heads) or not len(masks):
        raise WorkbenchError(f"masks must be [n_masks >= 1, n_layers={n_layers}, "
                             f"n_heads={n_heads}]; got {tuple(masks.shape)}")
    rows, until = checked_rows(model, prompts, max_new_tokens, until, rows_per_pass)
    device = model.cfg.device
    keep = (1.0 - masks.detach().float()).to(device).repeat_interleave(len(rows), dim=0)
    state = _RowMasks(keep)
    hooks = [(hook_z_name(l), partial(_row_mask_hook, state=state, layer=l,
                                      fill=fill_for(ablation.kind, ablation.means, l,
                                                    list(range(n_heads)), False)))
             for l in range(n_layers) if bool(masks[:, l].any())]
    stop = StopRule(model, max_new_tokens, until)
    with model.hooks(fwd_hooks=hooks):
        return decode_rows(model, rows * len(masks), stop, rows_per_pass, state.select)
