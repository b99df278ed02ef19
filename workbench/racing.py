"""Adaptive evaluation (racing): spend examples only on the candidates still undecided.

Most candidates of a CEL stage are decided long before every example has been scored: a head
whose removal wrecks the task, a random head set far below the found one, a finalist set far
behind the best of its size. Racing (Maron & Moore 1994; successive halving) scores every
candidate on a first slice of the split, drops those whose question is already answered, and
scores the rest on the next slice, doubling, until the survivors have seen every example. The
last look uses the whole split, so a candidate that is never decided gets exactly the
exhaustive numbers; a dropped one keeps the numbers of the examples it was scored on, and
every table says how many that was (`n`).

A candidate is decided at an intermediate look when a normal interval `mean +- z se` over the
examples scored so far lies on one side of the decision's threshold. `z` is Bonferroni
corrected over the looks (`look_z`: 2.50 for a 95 % level and 4 looks), so that a decision the
exhaustive computation would not make at its own level is rare; a slice is at least
`MIN_SLICE` examples, so that a standard error is not made of a handful of values. The order
of the examples is a seeded permutation (`example_order`), the same for every candidate, so
the looks compare candidates on the same examples, as the paired statistics need.

The slices are rows of the split scored by `MaskScorer.score(masks, rows=...)`, which runs the
model on those rows only, so a slice of an eighth of the split costs an eighth of a pass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.stats import mean_se

MIN_SLICE = 16  # examples in the first slice, at least (or the whole split when smaller)
ATOL = 1e-5  # an effect within float error of 0 through a forward pass is 0 (as search_pool)

# `open_fn(means, ses, z, active) -> Bool[n_active]`: which active candidates (`active`: their
# indices among all candidates) are still undecided, from `{metric: [n_active]}` means and
# standard errors over the examples scored so far and the look's interval quantile `z`.
OpenFn = Callable[[dict[str, Tensor], dict[str, Tensor], float, Tensor], Tensor]


def example_order(n: int, seed: int) -> Tensor:
    """The seeded order in which racing scores the `n` examples of a split."""
    g = torch.Generator().manual_seed(int(seed) * 7919 + 101)
    return torch.randperm(n, generator=g)


def first_slice(n: int, first: int | None = None) -> int:
    """Examples in the first look of a split of `n`: `first` when given (a stage's own
    setting, e.g. `CELConfig.knockout_examples`), else an eighth of the split, at least
    `MIN_SLICE`; never more than `n`."""
    if first is not None:
        return min(n, max(1, int(first)))
    return min(n, max(MIN_SLICE, math.ceil(n / 8)))


def slice_ends(n: int, first: int | None = None) -> list[int]:
    """Cumulative examples at each look: `first_slice(n, first)`, then doubling, the last
    always `n`."""
    ends = [first_slice(n, first)]
    while ends[-1] < n:
        ends.append(min(n, 2 * ends[-1]))
    return ends


def look_z(ci: float, n_looks: int) -> float:
    """The normal quantile of a two-sided interval at level `ci`, Bonferroni corrected over
    `n_looks` looks."""
    if not 0.0 < ci < 1.0:
        raise WorkbenchError(f"ci must be in (0, 1); got {ci}")
    return NormalDist().inv_cdf(1.0 - (1.0 - ci) / (2.0 * max(1, n_looks)))


@dataclass
class Race:
    """What a race measured.

    Attributes:
        diffs: `{metric: [n_candidates, n_examples]}` ablated minus clean per example, in the
            data's row order, NaN where a candidate was not scored (or the metric is undefined).
        n: `[n_candidates]` examples each candidate was scored on.
        rows_scored: candidate-examples scored in all (forward-equivalents x examples).
        n_examples: examples in the split.
        looks: examples seen at each look.
    """

    diffs: dict[str, Float[Tensor, "n_masks batch"]]
    n: Tensor
    rows_scored: int
    n_examples: int
    looks: list[int]

    @property
    def forward_eq(self) -> float:
        """Full passes over the split this race cost (masks x examples scored / examples)."""
        return self.rows_scored / max(1, self.n_examples)

    def means(self) -> dict[str, Tensor]:
        """Each candidate's mean effect over the examples it was scored on."""
        return {m: mean_se(d)[0] for m, d in self.diffs.items()}

    @property
    def complete(self) -> Tensor:
        """`[n_candidates]` True where a candidate saw every example."""
        return self.n == self.n_examples


@dataclass(frozen=True)
class RacePlan:
    """How single-head screening is raced (`race`'s settings): `open_fn` decides which heads
    stay open after each look (None: every head on every example), the example order is
    seeded by `seed`, the looks' intervals are corrected to level `ci`, and no head is scored
    on more than the first `max_examples` examples of that order (None: all)."""

    open_fn: OpenFn | None = None
    seed: int = 0
    ci: float = 0.95
    max_examples: int | None = None


def race(
    scorer,
    masks: Float[Tensor, "n_masks layer head_index"],
    open_fn: OpenFn | None,
    seed: int = 0,
    ci: float = 0.95,
    first: int | None = None,
    progress: bool = False,
    desc: str = "masks",
    max_examples: int | None = None,
    with_range: bool = False,
) -> Race:
    """Score head masks look by look, each look on the next slice of examples, keeping only
    the masks `open_fn` leaves open.

    Args:
        scorer: a `MaskScorer` (anything with `clean()` and `score(masks, rows=...)`).
        masks: 0/1 masks, 1 = ablated.
        open_fn: decides which masks stay open after a look (see `OpenFn`); None scores every
            mask on every example (the exhaustive computation, one look).
        seed: the example order (`example_order`).
        ci: the level the looks' intervals are corrected to (`look_z`).
        first: examples in the first look (default `first_slice`).
        max_examples: stop after this many examples even for open masks (None: all).
        with_range: also pass `open_fn` each metric's smallest and largest per-example
            difference so far, `{metric: (min, max)}` (a fifth argument): no resampled mean
            lies outside them (`workbench.guards.bounds`).

    Returns:
        A `Race`; masks never decided have the exhaustive numbers.
    """
    clean = scorer.clean()
    n_ex = int(next(iter(clean.values())).shape[0])
    n_masks = int(masks.shape[0])
    limit = n_ex if max_examples is None else min(n_ex, max(1, int(max_examples)))
    ends = [limit] if open_fn is None else [e for e in slice_ends(limit, first)]
    z = look_z(ci, len(ends))
    order = example_order(n_ex, seed)
    device = next(iter(clean.values())).device
    diffs = {m: torch.full((n_masks, n_ex), float("nan"), device=device, dtype=v.dtype)
             for m, v in clean.items()}
    n = torch.zeros(n_masks, dtype=torch.long)
    active = torch.arange(n_masks)
    rows_scored, start = 0, 0
    for k, end in enumerate(ends):
        rows = order[start:end]
        if len(active):
            scores = scorer.score(masks[active.to(masks.device)], progress,
                                  f"{desc} ({end}/{n_ex} examples)", rows=rows)
            dev_rows = rows.to(device)
            for m, v in scores.items():
                diffs[m][active.to(device)[:, None], dev_rows[None]] = (
                    v.to(device) - clean[m][dev_rows][None]
                )
            n[active] = end
            rows_scored += len(active) * len(rows)
        start = end
        if k == len(ends) - 1 or not len(active):
            break
        stats = {m: mean_se(d[active.to(device)]) for m, d in diffs.items()}
        extra = ()
        if with_range:
            extra = ({m: row_range(d[active.to(device)]) for m, d in diffs.items()},)
        still = open_fn({m: s[0] for m, s in stats.items()}, {m: s[1] for m, s in stats.items()},
                        z, active, *extra)
        active = active[still.cpu().bool()]
    return Race(diffs, n, rows_scored, n_ex, ends)


def row_range(diffs: Float[Tensor, "n_rows batch"]) -> tuple[Tensor, Tensor]:
    """Each row's smallest and largest value, NaN ignored (NaN for a row with none)."""
    valid = ~torch.isnan(diffs)
    lo = torch.where(valid, diffs, torch.full_like(diffs, float("inf"))).amin(-1)
    hi = torch.where(valid, diffs, torch.full_like(diffs, float("-inf"))).amax(-1)
    none = ~valid.any(-1)
    return lo.masked_fill(none, float("nan")), hi.masked_fill(none, float("nan"))


def interval(mean: Tensor, se: Tensor, z: float) -> tuple[Tensor, Tensor]:
    """`mean -+ z se`; an undefined se (one example) gives an unbounded interval."""
    se = torch.nan_to_num(se, nan=float("inf"))
    return mean - z * se, mean + z * se


def clearly_hurts(metric: str) -> OpenFn:
    """Open until the interval of `metric`'s effect lies below 0 (removal clearly hurts)."""

    def open_fn(means, ses, z, active):
        if metric not in means:
            return torch.ones_like(next(iter(means.values())), dtype=torch.bool)
        _, hi = interval(means[metric], ses[metric], z)
        return ~(hi < -ATOL)

    return open_fn


def pool_decided(metric: str) -> OpenFn:
    """Open until a head's membership of the search pool (`workbench.search.candidates.search_pool`:
    removal does not clearly hurt `metric`) is decided: out once its interval lies below 0,
    in once its mean effect is >= 0 (its interval then reaches 0 too, and more examples could
    only take it out by pulling the mean below 0). Only heads that lean towards hurting
    without clearly hurting are scored further. A pool decided this way contains every head
    the exhaustive pool contains, and may contain a few more: the conservative side."""

    def open_fn(means, ses, z, active):
        if metric not in means:
            return torch.ones_like(next(iter(means.values())), dtype=torch.bool)
        mean = means[metric]
        _, hi = interval(mean, ses[metric], z)
        return ~((hi < -ATOL) | (mean >= -ATOL))

    return open_fn


SCREEN_RULES: dict[str, Callable[[str], OpenFn]] = {"hurts": clearly_hurts, "pool": pool_decided}


def separated_from(values: dict[str, float]) -> OpenFn:
    """Open while the interval of any metric's effect still contains `values[metric]` (the
    found set's gain a random baseline ranks against): a set clearly below or above it on
    every metric is decided for its percentile."""

    def open_fn(means, ses, z, active):
        still = torch.zeros_like(next(iter(means.values())), dtype=torch.bool)
        for m, v in values.items():
            if math.isnan(v):
                continue
            lo, hi = interval(means[m], ses[m], z)
            still |= ~((hi < v) | (lo > v))
        return still

    return open_fn


# Racing saves wall time only while a pass over a slice costs its share of a full pass; where
# launching a forward costs what computing it does (small models on a GPU) a slice costs
# nearly a full pass and racing's looks cost more than they save. Measured on an NVIDIA H200
# (docs/speed.md): the embedded main job took 6 s raced against 4 s unraced, though racing cut
# its forward-equivalents 3.2x. `RACING_SAVING` is that smallest measured cut: racing pays
# while a first slice costs per example less than that many times a full pass.
RACING_SAVING = 3.0


def racing_pays(slice_s: float, full_s: float, share: float) -> bool:
    """Whether racing saves wall time on a device where a pass over a first slice (`share`
    of the split's examples) took `slice_s` seconds and a pass over all of them `full_s`:
    `slice_s < RACING_SAVING * share * full_s`. Pure compute gives `slice_s = share * full_s`
    (racing pays); pure launch overhead `slice_s = full_s` (it does not)."""
    if not 0.0 < share <= 1.0 or slice_s < 0.0 or full_s <= 0.0:
        raise WorkbenchError(f"racing_pays needs 0 < share <= 1 and times >= 0; got share "
                             f"{share}, slice {slice_s} s, full {full_s} s")
    return slice_s < RACING_SAVING * share * full_s


def time_slice_and_pass(scorer, first: int, repeats: int = 3) -> tuple[float, float]:
    """`(slice_s, full_s)`: seconds of one mask that restarts at the first layer (a whole
    pass) scored on the first `first` examples of racing's order and on every example, the
    faster of `repeats` each after an untimed one (synchronized on CUDA)."""
    model = scorer.model
    masks = torch.zeros(1, model.cfg.n_layers, model.cfg.n_heads)
    masks[0, 0, 0] = 1.0
    rows = example_order(len(scorer.data), 0)[:first]
    cuda = torch.device(model.cfg.device).type == "cuda"
    best = {}
    for name, r in (("slice", rows), ("full", None)):
        times = []
        for _ in range(repeats + 1):
            t0 = time.perf_counter()
            scorer.score(masks, rows=r)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        best[name] = min(times[1:])
    return best["slice"], best["full"]


def auto_racing(scorer, distributed: bool = False) -> tuple[bool, str | None]:
    """`(race?, why)` for `workbench cel --racing auto`: on a CPU (compute-bound: a slice
    costs its share) and under torch.distributed (every rank must decide alike) racing stays
    on, unmeasured (`why` None); on a GPU it is on when `racing_pays` for a measured first
    slice (`time_slice_and_pass`), `why` saying so in one line. Not yet run on a real GPU
    (docs/speed.md)."""
    device = torch.device(scorer.model.cfg.device)
    if device.type == "cpu" or distributed:
        return True, None
    n = len(scorer.data)
    first = first_slice(n)
    slice_s, full_s = time_slice_and_pass(scorer, first)
    on = racing_pays(slice_s, full_s, first / n)
    return on, (f"racing {'on' if on else 'off'}: on {device} one mask took {slice_s:.3g} s "
                f"on {first} of {n} selection examples and {full_s:.3g} s on all of them "
                f"(racing pays below {RACING_SAVING:g} x {first}/{n} of the full pass)")
