"""What scoring means to the rest of the workbench: the `Scorer` protocol, head sets as 0/1
masks (`masks_of`), and a custom metric's scores checked (`as_score_dict`).

A mask is a `[layer, head_index]` 0/1 tensor (1 = ablated). A scorer returns each example's
metrics with each mask's heads removed: `MaskScorer` (`workbench.scoring.scorer`) for any
hooked model, or the planted benchmark models' closed-form scorer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.compute import Compute
from workbench.errors import WorkbenchError
from workbench.heads import HeadSet
from workbench.hooked import HookedModel

CustomMetric = Callable[[object, object], "Tensor | Mapping[str, Tensor]"]


class Scorer(Protocol):
    """What the search, racing and confirmation need of a scorer: `MaskScorer`, or the
    planted benchmark models' closed-form scorer (`bench/planted.py`)."""

    model: object
    compute: Compute  # its `progress` shows bars in the racing loops that use the scorer

    def clean(self) -> dict[str, Tensor]:
        """Per-example scores of the unablated model, `{metric: [batch]}`."""
        ...

    def score(
        self,
        masks: Float[Tensor, "n_masks layer head_index"],
        progress: bool = False,
        desc: str = "masks",
        rows: Tensor | None = None,
    ) -> dict[str, Float[Tensor, "n_masks batch"]]:
        """Per-example scores with each mask's heads ablated (1 = ablated)."""
        ...


def masks_of(model: HookedModel, head_sets: Iterable) -> Float[Tensor, "n_sets layer head_index"]:
    """0/1 masks (1 = ablated) of head sets given as `HeadSet`s or head specs."""
    sets = [HeadSet.of(model, s) for s in head_sets]
    cfg = model.cfg
    masks = torch.zeros(len(sets), cfg.n_layers, cfg.n_heads)
    for i, s in enumerate(sets):
        for layer, head in s:
            masks[i, layer, head] = 1.0
    return masks.to(cfg.device)


def as_score_dict(out, where: str) -> dict[str, Tensor]:
    if isinstance(out, Tensor):
        out = {"metric": out}
    if not isinstance(out, Mapping) or not out:
        raise WorkbenchError(
            f"{where}: a custom metric must return a [batch] tensor or a dict of them; got "
            f"{type(out).__name__}"
        )
    scores = {}
    for name, v in out.items():
        if not isinstance(v, Tensor) or v.ndim != 1:
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise WorkbenchError(f"{where}: metric {name!r} must be a [batch] tensor; got {shape}")
        scores[str(name)] = v
    return scores
