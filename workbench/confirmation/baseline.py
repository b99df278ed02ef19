"""Random baselines drawn in looks: stop drawing random head sets once the found set's rank
among them is decided.

Confirmation ranks the found set of each size among `n_random` random sets of that size
(`workbench.confirmation.confirm`). The question the baseline answers is whether the found set is
among the best `alpha` (5 %) of such sets: whether `S`, the share of all sets of that size
whose held-out gain is at least the found set's, is below `alpha`. A uniform sample answers
it long before `n_random` sets when the answer is clear: no random triple of 100 reaching the
found set's gain already bounds `S` below 5 %, and 30 of 50 reaching it bounds `S` far above.

So the seeded list of `n_random` sets is scored in looks, its prefixes of `n_random / 4`,
`n_random / 2` and `n_random` sets (halving down to at least `MIN_LOOK`, so that a reported
share rests on at least that many sets), and drawing stops at the first look where the exact
(Clopper-Pearson) interval of `S` from the `count` of sets at least as good among the `m`
drawn lies wholly below or wholly above `alpha`. The interval's level is Bonferroni-corrected
over the looks (`1 - alpha / n_looks`), so either decision is wrong with probability at most
`alpha` whatever `S` is: a valid sequential rule (a group-sequential test with a Bonferroni
spending of `alpha`). Every prefix of the list is itself a uniform sample without replacement
(the list is drawn one set at a time), so the sets scored at a stop are a uniform sample of
their size, and the reported percentile and share are those of the sets scored (`n_random` in the
table counts them; `*_pct_hi` is the interval's upper end at the stop, in percent). A list that
holds every set of its size (the exact distribution) is always scored whole.

Which sets reach the found gain is decided by racing each set over the held-out examples
(`workbench.racing.separated_from`), exactly as without looks; only the number of sets drawn
changes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.racing import race, separated_from
from workbench.scoring.scorer import Scorer, masks_of
from workbench.stats import n_at_least, percentile_of, share_at_least

MIN_LOOK = 50  # sets in the first look, at least: a share on fewer would be too coarse

# `score(start, end) -> (gains, complete, forward_eq)`: the sets `[start, end)` of the list,
# scored: `{metric: [end - start]}` gains, `[end - start]` True where a set saw every example,
# and the forward-equivalents spent.
ScoreFn = Callable[[int, int], tuple[dict[str, np.ndarray], np.ndarray, float]]


def set_looks(n_sets: int, sequential: bool = True) -> list[int]:
    """Sets scored by each look: `n_sets` halved while at least `MIN_LOOK`, then doubling back
    up to `n_sets` (`[50, 100, 200]` for 200); `[n_sets]` when not sequential."""
    looks = [int(n_sets)]
    while sequential and math.ceil(looks[0] / 2) >= MIN_LOOK:
        looks.insert(0, math.ceil(looks[0] / 2))
    return looks


def _log_binom_pmf(k: int, m: int, p: float) -> float:
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == m else -math.inf
    return (math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
            + k * math.log(p) + (m - k) * math.log1p(-p))


def _binom_cdf(k: int, m: int, p: float) -> float:
    """P(Binomial(m, p) <= k)."""
    if k < 0:
        return 0.0
    if k >= m:
        return 1.0
    return min(1.0, sum(math.exp(_log_binom_pmf(j, m, p)) for j in range(k + 1)))


def _bisect(f: Callable[[float], bool], lo: float = 0.0, hi: float = 1.0) -> float:
    """The boundary in [lo, hi] where monotone `f` turns from False to True (to 1e-10)."""
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid):
            hi = mid
        else:
            lo = mid
    return hi


def share_interval(count: int, m: int, level: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval at `level` of a binomial share from
    `count` successes in `m` draws; `(0, 1)` when `m` is 0.

    Example:
        >>> share_interval(0, 100, 0.95)[1]  # no success in 100: the share is below 3.7 %
        0.0362...
    """
    if not 0 <= count <= m:
        raise WorkbenchError(f"a share needs 0 <= count <= m; got count {count}, m {m}")
    if not 0.0 < level < 1.0:
        raise WorkbenchError(f"level must be in (0, 1); got {level}")
    if m == 0:
        return 0.0, 1.0
    tail = (1.0 - level) / 2
    # lower end: the p at which P(X >= count) reaches the tail; upper: P(X <= count) falls to it
    lo = 0.0 if count == 0 else _bisect(lambda p: 1.0 - _binom_cdf(count - 1, m, p) >= tail)
    hi = 1.0 if count == m else _bisect(lambda p: _binom_cdf(count, m, p) <= tail)
    return lo, hi


def share_decided(count: int, m: int, alpha: float, n_looks: int) -> tuple[bool, float]:
    """Whether `count` of `m` sets at least as good as the found set decide that the share
    `S` of such sets is below or above `alpha`, at level `1 - alpha / n_looks`; and the
    interval's upper end."""
    lo, hi = share_interval(count, m, 1.0 - alpha / max(1, n_looks))
    return hi < alpha or lo > alpha, hi


@dataclass(frozen=True)
class BaselineRace:
    """How a random baseline spends its forwards: `examples` races each set over the
    held-out examples (`workbench.racing.separated_from`), its first look on `first`
    examples (None: racing's `first_slice`); `looks` draws the sets in looks
    (`draw_in_looks`). False for both scores every set of the list on every example."""

    examples: bool = False
    looks: bool = False
    first: int | None = None

    @classmethod
    def of(cls, value: "bool | BaselineRace") -> "BaselineRace":
        """A `BaselineRace` as given, or `examples=value` for a bool."""
        return value if isinstance(value, BaselineRace) else cls(examples=bool(value))


@dataclass
class Drawn:
    """The sets a baseline scored, in list order.

    Attributes:
        gains: `{metric: [n_scored]}` held-out gains.
        complete: `[n_scored]` True where a set saw every held-out example.
        forward_eq: forward-equivalents spent.
        share_hi: the upper end of the share's interval at the last look (`share_decided`);
            NaN when the list was scored in one look.
    """

    gains: dict[str, np.ndarray]
    complete: np.ndarray
    forward_eq: float
    share_hi: float

    @property
    def n(self) -> int:
        return len(self.complete)


def draw_in_looks(n_sets: int, score: ScoreFn, found: float, objective: str, alpha: float,
                  sequential: bool = True) -> Drawn:
    """Score a baseline's seeded list of `n_sets` sets look by look (`set_looks`), stopping
    at the first look where the share of sets whose `objective` gain is at least `found` is
    decided (`share_decided`).

    Args:
        n_sets: sets in the list (a uniform sample in draw order, so any prefix is one too).
        score: scores the sets `[start, end)` of the list (`ScoreFn`).
        found: the found set's held-out gain on `objective`.
        alpha: the share the found set is ranked against (`1 - ci`).
        sequential: False scores the whole list in one look.

    Returns:
        A `Drawn` of the sets scored.
    """
    looks = set_looks(n_sets, sequential)
    gains: dict[str, list[np.ndarray]] = {}
    complete: list[np.ndarray] = []
    forward_eq, share_hi, start = 0.0, math.nan, 0
    for end in looks:
        g, done, eq = score(start, end)
        for m, v in g.items():
            gains.setdefault(m, []).append(np.asarray(v))
        complete.append(np.asarray(done, dtype=bool))
        forward_eq += eq
        start = end
        values = np.concatenate(gains[objective])
        values = values[~np.isnan(values)]
        if not sequential or math.isnan(found) or len(values) == 0:
            continue
        decided, share_hi = share_decided(n_at_least(found, values), len(values), alpha,
                                          len(looks))
        if decided and end < looks[-1]:
            break
    return Drawn({m: np.concatenate(v) for m, v in gains.items()}, np.concatenate(complete),
                 forward_eq, share_hi)


def random_head_sets(
    n_layers: int, n_heads: int, size: int, n: int, seed: int
) -> list[list[tuple[int, int]]]:
    """`n` distinct head sets of `size` distinct heads, uniform over all such sets (seeded).

    Where there are at most `n` sets of that size (e.g. 120 pairs of 16 heads), all of them
    are returned in lexicographic order, so the baseline is the exact distribution rather than
    a sample with repeats.
    """
    total = n_layers * n_heads
    size = min(size, total)
    if math.comb(total, size) <= n:
        return [
            [(f // n_heads, f % n_heads) for f in combo]
            for combo in itertools.combinations(range(total), size)
        ]
    rng = np.random.default_rng([int(seed), int(size)])
    out: list[list[tuple[int, int]]] = []
    seen: set[tuple[int, ...]] = set()
    while len(out) < n:
        flat = tuple(sorted(int(f) for f in rng.choice(total, size=size, replace=False)))
        if flat not in seen:
            seen.add(flat)
            out.append([(f // n_heads, f % n_heads) for f in flat])
    return out


def pool_random_head_sets(
    pool, size: int, n: int, seed: int, reuse: Sequence | None = None
) -> list[list[tuple[int, int]]]:
    """`n` distinct sets of `size` heads drawn uniformly from `pool` (all of them, in
    lexicographic order, when there are at most `n`), seeded like `random_head_sets`.

    `reuse`: sets already drawn uniformly from all heads (`random_head_sets`). Those that lie
    in the pool come first, and seeded pool draws top them up to `n`. Uniform sets from all
    heads that happen to lie in the pool are uniform over the pool's sets, so the result is
    still a uniform sample without replacement, and the shared sets need not be scored twice
    (on a real model most heads are in the pool, and so are most random sets).
    """
    pool = sorted((int(l), int(h)) for l, h in pool)
    if size > len(pool) or size < 1:
        return []
    total = math.comb(len(pool), size)
    if reuse is None or total <= n:
        flat = random_head_sets(1, len(pool), size, n, seed)
        return [[pool[j] for _, j in s] for s in flat]
    members = set(pool)
    out = [sorted(map(tuple, s)) for s in reuse if all(tuple(h) in members for h in s)][:n]
    seen = {tuple(s) for s in out}
    # the plain pool draws, of which at most len(out) are taken already: enough to top up
    for s in pool_random_head_sets(pool, size, n, seed):
        if len(out) >= n:
            break
        if tuple(s) not in seen:
            seen.add(tuple(s))
            out.append(s)
    return out


def set_key(head_set) -> tuple:
    """A head set as a sorted tuple of `(layer, head)`, to compare sets."""
    return tuple(sorted(map(tuple, head_set)))


def random_baselines(heldout: Scorer, size: int, row: dict, objective: str,
                     secondary: str | None, n_random: int, seed: int, ci: float, pool,
                     plan: BaselineRace) -> dict:
    """The random-baseline columns of `confirm_sets`'s row for the found set of `size`
    (`row` holds its held-out gains `d_<metric>`): `n_random` seeded sets from all heads and
    from `pool`, raced over the held-out examples when `adaptive` and drawn in looks
    (`draw_in_looks`) as `plan` says."""
    adaptive, looks = plan.examples, plan.looks
    model = heldout.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    progress = heldout.compute.progress
    found = row[f"d_{objective}"]
    ranked = {m: row[f"d_{m}"] for m in (objective, secondary) if m is not None}
    random_sets = random_head_sets(L, H, size, n_random, seed)
    exhaustive = len(random_sets) == math.comb(L * H, min(size, L * H))
    scored: dict[tuple, tuple[float, bool]] = {}  # set -> (objective gain, complete)

    def score_random(a: int, b: int):
        r = race(heldout, masks_of(model, random_sets[a:b]),
                 separated_from(ranked) if adaptive else None, seed, ci, first=plan.first,
                 progress=progress, desc=f"random sets, size {size}")
        gains = {m: v.cpu().numpy() for m, v in r.means().items() if m in ranked}
        done = r.complete.numpy()
        for i, s in enumerate(random_sets[a:b]):
            scored[set_key(s)] = (float(gains[objective][i]), bool(done[i]))
        return gains, done, r.forward_eq

    alpha = 1.0 - ci
    drawn = draw_in_looks(len(random_sets), score_random, found, objective, alpha,
                          looks and not exhaustive)
    gains = drawn.gains
    out = {
        "random_mean": float(np.nanmean(gains[objective])),
        "random_q95": float(np.nanquantile(gains[objective], 0.95)),
        "percentile": percentile_of(found, gains[objective]),
        "random_pct_ge": 100.0 * share_at_least(found, gains[objective]),
    }
    if secondary is not None:
        out[f"percentile_{secondary}"] = percentile_of(row[f"d_{secondary}"], gains[secondary])
    out.update({"n_random": drawn.n, "n_random_complete": int(drawn.complete.sum()),
                "random_forward_eq": drawn.forward_eq, "random_exhaustive": exhaustive})
    if looks:
        out["random_pct_hi"] = 100.0 * drawn.share_hi
    pool_sets = (pool_random_head_sets(pool, size, n_random, seed, reuse=random_sets)
                 if pool else [])
    if not pool_sets:
        return out
    shared = [0]

    def score_pool(a: int, b: int):
        # the pool sets that are random sets scored above keep their scores
        chunk = pool_sets[a:b]
        g = np.empty(len(chunk))
        done = np.empty(len(chunk), dtype=bool)
        fresh = [j for j, s in enumerate(chunk) if set_key(s) not in scored]
        for j, s in enumerate(chunk):
            if set_key(s) in scored:
                g[j], done[j] = scored[set_key(s)]
        shared[0] += len(chunk) - len(fresh)
        eq = 0.0
        if fresh:
            pr = race(heldout, masks_of(model, [chunk[j] for j in fresh]),
                      separated_from({objective: found}) if adaptive else None, seed, ci,
                      first=plan.first, progress=progress, desc=f"pool sets, size {size}")
            g[fresh] = pr.means()[objective].cpu().numpy()
            done[fresh] = pr.complete.numpy()
            eq = pr.forward_eq
        return {objective: g}, done, eq

    pool_exhaustive = len(pool_sets) == math.comb(len(pool), min(size, len(pool)))
    drawn = draw_in_looks(len(pool_sets), score_pool, found, objective, alpha,
                          looks and not pool_exhaustive)
    g = drawn.gains[objective]
    out.update({
        "pool_random_mean": float(np.nanmean(g)),
        "pool_percentile": percentile_of(found, g),
        "pool_pct_ge": 100.0 * share_at_least(found, g),
        "n_pool_random": drawn.n,
        "n_pool_random_shared": shared[0],
        "n_pool_random_complete": int(drawn.complete.sum()),
        "pool_forward_eq": drawn.forward_eq,
    })
    if looks:
        out["pool_pct_hi"] = 100.0 * drawn.share_hi
    return out
