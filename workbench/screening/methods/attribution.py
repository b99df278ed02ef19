"""`attribution`: every head's first-order effect from one forward and one backward pass per
metric (`workbench.screening.attribution`): gradient x (ablated - clean) at `hook_z`.

An estimate: a CEL run checks it against exact screening when `check_attribution` is set and
reports their rank correlation.
"""

from __future__ import annotations

from workbench.screening.registry import ScreenCostInputs, ScreenMethod, register

# attribution's forward and backward pass per metric, through the full unembedding at every
# position: on SmolLM2 (33 examples) its two metrics took about 9 forward-equivalents' time
PASSES_PER_METRIC = 5.0


def _cost(inputs: ScreenCostInputs) -> tuple[float, float]:
    cost = PASSES_PER_METRIC * inputs.n_metrics
    return cost, cost


METHOD = register(ScreenMethod(
    "attribution", "workbench.screening.attribution:attribution_diffs",
    "gradient x (ablated - clean) at hook_z from one backward per metric (an estimate)",
    _cost, restarts=False, gradients=True, exact=False))
