"""Bayes-optimal log-odds of the label, in closed form, to check that training reaches the
global optimum of the joint objective.

Given the cue, `y` is independent of the filler tokens, and `u_s` and `u_c` are independent
given `(y, t)`. So the posterior log-odds of `y = +1` split into a shared and a conflict term:

    shared:    log N(u_s; mu_s, s^2) - log N(u_s; -mu_s, s^2) = 2 mu_s u_s / s^2
    conflict:  log sum_t P(t | cue) N(u_c; t mu_c, s^2) - log sum_t P(t | cue) N(u_c; -t mu_c, s^2)

With the noisy cue `m ~ N(gamma t, 1)` the task posterior has logit `2 gamma m`, and with
`z = mu_c u_c / s^2` the conflict term is `log cosh(z + gamma m) - log cosh(z - gamma m)`: about
`2 z tanh(gamma m)`, a product of the feature and a soft task guess, which is what a pair of
heads gated in opposite directions by the cue can express. A clean cue gives `2 t z`; no cue
gives 0 (the conflicting feature is useless on average).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from workbench.theory.data import Batch


def _log_cosh(a: Tensor) -> Tensor:
    a = a.abs()
    return a + torch.log1p(torch.exp(-2 * a)) - math.log(2)


def _conflict_noisy(z, batch, gamma):
    return _log_cosh(z + gamma * batch.m) - _log_cosh(z - gamma * batch.m)


def _conflict_clean(z, batch, gamma):
    return 2 * batch.task * z


def _conflict_none(z, batch, gamma):
    return torch.zeros_like(z)


# cue kind -> the conflict token's log-odds term (keys match `workbench.theory.data.CUES`)
CONFLICT_LOG_ODDS: dict[str, Callable[..., Tensor]] = {
    "noisy": _conflict_noisy,
    "clean": _conflict_clean,
    "none": _conflict_none,
}


def bayes_log_odds(batch: Batch, config) -> Float[Tensor, " batch"]:
    """`log P(y = +1 | X, q) - log P(y = -1 | X, q)` for every sample, in nats.

    Args:
        batch: samples from `make_batch` (uses `u_s`, `u_c`, `m` and `task`).
        config: the `TheoryConfig` that generated them.
    """
    var = config.sigma ** 2
    shared = 2 * config.mu_shared * batch.u_s / var
    z = config.mu_conflict * batch.u_c / var
    return shared + CONFLICT_LOG_ODDS[config.cue](z, batch, config.cue_strength)


def logistic_loss(logits: Tensor, y: Tensor) -> Tensor:
    """Per-sample logistic loss `log(1 + exp(-y f))` in nats (broadcasts over leading axes)."""
    return F.softplus(-y * logits)


def bayes_loss(batch: Batch, config) -> Float[Tensor, ""]:
    """Mean logistic loss of the Bayes-optimal predictor on `batch` (the floor of any model)."""
    return logistic_loss(bayes_log_odds(batch, config), batch.y).mean()
