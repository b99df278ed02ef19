"""`compressed_sensing`: random knockout masks over *all* heads, a cross-validated Lasso of
the masks' gain, then every set among the heads with the largest positive coefficients.

It needs no single-head screen and sees heads that only help jointly: a head of a redundant
pair gets a positive coefficient from the masks that also remove its partner (the method of
locuslab/llm-components, arXiv 2603.03335: ~100 masks, ~2 % of heads each, Lasso alpha
0.01, which `bench/peers.py` runs as a peer). The Lasso is solved here by FISTA, with the
objective of scikit-learn's `Lasso(alpha)`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.search.finalists import finalist_sets, n_sets
from workbench.search.registry import (
    FIELD_SETTINGS,
    CostInputs,
    Strategy,
    register,
    settings_as,
)

NAME = "compressed_sensing"


@dataclass(frozen=True)
class CompressedSensingSettings:
    """Compressed sensing's settings (`CELConfig` fields of the same names)."""

    top_m: int = 8  # heads with the largest coefficients searched
    n_masks: int | None = None  # knockout masks; None: `default_masks`
    knockout_p: float | None = None  # knockout probability; None: min(0.25, 5 / n)


def default_masks(n_heads: int) -> int:
    """Knockout masks when `n_masks` is not given: `4 n`, at least 64."""
    return max(64, 4 * n_heads)


def compressed_sensing(space, settings: CompressedSensingSettings | Mapping | None = None) -> None:
    """Random knockout masks over all heads, a Lasso of the gain on the masks, then
    exhaustive search among the `top_m` heads with the largest positive coefficients."""
    settings = settings_as(CompressedSensingSettings, settings)
    n_heads = space.n_heads
    p = settings.knockout_p or min(0.25, 5.0 / n_heads)
    n_masks = settings.n_masks or default_masks(n_heads)
    rng = np.random.default_rng([space.seed, 7])
    x = rng.random((n_masks, n_heads)) < p
    cfg = space.model.cfg
    heads = [(f // cfg.n_heads, f % cfg.n_heads) for f in range(n_heads)]
    sets = [[heads[j] for j in np.flatnonzero(row)] for row in x]
    space.evaluate(sets, NAME, rank=True)  # the measurements only rank heads
    target = space.regression_target
    coef = lasso_cv(x.astype(float), np.array(space.gains(sets, target)), seed=space.seed)
    order = [j for j in np.argsort(-coef, kind="stable") if coef[j] > 0]
    space.notes["cs_coefficients"] = dict(zip(space.head_names(heads[j] for j in order),
                                              (float(coef[j]) for j in order), strict=True))
    space.notes["cs_target"] = target
    pool = [heads[j] for j in order[: settings.top_m]]
    sets = finalist_sets(pool, space.max_size)
    if sets:
        space.score_sets(sets, NAME)


def _lasso(x: np.ndarray, y: np.ndarray, alpha: float, n_iter: int = 500) -> np.ndarray:
    """FISTA for `min_b 1/(2n) |y - x b|^2 + alpha |b|_1` on centred `x`, `y`."""
    n = x.shape[0]
    lipschitz = max(np.linalg.norm(x, 2) ** 2 / n, 1e-12)
    b = np.zeros(x.shape[1])
    z, t = b.copy(), 1.0
    for _ in range(n_iter):
        grad = x.T @ (x @ z - y) / n
        step = z - grad / lipschitz
        b_new = np.sign(step) * np.maximum(np.abs(step) - alpha / lipschitz, 0.0)
        t_new = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        z = b_new + (t - 1.0) / t_new * (b_new - b)
        b, t = b_new, t_new
    return b


def lasso_cv(
    x: np.ndarray, y: np.ndarray, n_alphas: int = 12, n_folds: int = 5, seed: int = 0
) -> np.ndarray:
    """Lasso coefficients of `y` on `x` (with intercept), the penalty chosen by k-fold CV."""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    n = len(y)
    if n < n_folds * 2:
        raise WorkbenchError(f"compressed sensing needs at least {n_folds * 2} masks; got {n}")
    xc, yc = x - x.mean(0), y - y.mean()
    alpha_max = lasso_alpha_max(x, y)
    if alpha_max == 0.0:
        return np.zeros(x.shape[1])
    alphas = alpha_max * np.logspace(0, -3, n_alphas)
    folds = np.random.default_rng([seed, 11]).permutation(n) % n_folds
    errors = np.zeros(n_alphas)
    for k in range(n_folds):
        tr, te = folds != k, folds == k
        mx, my = x[tr].mean(0), y[tr].mean()
        for i, alpha in enumerate(alphas):
            b = _lasso(x[tr] - mx, y[tr] - my, alpha)
            errors[i] += ((y[te] - my - (x[te] - mx) @ b) ** 2).sum()
    return _lasso(xc, yc, alphas[int(np.argmin(errors))])


def lasso_alpha_max(x: np.ndarray, y: np.ndarray) -> float:
    """The smallest penalty at which the Lasso of `y` on `x` (with intercept) zeroes every
    coefficient: `max_j |x_j' (y - mean y)| / n` over the centred columns."""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    return float(np.abs((x - x.mean(0)).T @ (y - y.mean())).max() / len(y))


def lasso(x: np.ndarray, y: np.ndarray, alpha: float, n_iter: int = 5000) -> np.ndarray:
    """Lasso coefficients of `y` on `x` (with intercept) at a fixed penalty `alpha`: the
    objective `1/(2n) |y - x b|^2 + alpha |b|_1` of scikit-learn's `Lasso(alpha)`, by FISTA.
    (`lasso_cv` chooses the penalty by cross-validation instead.)"""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    return _lasso(x - x.mean(0), y - y.mean(), alpha, n_iter)


def _cost(inputs: CostInputs, settings: Mapping) -> tuple[float, float]:
    config = inputs.config
    return (config.n_masks or default_masks(inputs.n_heads),
            n_sets(config.top_m, config.max_size))


STRATEGY = register(Strategy(
    NAME, compressed_sensing,
    "random knockouts of all heads, a cross-validated Lasso, then every set among its top_m",
    _cost, settings=tuple(FIELD_SETTINGS[n] for n in ("top_m", "n_masks", "knockout_p")),
    settings_type=CompressedSensingSettings,
    searched=lambda summary, config: list(summary["cs_coefficients"])[: config.top_m]))
