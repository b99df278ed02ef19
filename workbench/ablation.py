"""Removing attention heads through `blocks.{l}.attn.hook_z`.

A head's contribution to the residual stream is `z_h @ W_O[h]` (plus nothing else once value
biases are not folded into `b_O`), where `z_h` is the head's attention-weighted value vector
at `hook_z`. Replacing `z_h` before the output projection therefore removes exactly that
head: zero ablation sets it to 0; mean ablation sets it to the head's mean `z` over a
reference set, which keeps the average output (and so the residual-stream statistics later
layers expect) while deleting the example-specific information.

Resample ablation replaces `z_h` by the head's `z` on a counterfactual prompt of the same token
length (e.g. IOI with the names changed, greater-than with the start year at XX01): the head
then carries the information of another input of the same form rather than none, so the
measured effect isolates what the head says about this example (Wang et al. 2022; Chan et al.
2022, causal scrubbing). The means and the counterfactual `z` are computed by
`workbench.replacements` (`compute_head_means`, `compute_resample_z`).

An `Ablation` value carries the kind with its means (and whether they are per position)
through every stage, instead of three loose arguments. Two ways to ablate:

- `ablated(model, heads, kind)`: a context manager for one head set, attached with
  `model.hooks(...)` so the hooks are removed even when the body raises;
- `mask_hooks(...)`: many head sets in one forward. The batch is tiled `n_masks` times and
  each copy gets its own `(layer, head)` keep-mask, so a GPU evaluates many combinations
  per pass.

Any hooked model exposing `blocks.{l}.attn.hook_z` and a `cfg` with `n_layers`/`n_heads`
works (HookedTransformer, HookedEncoder, TransformerBridge in compatibility mode). The model
must keep value biases unfolded: for a bridge call
`enable_compatibility_mode(fold_value_biases=False)`; `load_model` already does the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.options import AblationKind
from workbench.replacements import HeadMeans, hook_z_name
from workbench.replacements import compute_head_means as compute_head_means
from workbench.replacements import compute_resample_z as compute_resample_z


@dataclass(frozen=True)
class Ablation:
    """How removed heads are replaced: what travels with every scoring call of a run.

    Attributes:
        kind: zero, mean or resample ablation (`AblationKind`; a string is parsed).
        means: the mean `z` of every head for mean ablation (`compute_head_means`); None where
            the caller takes the means over the task's own prompts (`screen_heads`, `run_cel`).
        per_position: mean ablation with the mean at each position (`HeadMeans.per_position`,
            equal-length prompts) instead of the mean over all positions.
        resample: the counterfactual `z` of the rows scored (`compute_resample_z`), `[batch,
            pos, layer, head_index, d_head]`, for resample ablation; None where the scorer
            runs the counterfactual prompts itself.

    Example:
        >>> Ablation("mean", compute_head_means(model, task), per_position=True)
    """

    kind: AblationKind = AblationKind.ZERO
    means: HeadMeans | None = None
    per_position: bool = False
    resample: Float[Tensor, "batch pos layer head_index d_head"] | None = field(
        default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AblationKind.parse(self.kind))
        if self.means is not None and not isinstance(self.means, HeadMeans):
            raise WorkbenchError(f"Ablation means must be HeadMeans (compute_head_means) or "
                                 f"None; got {type(self.means).__name__}")
        if not isinstance(self.per_position, bool):
            raise WorkbenchError(f"Ablation per_position must be True or False; got "
                                 f"{self.per_position!r}")

    @classmethod
    def of(cls, value: Ablation | AblationKind | str | None) -> Ablation:
        """`value` as an `Ablation`: a kind (`"mean"`) stands for that kind with no means;
        None for zero ablation."""
        return value if isinstance(value, Ablation) else cls(value or AblationKind.ZERO)

    def fill(self, layer: int, heads: list[int]) -> Tensor | None:
        """What replaces the `z` of `heads` at `layer` (`fill_for`)."""
        return fill_for(self.kind, self.means, layer, heads, self.per_position, self.resample)

    def hooks(self, model: HookedModel, heads: Iterable[HeadSpec] | HeadSet | None) -> list:
        """The hooks that ablate `heads` (`ablation_hooks`)."""
        return ablation_hooks(model, heads, self.kind, self.means, self.per_position,
                              self.resample)

    def mask_hooks(self, model: HookedModel, masks: Float[Tensor, "n_masks layer head_index"],
                   layers: Iterable[int] | None = None) -> list[tuple[str, object]]:
        """The hooks that ablate one head set per copy of a tiled batch (`mask_hooks`)."""
        return mask_hooks(model, masks, self.kind, self.means, self.per_position, layers,
                          self.resample)


def _resample_fill(z: Tensor, fill: Tensor) -> Tensor:
    """Check a resample fill `[batch, pos, head, d]` against `z` and cast it."""
    if fill.shape[0] != z.shape[0] or fill.shape[1] != z.shape[1]:
        raise WorkbenchError(
            f"resample activations are [batch={fill.shape[0]}, pos={fill.shape[1]}] but the "
            f"input is [batch={z.shape[0]}, pos={z.shape[1]}]; run compute_resample_z on the "
            "counterfactual prompts of this very batch"
        )
    return fill.to(z.dtype)


def _replace_heads_hook(
    z: Float[Tensor, "batch pos head_index d_head"], hook, heads: Tensor, fill: Tensor | None
):
    """Set `z[:, :, heads]` to 0 (`fill` None) or to `fill` (`[head, d]` or `[pos, head, d]`)."""
    z = z.clone()  # out of place, so gradients through other heads stay valid
    # With n_devices > 1 each layer lives on its own device: follow z, not cfg.device.
    heads = heads.to(z.device)
    if fill is not None:
        fill = fill.to(device=z.device, dtype=z.dtype)
    if fill is not None and fill.ndim == 4:  # resample: [batch, pos, head, d]
        z[:, :, heads] = _resample_fill(z, fill)
        return z
    if fill is None:
        z[:, :, heads] = 0.0
    elif fill.ndim == 2:
        z[:, :, heads] = fill
    else:
        if fill.shape[0] < z.shape[1]:
            raise WorkbenchError(
                f"per-position means cover {fill.shape[0]} positions but the input has "
                f"{z.shape[1]}; compute the means on prompts of this length or use averaged means"
            )
        z[:, :, heads] = fill[: z.shape[1]]
    return z


def fill_for(
    kind: AblationKind,
    means: HeadMeans | None,
    layer: int,
    heads: list[int],
    per_position: bool,
    resample: Tensor | None = None,
) -> Tensor | None:
    """What replaces the `z` of `heads` at `layer`: None for zero ablation, else `[head, d]`
    means, `[pos, head, d]` per-position means, or `[batch, pos, head, d]` resampled z."""
    if kind is AblationKind.RESAMPLE:
        if resample is None:
            raise WorkbenchError(
                "resample ablation needs the counterfactual run: pass "
                "resample=compute_resample_z(model, batch)"
            )
        return resample[:, :, layer, heads]
    if kind is AblationKind.ZERO:
        return None
    if means is None:
        raise WorkbenchError("mean ablation needs means: pass means=compute_head_means(...)")
    if per_position:
        if means.per_position is None:
            raise WorkbenchError(
                "per-position means need equal-length reference prompts; these differed"
            )
        return means.per_position[:, layer, heads]
    return means.averaged[layer, heads]


def replacement_z(
    z: Float[Tensor, "batch pos head_index d_head"],
    kind: AblationKind,
    means: HeadMeans | None,
    layer: int,
    per_position: bool = False,
) -> Float[Tensor, "batch pos head_index d_head"]:
    """What zero or mean ablation puts in place of every head's `z` at `layer`, shaped like
    `z` (attribution screening's `z_ablated`)."""
    fill = fill_for(kind, means, layer, list(range(z.shape[2])), per_position)
    if fill is None:
        return torch.zeros_like(z)
    fill = fill.to(device=z.device, dtype=z.dtype)
    if fill.ndim == 3:  # per position: [pos, head, d]
        if fill.shape[0] < z.shape[1]:
            raise WorkbenchError(
                f"per-position means cover {fill.shape[0]} positions but the input has "
                f"{z.shape[1]}; compute the means on prompts of this length"
            )
        return fill[: z.shape[1]][None].expand_as(z)
    return fill.expand_as(z)


def ablation_hooks(
    model: HookedModel,
    heads: Iterable[HeadSpec] | HeadSet | None,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    per_position: bool = False,
    resample: Tensor | None = None,
) -> list[tuple[str, object]]:
    """The `(hook_name, hook_fn)` pairs that ablate `heads`: one hook per touched layer.

    `resample` (`compute_resample_z`) supplies the replacement `z` for `kind="resample"`.
    """
    kind = AblationKind.parse(kind)
    head_set = HeadSet.of(model, heads)
    hooks = []
    for layer, layer_heads in head_set.by_layer().items():
        fill = fill_for(kind, means, layer, layer_heads, per_position, resample)
        idx = torch.tensor(layer_heads)  # moved to z.device inside the hook
        hooks.append((hook_z_name(layer), partial(_replace_heads_hook, heads=idx, fill=fill)))
    return hooks


@contextmanager
def ablated(
    model: HookedModel,
    heads: Iterable[HeadSpec] | HeadSet | None,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    per_position: bool = False,
    resample: Tensor | None = None,
) -> Iterator:
    """Run the body with `heads` ablated; the hooks are removed on exit, also on error.

    Example:
        >>> with ablated(model, ["L1H2", (0, 3)]):
        ...     logits = model(tokens)
    """
    hooks = ablation_hooks(model, heads, kind, means, per_position, resample)
    with model.hooks(fwd_hooks=hooks):
        yield model


def _mask_hook(
    z: Float[Tensor, "batch pos head_index d_head"],
    hook,
    keep: Float[Tensor, "n_masks head_index"],
    fill: Tensor | None,
):
    n_masks = keep.shape[0]
    zz = z.view(n_masks, -1, *z.shape[1:])  # (M, B, T, H, D)
    k = keep[:, None, None, :, None].to(device=z.device, dtype=z.dtype)
    if fill is None:
        return (zz * k).view_as(z)
    if fill.ndim == 4:  # resample: [batch, pos, head, d], the same for every mask
        f = _resample_fill(zz[0], fill.to(device=z.device))[None]
        return (zz * k + f * (1 - k)).view_as(z)
    f = fill.to(device=z.device, dtype=z.dtype)
    f = f[None, None, None] if f.ndim == 2 else f[None, None, : z.shape[1]]
    return (zz * k + f * (1 - k)).view_as(z)


def mask_hooks(
    model: HookedModel,
    masks: Float[Tensor, "n_masks layer head_index"],
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    per_position: bool = False,
    layers: Iterable[int] | None = None,
    resample: Tensor | None = None,
) -> list[tuple[str, object]]:
    """Hooks that ablate a different head set in each of `n_masks` copies of the batch.

    The input batch must be the original batch tiled `n_masks` times along dim 0 (mask-major:
    rows `[m * B:(m + 1) * B]` belong to mask `m`). `masks[m, l, h] = 1` means head `(l, h)`
    is ablated in copy `m`. Only layers where some mask ablates a head get a hook, restricted to
    `layers` when given (e.g. the layers a run that starts at layer `l` still computes).
    """
    kind = AblationKind.parse(kind)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if masks.ndim != 3 or tuple(masks.shape[1:]) != (n_layers, n_heads):
        raise WorkbenchError(
            f"masks must be [n_masks, n_layers={n_layers}, n_heads={n_heads}]; got "
            f"{tuple(masks.shape)}"
        )
    allowed = set(range(n_layers)) if layers is None else set(layers)
    hooks = []
    for layer in range(n_layers):
        if layer not in allowed or not bool(masks[:, layer].any()):
            continue
        fill = fill_for(kind, means, layer, list(range(n_heads)), per_position, resample)
        keep = 1.0 - masks[:, layer]
        hooks.append((hook_z_name(layer), partial(_mask_hook, keep=keep, fill=fill)))
    return hooks
