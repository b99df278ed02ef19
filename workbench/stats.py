"""Uncertainty for CEL: paired bootstrap intervals, standard errors, percentiles, rank agreement.

Every effect in the workbench is a mean over examples of a *paired* difference (the same
example scored with and without some heads), so its uncertainty comes from resampling
examples: a paired bootstrap draws `n` examples with replacement and recomputes the mean of
the differences. Resampling is done with multinomial count weights shared by all rows, so
the intervals of a thousand head sets cost one matrix product, on the model's device.

Conventions: intervals are percentile intervals at level `ci` (default 95 %); NaN entries
(e.g. `logit_diff` on an example without a wrong answer, or an example a race did not score,
see `workbench.racing`) are left out of every mean, and `n` counts the examples left; the
standard error is `std(ddof=1) / sqrt(n)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class Stats:
    """How intervals and p-values are computed.

    Attributes:
        n_boot: paired bootstrap resamples.
        ci: the intervals' coverage (and the level racing's looks are corrected to).
        seed: seeds the resamples, the sign flips and the racing order.
        n_flips: sign patterns of the sign-flip p-values when there are more than that.
    """

    n_boot: int = 1000
    ci: float = 0.95
    seed: int = 0
    n_flips: int = 10000

    def __post_init__(self) -> None:
        for name, low in (("n_boot", 1), ("seed", 0), ("n_flips", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise WorkbenchError(f"{name} must be an integer >= {low}; got {value!r}")
        if not 0.0 < self.ci < 1.0:
            raise WorkbenchError(f"ci must be in (0, 1); got {self.ci}")


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
    diffs: Float[Tensor, "n_rows batch"], n_boot: int = 1000, seed: int = 0, ci: float = 0.95,
    groups=None,
) -> dict[str, Tensor]:
    """`{"": mean, "_se": se, "_lo": lo, "_hi": hi, "_n": n}`: the suffixes of a `d_<metric>`
    column; `n` is the number of examples each row's numbers rest on (its non-NaN entries).
    With `groups` (per-example cluster labels) the interval resamples clusters
    (`clustered_bootstrap`), else examples (`paired_bootstrap`)."""
    mean, se = mean_se(diffs)
    if groups is None:
        lo, hi = paired_bootstrap(diffs, n_boot, seed, ci)
    else:
        lo, hi = clustered_bootstrap(diffs, groups, n_boot, seed, ci)
    return {"": mean, "_se": se, "_lo": lo, "_hi": hi, "_n": example_counts(diffs)}


def example_counts(diffs: Float[Tensor, "n_rows batch"]) -> Tensor:
    """The examples each row rests on: its non-NaN entries (an integer tensor `[n_rows]`)."""
    return (~torch.isnan(diffs)).sum(-1)


def _non_nan(samples) -> np.ndarray:
    s = np.asarray(samples, dtype=float)
    return s[~np.isnan(s)]


# Gains within this of each other are ties for `percentile_of` and `share_at_least`: the same
# head set scored in two passes (a random set that is the found set, scored restarted in the
# baseline and with a shared prefix in confirmation) differs by the float error of batching,
# ~1e-5 on SmolLM2 (`docs/speed.md`), which must not move a percentile.
TIE_ATOL = 1e-5


def percentile_of(value: float, samples) -> float:
    """Percentile rank of `value` among `samples` in [0, 100]; ties (within `TIE_ATOL`)
    count half."""
    s = _non_nan(samples)
    if len(s) == 0 or np.isnan(value):
        return float("nan")
    tie = np.abs(s - value) <= TIE_ATOL
    return float(100.0 * ((s < value) & ~tie).sum() + 50.0 * tie.sum()) / len(s)


def n_at_least(value: float, samples) -> int:
    """How many of `samples` are at least `value` (within `TIE_ATOL`); NaNs dropped."""
    return int((_non_nan(samples) >= value - TIE_ATOL).sum())


def share_at_least(value: float, samples) -> float:
    """Share of `samples` at least `value` (within `TIE_ATOL`, `n_at_least`), in [0, 1]; NaNs
    dropped, as in `percentile_of`."""
    s = _non_nan(samples)
    if len(s) == 0 or np.isnan(value):
        return float("nan")
    return n_at_least(value, s) / len(s)


def rank_correlation(a, b) -> float:
    """Spearman correlation (Pearson on average ranks), ignoring pairs with a NaN; tensors on
    any device."""
    a, b = (x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in (a, b))
    sa, sb = pd.Series(np.asarray(a, dtype=float)), pd.Series(np.asarray(b, dtype=float))
    keep = sa.notna() & sb.notna()
    if keep.sum() < 3:
        return float("nan")
    return float(sa[keep].rank().corr(sb[keep].rank()))


# ---------------------------------------------------------------------------------------------
# Clusters, tests and multiple comparisons


def group_index(groups) -> Tensor:
    """Integer cluster ids `[batch]` from per-example group labels; a None label is a cluster
    of its own (an example with no group shares nothing with the others)."""
    ids: dict = {}
    out = []
    for i, g in enumerate(groups):
        key = ("__alone__", i) if g is None else ("group", g)
        out.append(ids.setdefault(key, len(ids)))
    return torch.tensor(out, dtype=torch.long)


def cluster_bootstrap_weights(
    groups: Tensor, n_boot: int, seed: int, device=None
) -> Float[Tensor, "n_boot batch"]:
    """Bootstrap weights that resample whole clusters: each resample draws `G` clusters with
    replacement and every example weighs as often as its cluster was drawn.

    Args:
        groups: `[batch]` cluster ids `0..G-1` (see `group_index`).
    """
    if n_boot < 1:
        raise WorkbenchError(f"n_boot must be >= 1; got {n_boot}")
    groups = torch.as_tensor(groups, dtype=torch.long).cpu()
    n_groups = int(groups.max()) + 1 if len(groups) else 0
    if n_groups < 1:
        raise WorkbenchError("a bootstrap needs at least one example")
    g = torch.Generator().manual_seed(int(seed))
    idx = torch.randint(0, n_groups, (n_boot, n_groups), generator=g)  # (n_boot, G)
    counts = torch.zeros(n_boot, n_groups).scatter_add_(1, idx, torch.ones(n_boot, n_groups))
    return counts[:, groups].to(device)  # (n_boot, batch)


def clustered_bootstrap(
    diffs: Float[Tensor, "n_rows batch"],
    groups,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[Tensor, Tensor]:
    """Percentile interval of each row's mean paired difference, resampling clusters (e.g. the
    examples that share a template) rather than examples. Examples of one cluster are not
    independent, so resampling them one by one understates the spread.

    Args:
        diffs: per-example differences, one row per head set.
        groups: per-example labels or `[batch]` ids (None labels: clusters of one).

    Returns:
        `(lo, hi)`, each `[n_rows]`.
    """
    if not 0.0 < ci < 1.0:
        raise WorkbenchError(f"ci must be in (0, 1); got {ci}")
    ids = groups if isinstance(groups, Tensor) else group_index(groups)
    if len(ids) != diffs.shape[-1]:
        raise WorkbenchError(
            f"groups has {len(ids)} labels for {diffs.shape[-1]} examples; expected one each"
        )
    w = cluster_bootstrap_weights(ids, n_boot, seed, diffs.device).to(diffs.dtype)
    valid = (~torch.isnan(diffs)).to(diffs.dtype)
    x = torch.nan_to_num(diffs, nan=0.0)
    means = (x @ w.T) / (valid @ w.T)  # (n_rows, n_boot)
    alpha = (1.0 - ci) / 2.0
    q = torch.tensor([alpha, 1.0 - alpha], dtype=diffs.dtype, device=diffs.device)
    lo_hi = torch.nanquantile(means, q, dim=-1)
    return lo_hi[0], lo_hi[1]


def sign_flip_pvalue(
    diffs, groups=None, n_flips: int = 10000, seed: int = 0, alternative: str = "greater"
) -> float:
    """p-value of "the mean paired difference is > 0" (or `"two-sided"`: `!= 0`) by flipping
    the sign of each cluster's total (each example is its own cluster when `groups` is None).

    Under the null the differences of a cluster are symmetric about 0, so every sign pattern
    of the cluster totals is equally likely: with `G` clusters the test is exact, needs no
    normality and stays valid with few clusters, where a t-test or a bootstrap p-value is
    anti-conservative. All `2^G` patterns are enumerated when there are at most `n_flips`,
    otherwise `n_flips` random ones are drawn (p = (1 + hits) / (1 + n_flips)). A set whose
    held-out differences are all 0 gets p = 1. NaN differences are dropped.
    """
    if alternative not in ("greater", "two-sided"):
        raise WorkbenchError(f"alternative must be 'greater' or 'two-sided'; got {alternative!r}")
    d = np.asarray(diffs.cpu() if isinstance(diffs, Tensor) else diffs, dtype=float)
    ids = (
        np.arange(len(d))
        if groups is None
        else np.asarray(groups.cpu() if isinstance(groups, Tensor) else group_index(groups))
    )
    if len(ids) != len(d):
        raise WorkbenchError(f"groups has {len(ids)} labels for {len(d)} differences")
    keep = ~np.isnan(d)
    d, ids = d[keep], ids[keep]
    if len(d) == 0:
        return float("nan")
    _, ids = np.unique(ids, return_inverse=True)
    totals = np.bincount(ids, weights=d)  # (G,)
    n_groups = len(totals)
    stat = (lambda s: s) if alternative == "greater" else np.abs
    observed = stat(totals.sum())
    # Float sums of the same numbers in another order differ by rounding; count those as ties.
    tol = 1e-9 * max(1.0, float(np.abs(totals).sum()))
    if 2**n_groups <= n_flips:
        bits = (np.arange(2**n_groups)[:, None] >> np.arange(n_groups)[None]) & 1
        flipped = stat((1 - 2 * bits) @ totals)
        return float((flipped >= observed - tol).mean())
    rng = np.random.default_rng([int(seed), 17])
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_flips, n_groups))
    hits = int((stat(signs @ totals) >= observed - tol).sum())
    return float((1 + hits) / (1 + n_flips))


def sign_flip_pvalues(
    diffs, groups=None, n_flips: int = 10000, seed: int = 0, alternative: str = "greater"
) -> np.ndarray:
    """`sign_flip_pvalue` of each row of `diffs` (`[n_rows, batch]`, e.g. one row per metric
    of one head set), each equal to that row's own call: rows with the same examples left
    (the same NaN pattern) have the same clusters, so they share one draw of the `n_flips`
    sign patterns (the costly part) instead of drawing it once per row."""
    d = np.asarray(diffs.cpu() if isinstance(diffs, Tensor) else diffs, dtype=float)
    if d.ndim != 2:
        raise WorkbenchError(f"sign_flip_pvalues takes [n_rows, batch] differences; got shape "
                             f"{d.shape}")
    out = np.full(len(d), np.nan)
    patterns: dict[bytes, list[int]] = {}
    for i, row in enumerate(d):
        patterns.setdefault(np.isnan(row).tobytes(), []).append(i)
    for rows in patterns.values():
        keep = ~np.isnan(d[rows[0]])
        if not keep.any():
            continue
        # the first row's own call; the others reuse its clusters and sign patterns
        out[rows] = _flip_test(d[rows][:, keep], groups, keep, n_flips, seed, alternative)
    return out


def _flip_test(d: np.ndarray, groups, keep: np.ndarray, n_flips: int, seed: int,
               alternative: str) -> np.ndarray:
    """The sign-flip p-values of rows `d` (`[k, n]`, no NaN) over the examples `keep` of
    `groups`, by the rule of `sign_flip_pvalue`."""
    if alternative not in ("greater", "two-sided"):
        raise WorkbenchError(f"alternative must be 'greater' or 'two-sided'; got {alternative!r}")
    n = len(keep)
    ids = (np.arange(n) if groups is None
           else np.asarray(groups.cpu() if isinstance(groups, Tensor) else group_index(groups)))
    if len(ids) != n:
        raise WorkbenchError(f"groups has {len(ids)} labels for {n} differences")
    _, ids = np.unique(ids[keep], return_inverse=True)
    totals = np.stack([np.bincount(ids, weights=row) for row in d])  # (k, G)
    n_groups = totals.shape[1]
    stat = (lambda s: s) if alternative == "greater" else np.abs
    observed = stat(totals.sum(1))  # (k,)
    tol = 1e-9 * np.maximum(1.0, np.abs(totals).sum(1))
    if 2**n_groups <= n_flips:
        bits = (np.arange(2**n_groups)[:, None] >> np.arange(n_groups)[None]) & 1
        flipped = stat((1 - 2 * bits) @ totals.T)  # (2^G, k)
        return (flipped >= observed - tol).mean(0)
    rng = np.random.default_rng([int(seed), 17])
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_flips, n_groups))
    hits = (stat(signs @ totals.T) >= observed - tol).sum(0)
    return (1 + hits) / (1 + n_flips)


def holm(pvalues) -> np.ndarray:
    """Holm step-down adjusted p-values: sort ascending, multiply the `k`-th smallest by
    `m - k + 1`, take running maxima, cap at 1. Rejecting where the adjusted p < alpha keeps
    the family-wise error rate at alpha for any dependence between the tests. NaN p-values
    are left out of the family and stay NaN."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


def helpful_agreement(
    estimate: pd.DataFrame,
    exact: pd.DataFrame,
    metric: str,
    k: int | None = None,
    threshold: float = 0.0,
) -> dict[str, float]:
    """How well an estimated per-head table (e.g. attribution) finds the heads whose removal
    helps according to an exact one: precision and recall of the set of heads with
    `d_<metric> > threshold`, and the overlap of the top `k` heads of each table.

    Args:
        estimate, exact: per-head tables (`layer`, `head`, `d_<metric>`).
        k: for the top-k overlap; default the number of exactly helpful heads (at least 1).

    Returns:
        `precision` (share of estimated-helpful heads that are exactly helpful; NaN when none is
        estimated), `recall` (share of exactly helpful heads estimated helpful; NaN when none
        is), `n_estimated`, `n_exact`, `k` and `topk_overlap` (shared heads / k).
    """
    col = f"d_{metric}"
    for name, df in (("estimate", estimate), ("exact", exact)):
        if col not in df:
            raise WorkbenchError(f"{name} table has no column {col!r}; got {list(df.columns)}")
    a = estimate.set_index(["layer", "head"])[col].astype(float)
    b = exact.set_index(["layer", "head"])[col].astype(float)
    if set(a.index) != set(b.index):
        raise WorkbenchError("estimate and exact tables must list the same (layer, head) rows")
    b = b.loc[a.index]
    est = set(a.index[a.to_numpy() > threshold])
    true = set(b.index[b.to_numpy() > threshold])
    both = len(est & true)
    k = k if k is not None else max(1, len(true))
    top_a = set(a.sort_values(ascending=False, kind="stable").index[:k])
    top_b = set(b.sort_values(ascending=False, kind="stable").index[:k])
    return {
        "precision": both / len(est) if est else float("nan"),
        "recall": both / len(true) if true else float("nan"),
        "n_estimated": float(len(est)),
        "n_exact": float(len(true)),
        "k": float(k),
        "topk_overlap": len(top_a & top_b) / k,
    }
