"""`exact`: one masked pass per head through `MaskScorer` with prefix reuse: each ablated
run restarts at the head's layer from the cached residual (nothing before it can change).

Equal to one full `run_with_hooks` per head up to float error, at about 0.4 of its cost for
GPT-2-sized models (`bench/screen.py`). Raced: a head stops being scored once what the search
needs of it is decided (`workbench.racing`).
"""

from __future__ import annotations

from workbench.screening.registry import ScreenCostInputs, ScreenMethod, register


def _cost(inputs: ScreenCostInputs) -> tuple[float, float]:
    return inputs.n_heads * inputs.first, float(inputs.n_heads)


METHOD = register(ScreenMethod(
    "exact", "workbench.screening.screen:exact_diffs",
    "one masked pass per head, restarted at its layer (exact)", _cost))
