"""`gates`: learned hard-concrete head gates, rounded to finalists, then every set among them
scored exactly (`workbench.search.gate_training` trains them; the method and why it is built
so are in its docstring).

This module is the strategy's record: its settings, its cost, and where its code is. The
training imports torch, so the record names its function as a string and this module stays
light for the command line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.search.finalists import SCREEN_SHARE, default_budget, max_finalists, n_sets
from workbench.search.registry import FIELD_SETTINGS, CostInputs, Setting, Strategy, register

NAME = "gates"
# A forward plus backward pass over an example, in forward-equivalents (the backward's two
# matrix products per forward one; with frozen weights it needs only one, so 3 is an upper
# bound: the wall-time ratio measured 2.2-2.8 on the planted models).
FWD_BWD_COST = 3.0
DEFAULT_STEPS = 300

# How the gates are trained (defaults chosen on the planted models, `docs/recall.md`);
# `GateSettings` takes its defaults from here.
TRAINING = (
    Setting("steps", None, "Adam steps (default: 300, or fewer when half the search budget "
            "cannot pay for them)", low=1),
    Setting("batch_size", 8, "examples per step, each with its own gate sample", low=1),
    Setting("lr", 0.05, "Adam's learning rate on the gates' log-odds", kind=float, low=1e-12),
    Setting("penalty", 0.05, "weight of the L0 penalty toward removal, per head, in the "
            "target's units", kind=float, low=0.0),
    Setting("init", 1.0, "initial log-odds of a gate (1.0: open in about 5 samples of 6)",
            kind=float),
)
DEFAULTS = {s.name: s.default for s in TRAINING}
SETTINGS = (*TRAINING, FIELD_SETTINGS["search_budget"])


@dataclass(frozen=True)
class GateSettings:
    """The `gates` strategy's settings: how the gates are trained (`TRAINING`, each in
    `CELConfig.strategy_settings["gates"]`), and the search's budget and screening share.

    Args:
        steps: Adam steps; None: 300, or fewer when half the search budget cannot pay for
            them (the rest of the budget scores the rounded sets).
        batch_size: examples per step, each with its own gate sample.
        lr: Adam's learning rate on `log_alpha`.
        penalty: weight of the L0 penalty toward removal (per head, in the target's units).
        init: the initial `log_alpha` (1.0: a gate is open in about 5 samples of 6).
        search_budget: forward-equivalents of training and sets (a `CELConfig` field);
            None: `workbench.search.finalists.default_budget`, the interaction search's.
        screen_share: the finalists' share taken from single-head screening (a run keeps the
            default).
    """

    steps: int | None = DEFAULTS["steps"]
    batch_size: int = DEFAULTS["batch_size"]
    lr: float = DEFAULTS["lr"]
    penalty: float = DEFAULTS["penalty"]
    init: float = DEFAULTS["init"]
    search_budget: int | None = None
    screen_share: float = SCREEN_SHARE

    def __post_init__(self) -> None:
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise WorkbenchError(
                f"gate steps must be a positive integer or None; got {self.steps!r}"
            )
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise WorkbenchError(
                f"gate batch_size must be a positive integer; got {self.batch_size!r}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise WorkbenchError(f"gate lr must be a finite number > 0; got {self.lr!r}")
        if not (math.isfinite(self.penalty) and self.penalty >= 0):
            raise WorkbenchError(f"gate penalty must be a finite number >= 0; got {self.penalty!r}")
        if not math.isfinite(self.init):
            raise WorkbenchError(f"gate init (log_alpha) must be finite; got {self.init!r}")

    def training(self) -> dict:
        """The training settings (`TRAINING`'s names) and their values."""
        return {s.name: getattr(self, s.name) for s in TRAINING}


def training_steps(budget: int, n_examples: int, steps: int | None, batch_size: int,
                   extra: float = 0.0) -> tuple[int, float]:
    """`(steps, forward-equivalents of one step)`: `steps`, else as many of the default as
    half the budget pays for (less `extra`, the counterfactual forward of resample
    ablation)."""
    step_eq = FWD_BWD_COST * min(batch_size, n_examples) / n_examples
    return steps or min(DEFAULT_STEPS, int((budget / 2 - extra) // step_eq)), step_eq


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config, n = inputs.config, inputs.n_heads
    budget = config.search_budget or default_budget(n, config.max_size)
    steps, step_eq = training_steps(budget, max(1, inputs.n_select), settings["steps"],
                                    settings["batch_size"])
    training = steps * step_eq
    left = max(0, budget - math.ceil(training))
    return training, n_sets(max_finalists(left, config.max_size, n), config.max_size)


STRATEGY = register(Strategy(
    NAME, "workbench.search.gate_training:gate_search",
    "learned hard-concrete gates on the pool, rounded to finalists, every set among them",
    _cost, settings=SETTINGS, settings_type=GateSettings,
    searched=lambda summary, config: list(summary[NAME].get("finalists", []))))
