"""A sweep's table and figure: the best set of every cell, gathered from the cell folders.

`run_sweep` (`workbench.sweep`) runs one CEL run per cell of models x tasks x kinds, each in
its own results folder; `sweep_table` reads those folders into one table (`sweep.csv`) and
`sweep_plot` draws it (`sweep.png`):

| column                         | meaning                                                  |
|--------------------------------|----------------------------------------------------------|
| `model`, `task`, `kind`        | the cell                                                 |
| `objective`                    | the metric CEL improved (the task's)                     |
| `best`, `size`                 | the best head set and its size (`""`, 0 when none); when |
|                                | no set is significant, the top candidate                 |
| `significant`                  | whether `best` is significant (`p_holm < 1 - ci`)        |
| `gamed`                        | objective up, accuracy or log-prob down (`tradeoff.gamed`)|
| `select_gain`                  | its objective gain on the selection split                |
| `gain`, `gain_lo`, `gain_hi`   | its held-out gain with the paired bootstrap interval     |
| `percentile`, `random_pct_ge`  | its rank among random head sets of the same size, and the |
|                                | percent of them that do at least as well (both 0-100)     |
| `n_random`                     | how many random sets that is                             |
| `side_worst`, `side_worst_task`| the most negative objective effect on another task       |
| `side_mean`                    | the mean objective effect over the other tasks           |
| `side_worst_<m>`, `_task`,     | the worst accuracy / log-prob change on another task (its|
| `_p_holm`; `side_harmed`       | own metrics); the tasks hurt significantly in any metric |
| `folder`                       | the cell's results folder, relative to `out`             |
| `status`, `note`               | `done`, `skipped` (the task does not fit the model's     |
|                                | tokenizer: `note` says why), `failed` (`note`: the error)|
|                                | or `pending`; `note` also names side tasks left out      |
|                                | because they do not fit                                  |
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workbench.errors import WorkbenchError
from workbench.results.plots import save_figure
from workbench.results.result import CONFIG_FILE, REPORT_FILE, CELResult, mark_best
from workbench.results.tradeoff import SIDE_COLUMNS, side_summary
from workbench.tables import save_table

if TYPE_CHECKING:
    from workbench.sweep import SweepCell

TABLE_FILE = "sweep.csv"
PLOT_FILE = "sweep.png"
COLUMNS = (
    "model",
    "task",
    "kind",
    "objective",
    "best",
    "significant",
    "gamed",
    "size",
    "select_gain",
    "gain",
    "gain_lo",
    "gain_hi",
    "percentile",
    "random_pct_ge",
    "n_random",
    "side_worst",
    "side_worst_task",
    "side_mean",
    *SIDE_COLUMNS,
    "folder",
    "status",
    "note",
)
# The columns `workbench sweep` prints (`shown_table`), in the order of `COLUMNS`.
SHOWN_COLUMNS = (
    "model",
    "task",
    "kind",
    "objective",
    "best",
    "significant",
    "gamed",
    "gain",
    "gain_lo",
    "gain_hi",
    "percentile",
    "side_worst_accuracy",
    "side_harmed",
)


def slug(name: str, drop_suffix: str = "") -> str:
    """`name` (a path's last part) as a folder-name-safe string, `drop_suffix` removed."""
    base = Path(str(name)).name if ("/" in str(name) or "\\" in str(name)) else str(name)
    if drop_suffix and base.endswith(drop_suffix):
        base = base[: -len(drop_suffix)]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-") or "x"


def finished_result(folder: str | Path) -> CELResult | None:
    """The result in a cell folder when it is complete (every stage and the report), else
    None."""
    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file() or not (folder / REPORT_FILE).is_file():
        return None
    try:
        result = CELResult.load(folder)
    except WorkbenchError:
        return None
    if result.heads.empty or result.combos.empty or result.confirmation.empty:
        return None
    if result.config.others and result.side_effects.empty:
        return None
    return result


def _cell_row(cell: SweepCell, result: CELResult | None, status: str, note: str) -> dict:
    row: dict = {"model": cell.model, "task": cell.task, "kind": cell.kind, "folder": cell.name,
                 "status": "done" if result is not None else status, "note": note}
    if result is None:
        return row
    obj = result.config.objective
    row["objective"] = obj
    c = mark_best(result.confirmation, obj, result.alpha)
    significant = bool(c["best"].any()) if "best" in c else False
    best = c[c["best" if significant else "top_candidate"]] if "best" in c else c.iloc[0:0]
    if best.empty:
        row.update(best="", size=0, significant=False)
        return row
    b = best.iloc[0]
    row.update(
        best=str(b["heads"]),
        significant=significant,
        gamed=bool(b.get("gamed", False)),
        size=int(b["size"]),
        select_gain=b.get(f"select_d_{obj}", math.nan),
        gain=b.get(f"d_{obj}", math.nan),
        gain_lo=b.get(f"d_{obj}_lo", math.nan),
        gain_hi=b.get(f"d_{obj}_hi", math.nan),
        percentile=b.get("percentile", math.nan),
        random_pct_ge=b.get("random_pct_ge", math.nan),
        n_random=b.get("n_random", math.nan),
    )
    row.update(side_summary(result.side_effects, int(b["size"]), obj, result.alpha))
    return row


def sweep_table(
    out: str | Path,
    cells: Sequence[SweepCell],
    skipped: dict[str, str] | None = None,
    failed: dict[str, str] | None = None,
    notes: dict[str, str] | None = None,
) -> pd.DataFrame:
    """One row per cell from the cell folders under `out` (NaN / empty where a cell is not
    finished); `skipped` and `failed` map cell names to the reason, `notes` to a remark. See
    the module docstring for the columns."""
    out = Path(out)
    skipped, failed, notes = skipped or {}, failed or {}, notes or {}
    rows = []
    for c in cells:
        status = "skipped" if c.name in skipped else "failed" if c.name in failed else "pending"
        note = skipped.get(c.name) or failed.get(c.name) or notes.get(c.name, "")
        rows.append(_cell_row(c, finished_result(out / c.name), status, note))
    df = pd.DataFrame(rows).reindex(columns=list(COLUMNS))
    df["size"] = df["size"].astype("Int64")
    return df


def shown_table(table: pd.DataFrame) -> pd.DataFrame:
    """The columns of `table` that `workbench sweep` prints (`SHOWN_COLUMNS`), model and task
    paths shortened to their last part."""
    shown = table[list(SHOWN_COLUMNS)].copy()
    for c in ("model", "task"):
        shown[c] = [Path(str(v)).name for v in shown[c]]
    return shown


def sweep_plot(table: pd.DataFrame) -> Figure:
    """Held-out gain of each cell's best set with its interval (percentile vs random sets
    written beside it), and the worst side effect on another task."""
    if "status" in table:  # a skipped cell has nothing to draw
        table = table[table["status"] != "skipped"].reset_index(drop=True)
    n = len(table)
    fig = Figure(figsize=(9, max(2.5, 1.0 + 0.38 * n)))
    ax_gain, ax_side = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [3, 2]})
    y = np.arange(n)[::-1]
    labels = [
        f"{slug(r.model)} / {slug(r.task, '.jsonl')} / {r.kind}" for r in table.itertuples()
    ]
    gain = table["gain"].to_numpy(dtype=float)
    err = np.vstack(
        [
            gain - table["gain_lo"].to_numpy(dtype=float),
            table["gain_hi"].to_numpy(dtype=float) - gain,
        ]
    )
    ax_gain.errorbar(gain, y, xerr=err, fmt="o", capsize=4)
    for yi, g, p, best, sig in zip(y, gain, table["percentile"], table["best"],
                                   table["significant"], strict=True):
        if np.isfinite(g):
            pct = f", pct {float(p):.0f}" if pd.notna(p) else ""
            ns = "" if sig is True or sig == 1 else " (not significant)"
            ax_gain.annotate(
                f"{best}{pct}{ns}", (g, yi), xytext=(0, 6), textcoords="offset points", fontsize=7
            )
    ax_gain.axvline(0.0, color="grey", lw=0.8)
    ax_gain.set_yticks(y, labels, fontsize=8)
    ax_gain.set_xlabel("held-out gain of the best set (objective)")
    ax_gain.set_title("Removing the best head set", fontsize=9)
    side = table["side_worst_accuracy"].to_numpy(dtype=float)  # a metric of every task
    ax_side.barh(y, np.nan_to_num(side), color=["C3" if v < 0 else "C2" for v in side])
    ax_side.axvline(0.0, color="grey", lw=0.8)
    ax_side.set_xlabel("worst accuracy change on another task")
    ax_side.set_title("Side effects", fontsize=9)
    fig.tight_layout()
    return fig


def save_sweep(table: pd.DataFrame, out: str | Path, plot: bool = True) -> Path:
    """Write `sweep.csv` (and `sweep.png`) into `out`, atomically; returns the CSV path."""
    out = Path(out)
    path = save_table(table, out / TABLE_FILE)
    if plot:
        save_figure(sweep_plot(table), out / PLOT_FILE)
    return path
