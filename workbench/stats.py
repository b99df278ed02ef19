"""Uncertainty for CEL: paired bootstrap intervals, standard errors, percentiles, rank agreement.

Every effect in the workbench is a mean over examples of a *paired* difference (the same
example scored with and without some heads), so its uncertainty comes from resampling
examples: a paired bootstrap draws `n` examples with replacement and recomputes the mean of
the differences. Resampling is done with multinomial count weights shared by all rows, so
the intervals of a thousand head sets cost one matrix product, on the model's device.

Conventions: intervals are percentile intervals at level `ci` (default 95 %); NaN entries
(e.g. `logit_diff` on an example without a wrong answer) are left out of every mean; the
standard error is `std(ddof=1) / sqrt(n)`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError


def mean_se(diffs: Float[Tensor, "n_rows batch"]) -> tuple[Tensor, Tensor]:
    """NaN-aware mean and standard error of each row."""
    valid = ~torch.isnan(diffs)
    n = valid.sum(-1).to(diffs.dtype)
    x = torch.where(valid, diffs, torch.zeros_like(diffs))
    mean = x.sum(-1) / n
    dev = torch.where(valid, diffs - mean[:, None], torch.zeros_like(diffs))
    var = (dev**2).sum(-1) / (n - 1).clamp(min=1)
    se = torch.where(n > 1, (var / n).sqrt(), torch.full_like(mean, float("nan")))
    return mean, se


def bootstrap_weights(
    n_examples: int, n_boot: int, seed: int, device=None
) -> Float[Tensor, "n_boot batch"]:
    """How often each example is drawn in each of `n_boot` resamples (rows sum to `n_examples`)."""
    if n_examples < 1:
        raise WorkbenchError("a bootstrap needs at least one example")
    if n_boot < 1:
        raise WorkbenchError(f"n_boot must be >= 1; got {n_boot}")
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.randint(0, n_examples, (n_boot, n_examples), generator=g)  # (n_boot, n)
    counts = torch.zeros(n_boot, n_examples).scatter_add_(1, idx, torch.ones(n_boot, n_examples))
    return counts.to(device)


def paired_bootstrap(
    diffs: Float[Tensor, "n_rows batch"], n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Percentile interval of the mean paired difference of each row.

    Args:
        diffs: per-example differences (ablated minus clean), one row per head or head set.
        n_boot: number of resamples of the examples.
        seed: seeds the resampling; every row sees the same resamples.
        ci: the interval's coverage.

    Returns:
        `(lo, hi)`, each of shape `[n_rows]`.
    """
    if not 0.0 < ci < 1.0:
        raise WorkbenchError(f"ci must be in (0, 1); got {ci}")
    w = bootstrap_weights(diffs.shape[-1], n_boot, seed, diffs.device).to(diffs.dtype)
    valid = (~torch.isnan(diffs)).to(diffs.dtype)
    x = torch.nan_to_num(diffs, nan=0.0)
    means = (x @ w.T) / (valid @ w.T)  # (n_rows, n_boot); NaN when a resample has no valid row
    alpha = (1.0 - ci) / 2.0
    q = torch.tensor([alpha, 1.0 - alpha], dtype=diffs.dtype, device=diffs.device)
    lo_hi = torch.nanquantile(means, q, dim=-1)  # (2, n_rows)
    return lo_hi[0], lo_hi[1]


def effect_summary(
    diffs: Float[Tensor, "n_rows batch"], n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> dict[str, Tensor]:
    """`{"": mean, "_se": se, "_lo": lo, "_hi": hi}`: the suffixes of a `d_<metric>` column."""
    mean, se = mean_se(diffs)
    lo, hi = paired_bootstrap(diffs, n_boot, seed, ci)
    return {"": mean, "_se": se, "_lo": lo, "_hi": hi}


def _non_nan(samples) -> np.ndarray:
    s = np.asarray(samples, dtype=float)
    return s[~np.isnan(s)]


def percentile_of(value: float, samples) -> float:
    """Percentile rank of `value` among `samples` in [0, 100]; ties count half."""
    s = _non_nan(samples)
    if len(s) == 0 or np.isnan(value):
        return float("nan")
    return float(100.0 * ((s < value).sum() + 0.5 * (s == value).sum()) / len(s))


def share_at_least(value: float, samples) -> float:
    """Share of `samples` at least `value`, in [0, 1]; NaNs dropped, as in `percentile_of`."""
    s = _non_nan(samples)
    if len(s) == 0 or np.isnan(value):
        return float("nan")
    return float((s >= value).mean())


def rank_correlation(a, b) -> float:
    """Spearman correlation (Pearson on average ranks), ignoring pairs with a NaN."""
    sa, sb = pd.Series(np.asarray(a, dtype=float)), pd.Series(np.asarray(b, dtype=float))
    keep = sa.notna() & sb.notna()
    if keep.sum() < 3:
        return float("nan")
    return float(sa[keep].rank().corr(sb[keep].rank()))
