"""The trade-off of removing heads: what the gain costs, measured as carefully as the gain.

CEL's claim is a trade-off: removing some heads helps one task and may hurt others. The
gain is confirmed on held-out examples (`workbench.confirmation.confirm`); this module reads the
same tables for the other half. It needs no model: only the saved columns.

- **Every metric of the main task** (`main_metrics_table`): the sets are chosen and
  confirmed on the objective, but accuracy and the answer's log-prob move too. Each metric
  other than the objective has a two-sided sign-flip p-value (`d_<m>_p` in
  `confirmation.csv`), Holm-corrected across sizes (`d_<m>_p_holm`).
- **The guard** (`gamed`, `gaming_note`): an objective that is a difference (`logit_diff`,
  `prob_diff`) rises whenever the wrong answer falls faster than the right one, so a set
  that breaks the model can raise it (a 145-head set of a peer method raised SmolLM2's IOI
  logit difference by 18 nats while its accuracy fell by 68 points). A set whose objective
  rises (`d_<objective> > 0`) while the main task's accuracy or answer log-prob falls
  significantly (`d_<m> < 0` with `d_<m>_p_holm < alpha`, `m` in `GUARD_METRICS`, not the
  objective itself) is flagged `gamed`, and `workbench.results.result.mark_best` never calls it
  best. The log-prob of the answer and `logit_diff` share the softmax normaliser, so when
  the answer's log-prob falls while `logit_diff` (or `prob_diff`) rises, the wrong answers'
  fall further: the set "raises logit_diff by lowering both answers".
- **Side tasks in their own metrics** (`side_table`): accuracy and log-prob always,
  `logit_diff` and `prob_diff` only where the task defines a wrong answer (elsewhere they
  rest on no example and are left out), each with its paired interval, `n` and a two-sided
  sign-flip p-value, Holm-corrected per metric across all side rows (`d_<m>_p`,
  `d_<m>_p_holm` in `side_effects.csv`). A metric that applies to no side task has no
  column there at all (`drop_inapplicable`).
- **The trade-off table** (`tradeoff.csv`, made by `workbench.confirmation.confirm.tradeoff_table`
  and drawn by `workbench.results.plots.tradeoff_plot`): for the confirmed sets and a sample of each
  random baseline's sets, the held-out gain on the main task against the change on every
  side task, both with paired intervals.
"""

from __future__ import annotations

import math

import pandas as pd

from workbench.metric_records import NEXT_TOKEN, names_where, table_order
from workbench.metric_records import metric_names as registered_names

# the main task's metrics whose significant fall flags a gamed objective, and the objectives
# that are a difference between the answer and a wrong answer (`workbench.metric_records`)
GUARD_METRICS = names_where("guards")
DIFFERENCE_METRICS = names_where("difference")
# the suffixes of one metric's columns in a confirmation or side-effects table
METRIC_SUFFIXES = ("", "_se", "_lo", "_hi", "_n", "_p", "_p_holm")


def metric_names(table: pd.DataFrame) -> list[str]:
    """The metrics of a confirmation or side-effects table (those with a `d_<m>_n` column),
    the registered ones first in their usual order."""
    names = [c[2:-2] for c in table.columns if c.startswith("d_") and c.endswith("_n")]
    return table_order(names)


def applies(table: pd.DataFrame, metric: str) -> bool:
    """Whether some row of `table` has an example `metric` is defined on."""
    col = f"d_{metric}_n"
    return col in table and bool((table[col].fillna(0).astype(float) > 0).any())


def drop_inapplicable(table: pd.DataFrame) -> pd.DataFrame:
    """`table` without the columns of a metric that no row has an example for (`d_<m>*` and
    `clean_<m>`: e.g. `logit_diff` when no side task has a wrong answer), and without
    `p_value` / `p_holm` when every row's is NaN (the objective applies to no row)."""
    drop = []
    for m in metric_names(table):
        if not applies(table, m):
            drop += [f"d_{m}{s}" for s in METRIC_SUFFIXES] + [f"clean_{m}"]
    for col in ("p_value", "p_holm"):
        if col in table and table[col].isna().all():
            drop.append(col)
    return table.drop(columns=[c for c in drop if c in table])


def _falls(row, metric: str, alpha: float) -> bool:
    d, p = row.get(f"d_{metric}", math.nan), row.get(f"d_{metric}_p_holm", math.nan)
    return bool(pd.notna(d) and pd.notna(p) and float(d) < 0 and float(p) < alpha)


def _fallen(row, objective: str, alpha: float) -> list[str]:
    """The guard metrics of one confirmation row that fall significantly, when the
    objective rises; [] otherwise."""
    gain = row.get(f"d_{objective}", math.nan)
    if pd.isna(gain) or float(gain) <= 0:
        return []
    return [m for m in GUARD_METRICS if m != objective and _falls(row, m, alpha)]


def gamed(confirmation: pd.DataFrame, objective: str, alpha: float) -> pd.Series:
    """True for each confirmation row whose objective rises while the main task's accuracy
    or answer log-prob falls significantly (see the module docstring); all False for a
    table without the guard's p-values (written before they existed)."""
    return pd.Series([bool(_fallen(r, objective, alpha)) for _, r in confirmation.iterrows()],
                     index=confirmation.index, dtype=bool)


def gaming_note(row, objective: str, alpha: float) -> str:
    """What a gamed set does, in words and numbers ("" when the row is not gamed), e.g.
    `raises logit_diff by lowering both answers: logprob -4.6 [-4.9, -4.3] (p_holm 0.0003)`."""
    fallen = _fallen(row, objective, alpha)
    if not fallen:
        return ""
    both = objective in DIFFERENCE_METRICS and "logprob" in fallen
    verb = "falls" if len(fallen) == 1 else "fall"
    how = "by lowering both answers" if both else f"while {' and '.join(fallen)} {verb}"
    parts = [f"{m} {interval(row, m)} (p_holm {float(row[f'd_{m}_p_holm']):.2g})"
             for m in fallen]
    return f"raises {objective} {how}: " + "; ".join(parts)


def interval(row, metric: str) -> str:
    """`+0.25 [+0.218, +0.288]`: a row's `d_<metric>` with its interval, 3 significant
    digits ("" when the metric rests on no example)."""
    return format_interval(row.get(f"d_{metric}", math.nan), row.get(f"d_{metric}_lo", math.nan),
                           row.get(f"d_{metric}_hi", math.nan))


def format_interval(d, lo, hi) -> str:
    """`+0.25 [+0.218, +0.288]` (3 significant digits; "" for a NaN `d`)."""
    if pd.isna(d):
        return ""
    return f"{float(d):+.3g} [{float(lo):+.3g}, {float(hi):+.3g}]"


def main_metrics_table(confirmation: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Every metric of the main task beside the objective, one row per size: the held-out
    change with its interval (as text, `interval`) and its two-sided `p_holm` across sizes,
    for each metric that rests on some example, then `gamed`."""
    c = confirmation
    if c.empty:
        return pd.DataFrame()
    out = c[["size", "heads"]].copy()
    for m in metric_names(c):
        if m == objective or not applies(c, m):
            continue
        out[f"d_{m} [lo, hi]"] = [interval(r, m) for _, r in c.iterrows()]
        if f"d_{m}_p_holm" in c:
            out[f"p_holm {m}"] = c[f"d_{m}_p_holm"].astype(float)
    if "gamed" in c:
        out["gamed"] = c["gamed"].astype(bool)
    return out


def side_table(side_effects: pd.DataFrame) -> pd.DataFrame:
    """The side effects in each task's own metrics, one row per size, task and metric that
    applies to the task (it rests on some example): `size, heads, task, metric, d, d_lo,
    d_hi, n, p_value` (two-sided sign-flip) and `p_holm` (Holm per metric across all side
    rows). A table saved before the per-metric p-values has them only for the objective's
    rows (`p_value`, `p_holm`), NaN elsewhere."""
    s = side_effects
    cols = ["size", "heads", "task", "metric", "d", "d_lo", "d_hi", "n", "p_value", "p_holm"]
    rows = []
    for _, r in s.iterrows():
        for m in metric_names(s):
            n = r.get(f"d_{m}_n", 0)
            if pd.isna(n) or int(n) == 0:
                continue
            rows.append({"size": int(r["size"]), "heads": r["heads"], "task": r["task"],
                         "metric": m, "d": float(r[f"d_{m}"]), "d_lo": float(r[f"d_{m}_lo"]),
                         "d_hi": float(r[f"d_{m}_hi"]), "n": int(n),
                         "p_value": float(r.get(f"d_{m}_p", math.nan)),
                         "p_holm": float(r.get(f"d_{m}_p_holm", math.nan))})
    return pd.DataFrame(rows, columns=cols)


def side_harms(side_effects: pd.DataFrame, size: int, alpha: float) -> pd.DataFrame:
    """The rows of `side_table` of one size whose effect is significantly negative
    (`d < 0`, `p_holm < alpha`)."""
    t = side_table(side_effects)
    return t[(t["size"] == size) & (t["d"] < 0) & (t["p_holm"] < alpha)]


# the columns `side_summary` adds to a sweep's row, beside the objective's side_worst (a
# sweep runs next-token tasks: a multiple-choice side task's acc and acc_norm add their own)
SIDE_COLUMNS = tuple(f"side_worst_{m}{s}" for m in names_where("guards",
                                                                 registered_names(NEXT_TOKEN))
                     for s in ("", "_task", "_p_holm")) + ("side_harmed",)


def _worst(rows: pd.DataFrame, metric: str) -> pd.Series | None:
    col = f"d_{metric}"
    if col not in rows or not rows[col].notna().any():
        return None
    return rows.loc[rows[col].astype(float).idxmin()]


def side_summary(side_effects: pd.DataFrame, size: int, objective: str, alpha: float) -> dict:
    """A sweep's summary of the side effects of its set of `size`: `side_worst`,
    `side_worst_task` and `side_mean` in the objective's units where it applies to some side
    task (else left out); then, in each side task's own metrics, `side_worst_<m>` (the most
    negative change), its task and `p_holm` for accuracy and log-prob, and `side_harmed`:
    the tasks with a significant fall in any metric (`side_harms`), comma-separated."""
    s = side_effects
    mine = s[s["size"] == size] if not s.empty and "size" in s else s
    if mine.empty:
        return {}
    out = {}
    worst = _worst(mine, objective)
    if worst is not None:
        out.update(side_worst=float(worst[f"d_{objective}"]), side_worst_task=str(worst["task"]),
                   side_mean=float(mine[f"d_{objective}"].astype(float).mean()))
    for m in GUARD_METRICS:
        worst = _worst(mine, m)
        if worst is not None:
            out[f"side_worst_{m}"] = float(worst[f"d_{m}"])
            out[f"side_worst_{m}_task"] = str(worst["task"])
            out[f"side_worst_{m}_p_holm"] = float(worst.get(f"d_{m}_p_holm", math.nan))
    out["side_harmed"] = ",".join(dict.fromkeys(side_harms(s, size, alpha)["task"]))
    return out


__all__ = [
    "SIDE_COLUMNS",
    "DIFFERENCE_METRICS",
    "GUARD_METRICS",
    "applies",
    "drop_inapplicable",
    "format_interval",
    "gamed",
    "gaming_note",
    "interval",
    "main_metrics_table",
    "metric_names",
    "side_harms",
    "side_summary",
    "side_table",
]
