"""The trade-off table: the gain of removing heads on the main task against the change on
every side task, for the confirmed sets and for random baseline sets.

`tradeoff_table` scores, per size, the confirmed set (`origin` "found") and `n_sets` of the
sets each random baseline of the confirmation draws (`workbench.confirmation.baseline`: the
all-heads baseline, "random", and the pool baseline, "pool"), each a uniform sample of its
baseline's seeded draw, through the same scorers and the same `ConfirmPlan` as
`confirm_sets`. `workbench.results.tradeoff` reads and draws the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from workbench.config import TRADEOFF_SETS
from workbench.confirmation.baseline import pool_random_head_sets, random_head_sets, set_key
from workbench.heads import HeadSet
from workbench.racing import example_order
from workbench.scoring.scorer import Scorer, masks_of
from workbench.stats import Stats, effect_summary

if TYPE_CHECKING:
    from workbench.confirmation.confirm import ConfirmPlan

# examples of the held-out split and of each side task on which `tradeoff_table` scores those
# random sets (the confirmed sets: every example). On Gemma-3 x ioi with induction beside it,
# the 58 sets on all 180 held-out and 300 induction examples took 715 s of a 1707 s run
# (`docs/speed.md`); a cloud point's standard error on 64 examples is its spread / 8.
TRADEOFF_EXAMPLES = 64
TRADEOFF_COLUMNS = ("origin", "size", "heads", "task", "metric", "gain", "gain_lo", "gain_hi",
                    "gain_n", "side_d", "side_d_lo", "side_d_hi", "side_n")


def _sample(sets: list, k: int, seed: int, size: int, stream: int, prefer=()) -> list:
    """`k` of `sets`, uniform without replacement (seeded; all of them when there are at
    most `k`). The baselines list all sets in lexicographic order where they are exhaustive,
    so a prefix would not be a uniform sample.

    `prefer`: a uniform sample of a larger family (the all-heads baseline's); those of its
    sets that are among `sets` come first and seeded draws from the rest top them up, which
    is still a uniform sample of `sets` (as in `pool_random_head_sets`), and the shared sets
    are scored once."""
    members = {set_key(s) for s in sets}
    first = [s for s in prefer if set_key(s) in members][:k]
    taken = {set_key(s) for s in first}
    rest = [s for s in sets if set_key(s) not in taken]
    need = k - len(first)
    if len(rest) <= need:
        return first + rest
    rng = np.random.default_rng([int(seed), int(size), 35, stream])
    return first + [rest[i] for i in sorted(rng.choice(len(rest), size=need, replace=False))]


def _summaries(diffs: torch.Tensor, stats: Stats, groups) -> dict[str, np.ndarray]:
    """`effect_summary` of every row of `diffs` (clustered when `groups` is given)."""
    out = effect_summary(diffs, stats.n_boot, stats.seed, stats.ci, groups)
    return {k: v.cpu().numpy() for k, v in out.items()}


def _sampled_scores(scorer: Scorer, masks: torch.Tensor, full: torch.Tensor,
                    max_examples: int | None, seed: int) -> dict[str, torch.Tensor]:
    """`{metric: [n_masks, n_examples]}`: the masks where `full` on every example, the others
    on the first `max_examples` examples of `example_order` (NaN on the rest)."""
    clean = scorer.clean()
    n = next(iter(clean.values())).shape[0]
    if max_examples is None or max_examples >= n or bool(full.all()):
        return scorer.score(masks)
    out = {m: torch.full((len(masks), n), float("nan"), dtype=v.dtype, device=v.device)
           for m, v in clean.items()}
    rows = example_order(n, seed)[:max_examples].sort().values
    for which, kw in ((full, {}), (~full, {"rows": rows})):
        if not bool(which.any()):
            continue
        at = which.nonzero().flatten()
        for m, v in scorer.score(masks[which], **kw).items():
            cols = rows if kw else torch.arange(n)
            out[m][at.to(v.device)[:, None], cols.to(v.device)[None]] = v
    return out


def tradeoff_table(
    heldout: Scorer,
    others: Mapping[str, Scorer],
    sets: Mapping[int, HeadSet],
    plan: ConfirmPlan,
    *,
    n_sets: int = TRADEOFF_SETS,
    max_examples: int | None = TRADEOFF_EXAMPLES,
) -> pd.DataFrame:
    """The trade-off of removing heads: the gain on the main task against the change on
    every side task, for the confirmed sets and for random baseline sets.

    For each size: the confirmed set (`origin` "found"), `n_sets` of the sets the all-heads
    baseline of `confirm_sets` draws (the same seeded draw of `n_random`; "random") and
    `n_sets` of the pool baseline's ("pool"), each a uniform sample of its baseline's sets.
    A confirmed set is scored on the whole held-out split and on every example of every side
    task (no racing); a random set on the first `max_examples` of each in racing's seeded
    example order (`workbench.racing.example_order`), a uniform sample, so its numbers are
    those examples' paired means and intervals (`gain_n`, `side_n` count them).

    Args:
        heldout, others, sets, plan: as for `confirm_sets` (the same scorers and plan give the
            same numbers; the plan's `objective`, `stats`, `n_random`, `pool`, `groups` and
            `other_groups` apply).
        n_sets: random sets per size and baseline (0: the confirmed sets only).
        max_examples: examples per split for the random sets (None: every example).

    Returns:
        One row per set, side task and side metric that applies to the task (`TRADEOFF_COLUMNS`):
        `gain`, `gain_lo`, `gain_hi`, `gain_n`: the held-out change of the objective;
        `side_d`, `side_d_lo`, `side_d_hi`, `side_n`: the change of `metric` on `task`.
        Empty without side tasks.
    """
    rows = []
    for size, head_set in sorted(sets.items()):
        rows += tradeoff_rows(heldout, others, size, head_set, plan, n_sets=n_sets,
                              max_examples=max_examples)
    return pd.DataFrame(rows, columns=list(TRADEOFF_COLUMNS))


def tradeoff_rows(
    heldout: Scorer,
    others: Mapping[str, Scorer],
    size: int,
    head_set: HeadSet,
    plan: ConfirmPlan,
    *,
    n_sets: int = TRADEOFF_SETS,
    max_examples: int | None = TRADEOFF_EXAMPLES,
) -> list[dict]:
    """One size of `tradeoff_table` (the same arguments, `size` and its confirmed
    `head_set` for `sets`): its rows, as dicts. The random sets are drawn per size and
    seed, so a size's rows do not depend on the others."""
    objective, stats, n_random, pool = plan.objective, plan.stats, plan.n_random, plan.pool
    groups, other_groups = plan.groups, plan.other_groups
    model = heldout.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    rows: list[dict] = []
    if not others:
        return rows
    clean = heldout.clean()
    side_clean = {task: scorer.clean() for task, scorer in others.items()}
    chosen = [("found", list(HeadSet.of(model, head_set).heads))]
    if n_random > 0 and n_sets > 0:
        random_sets = random_head_sets(L, H, size, n_random, stats.seed)
        sample = _sample(random_sets, n_sets, stats.seed, size, 0)
        pool_sets = (pool_random_head_sets(pool, size, n_random, stats.seed,
                                           reuse=random_sets) if pool else [])
        chosen += [("random", s) for s in sample] + [
            ("pool", s) for s in _sample(pool_sets, n_sets, stats.seed, size, 1, sample)]
    unique = list(dict.fromkeys(set_key(s) for _, s in chosen))
    index = {u: i for i, u in enumerate(unique)}
    masks = masks_of(model, [list(u) for u in unique])
    found = torch.tensor([u == set_key(chosen[0][1]) for u in unique])
    scores = _sampled_scores(heldout, masks, found, max_examples, stats.seed)
    gain = _summaries(scores[objective] - clean[objective], stats, groups)
    names = [str(HeadSet.of(model, list(u))) for u in unique]
    for task, scorer in others.items():
        scores = _sampled_scores(scorer, masks, found, max_examples, stats.seed)
        og = (other_groups or {}).get(task)
        side = {m: _summaries(v - side_clean[task][m], stats, og) for m, v in scores.items()}
        for origin, s in chosen:
            i = index[set_key(s)]
            for m, st in side.items():
                if st["_n"][i] == 0:  # not defined on this task (no wrong answer)
                    continue
                rows.append({
                    "origin": origin, "size": size, "heads": names[i], "task": task,
                    "metric": m, "gain": float(gain[""][i]), "gain_lo": float(gain["_lo"][i]),
                    "gain_hi": float(gain["_hi"][i]), "gain_n": int(gain["_n"][i]),
                    "side_d": float(st[""][i]), "side_d_lo": float(st["_lo"][i]),
                    "side_d_hi": float(st["_hi"][i]), "side_n": int(st["_n"][i]),
                })
    return rows
