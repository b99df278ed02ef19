"""`naive`: the reference, one full `run_with_hooks` over the whole model per head with full
logits. For tests and benchmarks; CEL runs use `exact`, which equals it."""

from __future__ import annotations

from workbench.screening.registry import ScreenCostInputs, ScreenMethod, register


def _cost(inputs: ScreenCostInputs) -> tuple[float, float]:
    return inputs.n_heads * inputs.first, float(inputs.n_heads)


METHOD = register(ScreenMethod(
    "naive", "workbench.screening.screen:naive_diffs",
    "one full forward per head (the slow reference)", _cost, restarts=False, cel=False))
