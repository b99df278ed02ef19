"""Held-out confirmation (`workbench.confirmation.confirm`): random baseline sets seeded,
distinct and complete when few; pool sets from the pool only, reusing the random sets and
staying uniform; too few clusters is a clear error."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bench.planted import PlantSpec, planted_model
from workbench import WorkbenchError
from workbench.confirmation.confirm import (
    ConfirmPlan,
    confirm_sets,
    pool_random_head_sets,
    random_head_sets,
)
from workbench.heads import HeadSet

FIRST, SECOND = "logit_diff", "logprob"
# A planted micro model: 6 layers x 4 heads, one harmful single, one OR pair, one OR triple.
MICRO = PlantSpec(
    n_layers=6, n_heads=4, single_gains=(2.0,), pair_gains=(5.0,), triple_gains=(9.0,), seed=3
)


@pytest.fixture(scope="module")
def micro():
    return planted_model(MICRO)


def test_random_baseline_sets_are_seeded_distinct_and_valid():
    a = random_head_sets(3, 4, 2, 50, seed=1)  # 66 pairs > 50: a sample
    assert a == random_head_sets(3, 4, 2, 50, seed=1)
    assert a != random_head_sets(3, 4, 2, 50, seed=2)
    assert all(len(set(s)) == 2 and all(0 <= l < 3 and 0 <= h < 4 for l, h in s) for s in a)
    assert len({tuple(s) for s in a}) == 50


def test_random_baseline_is_every_set_when_there_are_few():
    heads = [(l, h) for l in range(2) for h in range(3)]
    every = [sorted(c) for c in itertools.combinations(heads, 2)]
    assert random_head_sets(2, 3, 2, 15, seed=0) == every
    assert random_head_sets(2, 3, 2, 100, seed=5) == every


def test_too_few_clusters_is_a_clear_error(micro):
    heldout = micro.scorer("heldout")
    sets = {1: HeadSet.of(micro.model, micro.best[1])}
    labels = ["a", "b"] * (len(heldout.data) // 2)  # a stratum, not clusters
    with pytest.raises(WorkbenchError, match="at least 8 groups.*got 2"):
        confirm_sets(heldout, sets, ConfirmPlan(FIRST, n_random=0, groups=labels))


def test_pool_random_sets_come_from_the_pool_only():
    pool = [(0, 1), (2, 3), (1, 0), (3, 3), (2, 2), (0, 0)]
    sets = pool_random_head_sets(pool, 2, 10, seed=1)
    assert len(sets) == 10 and len({tuple(s) for s in sets}) == 10
    assert all(set(s) <= set(pool) and len(set(s)) == 2 for s in sets)
    assert sets == pool_random_head_sets(pool, 2, 10, seed=1)
    assert len(pool_random_head_sets(pool, 2, 100, seed=1)) == 15  # all of them
    assert pool_random_head_sets(pool, 7, 10, seed=1) == []


def test_pool_random_sets_reuse_the_random_sets_and_stay_uniform():
    """Pool sets drawn with `reuse`: the random sets inside the pool first, topped up with the
    plain pool draws; distinct, inside the pool, seeded. Over 3000 seeds every one of the 28
    pool pairs appears in 10/28 of the samples (binomial sd 0.009; bound 0.04)."""
    from workbench.confirmation.confirm import pool_random_head_sets

    pool = [(0, 1), (0, 3), (1, 0), (1, 2), (2, 2), (2, 3), (3, 0), (3, 1)]
    random_sets = random_head_sets(4, 4, 2, 10, seed=5)
    sets = pool_random_head_sets(pool, 2, 10, seed=5, reuse=random_sets)
    inside = [s for s in random_sets if set(s) <= set(pool)]
    assert sets[: len(inside)] == inside and len(sets) == 10
    assert len({tuple(s) for s in sets}) == 10 and all(set(s) <= set(pool) for s in sets)
    assert sets == pool_random_head_sets(pool, 2, 10, seed=5, reuse=random_sets)
    plain = pool_random_head_sets(pool, 2, 10, seed=5)
    assert [s for s in sets[len(inside) :]] == [s for s in plain if s not in inside][
        : 10 - len(inside)
    ]
    # fewer pool sets than asked: all of them, as without reuse
    assert pool_random_head_sets(pool[:4], 2, 10, 5, reuse=random_sets) == (
        pool_random_head_sets(pool[:4], 2, 10, 5)
    )
    counts: dict[tuple, int] = {}
    n_seeds = 3000
    for seed in range(n_seeds):
        reuse = random_head_sets(4, 4, 2, 10, seed)
        for s in pool_random_head_sets(pool, 2, 10, seed, reuse=reuse):
            counts[tuple(s)] = counts.get(tuple(s), 0) + 1
    assert len(counts) == 28
    share = np.array(list(counts.values())) / n_seeds
    assert np.abs(share - 10 / 28).max() < 0.04


def test_a_guard_passes_held_out_when_no_example_falls_or_its_mean_is_shown_above():
    import torch

    from workbench.confirmation.confirm import guard_pvalue
    from workbench.stats import sign_flip_pvalue

    flips, seed = 2000, 0
    ties = torch.zeros(40)
    ties[:2] = 1.0  # accuracy: two examples fixed, none broken
    assert guard_pvalue(ties, 0.0, None, flips, seed) == 0.0
    assert guard_pvalue(torch.zeros(40), 0.0, None, flips, seed) == 0.0  # at 100 %: nothing moves
    # the naive one-sided sign-flip test could not pass either at any level
    assert sign_flip_pvalue(ties, None, flips, seed) > 0.2
    assert sign_flip_pvalue(torch.zeros(40), None, flips, seed) == 1.0
    # one example broken: the mean must be shown above -tolerance, by the sign-flip test
    mixed = ties.clone()
    mixed[-1] = -1.0
    assert guard_pvalue(mixed, 0.0, None, flips, seed) == sign_flip_pvalue(mixed, None, flips,
                                                                            seed) > 0.2
    # within a tolerance of 0.1 on the mean (the broken example alone falls by more)
    assert guard_pvalue(mixed, 0.1, None, flips, seed) == sign_flip_pvalue(
        mixed + 0.1, None, flips, seed) < 0.01
    assert guard_pvalue(mixed, 1.0, None, flips, seed) == 0.0  # no example falls by > 1
    # float noise of a change that is exactly 0 is not a fall; a NaN example is left out
    noisy = torch.tensor([1e-6, -1e-7, 0.0, float("nan")])
    assert guard_pvalue(noisy, 0.0, None, flips, seed) == 0.0
    # a gamed set: most examples fall
    assert guard_pvalue(-ties, 0.0, None, flips, seed) == 1.0
