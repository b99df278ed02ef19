"""Confirmation: is the gain of a found head set real, or the winner's curse?

The search picks, among many head sets, the ones that score best on the selection split, so
their selection-split gains are biased upwards. Confirmation re-scores the best set of each
size on the **held-out split**, which played no part in screening or search, and reports:

- the held-out gain of every metric, with its standard error and a paired bootstrap interval
  (`workbench.stats`);
- a baseline of `n_random` distinct head sets of the same size drawn uniformly (seeded) from
  all heads, or all sets of that size where there are no more than `n_random` (then the
  baseline is exact), scored on the same held-out examples: their mean and 95th percentile
  gain, the found set's `percentile` among them (ties count half) and `random_pct_ge`, the
  percent of them that do at least as well (the found set itself counts where it is among
  them); both are percents, 0-100. A set that merely removes "some heads" scores near the
  50th percentile; a real enhancement sits near 100. With `adaptive=True` the random sets
  are raced: only those whose interval still overlaps the found set's gain see more held-out
  examples (the percentile is the exhaustive one whenever the intervals separate;
  `n_random_complete` counts the sets scored on every example, `random_forward_eq` the
  passes spent). The objective may be coarse
  (accuracy on few examples, with ties at a ceiling), so the percentile on the secondary metric
  is reported too;
- side effects: the same sets' effects on each other task, on all of its examples.

Honest-null additions, each optional so older callers keep their columns:

- `pool`: a second random baseline drawn only from heads whose single removal does not
  clearly hurt on the selection split (`workbench.search.candidates.search_pool`). Most random heads
  hurt, so against all heads a set that does nothing (gain exactly 0) sits near the 100th
  percentile; against the pool it sits near the 50th. Columns `pool_random_mean`,
  `pool_percentile`, `pool_pct_ge`, `n_pool_random`; the all-heads columns stay.
- `groups`: per-example cluster labels of the held-out split (e.g. the template an example
  was made from). Intervals then resample clusters (`clustered_bootstrap`) and the p-value
  flips cluster totals, since examples of one cluster share their noise.
- `p_value`: one-sided sign-flip p-value of "the held-out gain on the objective is > 0"
  (`workbench.stats.sign_flip_pvalue`: exact for few clusters, no normality), and `p_holm`,
  Holm-adjusted across the sizes: the headline is a size with `p_holm < alpha`. Side-effect
  rows get a two-sided `p_value` (is there any effect?) and `p_holm` across all of them.

The trade-off (`workbench.results.tradeoff`), in added columns only:

- every metric `m` of the main task other than the objective gets a two-sided sign-flip
  `d_<m>_p` and `d_<m>_p_holm`, Holm-corrected across sizes (the guard against a gamed
  objective reads them);
- every side-effect metric gets the same, `d_<m>_p_holm` Holm-corrected across all side
  rows, one family per metric (`p_value` / `p_holm` stay: the objective's); a metric that
  rests on no example of any row (`logit_diff` when no side task has a wrong answer) is left
  out, as are `p_value` / `p_holm` when the objective applies to no side task;
- the trade-off table (`workbench.confirmation.tradeoff`): the confirmed sets and
  `TRADEOFF_SETS` sets of each random baseline per size, their held-out gain against their
  change on every side task, with intervals.

Random sets and found sets are scored through one `MaskScorer`, so many of them share a
forward pass where that pays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd
import torch

from workbench.config import TRADEOFF_SETS as TRADEOFF_SETS  # callers import these from here
from workbench.confirmation.baseline import BaselineRace, random_baselines
from workbench.confirmation.baseline import pool_random_head_sets as pool_random_head_sets
from workbench.confirmation.baseline import random_head_sets as random_head_sets
from workbench.errors import WorkbenchError
from workbench.guards import SLACK, Guard
from workbench.heads import HeadSet
from workbench.options import ClusterMode
from workbench.results.tradeoff import drop_inapplicable, metric_names
from workbench.scoring.scorer import Scorer, masks_of
from workbench.stats import (
    Stats,
    effect_summary,
    holm,
    sign_flip_pvalue,
    sign_flip_pvalues,
)


def _effect_row(
    diffs: dict[str, torch.Tensor], n_boot: int, seed: int, ci: float, groups=None
) -> dict:
    row = {}
    for m, d in diffs.items():
        stats = effect_summary(d[None], n_boot, seed, ci, groups)
        for stat, v in stats.items():
            row[f"d_{m}{stat}"] = int(v[0]) if stat == "_n" else float(v[0])
    return row


# where `workbench.estimate` reads the trade-off's example count
from workbench.confirmation.tradeoff import TRADEOFF_EXAMPLES as TRADEOFF_EXAMPLES  # noqa: E402

MIN_CLUSTERS = 8  # with G clusters the smallest one-sided sign-flip p is 2^-G: 0.0039 at 8


def _check_clusters(groups, where: str) -> None:
    if groups is None:
        return
    labels = groups.tolist() if isinstance(groups, torch.Tensor) else list(groups)
    n = len({("alone", i) if g is None else g for i, g in enumerate(labels)})
    if n < MIN_CLUSTERS:
        raise WorkbenchError(
            f"{where}: clustered inference needs at least {MIN_CLUSTERS} groups (the smallest "
            f"p-value with G groups is 2^-G); got {n}. Cluster only by a label that marks "
            "examples sharing their noise (a template), not by a stratum"
        )


def example_groups(data) -> list | None:
    """The `group` label of every example of an encoded task, or None when none has one."""
    task = getattr(data, "task", None)
    labels = [e.group for e in task.examples] if task is not None else []
    return labels if any(g is not None for g in labels) else None


def cluster_labels(data, mode: ClusterMode | str) -> list | None:
    """The group labels to cluster a split's inference by, or None for independent examples
    (`CELConfig.cluster`: `none`, `group`, or `auto`: groups when there are at least
    `MIN_CLUSTERS`)."""
    mode = ClusterMode.parse(mode)
    labels = example_groups(data) if mode is not ClusterMode.NONE else None
    if labels is None or (mode is ClusterMode.AUTO and len(set(labels)) < MIN_CLUSTERS):
        return None
    return labels


def confirm_sets(
    heldout: Scorer,
    sets: Mapping[int, HeadSet],
    plan: ConfirmPlan,
    others: Mapping[str, Scorer] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out confirmation and side effects of one head set per size.

    Args:
        heldout: a scorer of the held-out split.
        sets: size -> the best head set of that size (found on the selection split).
        plan: what each size is confirmed with (`ConfirmPlan`).
        others: task name -> a scorer of that task, for side effects.

    Returns:
        `(confirmation, side_effects)`: one row per size; one row per size and other task.

    Example:
        >>> conf, side = confirm_sets(heldout, sets, ConfirmPlan("logit_diff", n_random=100))
    """
    check_groups(plan)
    rows, side_rows = [], []
    for size, head_set in sorted(sets.items()):
        row, sides = confirm_size(heldout, size, head_set, others or {}, plan)
        rows.append(row)
        side_rows += sides
    return finish_confirmation(rows, side_rows)


@dataclass(frozen=True)
class ConfirmPlan:
    """What `confirm_sets` confirms each size with, besides the scorers and the sets.

    Attributes:
        objective, secondary: the metric names used for the percentiles.
        best_size: the size of the overall best set (flagged `best`).
        select_gains: size -> the set's objective gain on the selection split (reported
            next to the held-out gain).
        n_random: random sets per size; 0 skips the baseline.
        stats: the bootstrap's resamples, level and seed, and the sign flips of the p-values
            (`Stats()` by default); `seed` also draws the random sets.
        pool: heads the second random baseline draws from (None: no pool baseline).
        groups: per-example cluster labels of the held-out split (`example_groups`), or None
            for independent examples.
        other_groups: the same for each side-effect task.
        adaptive: race the random sets (`workbench.racing`): a set is scored on more held-out
            examples only while its interval still contains the found set's gain (on the
            objective or the secondary), so the percentiles and shares equal the exhaustive
            ones whenever the looks' intervals are right; `random_mean` / `random_q95` are then
            means over each set's own examples (`n_random_complete` saw all of them). A
            `BaselineRace` may also draw the sets in looks (`workbench.confirmation.baseline`): stop
            at 50, 100, ... of the `n_random` sets once the share of sets at least as good as the
            found set is decided against `1 - ci`; `n_random` / `n_pool_random` then count the sets
            scored, and `random_pct_hi` / `pool_pct_hi` bound the share.
        guards: the run's guards (`workbench.guards`), the safety test: each gets a one-sided
            sign-flip p-value of "the change is above -tolerance" (`guard_p_<task>_<metric>`;
            a side task's on its held-out examples), `guarded_p` is the largest of those and
            the objective's `p_value` (an intersection-union test), Holm across sizes in
            `guarded_p_holm`; the table then also counts the held-out examples each set turns
            right and wrong.
    """

    objective: str
    secondary: str | None = None
    best_size: int | None = None
    select_gains: Mapping[int, float] = field(default_factory=dict)
    n_random: int = 200
    stats: Stats = field(default_factory=Stats)
    pool: object = None
    groups: object = None
    other_groups: Mapping[str, list] = field(default_factory=dict)
    adaptive: bool | BaselineRace = False
    guards: tuple[Guard, ...] = ()

    def __post_init__(self) -> None:  # None for the defaults, as the keywords took them
        object.__setattr__(self, "stats", self.stats or Stats())
        object.__setattr__(self, "select_gains", dict(self.select_gains or {}))
        object.__setattr__(self, "other_groups", dict(self.other_groups or {}))


def guard_pvalue(changes: torch.Tensor, tolerance: float, groups, n_flips: int, seed: int) -> float:
    """The held-out safety test of one guard: the one-sided sign-flip p-value of "the change is
    above `-tolerance`", or 0 when no example's change falls below `-tolerance` (beyond the
    float slack of `workbench.guards.SLACK`). As the search's intervals are clipped at the
    smallest per-example change (`workbench.guards.bounds`), a set that lowers no held-out
    example is not worse on them: accuracy, whose changes are mostly ties at 0, would otherwise
    have to rise significantly to pass a guard of tolerance 0, which no set can do from a
    clean accuracy of 100 %. A set that lowers some example must show its mean change above
    `-tolerance`."""
    finite = changes[~torch.isnan(changes)]
    if finite.numel() and bool((finite >= -tolerance - SLACK).all()):
        return 0.0
    return sign_flip_pvalue(changes + tolerance, groups, n_flips, seed)


def check_groups(plan: ConfirmPlan) -> None:
    """Refuse clustered inference on fewer than `MIN_CLUSTERS` groups (before any forward)."""
    _check_clusters(plan.groups, "held-out split")
    for task, og in plan.other_groups.items():
        _check_clusters(og, f"side-effect task {task!r}")


def confirm_size(heldout: Scorer, size: int, head_set: HeadSet, others: Mapping[str, Scorer],
                 plan: ConfirmPlan) -> tuple[dict, list[dict]]:
    """One size of `confirm_sets`: the found set's row of the confirmation table (before the
    Holm correction across sizes) and its rows of the side-effects table. A size's rows do
    not depend on the other sizes (the random sets are drawn per size and seed), so a run
    interrupted between sizes resumes from the sizes done (`workbench.pipeline`)."""
    stats, objective, groups = plan.stats, plan.objective, plan.groups
    n_boot, ci, seed, n_flips = stats.n_boot, stats.ci, stats.seed, stats.n_flips
    clean = heldout.clean()
    masks = masks_of(heldout.model, [head_set])
    scores = heldout.score(masks)
    diffs = {m: scores[m][0] - clean[m] for m in scores}
    row = {"size": size, "heads": str(head_set), "best": size == plan.best_size}
    if size in plan.select_gains:
        row[f"select_d_{objective}"] = float(plan.select_gains[size])
    row[f"clean_{objective}"] = float(torch.nanmean(clean[objective].float()))
    row.update(_effect_row(diffs, n_boot, seed, ci, groups))
    row["p_value"] = sign_flip_pvalue(diffs[objective], groups, n_flips, seed)
    if plan.n_random > 0:
        row.update(random_baselines(heldout, size, row, objective, plan.secondary,
                                    plan.n_random, seed, ci, plan.pool,
                                    BaselineRace.of(plan.adaptive)))
    # is there any effect on the main task's other metrics?
    row.update(_two_sided(diffs, objective, groups, n_flips, seed))
    if plan.guards and "accuracy" in diffs:  # held-out examples the set turns right, wrong
        row["fixes"] = int((diffs["accuracy"] > 0).sum())
        row["breaks"] = int((diffs["accuracy"] < 0).sum())
    side_rows = []
    for task, scorer in others.items():
        other_clean = scorer.clean()
        other_scores = scorer.score(masks)
        side = {"size": size, "heads": str(head_set), "task": task}
        og = plan.other_groups.get(task)
        side_diffs = {m: other_scores[m][0] - other_clean[m] for m in other_scores}
        side.update(_effect_row(side_diffs, n_boot, seed, ci, og))
        # a side task of another kind (ioi beside a multiple-choice task) has no value in the
        # objective's units: its own metrics are its side effects
        side["p_value"] = sign_flip_pvalue(
            side_diffs[objective], og, n_flips, seed, alternative="two-sided"
        ) if objective in side_diffs else float("nan")
        for m, v in other_clean.items():
            side[f"clean_{m}"] = float(torch.nanmean(v.float()))
        if objective in side_diffs:
            side[f"d_{objective}_p"] = side["p_value"]
        side.update(_two_sided(side_diffs, objective, og, n_flips, seed))
        side_rows.append(side)
        for g in plan.guards:
            if g.task == task:  # the safety test on the side task's held-out examples
                rows = _heldout_rows(scorer.data)
                sub = None if og is None else [og[i] for i in rows.tolist()]
                row[f"guard_p_{task}_{g.metric}"] = guard_pvalue(
                    side_diffs[g.metric][rows.to(side_diffs[g.metric].device)], g.tolerance,
                    sub, n_flips, seed)
    for g in plan.guards:
        if g.on_main:
            row[f"guard_p_main_{g.metric}"] = guard_pvalue(diffs[g.metric], g.tolerance,
                                                           groups, n_flips, seed)
    if plan.guards:
        row["guarded_p"] = max(row["p_value"], *(row[f"guard_p_{g.task}_{g.metric}"]
                                                 for g in plan.guards))
    return row, side_rows


def finish_confirmation(rows: list[dict],
                        side_rows: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The confirmation and side-effects tables of `confirm_size`'s rows: the Holm
    corrections across sizes (across all side rows for side effects) added, the columns of
    metrics that apply to no row left out."""
    confirmation, side_effects = pd.DataFrame(rows), pd.DataFrame(side_rows)
    if not confirmation.empty:
        confirmation["p_holm"] = holm(confirmation["p_value"])
        if "guarded_p" in confirmation:  # a guarded run's safety test, Holm across sizes
            confirmation["guarded_p_holm"] = holm(confirmation["guarded_p"])
        _add_holm(confirmation)
    if not side_effects.empty:
        side_effects["p_holm"] = holm(side_effects["p_value"])
        _add_holm(side_effects)
    return drop_inapplicable(confirmation), drop_inapplicable(side_effects)


def _heldout_rows(data) -> torch.Tensor:
    """The rows of a task's encoded examples in its held-out split (every row when it has
    none: a side task written without splits)."""
    examples = data.task.examples
    rows = [i for i, e in enumerate(examples) if e.split == "heldout"]
    return torch.tensor(rows or list(range(len(examples))), dtype=torch.long)


def _two_sided(diffs: dict[str, torch.Tensor], skip: str, groups, n_flips: int,
               seed: int) -> dict[str, float]:
    """`d_<m>_p`: the two-sided sign-flip p-value of every metric but `skip`."""
    names = [m for m in diffs if m != skip]
    if not names:
        return {}
    p = sign_flip_pvalues(torch.stack([diffs[m] for m in names]), groups, n_flips, seed,
                          "two-sided")
    return {f"d_{m}_p": float(v) for m, v in zip(names, p, strict=True)}


def _add_holm(table: pd.DataFrame) -> None:
    """`d_<m>_p_holm` beside every `d_<m>_p`: Holm across the table's rows, one family per
    metric."""
    for m in metric_names(table):
        if f"d_{m}_p" in table:
            table[f"d_{m}_p_holm"] = holm(table[f"d_{m}_p"])
