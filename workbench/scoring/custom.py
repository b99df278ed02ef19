"""A custom metric scored under many masks (`MaskScorer` with `metric=`).

The metric runs the model itself, so each mask is one call of it under that mask's hooks. A
metric with a `masks_metric` attribute, `masks_metric(model, data, masks, ablation) ->
{name: [n_masks, batch]}`, scores several masks per call instead, as many as fill about
`JOINT_ROWS` rows of masks x examples, wherever the ablation is zero or averaged means (a
hook can then tell rows apart by their mask alone): a generation task decodes the masks'
rows together (`workbench.metrics.generation.generation_masks_metric`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from workbench.ablation import Ablation
from workbench.hooked import HookedModel
from workbench.scoring.interface import CustomMetric, as_score_dict

# Rows of masks x examples one `masks_metric` call scores: a generation task decodes them in
# groups of `ROWS_PER_PASS` (64), so four full groups where the examples allow.
JOINT_ROWS = 256


def masks_per_call(metric: CustomMetric, data, ablation: Ablation) -> int:
    """How many masks one call of `metric` scores: 1, or as many as fill `JOINT_ROWS` rows
    for a metric with a `masks_metric` and an ablation that does not depend on the row."""
    joint = getattr(metric, "masks_metric", None)
    if joint is None or ablation.resample is not None or ablation.per_position:
        return 1
    return max(1, JOINT_ROWS // max(1, len(data)))


def score_metric(model: HookedModel, metric: CustomMetric, data, masks: Tensor,
                 out: dict[str, Tensor], bar, ablation: Ablation) -> None:
    """Fill `out[name][i]` with `metric`'s scores on `data` under mask `i`, for every mask."""
    step = masks_per_call(metric, data, ablation)
    with torch.no_grad():
        for i in range(0, masks.shape[0], step):
            part = masks[i : i + step]
            if step > 1:
                scores = metric.masks_metric(model, data, part, ablation)
            else:
                with model.hooks(fwd_hooks=ablation.mask_hooks(model, part)):
                    scores = {name: v[None] for name, v in
                              as_score_dict(metric(model, data), "ablated run").items()}
            for name, v in scores.items():
                if name in out:
                    out[name][i : i + len(part)] = v
            bar.update(len(part))
