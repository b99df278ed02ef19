"""`exhaustive`: every set of size 1..`max_size` among the top `top_m` screening candidates.

Exact and complete within its pool, and blind outside it: a head with no single effect (a
member of a redundant pair) enters only if the pool is topped up to reach it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import combinations

from workbench.search.finalists import n_sets
from workbench.search.registry import (
    FIELD_SETTINGS,
    CostInputs,
    Strategy,
    register,
    settings_as,
)

NAME = "exhaustive"


@dataclass(frozen=True)
class ExhaustiveSettings:
    """The exhaustive search's settings (`CELConfig` fields of the same names)."""

    top_m: int = 8  # screening candidates searched


def exhaustive(space, settings: ExhaustiveSettings | Mapping | None = None) -> None:
    """Every set of size 1..max_size among the first `top_m` candidates."""
    pool = space.candidates[: settings_as(ExhaustiveSettings, settings).top_m]
    sets = [c for k in range(1, space.max_size + 1) for c in combinations(pool, k)]
    space.score_sets(sets, NAME)


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config = inputs.config
    return 0.0, n_sets(min(config.top_m, inputs.n_heads), config.max_size)


STRATEGY = register(Strategy(
    NAME, exhaustive, "every set of up to max_size heads among the top_m screening candidates",
    _cost, ranked=True, certain=True,
    settings=(FIELD_SETTINGS["top_m"],), settings_type=ExhaustiveSettings,
    searched=lambda summary, config: list(summary["candidates"][: config.top_m])))
