"""Confirmation: is the gain of a found head set real, or the winner's curse?

The search picks, among many head sets, the ones that score best on the selection split, so
their selection-split gains are biased upwards. Confirmation re-scores the best set of each
size on the **held-out split**, which played no part in screening or search, and reports:

- the held-out gain of every metric, with its standard error and a paired bootstrap interval
  (`workbench.stats`);
- a baseline of `n_random` distinct head sets of the same size drawn uniformly (seeded) from
  all heads, or all sets of that size where there are no more than `n_random` (then the
  baseline is exact), scored on the same held-out examples: their mean and 95th percentile
  gain, the found set's percentile among them (ties count half) and `random_share_ge`, the
  share of them that do at least as well (the found set itself counts where it is among
  them). A set that merely removes "some heads" scores near the 50th percentile; a real
  enhancement sits near 100. With `adaptive=True` the random sets are raced: only those whose
  interval still overlaps the found set's gain see more held-out examples (the percentile is
  the exhaustive one whenever the intervals separate; `n_random_complete` counts the sets
  scored on every example, `random_forward_eq` the passes spent). The objective may be coarse
  (accuracy on few examples, with ties at a ceiling), so the percentile on the secondary metric
  is reported too;
- side effects: the same sets' effects on each other task, on all of its examples.

Honest-null additions (issue 11), each optional so older callers keep their columns:

- `pool`: a second random baseline drawn only from heads whose single removal does not
  clearly hurt on the selection split (`workbench.search.search_pool`). Most random heads
  hurt, so against all heads a set that does nothing (gain exactly 0) sits near the 100th
  percentile; against the pool it sits near the 50th. Columns `pool_random_mean`,
  `pool_percentile`, `pool_share_ge`, `n_pool_random`; the all-heads columns stay.
- `groups`: per-example cluster labels of the held-out split (e.g. the template an example
  was made from). Intervals then resample clusters (`clustered_bootstrap`) and the p-value
  flips cluster totals, since examples of one cluster share their noise.
- `p_value`: one-sided sign-flip p-value of "the held-out gain on the objective is > 0"
  (`workbench.stats.sign_flip_pvalue`: exact for few clusters, no normality), and `p_holm`,
  Holm-adjusted across the sizes: the headline is a size with `p_holm < alpha`. Side-effect
  rows get a two-sided `p_value` (is there any effect?) and `p_holm` across all of them.

Random sets and found sets are scored through one `MaskScorer`, so many of them share a
forward pass where that pays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.heads import HeadSet
from workbench.options import ClusterMode
from workbench.racing import race, separated_from
from workbench.scoring import Scorer, masks_of
from workbench.stats import (
    Stats,
    clustered_bootstrap,
    effect_summary,
    example_counts,
    holm,
    mean_se,
    percentile_of,
    share_at_least,
    sign_flip_pvalue,
)


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


def _effect_row(
    diffs: dict[str, torch.Tensor], n_boot: int, seed: int, ci: float, groups=None
) -> dict:
    row = {}
    for m, d in diffs.items():
        if groups is None:
            stats = effect_summary(d[None], n_boot, seed, ci)
        else:
            mean, se = mean_se(d[None])
            lo, hi = clustered_bootstrap(d[None], groups, n_boot, seed, ci)
            stats = {"": mean, "_se": se, "_lo": lo, "_hi": hi, "_n": example_counts(d[None])}
        for stat, v in stats.items():
            row[f"d_{m}{stat}"] = int(v[0]) if stat == "_n" else float(v[0])
    return row


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
    objective: str,
    secondary: str | None = None,
    others: Mapping[str, Scorer] | None = None,
    best_size: int | None = None,
    select_gains: Mapping[int, float] | None = None,
    n_random: int = 200,
    stats: Stats | None = None,
    *,
    pool=None,
    groups=None,
    other_groups: Mapping[str, list] | None = None,
    adaptive: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out confirmation and side effects of one head set per size.

    Args:
        heldout: a scorer of the held-out split.
        sets: size -> the best head set of that size (found on the selection split).
        objective, secondary: the metric names used for the percentiles.
        others: task name -> a scorer of that task, for side effects.
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
            means over each set's own examples (`n_random_complete` saw all of them).

    Returns:
        `(confirmation, side_effects)`: one row per size; one row per size and other task.
    """
    stats = stats or Stats()
    n_boot, ci, seed, n_flips = stats.n_boot, stats.ci, stats.seed, stats.n_flips
    progress = heldout.compute.progress
    model = heldout.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    _check_clusters(groups, "held-out split")
    for task, og in (other_groups or {}).items():
        _check_clusters(og, f"side-effect task {task!r}")
    clean = heldout.clean()
    rows, side_rows = [], []
    for size, head_set in sorted(sets.items()):
        masks = masks_of(model, [head_set])
        scores = heldout.score(masks)
        diffs = {m: scores[m][0] - clean[m] for m in scores}
        row = {"size": size, "heads": str(head_set), "best": size == best_size}
        if select_gains is not None and size in select_gains:
            row[f"select_d_{objective}"] = float(select_gains[size])
        row[f"clean_{objective}"] = float(torch.nanmean(clean[objective].float()))
        row.update(_effect_row(diffs, n_boot, seed, ci, groups))
        row["p_value"] = sign_flip_pvalue(diffs[objective], groups, n_flips, seed)
        if n_random > 0:
            random_sets = random_head_sets(L, H, size, n_random, seed)
            ranked = {m: row[f"d_{m}"] for m in (objective, secondary) if m is not None}
            r = race(heldout, masks_of(model, random_sets),
                     separated_from(ranked) if adaptive else None, seed, ci,
                     progress=progress, desc=f"random sets, size {size}")
            gains = {m: v.cpu().numpy() for m, v in r.means().items() if m in ranked}
            row["random_mean"] = float(np.nanmean(gains[objective]))
            row["random_q95"] = float(np.nanquantile(gains[objective], 0.95))
            row["percentile"] = percentile_of(row[f"d_{objective}"], gains[objective])
            row["random_share_ge"] = share_at_least(row[f"d_{objective}"], gains[objective])
            if secondary is not None:
                row[f"percentile_{secondary}"] = percentile_of(
                    row[f"d_{secondary}"], gains[secondary]
                )
            row["n_random"] = len(random_sets)
            row["n_random_complete"] = int(r.complete.sum())
            row["random_forward_eq"] = r.forward_eq
            row["random_exhaustive"] = len(random_sets) == math.comb(L * H, min(size, L * H))
            pool_sets = (pool_random_head_sets(pool, size, n_random, seed, reuse=random_sets)
                         if pool else [])
            if pool_sets:
                # the pool sets that are random sets too were scored above
                scored = {tuple(sorted(s)): i for i, s in enumerate(random_sets)}
                shared = [scored.get(tuple(sorted(s)), -1) for s in pool_sets]
                old = [j for j, i in enumerate(shared) if i >= 0]
                fresh = [j for j, i in enumerate(shared) if i < 0]
                g = np.empty(len(pool_sets))
                complete = np.empty(len(pool_sets), dtype=bool)
                g[old] = gains[objective][[shared[j] for j in old]]
                complete[old] = r.complete.numpy()[[shared[j] for j in old]]
                pool_eq = 0.0
                if fresh:
                    value = {objective: row[f"d_{objective}"]}
                    pr = race(heldout, masks_of(model, [pool_sets[j] for j in fresh]),
                              separated_from(value) if adaptive else None, seed, ci,
                              progress=progress, desc=f"pool sets, size {size}")
                    g[fresh] = pr.means()[objective].cpu().numpy()
                    complete[fresh] = pr.complete.numpy()
                    pool_eq = pr.forward_eq
                row["pool_random_mean"] = float(np.nanmean(g))
                row["pool_percentile"] = percentile_of(row[f"d_{objective}"], g)
                row["pool_share_ge"] = share_at_least(row[f"d_{objective}"], g)
                row["n_pool_random"] = len(pool_sets)
                row["n_pool_random_shared"] = len(old)
                row["n_pool_random_complete"] = int(complete.sum())
                row["pool_forward_eq"] = pool_eq
        rows.append(row)
        for task, scorer in (others or {}).items():
            other_clean = scorer.clean()
            other_scores = scorer.score(masks)
            side = {"size": size, "heads": str(head_set), "task": task}
            og = (other_groups or {}).get(task)
            side_diffs = {m: other_scores[m][0] - other_clean[m] for m in other_scores}
            side.update(_effect_row(side_diffs, n_boot, seed, ci, og))
            side["p_value"] = sign_flip_pvalue(
                side_diffs[objective], og, n_flips, seed, alternative="two-sided"
            )
            for m, v in other_clean.items():
                side[f"clean_{m}"] = float(torch.nanmean(v.float()))
            side_rows.append(side)
    confirmation, side_effects = pd.DataFrame(rows), pd.DataFrame(side_rows)
    if not confirmation.empty:
        confirmation["p_holm"] = holm(confirmation["p_value"])
    if not side_effects.empty:
        side_effects["p_holm"] = holm(side_effects["p_value"])
    return confirmation, side_effects
