"""`greedy`: forward selection over the candidate pool, one head per step, up to `max_size`.

A step that gains nothing can enable the next (a redundant pair), so it always takes
`max_size` steps; each step scores every pool head added to the current set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workbench.search.registry import CostInputs, Strategy, register

NAME = "greedy"


@dataclass(frozen=True)
class GreedySettings:
    """The greedy search has no settings of its own (it reads `max_size` from the space)."""


def greedy(space, settings: GreedySettings | Mapping | None = None) -> None:
    """Forward selection: add the pool head that gives the best set, up to max_size."""
    current: tuple = ()
    for _ in range(space.max_size):
        trials = [current + (h,) for h in space.candidates if h not in current]
        if not trials:
            return
        keys = space.score_sets(trials, NAME)
        current = tuple(sorted(trials[max(range(len(trials)), key=keys.__getitem__)]))


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    return 0.0, inputs.n_heads * inputs.config.max_size


STRATEGY = register(Strategy(
    NAME, greedy, "forward selection over the candidate pool, one head per step", _cost,
    ranked=True, settings_type=GreedySettings))
