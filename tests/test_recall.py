"""Planted-truth models (`bench/planted.py`): their logits are the planted numbers,
OR members alone do nothing, screening cannot see a pair; and the honest null, screen ->
interaction search -> held-out confirmation. Each strategy's recall on the planted micro model
is tests/search/test_recall.py; the statistics' naive references, tests/test_stats.py."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close
from workbench.compute import Compute
from workbench.confirmation.confirm import ConfirmPlan, confirm_sets, example_groups
from workbench.heads import HeadSet
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import ScreenRace, screen_heads, screen_scorer
from workbench.screening.stage import screen_race_rule
from workbench.search.candidates import best_sets, candidate_heads, search_pool, select_candidates
from workbench.search.registry import get_strategy
from workbench.search.space import SearchSpace
from workbench.stats import Stats, holm
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
    conf, _ = confirm_sets(heldout, {s: HeadSet.of(model, n) for s, n in sets.items()}, ConfirmPlan(
        FIRST,
        SECOND,
        best_size=best,
        n_random=n_random,
        pool=pool,
        groups=example_groups(heldout.data) if cluster else None,
        adaptive=adaptive,
        stats=Stats(n_boot=200),
    ))
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
