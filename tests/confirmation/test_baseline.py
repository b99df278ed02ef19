"""Random baselines drawn in looks (`workbench.confirmation.baseline`): the exact share interval,
the stopping rule's error rate, and the drawn sets' numbers against scoring every set."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close
from workbench import WorkbenchError
from workbench.confirmation.baseline import (
    MIN_LOOK,
    BaselineRace,
    draw_in_looks,
    set_looks,
    share_decided,
    share_interval,
)
from workbench.confirmation.confirm import (
    ConfirmPlan,
    confirm_sets,
    pool_random_head_sets,
    random_head_sets,
)
from workbench.heads import HeadSet
from workbench.scoring.scorer import masks_of
from workbench.stats import Stats, percentile_of, share_at_least

FIRST, SECOND = "logit_diff", "logprob"
MICRO = PlantSpec(
    n_layers=6, n_heads=4, single_gains=(2.0,), pair_gains=(5.0,), triple_gains=(9.0,), seed=3
)


def _pmf(k: int, m: int, p: float) -> float:
    return math.comb(m, k) * p**k * (1 - p) ** (m - k)


def test_share_interval_is_clopper_pearson():
    """The closed forms at 0 and m successes, the tails at the bounds, and exact coverage."""
    for m in (1, 10, 100):
        tail = 0.025
        assert_close(share_interval(0, m, 0.95)[1], 1 - tail ** (1 / m), atol=1e-8)
        assert_close(share_interval(m, m, 0.95)[0], tail ** (1 / m), atol=1e-8)
        assert share_interval(0, m, 0.95)[0] == 0.0 and share_interval(m, m, 0.95)[1] == 1.0
    lo, hi = share_interval(7, 50, 0.9)
    assert_close(sum(_pmf(k, 50, lo) for k in range(7, 51)), 0.05, atol=1e-8)
    assert_close(sum(_pmf(k, 50, hi) for k in range(8)), 0.05, atol=1e-8)
    # coverage: the interval holds the true share with probability >= level
    for p in (0.01, 0.05, 0.3):
        cover = sum(_pmf(k, 60, p) for k in range(61)
                    if share_interval(k, 60, 0.95)[0] <= p <= share_interval(k, 60, 0.95)[1])
        assert cover >= 0.95
    assert share_interval(0, 0, 0.95) == (0.0, 1.0)
    with pytest.raises(WorkbenchError, match="count"):
        share_interval(3, 2, 0.95)


def test_looks_halve_down_to_the_minimum():
    assert set_looks(200) == [50, 100, 200]
    assert set_looks(100) == [MIN_LOOK, 100]
    assert set_looks(99) == [50, 99] and set_looks(98) == [98]
    assert set_looks(30) == [30]
    assert set_looks(200, sequential=False) == [200]
    # no successes in 100 decide a share below 5 % at the 3 looks' corrected level; in 50 not
    assert share_decided(0, 100, 0.05, 3)[0] and not share_decided(0, 50, 0.05, 3)[0]
    assert share_decided(20, 50, 0.05, 3)[0]  # far above
    assert not share_decided(3, 50, 0.05, 3)[0]


def _draw(gains: np.ndarray, found: float, sequential: bool = True):
    calls = []

    def score(a, b):
        calls.append((a, b))
        return {FIRST: gains[a:b]}, np.ones(b - a, dtype=bool), float(b - a)

    return draw_in_looks(len(gains), score, found, FIRST, 0.05, sequential), calls


def test_drawing_stops_at_the_first_decided_look():
    below = np.linspace(-1.0, 0.0, 200)
    drawn, calls = _draw(below, 1.0)
    assert calls == [(0, 50), (50, 100)] and drawn.n == 100 and drawn.forward_eq == 100.0
    assert drawn.share_hi < 0.05
    drawn, calls = _draw(np.tile([0.0, 2.0], 100), 1.0)  # half of them reach it
    assert calls == [(0, 50)] and drawn.n == 50
    drawn, calls = _draw(np.r_[2.0, below[1:]], 1.0)  # one reaches it: undecided until the end
    assert calls[-1] == (100, 200) and drawn.n == 200
    drawn, calls = _draw(below, 1.0, sequential=False)
    assert calls == [(0, 200)] and math.isnan(drawn.share_hi)
    assert_close(drawn.gains[FIRST], below)


def test_the_stopping_rule_errs_rarely_at_the_threshold():
    """With the true share exactly 5 % (the hardest case) the looks declare the found set in
    the top 5 % in at most 5 % of 4000 seeded baselines (the rule's level); with no random set
    as good, every baseline stops at 100 sets."""
    rng = np.random.default_rng(0)
    wrong = 0
    for _ in range(4000):
        drawn, _ = _draw((rng.random(200) < 0.05).astype(float), 1.0)  # 1: reaches the gain
        wrong += drawn.share_hi < 0.05
    assert wrong / 4000 <= 0.05
    assert _draw(np.zeros(200), 1.0)[0].n == 100


@pytest.fixture(scope="module")
def micro():
    return planted_model(MICRO)


def test_looks_give_the_exact_numbers_of_the_sets_drawn(micro):
    """200 random sets per size on the planted micro model (24 heads, found sets with gains
    2, 5 and 9): with looks the percentiles and shares are those of the exact held-out gains
    of the first `n_random` sets of each seeded list (all 24 singles; the pairs stop at 100,
    where none reaches the planted pair), the pool baseline's likewise, at fewer passes."""
    scorer = micro.scorer("heldout")
    L, H = MICRO.n_layers, MICRO.n_heads
    pool = [(l, h) for l in range(L) for h in range(H)][2:]
    sets = {s: HeadSet.of(micro.model, micro.best[s]) for s in (1, 2, 3)}
    runs = {looks: confirm_sets(scorer, sets, ConfirmPlan(
                FIRST, SECOND, n_random=200, pool=pool, adaptive=BaselineRace(True, looks),
                stats=Stats(n_boot=100)))[0]
            for looks in (False, True)}
    full, drawn = runs[False], runs[True]
    assert drawn["n_random"].tolist() == [24, 100, 200]
    assert drawn["n_pool_random"].tolist()[:2] == [22, 100]
    assert math.isnan(drawn["random_pct_hi"][0]) and drawn["random_pct_hi"][1] < 5.0
    assert "random_pct_hi" not in full
    clean = scorer.clean()

    def exact(head_sets, m):
        return (scorer.score(masks_of(micro.model, head_sets))[m] - clean[m][None]).mean(-1)

    for i, size in enumerate((1, 2, 3)):
        random_sets = random_head_sets(L, H, size, 200, 0)[: drawn["n_random"][i]]
        found = drawn[f"d_{FIRST}"][i]
        gains = exact(random_sets, FIRST).numpy()
        assert_close(drawn["percentile"][i], percentile_of(found, gains))
        assert_close(drawn["random_pct_ge"][i], 100.0 * share_at_least(found, gains))
        assert_close(drawn[f"percentile_{SECOND}"][i],
                     percentile_of(drawn[f"d_{SECOND}"][i], exact(random_sets, SECOND).numpy()))
        pool_sets = pool_random_head_sets(pool, size, 200, 0, reuse=random_head_sets(
            L, H, size, 200, 0))[: drawn["n_pool_random"][i]]
        assert_close(drawn["pool_percentile"][i],
                     percentile_of(found, exact(pool_sets, FIRST).numpy()))
    assert_close(drawn[f"d_{FIRST}"], full[f"d_{FIRST}"])
    same = drawn["n_random"] == full["n_random"]  # sizes 1 and 3: every set of the list
    assert_close(drawn["percentile"][same], full["percentile"][same])
    assert drawn["random_forward_eq"][1] < full["random_forward_eq"][1]
    assert drawn["pool_forward_eq"][1] <= full["pool_forward_eq"][1]


def test_gains_within_float_error_of_the_found_set_are_ties():
    """The found set drawn again as a random set, scored in another pass (shared or
    restarted prefix), differs by batching's float error: a tie, not a rank."""
    from workbench.stats import TIE_ATOL, percentile_of, share_at_least

    found = 0.3
    noisy = [0.1, found + TIE_ATOL / 3, found - TIE_ATOL / 3, 0.5]
    assert percentile_of(found, noisy) == percentile_of(found, [0.1, found, found, 0.5]) == 50.0
    assert share_at_least(found, noisy) == share_at_least(found, [0.1, found, found, 0.5]) == 0.75
    assert percentile_of(found, [found - 3 * TIE_ATOL]) == 100.0  # beyond it: a rank
    assert share_at_least(found, [found - 3 * TIE_ATOL]) == 0.0


def test_first_look_on_baseline_examples(micro, monkeypatch):
    """`BaselineRace.first` (`CELConfig.baseline_examples`): each random and pool set's race
    over the held-out split starts with a look on `first` examples instead of racing's first
    slice. On the planted micro model, whose random sets lie far from the found sets, the
    percentiles and shares are unchanged at a smaller share of the forwards (at least
    `first / first_slice` of them: the sets that race on see more)."""
    import workbench.confirmation.baseline as baseline
    from workbench.racing import first_slice

    scorer = micro.scorer("heldout")
    n_held = len(next(iter(scorer.clean().values())))
    sets = {s: HeadSet.of(micro.model, micro.best[s]) for s in (1, 2, 3)}
    pool = [(l, h) for l in range(MICRO.n_layers) for h in range(MICRO.n_heads)][2:]
    first = 8
    assert first < first_slice(n_held)
    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs["first"])
        return race(*args, **kwargs)

    race = baseline.race
    monkeypatch.setattr(baseline, "race", recording)
    runs = {k: confirm_sets(scorer, sets, ConfirmPlan(
                FIRST, SECOND, n_random=40, pool=pool, adaptive=BaselineRace(True, False, k),
                stats=Stats(n_boot=100)))[0]
            for k in (None, first)}
    assert set(seen) == {None, first} and seen.count(first) == seen.count(None) >= 3
    for column in ("percentile", "random_pct_ge", f"percentile_{SECOND}", "n_random",
                   "pool_percentile", "pool_pct_ge"):
        assert_close(runs[first][column], runs[None][column], msg=column)
    for column in ("random_forward_eq", "pool_forward_eq"):
        ratio = (runs[first][column] / runs[None][column]).dropna()  # NaN: every set reused
        assert len(ratio) >= 2 and (ratio < 1).all(), column
        assert (ratio >= first / first_slice(n_held) - 1e-9).all(), column
