"""Planted-truth models, the interaction search, and the honest-null statistics (issue 11)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close
from workbench import WorkbenchError
from workbench.compute import Compute
from workbench.confirmation.confirm import confirm_sets, example_groups, pool_random_head_sets
from workbench.heads import HeadSet
from workbench.pipeline import screen_race_rule
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import ScreenRace, screen_heads, screen_scorer
from workbench.search.candidates import best_sets, candidate_heads, search_pool, select_candidates
from workbench.search.finalists import default_budget
from workbench.search.registry import get_strategy, strategies
from workbench.search.space import SearchSpace
from workbench.stats import (
    Stats,
    bootstrap_weights,
    cluster_bootstrap_weights,
    clustered_bootstrap,
    group_index,
    helpful_agreement,
    holm,
    paired_bootstrap,
    sign_flip_pvalue,
)
from workbench.tasks.encoding import encode_task

FIRST, SECOND = "logit_diff", "logprob"
# A planted micro model: 6 layers x 4 heads, one harmful single, one OR pair, one OR triple.
MICRO = PlantSpec(
    n_layers=6, n_heads=4, single_gains=(2.0,), pair_gains=(5.0,), triple_gains=(9.0,), seed=3
)


@pytest.fixture(scope="module")
def micro():
    return planted_model(MICRO)


@pytest.fixture(scope="module")
def micro_screen(micro):
    heads = screen_heads(micro.model, micro.task, stats=Stats(n_boot=200))
    return select_candidates(heads, FIRST, SECOND, 8)


def _random_masks(pm, n, p, seed):
    L, H = pm.spec.n_layers, pm.spec.n_heads
    rng = np.random.default_rng(seed)
    masks = rng.random((n, L, H)) < p
    planted = [h for h, r in pm.roles.items() if r not in ("helpful", "noise")]
    for m in masks:  # every planted head in play, in every combination over the masks
        for l, h in planted:
            m[l, h] = rng.random() < 0.5
    return torch.tensor(masks).float()


def test_planted_model_logits_are_the_planted_numbers(micro):
    """The forward pass, the per-example loop and the analytic scorer agree on random masks."""
    masks = _random_masks(micro, 24, 0.3, seed=0)
    batch = encode_task(micro.model, micro.task, "select")
    real = MaskScorer(micro.model, batch, compute=Compute(masks_per_pass=8)).score(masks)
    fast = micro.scorer("select").score(masks)
    L, H = MICRO.n_layers, MICRO.n_heads
    for i, m in enumerate(masks):
        removed = [(l, h) for l in range(L) for h in range(H) if m[l, h]]
        # float32 forwards through 6 layers of sums of ~20 terms of size <= 10: measured max
        # error 6e-6 here (2e-5 at 1024 heads); 1e-4 leaves room, far below any planted gain.
        assert_close(real["logit_diff"][i], micro.logit_diff(removed, "select"), atol=1e-4)
    for metric in real:
        assert_close(fast[metric], real[metric], atol=1e-4)


def test_or_members_alone_do_exactly_nothing(micro):
    scorer = micro.scorer("select")
    clean = micro.logit_diff((), "select")
    for members, reader, gain in micro.groups:
        for k in range(1, len(members)):
            for subset in itertools.combinations(members, k):
                assert_close(micro.logit_diff(subset, "select"), clean)
        together = micro.logit_diff(members, "select") - clean
        assert_close(together.mean(), gain, atol=1e-9)  # gate weights have mean exactly 1
        assert micro.logit_diff([reader], "select").mean() < clean.mean()  # readers hurt
    batch = encode_task(micro.model, micro.task, "select")
    real = MaskScorer(micro.model, batch)
    members = [m for g in micro.groups for m in g[0]]
    d = (
        real.score(masks_of(micro.model, [[m] for m in members]))["logit_diff"]
        - real.clean()["logit_diff"]
    )
    assert float(d.abs().max()) < 1e-5  # the forward pass agrees: exactly zero up to float
    assert scorer.clean()["logit_diff"].shape == (len(batch),)


def test_planted_best_sets_are_the_plants(micro):
    pair = micro.groups[0][0]
    triple = micro.groups[1][0]
    single = next(h for h, r in micro.roles.items() if r == "single")
    name = lambda hs: ",".join(sorted(HeadSet.of(micro.model, list(hs)).names))  # noqa: E731
    assert micro.best == {1: name([single]), 2: name(pair), 3: name(triple)}
    assert micro.best_gain == {1: 2.0, 2: 5.0, 3: 9.0}


def test_backup_head_gives_back_part_of_the_gain():
    pm = planted_model(PlantSpec(n_layers=6, n_heads=4, single_gains=(), pair_gains=(),
                                 triple_gains=(), backup=(2.5, 0.6), seed=1))  # fmt: skip
    a = next(h for h, r in pm.roles.items() if r == "backup_a")
    b = next(h for h, r in pm.roles.items() if r == "backup_b")
    assert a[0] < b[0]
    assert_close(pm.expected_gain([a]), 1.0, atol=1e-9)
    assert_close(pm.expected_gain([b]), 0.0)
    assert_close(pm.expected_gain([a, b]), 2.5, atol=1e-9)
    masks = masks_of(pm.model, [[a], [b], [a, b]])
    batch = encode_task(pm.model, pm.task, "select")
    real = MaskScorer(pm.model, batch)
    d = (real.score(masks)["logit_diff"] - real.clean()["logit_diff"]).mean(-1)
    assert_close(d, [1.0, 0.0, 2.5], atol=1e-4)  # float32 forward, see above


def test_analytic_screen_equals_screen_heads(micro, micro_screen):
    fast = screen_scorer(micro.scorer("select"), stats=Stats(n_boot=200))
    for col in ("d_logit_diff", "d_logprob", "d_accuracy", "d_logit_diff_hi"):
        assert_close(fast[col], micro_screen[col], atol=1e-4)


def test_the_benchmarks_counting_scorer_is_a_scorer(micro, micro_screen):
    """bench/recall.py wraps each scorer to count forward-equivalents: through the wrapper
    screening gives the same table, and one mask per head over every example counts one
    forward-equivalent per head."""
    from bench.recall import CountingScorer

    counted = CountingScorer(micro.scorer("select"))
    table = screen_scorer(counted, stats=Stats(n_boot=200))
    assert_close(table["d_logit_diff"], screen_scorer(micro.scorer("select"),
                                                      stats=Stats(n_boot=200))["d_logit_diff"])
    assert counted.count == micro.spec.n_layers * micro.spec.n_heads


def test_size_one_screening_cannot_see_the_pair(micro, micro_screen):
    members = [m for g in micro.groups for m in g[0]]
    d = micro_screen.set_index(["layer", "head"])["d_logit_diff"]
    assert all(abs(d[m]) < 1e-5 for m in members)
    best_single = d.idxmax()
    assert micro.roles[best_single] == "single"
    pool = search_pool(micro_screen, FIRST)
    assert set(members) <= set(pool)  # zero effect: never "clearly hurts"
    assert not {h for h, r in micro.roles.items() if r in ("helpful", "reader")} & set(pool)


def _search(pm, heads, strategy, **kw):
    batch = encode_task(pm.model, pm.task, "select")
    scorer = MaskScorer(pm.model, batch, compute=Compute(masks_per_pass=16))
    space = SearchSpace(
        scorer,
        candidate_heads(heads),
        FIRST,
        SECOND,
        max_size=3,
        seed=0,
        pool=search_pool(heads, FIRST),
        **kw,
    )
    get_strategy(strategy)(space)
    return space, best_sets(pd.DataFrame(space.records), FIRST, SECOND, 3)


# Known answers per strategy on the planted micro model. With `top_m = 3` the candidates of
# `select_candidates` are the three heads whose single removal helps beyond noise (the
# single, the backup's A and a noise head), as on a large model where more than `top_m`
# heads look helpful alone; the OR members (single effect exactly 0) are not among them. So
# exhaustive, greedy and beam find the single but not the pair or the triple; compressed
# sensing (p = 5/24, 96 masks: a pair is knocked out together about 4 times) gives the pair members
# no positive coefficient; the interaction search finds all three, and so do the learned gates
# (`workbench.search.strategies.gates`: their push sees the members, the gradient at g = 1 not).
EXPECTED = {
    "exhaustive": {1},
    "greedy": {1},
    "beam": {1},
    "compressed_sensing": {1},
    "interaction": {1, 2, 3},
    "gates": {1, 2, 3},
}


@pytest.mark.parametrize("strategy", sorted(strategies()))
def test_each_strategy_on_the_planted_micro_model(micro, micro_screen, strategy):
    heads = select_candidates(micro_screen, FIRST, SECOND, 3)
    space, (sets, best_size) = _search(micro, heads, strategy, top_m=3)
    found = {s for s in (1, 2, 3) if sets.get(s) == micro.best[s]}
    assert found == EXPECTED[strategy]
    if strategy == "interaction":
        assert best_size == 3
        n = MICRO.n_layers * MICRO.n_heads
        evaluated = len({r["heads"] for r in space.records})
        assert evaluated <= default_budget(n)


def test_pick_finalists_takes_a_share_from_screening_then_the_knockouts():
    from workbench.search.finalists import pick_finalists

    a, b, c, d, e, f = [(0, i) for i in range(6)]
    # k = 5, share 0.25: ceil(1.25) = 2 screening heads, then the knockouts' order without
    # repeats
    assert pick_finalists([a, b, c], [c, b, d, e, f], 5, 0.25) == [a, b, c, d, e]
    assert pick_finalists([a, b, c], [c, b, d, e, f], 5, 0.0) == [c, b, d, e, f]
    assert pick_finalists([a, b, c], [c, d], 5, 0.25) == [a, b, c, d]  # all there are
    assert pick_finalists([a, b], [c], 3, 1.0) == [a, b, c]  # screening runs out first
    assert pick_finalists([a], [], 3, 0.25) == [a]


def test_interaction_finalists_include_the_top_screening_candidates(micro, micro_screen):
    """The finalists are `pick_finalists` of the screening candidates in the pool and the
    knockouts' order (the SmolLM2 greater_than miss: the best single head was screening's
    first candidate but not among the knockouts' top heads)."""
    from workbench.search.finalists import pick_finalists

    heads = select_candidates(micro_screen, FIRST, SECOND, 3)
    budget = 100 + 24  # 100 masks, 24 sets left: 4 finalists (4 + 6 + 4 sets of size 1-3)
    plain, _ = _search(micro, heads, "interaction", budget=budget, n_masks=100, screen_share=0)
    mixed, _ = _search(micro, heads, "interaction", budget=budget, n_masks=100, screen_share=0.75)
    knocked = plain.notes["interaction"]["finalists"]  # the knockouts' top 4, in order
    pool = search_pool(heads, FIRST)
    screened = [f"L{l}H{h}" for l, h in candidate_heads(heads) if (l, h) in pool]
    assert len(knocked) == 4 and len(screened) == 3
    # ceil(0.75 * 4) = 3 from screening, then the knockouts' best not yet chosen
    assert mixed.notes["interaction"]["finalists"] == pick_finalists(screened, knocked, 4, 0.75)
    assert mixed.notes["interaction"]["finalists"][:3] == screened
    # here screening's third candidate (a noise head) was not among the knockouts' top 4
    assert set(screened) - set(knocked)


def test_main_effects_equal_least_squares():
    from workbench.search.strategies.interaction import _main_effects

    rng = np.random.default_rng(5)
    x = rng.random((300, 12)) < 0.3
    y = 0.5 + x @ rng.normal(0, 1, 12) + 2.0 * (x[:, 0] & x[:, 1]) + rng.normal(0, 0.1, 300)
    design = np.column_stack([np.ones(300), x.astype(float)])
    ref = np.linalg.lstsq(design, y, rcond=None)[0][1:]
    assert_close(_main_effects(x, y, ridge=0.0), ref, atol=1e-9)
    # the default ridge (1e-3 of the mean column variance) moved effects by 1.8e-3 here
    assert_close(_main_effects(x, y), ref, atol=1e-2)


def test_interaction_respects_its_budget(micro, micro_screen):
    space, _ = _search(micro, micro_screen, "interaction", budget=300, n_masks=100)
    assert len({r["heads"] for r in space.records}) <= 300
    assert space.notes["interaction"]["n_masks"] == 100
    # a budget the knockouts alone use up is refused, not turned into an empty search
    with pytest.raises(WorkbenchError, match="leaves no room for finalist sets after 64"):
        _search(micro, micro_screen, "interaction", budget=60)


# ---------------------------------------------------------------------------------------------
# Statistics against naive references


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


def test_too_few_clusters_is_a_clear_error(micro):
    heldout = micro.scorer("heldout")
    sets = {1: HeadSet.of(micro.model, micro.best[1])}
    labels = ["a", "b"] * (len(heldout.data) // 2)  # a stratum, not clusters
    with pytest.raises(WorkbenchError, match="at least 8 groups.*got 2"):
        confirm_sets(heldout, sets, FIRST, n_random=0, groups=labels)


def test_pool_random_sets_come_from_the_pool_only():
    pool = [(0, 1), (2, 3), (1, 0), (3, 3), (2, 2), (0, 0)]
    sets = pool_random_head_sets(pool, 2, 10, seed=1)
    assert len(sets) == 10 and len({tuple(s) for s in sets}) == 10
    assert all(set(s) <= set(pool) and len(set(s)) == 2 for s in sets)
    assert sets == pool_random_head_sets(pool, 2, 10, seed=1)
    assert len(pool_random_head_sets(pool, 2, 100, seed=1)) == 15  # all of them
    assert pool_random_head_sets(pool, 7, 10, seed=1) == []


# ---------------------------------------------------------------------------------------------
# The null: screen -> interaction search -> held-out confirmation with Holm across sizes


def _pipeline(pm, n_random=40, alpha=0.05, cluster=True, adaptive=True):
    """What `run_cel` does by default (raced screening, raced interaction search, honest
    confirmation with raced baselines). Scores come from the analytic scorer (equal to the
    forward pass, tested above) to keep 20 null models within seconds."""
    model = pm.model
    select = pm.scorer("select")
    heldout = pm.scorer("heldout")
    heads = select_candidates(
        screen_scorer(
            select,
            race_on=ScreenRace(FIRST, screen_race_rule(["interaction"])) if adaptive else None,
            stats=Stats(n_boot=200),
        ),
        FIRST,
        SECOND,
        8,
    )
    pool = search_pool(heads, FIRST)
    space = SearchSpace(
        select,
        candidate_heads(heads),
        FIRST,
        SECOND,
        max_size=3,
        seed=0,
        pool=pool,
        adaptive=adaptive,
    )
    get_strategy("interaction")(space)
    sets, best = best_sets(pd.DataFrame(space.records), FIRST, SECOND, 3)
    conf, _ = confirm_sets(
        heldout,
        {s: HeadSet.of(model, n) for s, n in sets.items()},
        FIRST,
        SECOND,
        best_size=best,
        n_random=n_random,
        pool=pool,
        groups=example_groups(heldout.data) if cluster else None,
        adaptive=adaptive,
        stats=Stats(n_boot=200),
    )
    return conf, bool((conf["p_holm"] < alpha).any())


@pytest.mark.parametrize("adaptive", [True, False])
def test_null_models_rarely_declare_an_enhancement(adaptive):
    """20 null plants (helpful and noise heads only): at most 1 declares a significant gain,
    raced (the default) or not. The noise is shared by the examples of a filler, so the test
    clusters by filler."""
    declared = [
        _pipeline(
            planted_model(PlantSpec.null(n_layers=4, n_heads=4, seed=s)),
            n_random=0,
            adaptive=adaptive,
        )[1]
        for s in range(20)
    ]
    assert sum(declared) <= 1
    # Without clustering the same pipeline calls noise an enhancement (rows of one filler
    # share its noise, so 64 rows carry the information of 8): the check has teeth.
    naive = [
        _pipeline(planted_model(PlantSpec.null(n_layers=4, n_heads=4, seed=s)), 0, cluster=False)[1]
        for s in range(20)
    ]
    assert sum(naive) > sum(declared)


def test_a_planted_enhancement_is_declared_with_honest_columns(micro):
    conf, declared = _pipeline(micro)
    assert declared
    assert list(conf["heads"]) == [micro.best[s] for s in (1, 2, 3)]
    assert_close(conf["p_holm"], holm(conf["p_value"]))
    # the held-out gain is the planted one up to noise heads (none in the found sets)
    assert_close(conf["d_logit_diff"], [2.0, 5.0, 9.0], atol=1e-4)
    # the pool holds the planted heads, so a few random pool sets contain them: not 100
    assert (conf["pool_percentile"] >= 95.0).all()
    assert (conf["pool_random_mean"] > conf["random_mean"]).all()  # most random heads hurt
