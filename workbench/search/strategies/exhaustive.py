"""`exhaustive`: every set of size 1..`max_size` among the top `top_m` screening candidates.

Exact and complete within its pool, and blind outside it: a head with no single effect (a
member of a redundant pair) enters only if the pool is topped up to reach it.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

from workbench.search.finalists import n_sets
from workbench.search.registry import CostInputs, Strategy, register

NAME = "exhaustive"


def exhaustive(space, settings: Mapping | None = None) -> None:
    """Every set of size 1..max_size among the first `top_m` candidates."""
    pool = space.candidates[: space.top_m]
    sets = [c for k in range(1, space.max_size + 1) for c in combinations(pool, k)]
    space.score_sets(sets, NAME)


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config = inputs.config
    return 0.0, n_sets(min(config.top_m, inputs.n_heads), config.max_size)


STRATEGY = register(Strategy(
    NAME, exhaustive, "every set of up to max_size heads among the top_m screening candidates",
    _cost, ranked=True, certain=True,
    searched=lambda summary, config: list(summary["candidates"][: config.top_m])))
