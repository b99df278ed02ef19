"""`interaction` (the default): random knockouts over the pool, main effects, then every set
among the finalists scored exactly.

Removing two heads is not the sum of removing each (backup heads, saturation), and a member
of a redundant pair shows no single effect. Random masks that knock out ~30 % of the pool at
once remove pairs and triples together often enough for a regression on the masks to see
their members; the sets among the heads it ranks highest are then scored exactly, so
interactions are verified, not modelled. On planted models (`bench/recall.py`) it is the
only strategy that finds OR pairs and triples, at 144 to 1024 heads, within `2.5 n + 500`
masks (half that when the sets searched have at most 2 heads).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from workbench.errors import WorkbenchError
from workbench.search.finalists import (
    KNOCKOUT_EXAMPLES,
    SCREEN_SHARE,
    default_budget,
    finalist_sets,
    max_finalists,
    n_sets,
    pick_finalists,
)
from workbench.search.registry import (
    FIELD_SETTINGS,
    CostInputs,
    Strategy,
    register,
    settings_as,
)

NAME = "interaction"
KNOCKOUT_P = 0.3  # each pool head is knocked out of a mask with this probability


@dataclass(frozen=True)
class InteractionSettings:
    """The interaction search's settings (`CELConfig` fields of the same names, but
    `screen_share`, which a run keeps at its default)."""

    n_masks: int | None = None  # knockout masks; None: `knockout_masks`
    knockout_p: float | None = None  # each pool head's knockout probability; None: KNOCKOUT_P
    search_budget: int | None = None  # None: `default_budget`
    knockout_examples: int | None = KNOCKOUT_EXAMPLES  # a raced knockout's; None: slice 1
    screen_share: float = SCREEN_SHARE  # finalists taken from single-head screening


def knockout_masks(n_heads: int, budget: int) -> int:
    """The knockout masks when `n_masks` is not given: `4 n`, at most half the budget, at
    least 64."""
    return max(64, min(4 * n_heads, budget // 2))


def _main_effects(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Least-squares main effects of 0/1 knockouts `x` on `y` (with intercept), a small ridge
    keeping the solve defined when a column is constant or masks are few."""
    finite = np.isfinite(y)
    x, y = x[finite].astype(float), y[finite]
    xc, yc = x - x.mean(0), y - y.mean()
    gram = xc.T @ xc
    lam = ridge * max(float(np.trace(gram)) / max(x.shape[1], 1), 1e-12)
    return np.linalg.solve(gram + lam * np.eye(x.shape[1]), xc.T @ yc)


def guard_effects(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> tuple[np.ndarray,
                                                                               np.ndarray]:
    """`_main_effects` of `y` (a guard metric's gains) with their standard errors, from the
    residual variance of the same ridge fit: `se_j = sigma sqrt([(G + lam I)^-1]_jj)`."""
    finite = np.isfinite(y)
    x, y = x[finite].astype(float), y[finite]
    xc, yc = x - x.mean(0), y - y.mean()
    gram = xc.T @ xc
    lam = ridge * max(float(np.trace(gram)) / max(x.shape[1], 1), 1e-12)
    inv = np.linalg.inv(gram + lam * np.eye(x.shape[1]))
    coef = inv @ (xc.T @ yc)
    dof = max(1, len(y) - x.shape[1] - 1)
    sigma2 = float(((yc - xc @ coef) ** 2).sum()) / dof
    return coef, np.sqrt(np.maximum(sigma2 * np.diag(inv), 0.0))


def guarded_order(coef: np.ndarray, guard_fits: list[tuple[np.ndarray, np.ndarray, float]],
                  alpha: float = 0.05) -> list[int]:
    """The heads with a positive main effect on the target, best first; with guards
    (`guard_fits`: each guard's `(effects, standard errors, tolerance)` from `guard_effects`),
    a head whose main effect on a guard metric is clearly below `-tolerance` (its upper
    bound, Bonferroni-corrected over the heads and guards at level `alpha`, is below it)
    ranks after every other: a head that raises the objective only by lowering a guard, such
    as one that pushes both answers down, comes after every head that raises it without.
    Only a clear fall demotes a head: most heads' guard effects are 0 plus regression noise,
    and demoting on the sign of noise pushed planted pair and triple members out of the
    finalists (`docs/recall.md`)."""
    order = [int(j) for j in np.argsort(-coef, kind="stable") if coef[j] > 0]
    if not guard_fits:
        return order
    z = NormalDist().inv_cdf(1 - alpha / max(1, len(coef) * len(guard_fits)))
    falls = np.zeros(len(coef), dtype=bool)
    for effects, se, tolerance in guard_fits:
        falls |= effects + z * se < -tolerance
    return [j for j in order if not falls[j]] + [j for j in order if falls[j]]


def interaction(space, settings: InteractionSettings | Mapping | None = None) -> None:
    """Interaction-aware search: random knockouts over the pool, then exact verification.

    1. The pool is `space.pool` (heads whose single removal does not clearly hurt, see
       `search_pool`), else every head. Heads that clearly hurt would only add noise and
       cannot belong to an enhancing set.
    2. `n_masks` random masks (default `min(4 n, budget / 2)`) knock out each pool head with
       probability `knockout_p` (default 0.3): every pair is then removed together in
       `n_masks p^2` masks and every triple in `n_masks p^3` (at 144 heads, 576 masks: 52 and
       16), so a member of an OR pair gets a main effect of `G p` and of an OR triple `G p^2`
       (Bernoulli knockouts, least squares on the masks' gain: the regression target as in
       `compressed_sensing`).
    3. `K` finalists, `K` as large as the remaining budget allows for every set of size
       1..`max_size`: the first quarter (`screen_share`) are single-head screening's top
       candidates in the pool, the rest the pool heads with the largest positive main effects
       (`pick_finalists`). Every such set is scored exactly: interactions among finalists are
       verified, not modelled. Screening's share is there because a knockout removes ~30 %
       of the pool at once, which on a real model is far from removing one head: on SmolLM2
       greater_than the best single head (screening's first candidate, +0.16 prob_diff held
       out) was not among the knockouts' top 20 (`docs/real-model-cel.md`). On planted
       models the share changes no recall (`docs/recall.md`). Under `run_cel`'s raced
       screening a head that does not hurt is ranked on the first slice of examples.
    """
    settings = settings_as(InteractionSettings, settings)
    pool = space.pool_heads()
    budget = space.search_budget(settings.search_budget)
    if not pool:
        space.notes[NAME] = {"pool": 0}
        return
    p = settings.knockout_p or KNOCKOUT_P
    if not 0.0 < p < 1.0:
        raise WorkbenchError(f"knockout_p must be in (0, 1); got {p}")
    n_masks = settings.n_masks or knockout_masks(space.n_heads, budget)
    rng = np.random.default_rng([space.seed, 13])
    x = rng.random((n_masks, len(pool))) < p
    x[~x.any(1), 0] = True  # no empty mask: the clean run is no measurement
    sets = [[pool[j] for j in np.flatnonzero(row)] for row in x]
    # the knockouts only rank heads for the finalists: one slice of examples each when
    # adaptive, and at the search's lower precision where it has one (`space.ranker`)
    rows = space.knockout_rows(settings.knockout_examples) if space.adaptive else None
    space.evaluate(sets, NAME, rows=rows, rank=True)
    knockout_eq = space.forward_eq
    target = space.regression_target
    coef = _main_effects(x, np.array(space.gains(sets, target)))
    order = guarded_order(coef, [(*guard_effects(x, np.array(space.gains(sets, g.metric))),
                                  g.tolerance) for g in space.guards], 1.0 - space.ci)
    left = budget - n_masks
    if left < 1:
        raise WorkbenchError(
            f"search budget {budget} leaves no room for finalist sets after {n_masks} knockout "
            f"masks (at least 64); give a budget of at least {n_masks + 1}, or fewer masks "
            "(n_masks)"
        )
    in_pool = set(pool)
    screened = [h for h in space.candidates if h in in_pool]
    knocked = [pool[j] for j in order]
    k = max_finalists(left, space.max_size, len(set(screened) | set(knocked)))
    finalists = pick_finalists(screened, knocked, k, settings.screen_share)
    effects = dict(zip(space.head_names(pool[j] for j in order[: max(k, 20)]),
                       (float(coef[j]) for j in order[: max(k, 20)]), strict=True))
    space.notes[NAME] = {
        "pool": len(pool),
        "n_masks": n_masks,
        "knockout_p": p,
        "target": target,
        "finalists": space.head_names(finalists),
        "effects": effects,
        "knockout_examples": space.n_examples if rows is None else len(rows),
    }
    sets = finalist_sets(finalists, space.max_size)
    if sets:
        space.score_sets(sets, NAME)
    space.notes[NAME]["forward_eq"] = {
        "knockouts": knockout_eq, "finalists": space.forward_eq - knockout_eq}


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config, n = inputs.config, inputs.n_heads
    budget = config.search_budget or default_budget(n, config.max_size)
    masks = config.n_masks or knockout_masks(n, budget)
    finalists = max_finalists(max(0, budget - masks), config.max_size, n)
    # the knockouts (~30 % of the pool each) restart near the bottom: a whole forward each
    return masks * inputs.knockout, n_sets(finalists, config.max_size)


STRATEGY = register(Strategy(
    NAME, interaction,
    "random knockouts over the pool, main effects, then every set among the finalists "
    "(the default)", _cost, settings_type=InteractionSettings,
    settings=tuple(FIELD_SETTINGS[n] for n in ("n_masks", "knockout_p", "search_budget",
                                               "knockout_examples")),
    searched=lambda summary, config: list(summary[NAME].get("finalists", []))))
