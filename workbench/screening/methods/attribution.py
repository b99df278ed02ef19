"""`attribution`: every head's first-order effect from one forward and one backward pass per
metric (`workbench.screening.attribution`): gradient x (ablated - clean) at `hook_z`.

An estimate: a CEL run checks it against exact screening when `check_attribution` is set and
reports their rank correlation.
"""

from __future__ import annotations

from workbench.screening.registry import ScreenCostInputs, ScreenMethod, register

# attribution's forward and backward pass per metric: on SmolLM2 (33 examples) its two
# metrics took about 9 forward-equivalents' time, its four 3.4-5.6 on a loaded machine
PASSES_PER_METRIC = 5.0
# the least a backward costs, in forwards: it runs back through every block's MLP, output
# projection and norms above each head's z (each z is a leaf of its own, so no attention
# pattern is differentiated); on SmolLM2 one took about one forward (2026-12-05)
LEAST_BACKWARD = 0.5


def _cost(inputs: ScreenCostInputs) -> tuple[float, float]:
    return 1.0 + LEAST_BACKWARD * inputs.n_metrics, PASSES_PER_METRIC * inputs.n_metrics


METHOD = register(ScreenMethod(
    "attribution", "workbench.screening.attribution:attribution_diffs",
    "gradient x (ablated - clean) at hook_z from one backward per metric (an estimate)",
    _cost, restarts=False, gradients=True, exact=False))
