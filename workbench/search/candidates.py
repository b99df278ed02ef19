"""Candidate heads and best sets: how single-head screening and the search's scored sets are
ranked (stage 1's candidates, stage 2's pool, stage 3's sets).

- `rank_order`: the metric that ranks and its tie-break (`RankBy`: the objective first, or
  the secondary);
- `select_candidates`: the heads whose single removal helps beyond noise on the selection
  split, filled up to `top_m` in rank order (see `workbench.search.space`'s docstring for why);
- `search_pool`: the heads whose single removal does not clearly hurt, which the interaction
  search knocks out at random;
- `best_sets`: the best set of each size, and the overall best (the smallest size with the
  largest gain: the tie-break does not justify removing more heads);
- `set_record`: a set's row of the search's table, the one scored on the most examples (its
  gains are what confirmation reports as the selection-split gain).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import pandas as pd

from workbench.guards import Guard, bounds, decide
from workbench.heads import Head
from workbench.options import RankBy


def sort_key(gains: dict[str, float], first: str, second: str | None) -> tuple:
    """The order of head sets: gain on `first`, then on `second`; NaN ranks last."""

    def clean(v):
        return -math.inf if v is None or math.isnan(v) else v

    return (clean(gains.get(first)), clean(gains.get(second)) if second else 0.0)


def search_pool(
    heads: pd.DataFrame, first: str, atol: float = 1e-5, second: str | None = None,
    guards=(),
) -> list[Head]:
    """Heads whose single removal does not clearly hurt `first`: the upper end of the paired
    interval of `d_<first>` is >= `-atol` (`atol` absorbs the float error of an effect that
    is exactly zero, ~1e-6 through a forward pass). NaN rows are left out. When no head has
    an interval for `first` (attribution on a multi-token task's exact match), `second`
    decides instead, as it ranks the candidates then (`select_candidates`).

    With `guards` (`workbench.guards.Guard`s of the main task), a head whose single removal
    clearly breaks a guard is left out too: the upper end of its `d_<metric>` interval lies
    below `-tolerance - atol`. Such a head (a "gamer": it raises a difference objective by
    pushing every answer down) otherwise dominates the knockouts' regression on the objective
    and hides the main effects of the heads that enhance the task (`docs/guards.md`). A head
    with no interval for a guard metric stays.

    Returns:
        The pool, in `(layer, head)` order.
    """
    first = estimated_metric(heads, first, second, "_hi")
    hi = heads[f"d_{first}_hi"].to_numpy(dtype=float)
    keep = ~np.isnan(hi) & (hi >= -atol)
    for g in guards:
        column = f"d_{g.metric}_hi"
        if column in heads:
            g_hi = heads[column].to_numpy(dtype=float)
            keep &= ~(g_hi < -g.tolerance - atol)
    return [
        (int(l), int(h)) for l, h, k in zip(heads["layer"], heads["head"], keep, strict=True) if k
    ]




def estimated_metric(heads: pd.DataFrame, first: str, second: str | None, column: str = "") -> str:
    """`first`, or `second` when no head has a number in `d_<first><column>` and some have
    one for `second` (attribution cannot linearise a multi-token task's exact-match
    accuracy): the metric that ranks the candidates and decides the search pool."""
    if (second is not None and f"d_{second}{column}" in heads
            and heads[f"d_{first}{column}"].isna().all()
            and heads[f"d_{second}{column}"].notna().any()):
        return second
    return first


def rank_order(objective: str, secondary: str | None, rank_by: str) -> tuple[str, str | None]:
    """`(first, tie-break)` metrics for `rank_by` = `"objective"` or `"secondary"`."""
    if RankBy.parse(rank_by) is RankBy.SECONDARY and secondary is not None:
        return secondary, objective
    return objective, secondary


def select_candidates(
    heads: pd.DataFrame, first: str, second: str | None, top_m: int, guards=()
) -> pd.DataFrame:
    """Mark candidates in a screening table (see the module docstring for the rule), ranking
    heads by their gain on `first`, ties broken by `second` (see `rank_order`); by `second`
    alone when no head has a number for `first`. With `guards` (`workbench.guards.Guard`s of
    the main task) the candidates whose single removal does not lower a guard metric beyond
    its tolerance (point estimates) rank before those that do, each group in the same order.

    Returns:
        A copy of `heads` with `candidate` (bool) and `candidate_rank` (0 = best, -1 = none).
    """
    df = heads.copy()
    if estimated_metric(df, first, second) != first:  # rank by `second` alone
        first, second = second, None
    d_obj = df[f"d_{first}"].to_numpy(dtype=float)
    beyond = df[f"d_{first}_lo"].to_numpy(dtype=float) > 0
    if second is not None and f"d_{second}_lo" in df:
        beyond |= (d_obj >= 0) & (df[f"d_{second}_lo"].to_numpy(dtype=float) > 0)
    d_sec = df[f"d_{second}"].to_numpy(dtype=float) if second else np.zeros(len(df))
    keys = [
        sort_key({first: a, second: b}, first, second) for a, b in zip(d_obj, d_sec, strict=True)
    ]
    order = sorted(range(len(df)), key=lambda i: keys[i], reverse=True)  # stable: layer, head
    order = [i for i in order if not math.isnan(d_obj[i])]
    chosen = [i for i in order if beyond[i]]
    chosen += [i for i in order if not beyond[i]][: max(0, top_m - len(chosen))]
    if guards:
        keeps = [all(not (df[f"d_{g.metric}"].iloc[i] < -g.tolerance) for g in guards)
                 for i in chosen]
        chosen = [i for i, k in zip(chosen, keeps, strict=True) if k] + \
            [i for i, k in zip(chosen, keeps, strict=True) if not k]
    df["candidate"] = False
    df["candidate_rank"] = -1
    for rank, i in enumerate(chosen):
        df.iloc[i, df.columns.get_loc("candidate")] = True
        df.iloc[i, df.columns.get_loc("candidate_rank")] = rank
    return df


def candidate_heads(heads: pd.DataFrame) -> list[Head]:
    """The candidates of a marked screening table, best first."""
    c = heads[heads["candidate"].astype(bool)].sort_values("candidate_rank")
    return [(int(l), int(h)) for l, h in zip(c["layer"], c["head"], strict=True)]


def best_sets(
    combos: pd.DataFrame, first: str, second: str | None, max_size: int
) -> tuple[dict[int, str], int | None]:
    """The best set of each size (by `sort_key`) and the size of the overall best: the
    smallest size whose best set has the largest gain on `first`. Where `combos` has an `n`
    column (examples a score rests on), only the sets of a size scored on the most examples
    compete: a set a race dropped early keeps a slice estimate, not a score to rank by. Where
    it has a `feasible` column (a guarded search, `workbench.guards`), only feasible sets
    compete: a size with none has no best set. Rows that only ranked heads at a lower
    precision (a `ranked` column, `workbench.search.space.SearchSpace.ranker`) never compete."""
    combos = compared(combos)
    most = combos.groupby("size")["n"].max().to_dict() if "n" in combos and len(combos) else {}
    guarded = "feasible" in combos
    best: dict[int, tuple[tuple, str]] = {}
    for row in combos.itertuples(index=False):
        size = int(row.size)
        if not 1 <= size <= max_size:
            continue
        if most and int(row.n) < most[size]:
            continue
        if guarded and not _true(row.feasible):
            continue
        gains = {first: getattr(row, f"d_{first}")}
        if second:
            gains[second] = getattr(row, f"d_{second}")
        key = sort_key(gains, first, second)
        heads = str(row.heads)
        if (
            size not in best
            or key > best[size][0]
            or (key == best[size][0] and heads < best[size][1])
        ):
            best[size] = (key, heads)
    if not best:
        return {}, None
    # Parsimony: a larger set must gain more on `first`; the tie-break orders sets of one size
    # but does not justify removing more heads. `max` keeps the smallest size on ties.
    overall = max(sorted(best), key=lambda s: best[s][0][0])
    return {s: heads for s, (_, heads) in sorted(best.items())}, overall


def _true(value) -> bool:
    """A table's boolean, also as read back from CSV (`"True"`)."""
    return bool(value) if isinstance(value, (bool, np.bool_)) else str(value) == "True"


def compared(combos: pd.DataFrame) -> pd.DataFrame:
    """The rows of `combos` that scored sets to compare them: all of them, but for the rows a
    `ranked` column marks (the knockouts a lower-precision copy scored, which only rank
    heads)."""
    if "ranked" not in combos or combos.empty:
        return combos
    return combos[~combos["ranked"].astype(bool)]


def set_record(combos: pd.DataFrame, heads: str) -> pd.Series | None:
    """The row of `combos` that scored the set `heads` (`"L1H0,L1H6"`) on the most examples
    (the first such row); None when the search never scored it. A set raced out early and
    scored again later has several rows: only the one with the most examples is the set's
    full-split value (`best_sets` ranks by those rows too). Rows that only ranked heads are
    not a set's value (`compared`)."""
    combos = compared(combos)
    if combos.empty:
        return None
    rows = combos[combos["heads"].astype(str) == heads]
    if rows.empty:
        return None
    return rows.loc[rows["n"].idxmax()] if "n" in rows else rows.iloc[0]


def closest_infeasible(combos, guards: Sequence[Guard], config, sets: dict) -> dict:
    """For each size of 1..`config.max_size` with no feasible set (`sets` lacks it), the set
    the search ranks first on the objective among those scored on every example, and the
    guards it failed: `{size: {"heads": ..., "d_<objective>": ..., "failed": [...]}}`."""
    if combos is None or len(combos) == 0 or "feasible" not in combos:
        return {}
    combos = compared(combos)  # not the knockouts a lower-precision copy scored
    z = NormalDist().inv_cdf(0.5 + config.ci / 2)
    out = {}
    for size in range(1, config.max_size + 1):
        if size in sets:
            continue
        rows = combos[combos["size"] == size]
        if rows.empty:
            continue
        rows = rows[rows["n"] == rows["n"].max()]
        top = rows.loc[rows[f"d_{config.objective}"].astype(float).idxmax()]
        failed = [g.label for g in guards if g.on_main and not decide(
            config.guard_rule, float(top[f"d_{g.metric}"]),
            *bounds(*(float(top[f"d_{g.metric}{s}"]) for s in ("", "_se")), z,
                    *(float(top[f"d_{g.metric}{s}"]) for s in ("_min", "_max"))), g.tolerance)]
        side = top.get("guard_failed")
        if isinstance(side, str) and side:
            failed += side.split(",")
        out[str(size)] = {"heads": str(top["heads"]),
                          f"d_{config.objective}": float(top[f"d_{config.objective}"]),
                          "failed": failed}
    return out
