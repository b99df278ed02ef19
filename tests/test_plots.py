"""The CEL plots: the heatmap's axes are layer and head indices, so their ticks are integers."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from workbench.plots import heads_heatmap
from workbench.results import CELConfig, CELResult
from workbench.tables import head_name


def _result(n_layers: int, n_heads: int) -> CELResult:
    layer, head = np.divmod(np.arange(n_layers * n_heads), n_heads)
    heads = pd.DataFrame(
        {
            "layer": layer,
            "head": head,
            "head_name": [head_name(int(l), int(h)) for l, h in zip(layer, head, strict=True)],
            "d_accuracy": np.random.default_rng(0).normal(0.0, 0.1, len(layer)),
            "candidate": np.arange(len(layer)) < 2,
        }
    )
    return CELResult(config=CELConfig(model="m", task="t", objective="accuracy"), heads=heads)


def _shown_ticks(axis, lo: float, hi: float) -> list[tuple[float, str]]:
    """(location, label) of the ticks drawn: matplotlib draws only those inside the view."""
    pairs = zip(axis.get_majorticklocs(), axis.get_majorticklabels(), strict=True)
    return [(loc, t.get_text()) for loc, t in pairs if lo <= loc <= hi]


@pytest.mark.parametrize(("n_layers", "n_heads"), [(3, 5), (1, 12), (1, 1), (2, 4), (48, 16)])
def test_heatmap_ticks_are_layer_and_head_indices(n_layers, n_heads):
    fig = heads_heatmap(_result(n_layers, n_heads))
    fig.savefig(io.BytesIO(), format="png")  # a full draw, so the tick labels are formatted
    (ax,) = [a for a in fig.axes if a.get_xlabel() == "head"]
    for axis, limits, n in (
        (ax.xaxis, ax.get_xlim(), n_heads),
        (ax.yaxis, ax.get_ylim(), n_layers),
    ):
        ticks = _shown_ticks(axis, *sorted(limits))
        assert ticks, f"no ticks on the {axis.axis_name} axis"
        for loc, label in ticks:
            value = int(label.replace("\N{MINUS SIGN}", "-"))  # ValueError on '0.5'
            assert value == loc and 0 <= value < n, (axis.axis_name, loc, label)
