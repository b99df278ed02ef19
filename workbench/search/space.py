"""The search space of stage 2: the pool, the scorer and the record of every set scored.

Every strategy (`workbench.search.strategies`, registered in `workbench.search.registry`)
works through one `SearchSpace`: it asks the space to score head sets on the selection split
(`evaluate`: exactly; `score_sets`: raced when `adaptive`), and the space scores each set
once (strategies share its cache), records it (`records`: `strategy, size, heads,
ablated_<objective>, n, d_<metric>`: the objective's value with the set removed, estimated as
the clean mean over the whole selection split plus the set's gain; `n` the examples its gains
rest on) and counts the forward-equivalents spent.

With `adaptive=True` (the pipeline's default, `workbench.racing`) the sets a strategy compares
are raced within each size: all on a first slice of the selection split, then only those whose
interval still reaches the best lower bound of their size on more examples, up to all of them;
knockout masks, which only rank heads, are scored on the first slice (`knockout_rows`). On
planted models this gives the same best sets at 0.30-0.32 of the forward-equivalents
(`bench/recall.py`, `docs/speed.md`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import torch

from workbench.guards import DEFAULT_RULE, bounds, decide
from workbench.heads import Head
from workbench.metric_records import record
from workbench.racing import ATOL, example_order, first_slice, interval, race, row_range
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.search.candidates import rank_order, sort_key
from workbench.search.finalists import default_budget
from workbench.stats import mean_se
from workbench.tables import head_name

HeadTuple = tuple[Head, ...]
# the entries of a cached set that are not a metric's gain
_NOT_GAINS = ("score", "n", "feasible", "spread", "ranked")


def _names(heads: Iterable[Head]) -> str:
    return ",".join(head_name(l, h) for l, h in sorted(heads))


@dataclass
class SearchSpace:
    """What a strategy works with: the candidate pool, the scorer, and the record of sets.

    It holds what every strategy shares (the scorer, the candidates, the objective and its
    tie-break, the largest set, the seed, racing, the guards, the lower-precision ranker);
    what one strategy alone reads is in its own settings (`Strategy.settings_type`, e.g.
    `InteractionSettings`, built from a run's config by `Strategy.settings_of`).

    Strategies call `evaluate(sets, strategy)`, which scores new sets on the selection split
    in batches, records every requested set and returns their sort keys. With `guards` (the
    main task's `workbench.guards.Guard`s) every set's feasibility is decided by
    `guard_rule` from its guard metrics' changes on the same passes, recorded (`feasible`),
    and ranks first in the sort keys: a strategy maximises the objective over feasible sets.

    With a `ranker` (a scorer of the same split on a lower-precision copy of the model,
    `workbench.precision`) the masks that only rank heads (`evaluate(..., rank=True)`: the
    interaction search's knockouts) are scored by it, and every set the strategies compare
    by `scorer`, at the model's own precision: a set scored by the ranker is never taken
    for a comparison, but scored again.
    """

    scorer: MaskScorer
    candidates: list[Head]
    objective: str
    secondary: str | None
    rank_by: str = "objective"
    max_size: int = 3
    seed: int = 0
    progress: bool = False
    pool: list[Head] | None = None
    adaptive: bool = False
    ci: float = 0.95
    guards: tuple = ()
    guard_rule: str = DEFAULT_RULE
    ranker: MaskScorer | None = None
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
    def n_heads(self) -> int:
        return self.model.cfg.n_layers * self.model.cfg.n_heads

    @property
    def regression_target(self) -> str:
        """The metric a regression on knockout masks fits: the objective, or the secondary
        metric when the objective is a 0/1 score per example (its record is `coarse`: a mean
        of 0/1 values over few examples is too coarse to regress on)."""
        coarse = record(self.objective, getattr(self.scorer, "metric", None)).coarse
        return self.secondary if coarse and self.secondary else self.objective

    def pool_heads(self) -> list[Head]:
        """The search pool (`pool`: heads whose single removal does not clearly hurt, see
        `workbench.search.candidates.search_pool`), else every head, in layer order."""
        if self.pool is not None:
            return list(self.pool)
        cfg = self.model.cfg
        return [(l, h) for l in range(cfg.n_layers) for h in range(cfg.n_heads)]

    def search_budget(self, budget: int | None = None) -> int:
        """`budget` (a strategy's `search_budget` setting), else
        `workbench.search.finalists.default_budget` for this model and `max_size`."""
        return budget if budget is not None else default_budget(self.n_heads, self.max_size)

    def gains(self, sets: Sequence[Iterable[Head]], metric: str) -> list[float]:
        """The recorded gain on `metric` of each of `sets` (scored before)."""
        return [self._cache[tuple(sorted(set(s)))][metric] for s in sets]

    @staticmethod
    def head_names(heads: Iterable[Head]) -> list[str]:
        """`["L1H2", ...]` for `heads`, in the order given."""
        return [head_name(l, h) for l, h in heads]

    @property
    def n_examples(self) -> int:
        return int(next(iter(self.scorer.clean().values())).shape[0])

    def first_rows(self) -> torch.Tensor:
        """The examples of the first racing look (`workbench.racing`), in racing order."""
        n = self.n_examples
        return example_order(n, self.seed)[: first_slice(n)]

    def knockout_rows(self, examples: int | None) -> torch.Tensor:
        """The examples the interaction search's knockouts are scored on when `adaptive`: the
        first `examples` (its `knockout_examples` setting) in racing order (all of a smaller
        split; None: the first racing slice, `first_rows`)."""
        n = self.n_examples
        return example_order(n, self.seed)[: first_slice(n, examples)]

    def _scored(self, s: HeadTuple, rank: bool = False) -> int:
        """Examples the cached set `s` was scored on, for a comparison (`rank` False: only
        by `scorer`) or for a ranking (either scorer); -1 when not cached."""
        entry = self._cache.get(s)
        if entry is None or (entry.get("ranked", False) and not rank):
            return -1
        return entry["n"]

    def evaluate(
        self, sets: Sequence[Iterable[Head]], strategy: str, rows: torch.Tensor | None = None,
        rank: bool = False,
    ) -> list[tuple]:
        """Score head sets (once each, cached), record them, return their sort keys.

        With `rows` the sets are scored on those examples only (and recorded with their `n`);
        a set cached from fewer examples than asked is scored again. With `rank` the sets
        only rank heads and are scored by `ranker` where there is one (class docstring).
        """
        sets = [tuple(sorted(set(s))) for s in sets]
        n_ex = self.n_examples
        want = n_ex if rows is None else len(rows)
        new = list(dict.fromkeys(s for s in sets if self._scored(s, rank) < want))
        if new:
            scorer = self.ranker if rank and self.ranker is not None else self.scorer
            clean = scorer.clean()
            kw = {} if rows is None else {"rows": rows}
            scores = scorer.score(masks_of(self.model, new), self.progress, strategy, **kw)
            picked = {m: c if rows is None else c[rows.to(c.device)] for m, c in clean.items()}
            diffs = {m: v - picked[m][None] for m, v in scores.items()}
            gains = {m: torch.nanmean(d, dim=-1).cpu().numpy() for m, d in diffs.items()}
            self.forward_eq += len(new) * want / n_ex
            self._store(new, gains, [want] * len(new), self._spread(diffs),
                        ranked=scorer is not self.scorer)
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
        new = list(dict.fromkeys(s for s in sets if self._scored(s) < n_ex))
        if new:
            first = self.order[0]
            sizes = torch.tensor([len(s) for s in new])

            def open_fn(means, ses, z, active, ranges=None):
                lo, hi = interval(means[first].cpu(), ses[first].cpu(), z)
                # with guards, a set whose guard interval lies below its tolerance is decided
                # infeasible and stops, and only sets already shown feasible (every guard's
                # interval above its tolerance) set the bar the others must reach: a set that
                # may yet fail a guard does not push out one that passes
                out = torch.zeros(len(active), dtype=torch.bool)
                sure = torch.ones(len(active), dtype=torch.bool)
                for g in self.guards:
                    g_lo, g_hi = bounds(means[g.metric].cpu(), ses[g.metric].cpu(), z,
                                        *(r.cpu() for r in ranges[g.metric]))
                    out |= g_hi < -g.tolerance - ATOL
                    sure &= g_lo >= -g.tolerance - ATOL
                of_size = sizes[active]
                still = ~out
                for k in of_size.unique().tolist():
                    mine = of_size == k
                    bar = mine & sure
                    if not bool(bar.any()):
                        continue
                    best_lo = torch.nan_to_num(lo[bar], nan=-math.inf).max()
                    still[mine] &= ~(hi[mine] < best_lo - ATOL)
                return still

            result = race(self.scorer, masks_of(self.model, new), open_fn, self.seed, self.ci,
                          progress=self.progress, desc=strategy, with_range=bool(self.guards))
            self.forward_eq += result.forward_eq
            means = {m: v.cpu().numpy() for m, v in result.means().items()}
            self._store(new, means, result.n.tolist(), self._spread(result.diffs))
        return self._record(sets, strategy)

    def _spread(self, diffs: dict) -> dict[str, tuple]:
        """Each guard metric's per-set standard error, smallest and largest per-example change
        (`{metric: (se, min, max)}`, numpy rows), from per-example differences."""
        out = {}
        for g in self.guards:
            d = diffs[g.metric]
            lo, hi = row_range(d)
            out[g.metric] = tuple(v.cpu().numpy() for v in (mean_se(d)[1], lo, hi))
        return out

    def _store(self, new: list[HeadTuple], gains: dict, ns: list[int], spread: dict,
               ranked: bool = False) -> None:
        clean_mean = float(torch.nanmean(self.scorer.clean()[self.objective].float()))
        z = NormalDist().inv_cdf(0.5 + self.ci / 2)
        for i, s in enumerate(new):
            entry = {m: float(gains[m][i]) for m in gains}
            entry["score"] = clean_mean + entry[self.objective]
            entry["n"] = int(ns[i])
            if ranked:
                entry["ranked"] = True
            if self.guards:
                entry["spread"] = {m: tuple(float(v[i]) for v in spread[m]) for m in spread}
                entry["feasible"] = all(
                    decide(self.guard_rule, entry[g.metric],
                           *bounds(entry[g.metric], entry["spread"][g.metric][0], z,
                                   *entry["spread"][g.metric][1:]), g.tolerance)
                    for g in self.guards)
            self._cache[s] = entry

    def _record(self, sets: list[HeadTuple], strategy: str) -> list[tuple]:
        keys = []
        n_ex = self.n_examples
        for s in sets:
            entry = self._cache[s]
            row = {
                "strategy": strategy,
                "size": len(s),
                "heads": _names(s),
                f"ablated_{self.objective}": entry["score"],
                "n": entry["n"],
                **{f"d_{m}": v for m, v in entry.items() if m not in _NOT_GAINS},
            }
            if self.ranker is not None:  # which rows only ranked heads, at lower precision
                row["ranked"] = bool(entry.get("ranked", False))
            if self.guards:
                for m, (se, smallest, largest) in entry["spread"].items():
                    row.update({f"d_{m}_se": se, f"d_{m}_min": smallest, f"d_{m}_max": largest})
                row["feasible"] = entry["feasible"]
            self.records.append(row)
            keys.append((entry["n"] == n_ex, entry.get("feasible", True),
                         *sort_key(entry, *self.order)))
        return keys

    def feasible(self, heads: Iterable[Head]) -> bool:
        """Whether a scored set passes every guard (True without guards)."""
        return bool(self._cache[tuple(sorted(set(heads)))].get("feasible", True))

    def check_side_guards(self, guards, scorers: dict) -> None:
        """Hold the best set of each size to `guards` on side tasks (`scorers`: task name ->
        a scorer of that task's selection split): the sets of each size that saw every
        example are taken in rank order, each scored on the guards' tasks, until one passes;
        those that fail are marked infeasible (`feasible`, and `guard_failed` naming the
        guards), so the best feasible set of a size passes every guard. A set is scored on a
        side task only when every better set of its size failed: usually once per size."""
        n_ex = self.n_examples
        z = NormalDist().inv_cdf(0.5 + self.ci / 2)
        failed: dict[HeadTuple, list[str]] = {}
        for size in range(1, self.max_size + 1):
            ranked = sorted((s for s, e in self._cache.items()
                             if len(s) == size and e["n"] == n_ex and e.get("feasible", True)
                             and not e.get("ranked", False)),
                            key=lambda s: (sort_key(self._cache[s], *self.order), _names(s)),
                            reverse=True)
            for s in ranked:
                missed = []
                for g in guards:
                    scorer = scorers[g.task]
                    clean = scorer.clean()[g.metric]
                    diff = scorer.score(masks_of(self.model, [s]))[g.metric][0] - clean
                    self.forward_eq += len(clean) / n_ex
                    mean, se = (float(v[0]) for v in mean_se(diff[None]))
                    smallest, largest = (float(v[0]) for v in row_range(diff[None]))
                    if not decide(self.guard_rule, mean,
                                  *bounds(mean, se, z, smallest, largest), g.tolerance):
                        missed.append(g.label)
                if not missed:
                    break
                failed[s] = missed
                self._cache[s]["feasible"] = False
        names = {_names(s): ",".join(m) for s, m in failed.items()}
        for row in self.records:
            row.setdefault("feasible", True)
            if row["heads"] in names:
                row["feasible"] = False
                row["guard_failed"] = names[row["heads"]]
        self.notes["side_guards"] = {"checked": [g.label for g in guards],
                                     "failed": names}
