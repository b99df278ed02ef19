"""Stage 2 of CEL: search head sets whose joint removal improves the task.

Removing two heads is not the sum of removing each (backup heads, saturation), so CEL scores
*sets* of heads, on the selection split only. Which sets is the job of a strategy, one
function per entry of `STRATEGIES`:

- `exhaustive`: every set of size 1..`max_size` among the top `top_m` candidates;
- `greedy`: forward selection over the candidate pool, one head per step, always up to
  `max_size` (a step that gains nothing can enable the next, as with a redundant pair);
- `beam`: greedy keeping the `beam_width` best sets of each size;
- `compressed_sensing`: random knockout masks over *all* heads (each head removed with
  probability `knockout_p`), a cross-validated Lasso of the masks' gain on the masks, and
  exhaustive search among the heads with the largest positive coefficients. It needs no
  single-head screen and sees heads that only help jointly: a head of a redundant pair gets
  a positive coefficient from the masks that also remove its partner.
- `interaction`: random knockouts (p = 0.3) over the pool of heads whose single removal does
  not clearly hurt (`search_pool`), least-squares main effects, then every set of size
  1..`max_size` among as many finalists as the forward budget (`default_budget`) allows
  (a quarter screening's top candidates, the rest the top main effects), scored exactly.
  On planted models (`bench/recall.py`) it is the only strategy that finds OR pairs and
  triples, at 144 to 1024 heads, within `2.5 n + 500` masks (half that when the sets
  searched have at most 2 heads).

Every evaluated set is recorded (`strategy, size, heads, ablated_<objective>, n,
d_<metric>`: the objective's value with the set removed, estimated as the clean mean over the
whole selection split plus the set's gain; `n` the examples its gains rest on), and
strategies share one cache, so a set is scored once.

With `adaptive=True` (the pipeline's default, `workbench.racing`) the sets a strategy compares
are raced within each size: all on a first slice of the selection split, then only those whose
interval still reaches the best lower bound of their size on more examples, up to all of them;
the interaction search's knockout masks, which only rank heads, are scored on the first slice.
On planted models this gives the same best sets at 0.30-0.32 of the forward-equivalents
(`bench/recall.py`, `docs/speed.md`).

Choices (measured or argued, see the README):

- The objective is the task's `metric` (default accuracy). With `rank_by="objective"` (the
  default) sets and candidates are ranked by the objective's gain on the selection split,
  ties broken by the `secondary` metric's gain (log-prob, or accuracy when the objective is
  log-prob); `rank_by="secondary"` ranks by the secondary first. Accuracy is coarse on a
  small selection split, so ties are common; the tie-break orders them by a continuous
  measure without letting a set that costs accuracy win on confidence alone. Measured on a
  retrained embedded-style model (2 x 4 heads, map task, 6 random selection subsets of 24 and
  of 96 examples, exhaustive up to size 3, gains on 600 held-out examples): both orders chose
  the same best sets (+0.080 accuracy held out); the best single head was as good or better
  with the objective first (+0.072 vs +0.070 at 96 examples). So the objective goes first.
- The overall best set is the smallest size whose best set has the largest objective gain:
  the tie-break orders sets of one size but does not justify removing more heads.
- Candidates (the pool for exhaustive, greedy and beam) are the heads whose single removal
  helps beyond noise on the selection split: the lower end of the paired bootstrap interval
  of the (first) metric's gain is above 0, or that gain is >= 0 and the tie-break metric's
  interval is above 0. When fewer than `top_m` heads qualify, the pool is filled up to
  `top_m` with the next heads in the same order (heads with no single effect, like a
  redundant pair, come before heads whose removal hurts). Greedy and beam search the whole
  pool; exhaustive its first `top_m`.
- The compressed-sensing regression uses the secondary metric's gain when the objective is
  accuracy (a mean of 0/1 values over few examples is too coarse to regress on), else the
  objective's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import torch

from workbench.candidates import rank_order, sort_key
from workbench.config import KNOCKOUT_EXAMPLES
from workbench.errors import WorkbenchError
from workbench.gates import gate_search
from workbench.heads import Head
from workbench.options import STRATEGY_NAMES, choose
from workbench.racing import ATOL, example_order, first_slice, interval, race
from workbench.scoring import MaskScorer, masks_of
from workbench.tables import head_name

HeadTuple = tuple[Head, ...]
# Share of the interaction search's finalists taken from single-head screening's top
# candidates (`pick_finalists`); the rest come from the knockout main effects.
SCREEN_SHARE = 0.25


def _names(heads: Iterable[Head]) -> str:
    return ",".join(head_name(l, h) for l, h in sorted(heads))


@dataclass
class SearchSpace:
    """What a strategy works with: the candidate pool, the scorer, and the record of sets.

    Strategies call `evaluate(sets, strategy)`, which scores new sets on the selection split
    in batches, records every requested set and returns their sort keys.
    """

    scorer: MaskScorer
    candidates: list[Head]
    objective: str
    secondary: str | None
    rank_by: str = "objective"
    max_size: int = 3
    top_m: int = 8
    beam_width: int = 4
    n_masks: int | None = None
    knockout_p: float | None = None
    seed: int = 0
    progress: bool = False
    pool: list[Head] | None = None
    budget: int | None = None
    screen_share: float = SCREEN_SHARE
    knockout_examples: int | None = KNOCKOUT_EXAMPLES
    adaptive: bool = False
    ci: float = 0.95
    records: list[dict] = field(default_factory=list)
    notes: dict = field(default_factory=dict)
    forward_eq: float = 0.0
    _cache: dict[HeadTuple, dict[str, float]] = field(default_factory=dict)

    @property
    def model(self):
        return self.scorer.model

    @property
    def order(self) -> tuple[str, str | None]:
        """The metrics sets are ranked by: (first, tie-break)."""
        return rank_order(self.objective, self.secondary, self.rank_by)

    @property
    def n_examples(self) -> int:
        return int(next(iter(self.scorer.clean().values())).shape[0])

    def first_rows(self) -> torch.Tensor:
        """The examples of the first racing look (`workbench.racing`), in racing order."""
        n = self.n_examples
        return example_order(n, self.seed)[: first_slice(n)]

    def knockout_rows(self) -> torch.Tensor:
        """The examples the interaction search's knockouts are scored on when `adaptive`: the
        first `knockout_examples` in racing order (all of a smaller split; None: the first
        racing slice, `first_rows`)."""
        n = self.n_examples
        return example_order(n, self.seed)[: first_slice(n, self.knockout_examples)]

    def evaluate(
        self, sets: Sequence[Iterable[Head]], strategy: str, rows: torch.Tensor | None = None
    ) -> list[tuple]:
        """Score head sets (once each, cached), record them, return their sort keys.

        With `rows` the sets are scored on those examples only (and recorded with their `n`);
        a set cached from fewer examples than asked is scored again.
        """
        sets = [tuple(sorted(set(s))) for s in sets]
        n_ex = self.n_examples
        want = n_ex if rows is None else len(rows)
        new = list(dict.fromkeys(s for s in sets if self._cache.get(s, {}).get("n", -1) < want))
        if new:
            clean = self.scorer.clean()
            kw = {} if rows is None else {"rows": rows}
            scores = self.scorer.score(masks_of(self.model, new), self.progress, strategy, **kw)
            picked = {m: c if rows is None else c[rows.to(c.device)] for m, c in clean.items()}
            gains = {m: torch.nanmean(v - picked[m][None], dim=-1) for m, v in scores.items()}
            self.forward_eq += len(new) * want / n_ex
            self._store(new, {m: g.cpu().numpy() for m, g in gains.items()}, [want] * len(new))
        return self._record(sets, strategy)

    def score_sets(self, sets: Sequence[Iterable[Head]], strategy: str) -> list[tuple]:
        """Score sets to compare them: raced when `adaptive` (`race_sets`), else exactly."""
        return self.race_sets(sets, strategy) if self.adaptive else self.evaluate(sets, strategy)

    def race_sets(self, sets: Sequence[Iterable[Head]], strategy: str) -> list[tuple]:
        """Race sets of each size on the objective (`workbench.racing.race`): a set stops once
        its interval lies below the best lower bound of its size; the others see every
        example. Sort keys rank sets that saw every example first.
        """
        sets = [tuple(sorted(set(s))) for s in sets]
        n_ex = self.n_examples
        new = list(dict.fromkeys(s for s in sets if self._cache.get(s, {}).get("n", -1) < n_ex))
        if new:
            first = self.order[0]
            sizes = torch.tensor([len(s) for s in new])

            def open_fn(means, ses, z, active):
                lo, hi = interval(means[first].cpu(), ses[first].cpu(), z)
                of_size = sizes[active]
                still = torch.ones(len(active), dtype=torch.bool)
                for k in of_size.unique().tolist():
                    mine = of_size == k
                    best_lo = torch.nan_to_num(lo[mine], nan=-math.inf).max()
                    still[mine] = ~(hi[mine] < best_lo - ATOL)
                return still

            result = race(self.scorer, masks_of(self.model, new), open_fn, self.seed, self.ci,
                          progress=self.progress, desc=strategy)
            self.forward_eq += result.forward_eq
            means = {m: v.cpu().numpy() for m, v in result.means().items()}
            self._store(new, means, result.n.tolist())
        return self._record(sets, strategy)

    def _store(self, new: list[HeadTuple], gains: dict, ns: list[int]) -> None:
        clean_mean = float(torch.nanmean(self.scorer.clean()[self.objective].float()))
        for i, s in enumerate(new):
            entry = {m: float(gains[m][i]) for m in gains}
            entry["score"] = clean_mean + entry[self.objective]
            entry["n"] = int(ns[i])
            self._cache[s] = entry

    def _record(self, sets: list[HeadTuple], strategy: str) -> list[tuple]:
        keys = []
        n_ex = self.n_examples
        for s in sets:
            entry = self._cache[s]
            self.records.append(
                {
                    "strategy": strategy,
                    "size": len(s),
                    "heads": _names(s),
                    f"ablated_{self.objective}": entry["score"],
                    "n": entry["n"],
                    **{f"d_{m}": v for m, v in entry.items() if m not in ("score", "n")},
                }
            )
            keys.append((entry["n"] == n_ex, *sort_key(entry, *self.order)))
        return keys


def exhaustive(space: SearchSpace) -> None:
    """Every set of size 1..max_size among the first `top_m` candidates."""
    pool = space.candidates[: space.top_m]
    sets = [c for k in range(1, space.max_size + 1) for c in combinations(pool, k)]
    space.score_sets(sets, "exhaustive")


def greedy(space: SearchSpace) -> None:
    """Forward selection: add the pool head that gives the best set, up to max_size."""
    current: HeadTuple = ()
    for _ in range(space.max_size):
        trials = [current + (h,) for h in space.candidates if h not in current]
        if not trials:
            return
        keys = space.score_sets(trials, "greedy")
        current = tuple(sorted(trials[max(range(len(trials)), key=keys.__getitem__)]))


def beam(space: SearchSpace) -> None:
    """Beam search: extend each of the `beam_width` best sets by one pool head per step."""
    beams: list[HeadTuple] = [()]
    for _ in range(space.max_size):
        trials = list(
            dict.fromkeys(
                tuple(sorted(b + (h,))) for b in beams for h in space.candidates if h not in b
            )
        )
        if not trials:
            return
        keys = space.score_sets(trials, "beam")
        order = sorted(range(len(trials)), key=lambda i: keys[i], reverse=True)
        beams = [trials[i] for i in order[: space.beam_width]]


def compressed_sensing(space: SearchSpace) -> None:
    """Random knockout masks over all heads, a Lasso of the gain on the masks, then
    exhaustive search among the `top_m` heads with the largest positive coefficients."""
    model = space.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    n_heads = L * H
    p = space.knockout_p or min(0.25, 5.0 / n_heads)
    n_masks = space.n_masks or max(64, 4 * n_heads)
    rng = np.random.default_rng([space.seed, 7])
    x = rng.random((n_masks, n_heads)) < p
    heads = [(f // H, f % H) for f in range(n_heads)]
    sets = [[heads[j] for j in np.flatnonzero(row)] for row in x]
    space.evaluate(sets, "compressed_sensing")
    target = (
        space.secondary if space.objective == "accuracy" and space.secondary else space.objective
    )
    y = np.array([space._cache[tuple(sorted(s))][target] for s in sets])
    coef = lasso_cv(x.astype(float), y, seed=space.seed)
    order = [j for j in np.argsort(-coef, kind="stable") if coef[j] > 0]
    space.notes["cs_coefficients"] = {head_name(*heads[j]): float(coef[j]) for j in order}
    space.notes["cs_target"] = target
    pool = [heads[j] for j in order[: space.top_m]]
    sets = [c for k in range(1, space.max_size + 1) for c in combinations(pool, k)]
    if sets:
        space.score_sets(sets, "compressed_sensing")


def default_budget(n_heads: int, max_size: int = 3) -> int:
    """Masks the interaction search may score on the selection split: `2.5 n + 500` (half
    knockouts, half finalist sets) for sets of 3 or more heads, half that for sets of up to 2.

    What the masks must resolve sets the budget: a member of an OR pair shows a knockout main
    effect of `G p`, a member of an OR triple only `G p^2`. For triples, `2.5 n + 500` is the
    smallest of the budgets tried (`5 n + 1000`, `3 n + 500`, `2.5 n + 500`, `2 n + 500`) that
    keeps 10/10 planted singles, pairs and triples at 144, 384 and 1024 heads
    (`bench/recall.py`; `2 n + 500` missed one triple at 144 heads); the earlier `5 n + 1000`
    cost a 270-head model 2x more masks (`docs/speed.md`). For pairs, half of it keeps 10/10
    singles and pairs at 144, 384 and 1024 heads on 16 and on 64 selection examples; 0.35 of
    it lost one or two pairs in 10 (`bench/quick.py --budgets`, `docs/recall.md`). The
    examples do not set it: knockouts are scored on the first slice (an eighth of the split,
    at least 16 examples) whatever the split's size, and on planted models 16 selection
    examples found within one plant of what 64 found at every budget tried (triples at the
    full budget: 9/10 and 10/10)."""
    full = 5 * n_heads // 2 + 500
    return full if max_size >= 3 else full // 2


def _n_sets(k: int, max_size: int) -> int:
    return sum(math.comb(k, s) for s in range(1, max_size + 1))


def max_finalists(left: int, max_size: int, available: int | None = None) -> int:
    """The most finalists `k` (at most `available`) whose sets of size 1..`max_size` fit in
    `left` masks."""
    k = 0
    while (available is None or k < available) and _n_sets(k + 1, max_size) <= left:
        k += 1
    return k


def _main_effects(x: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Least-squares main effects of 0/1 knockouts `x` on `y` (with intercept), a small ridge
    keeping the solve defined when a column is constant or masks are few."""
    finite = np.isfinite(y)
    x, y = x[finite].astype(float), y[finite]
    xc, yc = x - x.mean(0), y - y.mean()
    gram = xc.T @ xc
    lam = ridge * max(float(np.trace(gram)) / max(x.shape[1], 1), 1e-12)
    return np.linalg.solve(gram + lam * np.eye(x.shape[1]), xc.T @ yc)


def pick_finalists(
    screened: Sequence[Head], knocked: Sequence[Head], k: int, screen_share: float
) -> list[Head]:
    """`k` finalists: the first `ceil(screen_share k)` heads of `screened` (single-head
    screening's order), then the heads of `knocked` (knockout main effects' order) not yet
    chosen, then the rest of `screened` if `knocked` runs out."""
    n_screen = min(k, math.ceil(screen_share * k))
    chosen = list(dict.fromkeys(screened[:n_screen]))
    for h in [*knocked, *screened]:
        if len(chosen) >= k:
            break
        if h not in chosen:
            chosen.append(h)
    return chosen


def interaction(space: SearchSpace) -> None:
    """Interaction-aware search: random knockouts over the pool, then exact verification.

    1. The pool is `space.pool` (heads whose single removal does not clearly hurt, see
       `search_pool`), else every head. Heads that clearly hurt would only add noise and
       cannot belong to an enhancing set.
    2. `n_masks` random masks (default `min(4 n, budget / 2)`) knock out each pool head with
       probability `knockout_p` (default 0.3): every pair is then removed together in
       `n_masks p^2` masks and every triple in `n_masks p^3` (at 144 heads, 576 masks: 52 and
       16), so a member of an OR pair gets a main effect of `G p` and of an OR triple `G p^2`
       (Bernoulli knockouts, least squares on the masks' gain: the regression target as in
       `compressed_sensing`).
    3. `K` finalists, `K` as large as the remaining budget allows for every set of size
       1..`max_size`: the first quarter (`screen_share`) are single-head screening's top
       candidates in the pool, the rest the pool heads with the largest positive main effects
       (`pick_finalists`). Every such set is scored exactly: interactions among finalists are
       verified, not modelled. Screening's share is there because a knockout removes ~30 %
       of the pool at once, which on a real model is far from removing one head: on SmolLM2
       greater_than the best single head (screening's first candidate, +0.16 prob_diff held
       out) was not among the knockouts' top 20 (`docs/real-model-cel.md`). On planted
       models the share changes no recall (`docs/recall.md`). Under `run_cel`'s raced
       screening a head that does not hurt is ranked on the first slice of examples.
    """
    model = space.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    n_heads = L * H
    pool = (
        list(space.pool) if space.pool is not None else [(l, h) for l in range(L) for h in range(H)]
    )
    budget = space.budget if space.budget is not None else default_budget(n_heads,
                                                                          space.max_size)
    if not pool:
        space.notes["interaction"] = {"pool": 0}
        return
    p = space.knockout_p or 0.3
    if not 0.0 < p < 1.0:
        raise WorkbenchError(f"knockout_p must be in (0, 1); got {p}")
    n_masks = space.n_masks or max(64, min(4 * n_heads, budget // 2))
    rng = np.random.default_rng([space.seed, 13])
    x = rng.random((n_masks, len(pool))) < p
    x[~x.any(1), 0] = True  # no empty mask: the clean run is no measurement
    sets = [[pool[j] for j in np.flatnonzero(row)] for row in x]
    # adaptive: the knockouts only rank heads for the finalists, so one slice of examples each
    space.evaluate(sets, "interaction", rows=space.knockout_rows() if space.adaptive else None)
    knockout_eq = space.forward_eq
    target = (
        space.secondary if space.objective == "accuracy" and space.secondary else space.objective
    )
    y = np.array([space._cache[tuple(sorted(s))][target] for s in sets])
    coef = _main_effects(x, y)
    order = [j for j in np.argsort(-coef, kind="stable") if coef[j] > 0]
    left = budget - n_masks
    if left < 1:
        raise WorkbenchError(
            f"search budget {budget} leaves no room for finalist sets after {n_masks} knockout "
            f"masks (at least 64); give a budget of at least {n_masks + 1}, or fewer masks "
            "(n_masks)"
        )
    in_pool = set(pool)
    screened = [h for h in space.candidates if h in in_pool]
    knocked = [pool[j] for j in order]
    k = max_finalists(left, space.max_size, len(set(screened) | set(knocked)))
    finalists = pick_finalists(screened, knocked, k, space.screen_share)
    space.notes["interaction"] = {
        "pool": len(pool),
        "n_masks": n_masks,
        "knockout_p": p,
        "target": target,
        "finalists": [head_name(*h) for h in finalists],
        "effects": {head_name(*pool[j]): float(coef[j]) for j in order[: max(k, 20)]},
        "knockout_examples": len(space.knockout_rows()) if space.adaptive else space.n_examples,
    }
    sets = [c for s in range(1, space.max_size + 1) for c in combinations(finalists, s)]
    if sets:
        space.score_sets(sets, "interaction")
    space.notes["interaction"]["forward_eq"] = {
        "knockouts": knockout_eq, "finalists": space.forward_eq - knockout_eq}


Strategy = Callable[[SearchSpace], None]
STRATEGIES: dict[str, Strategy] = {
    "exhaustive": exhaustive,
    "greedy": greedy,
    "beam": beam,
    "compressed_sensing": compressed_sensing,
    "interaction": interaction,
    "gates": gate_search,
}


# Strategies that search among screening's top candidates, so need its ranks on every example;
# the others use only the pool (`search_pool`) or no screening at all.
RANKED_STRATEGIES = frozenset({"exhaustive", "greedy", "beam"})


def get_strategy(name: str) -> Strategy:
    """The strategy named `name`, one of `workbench.options.STRATEGY_NAMES`."""
    return STRATEGIES[choose(name, STRATEGY_NAMES, "search strategy")]


# ---------------------------------------------------------------------------------------------
# Sparse regression


def _lasso(x: np.ndarray, y: np.ndarray, alpha: float, n_iter: int = 500) -> np.ndarray:
    """FISTA for `min_b 1/(2n) |y - x b|^2 + alpha |b|_1` on centred `x`, `y`."""
    n = x.shape[0]
    lipschitz = max(np.linalg.norm(x, 2) ** 2 / n, 1e-12)
    b = np.zeros(x.shape[1])
    z, t = b.copy(), 1.0
    for _ in range(n_iter):
        grad = x.T @ (x @ z - y) / n
        step = z - grad / lipschitz
        b_new = np.sign(step) * np.maximum(np.abs(step) - alpha / lipschitz, 0.0)
        t_new = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        z = b_new + (t - 1.0) / t_new * (b_new - b)
        b, t = b_new, t_new
    return b


def lasso_cv(
    x: np.ndarray, y: np.ndarray, n_alphas: int = 12, n_folds: int = 5, seed: int = 0
) -> np.ndarray:
    """Lasso coefficients of `y` on `x` (with intercept), the penalty chosen by k-fold CV."""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    n = len(y)
    if n < n_folds * 2:
        raise WorkbenchError(f"compressed sensing needs at least {n_folds * 2} masks; got {n}")
    xc, yc = x - x.mean(0), y - y.mean()
    alpha_max = lasso_alpha_max(x, y)
    if alpha_max == 0.0:
        return np.zeros(x.shape[1])
    alphas = alpha_max * np.logspace(0, -3, n_alphas)
    folds = np.random.default_rng([seed, 11]).permutation(n) % n_folds
    errors = np.zeros(n_alphas)
    for k in range(n_folds):
        tr, te = folds != k, folds == k
        mx, my = x[tr].mean(0), y[tr].mean()
        for i, alpha in enumerate(alphas):
            b = _lasso(x[tr] - mx, y[tr] - my, alpha)
            errors[i] += ((y[te] - my - (x[te] - mx) @ b) ** 2).sum()
    return _lasso(xc, yc, alphas[int(np.argmin(errors))])


def lasso_alpha_max(x: np.ndarray, y: np.ndarray) -> float:
    """The smallest penalty at which the Lasso of `y` on `x` (with intercept) zeroes every
    coefficient: `max_j |x_j' (y - mean y)| / n` over the centred columns."""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    return float(np.abs((x - x.mean(0)).T @ (y - y.mean())).max() / len(y))


def lasso(x: np.ndarray, y: np.ndarray, alpha: float, n_iter: int = 5000) -> np.ndarray:
    """Lasso coefficients of `y` on `x` (with intercept) at a fixed penalty `alpha`: the
    objective `1/(2n) |y - x b|^2 + alpha |b|_1` of scikit-learn's `Lasso(alpha)`, by FISTA.
    (`lasso_cv` chooses the penalty by cross-validation instead.)"""
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    return _lasso(x - x.mean(0), y - y.mean(), alpha, n_iter)
