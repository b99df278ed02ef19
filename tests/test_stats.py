"""The statistics (`workbench.stats`) against naive references: the paired and the clustered
bootstrap, percentiles and rank correlation, Holm's step-down adjustment, sign-flip p-values
(one row and batched), helpful-head agreement."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import assert_close
from workbench.stats import (
    bootstrap_weights,
    cluster_bootstrap_weights,
    clustered_bootstrap,
    group_index,
    helpful_agreement,
    holm,
    mean_se,
    paired_bootstrap,
    percentile_of,
    rank_correlation,
    share_at_least,
    sign_flip_pvalue,
    sign_flip_pvalues,
)


def test_bootstrap_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    diffs = torch.tensor(rng.normal(0.3, 1.0, size=(3, 25)))
    diffs[1, 4] = float("nan")
    lo, hi = paired_bootstrap(diffs, n_boot=400, seed=5, ci=0.9)
    w = bootstrap_weights(25, 400, 5).double().numpy()
    for r in range(3):
        x = diffs[r].numpy()
        valid = ~np.isnan(x)
        boots = (w[:, valid] @ x[valid]) / w[:, valid].sum(1)
        assert_close(lo[r], np.quantile(boots, 0.05))
        assert_close(hi[r], np.quantile(boots, 0.95))
    mean, se = mean_se(diffs)
    assert_close(mean[1], np.nanmean(diffs[1].numpy()))
    assert_close(se[0], diffs[0].numpy().std(ddof=1) / 5.0)
    assert (bootstrap_weights(25, 400, 5).sum(1) == 25).all()


def test_percentile_and_rank_correlation():
    assert percentile_of(3.0, [1, 2, 3, 4]) == 62.5
    assert percentile_of(10.0, [1, 2]) == 100.0
    assert share_at_least(3.0, [1, 2, 3, 4]) == 0.5
    assert share_at_least(3.0, [1, float("nan"), 3, 4]) == 2 / 3  # NaNs dropped, as above
    scipy_stats = pytest.importorskip("scipy.stats")  # reference only; not a dependency
    a, b = np.random.default_rng(1).normal(size=(2, 30))
    b[3] = a[7]  # a tie
    assert_close(rank_correlation(a, b), scipy_stats.spearmanr(a, b).statistic)


def _holm_naive(p, alpha):
    """The textbook step-down procedure: reject in order while p_(k) <= alpha / (m - k + 1)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    reject = [False] * len(p)
    for k, i in enumerate(order):
        if p[i] <= alpha / (len(p) - k):
            reject[i] = True
        else:
            break
    return reject


def test_holm_adjusted_pvalues_match_the_step_down_procedure():
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = int(rng.integers(1, 8))
        p = rng.choice([0.001, 0.01, 0.02, 0.03, 0.04, 0.2, 0.5], size=m) * rng.uniform(0.5, 1, m)
        adjusted = holm(p)
        for alpha in (0.01, 0.025, 0.05, 0.1):
            assert list(adjusted <= alpha) == _holm_naive(list(p), alpha)
    assert_close(holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])  # by hand: 3x, 1x..., maxima
    assert_close(holm([0.5, np.nan, 0.01]), [0.5, np.nan, 0.02])


def test_clustered_bootstrap_matches_a_loop_over_resampled_clusters():
    rng = np.random.default_rng(1)
    labels = [f"t{int(g)}" for g in rng.integers(0, 6, 40)]
    diffs = torch.tensor(rng.normal(0.2, 1.0, (3, 40)))
    diffs[1, 5] = float("nan")
    ids = group_index(labels)
    w = cluster_bootstrap_weights(ids, 300, seed=4)
    # Naive: redraw the same cluster indices, concatenate the drawn clusters' rows, average.
    g = torch.Generator().manual_seed(4)
    draws = torch.randint(0, int(ids.max()) + 1, (300, int(ids.max()) + 1), generator=g)
    means = np.zeros((3, 300))
    for b in range(300):
        rows = np.concatenate([np.flatnonzero(ids.numpy() == c) for c in draws[b].tolist()])
        means[:, b] = np.nanmean(diffs.numpy()[:, rows], axis=1)
        assert_close(w[b], np.bincount(rows, minlength=40))
    lo, hi = clustered_bootstrap(diffs, labels, 300, seed=4)
    assert_close(lo, np.quantile(means, 0.025, axis=1), atol=1e-9)
    assert_close(hi, np.quantile(means, 0.975, axis=1), atol=1e-9)


def test_clusters_of_one_are_the_ordinary_paired_bootstrap():
    diffs = torch.tensor(np.random.default_rng(2).normal(0, 1, (2, 30)))
    lo, hi = clustered_bootstrap(diffs, [None] * 30, 200, seed=5)
    ref_lo, ref_hi = paired_bootstrap(diffs, 200, seed=5)
    assert_close(lo, ref_lo)
    assert_close(hi, ref_hi)
    assert_close(cluster_bootstrap_weights(torch.arange(30), 50, 1), bootstrap_weights(30, 50, 1))


def test_clustered_interval_is_wider_when_clusters_share_noise():
    rng = np.random.default_rng(3)
    shared = np.repeat(rng.normal(0, 1, 8), 10)  # 8 clusters of 10 examples
    diffs = torch.tensor(shared + rng.normal(0, 0.1, 80))[None]
    labels = np.repeat(np.arange(8), 10).tolist()
    lo, hi = clustered_bootstrap(diffs, labels, 2000, seed=0)
    lo_r, hi_r = paired_bootstrap(diffs, 2000, seed=0)
    assert float(hi - lo) > 2.5 * float(hi_r - lo_r)  # ~sqrt(10) wider


def test_sign_flip_pvalue_matches_enumeration():
    rng = np.random.default_rng(4)
    d = rng.normal(0.3, 1.0, 24)
    labels = (np.arange(24) % 6).tolist()
    totals = np.bincount(labels, weights=d)
    naive = np.mean(
        [np.dot(s, totals) >= totals.sum() - 1e-12 for s in itertools.product([-1, 1], repeat=6)]
    )
    assert_close(sign_flip_pvalue(d, labels), naive)
    two = np.mean(
        [abs(np.dot(s, totals)) >= abs(totals.sum()) - 1e-12
         for s in itertools.product([-1, 1], repeat=6)]
    )  # fmt: skip
    assert_close(sign_flip_pvalue(d, labels, alternative="two-sided"), two)
    assert sign_flip_pvalue(np.zeros(10)) == 1.0  # doing nothing is never significant
    assert sign_flip_pvalue(np.ones(12)) == 1 / 2**12
    # Monte Carlo (2^40 patterns > n_flips) agrees with the normal approximation of the
    # randomisation distribution: sd of the flipped sum = sqrt(sum of squares).
    d = rng.normal(0.4, 1.0, 40)
    z = d.sum() / np.sqrt((d**2).sum())
    from math import erf, sqrt

    approx = 0.5 * (1 - erf(z / sqrt(2)))
    assert abs(sign_flip_pvalue(d, n_flips=20000) - approx) < 0.02  # MC sd ~0.002 + approx


def test_helpful_agreement_on_a_hand_made_example():
    idx = pd.MultiIndex.from_product([[0, 1], [0, 1, 2]], names=["layer", "head"]).to_frame(
        index=False
    )
    exact = idx.assign(d_accuracy=[0.0, 0.2, -0.1, 0.05, -0.3, 0.0])
    att = idx.assign(d_accuracy=[0.1, 0.3, 0.02, -0.01, -0.2, 0.04])
    out = helpful_agreement(att, exact, "accuracy")
    # exact helpful: L0H1, L1H0; estimated helpful: L0H0, L0H1, L0H2, L1H2.
    assert out["precision"] == 1 / 4
    assert out["recall"] == 1 / 2
    assert (out["n_estimated"], out["n_exact"], out["k"]) == (4, 2, 2)
    assert out["topk_overlap"] == 1 / 2  # top 2: {L0H1, L0H0} vs {L0H1, L1H0}
    assert helpful_agreement(att, exact, "accuracy", k=6)["topk_overlap"] == 1.0
    none = helpful_agreement(att, exact.assign(d_accuracy=-1.0), "accuracy")
    assert np.isnan(none["recall"]) and none["precision"] == 0.0


@pytest.mark.parametrize(("n", "grouped", "n_flips"), [(40, False, 500), (40, True, 500),
                                                       (9, False, 10000)])
def test_batched_sign_flip_pvalues_equal_one_call_per_row(n, grouped, n_flips):
    """Rows sharing a NaN pattern share one draw of sign patterns; each p-value still equals
    its own `sign_flip_pvalue` call (sampled flips, clusters, and exact enumeration)."""
    rng = np.random.default_rng(3)
    d = rng.normal(0.1, 1.0, size=(4, n))
    d[2, :3] = np.nan  # its own pattern
    d[3] = np.round(d[3])  # ties at the threshold
    groups = [f"g{i % 8}" for i in range(n)] if grouped else None
    for alternative in ("greater", "two-sided"):
        got = sign_flip_pvalues(d, groups, n_flips, 5, alternative)
        want = [sign_flip_pvalue(row, groups, n_flips, 5, alternative) for row in d]
        assert got.tolist() == want
    assert np.isnan(sign_flip_pvalues(np.full((1, n), np.nan))).all()
