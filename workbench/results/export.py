"""Tables that say what they rest on: the long (tidy) export of runs, and single heads with n.

A CEL results folder holds wide tables, one column per metric and statistic. To compare runs
(models, tasks, ablation kinds) in pandas a long table is easier: one row per measured
effect. `tidy_table` turns one run into it and `tidy` stacks several; `workbench.results.report`
writes each folder's as `tidy.csv` (`TIDY_FILE`). Its columns:

| column   | meaning                                                                         |
|----------|---------------------------------------------------------------------------------|
| `run`    | the run's name: its folder's name, or the key it was given under (below)         |
| `table`  | the wide table the row comes from: `heads`, `combos`, `confirmation`, `side_effects` |
| `split`  | `select`, `heldout`, or `all` (a side task's examples)                           |
| `task`   | the task the effect is measured on (the main task or a side task)               |
| `metric` | the metric, e.g. `accuracy`; the value is its change `d_<metric>`                |
| `heads`  | the head (`"L0H4"`) or head set (`"L1H0,L1H6"`) removed                          |
| `size`   | how many heads that is                                                          |
| `value`  | the effect, ablated minus clean, in the metric's units                          |
| `lo`, `hi` | its paired bootstrap interval (empty for `combos`, which has none)            |
| `n`      | the examples (or, clustered, still examples) the value rests on                  |

A folder's own `tidy.csv` names its run `model:task`, which must not change when the folder
moves.

Every value is a cell of a wide table, copied: `heads`' `d_<m>` (and each side task's
`d_<m>_<task>`), `combos`' `d_<m>`, `confirmation`'s and `side_effects`' `d_<m>`; a cell
measured on no example (`logit_diff` of a task without wrong answers) is left out. Random
baselines (`percentile`, `random_pct_ge`, `tradeoff.csv`'s sampled sets) stay in the wide
tables.

`single_heads` is the per-head screening table of a run beside what it rests on: racing
(`workbench.racing`) stops a head once its rank is decided, so a clearly helpful or harmful
head is measured on a first slice of the selection split, not all of it. The search may later
score the same head alone on more examples; `search_d_<objective>` and `search_n` give that
value where it exists, the number the confirmation table's `select_d_<objective>` shows for a
single head.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.results.store import read_folder
from workbench.screening.registry import screening_estimate
from workbench.search.candidates import set_record

TIDY_FILE = "tidy.csv"
TIDY_COLUMNS = ("run", "table", "split", "task", "metric", "heads", "size", "value", "lo", "hi",
                "n")


def tidy(*runs) -> pd.DataFrame:
    """Several CEL runs as one long table (`TIDY_COLUMNS`, see the module docstring).

    Args:
        runs: results folders (str or Path), `CELResult`s, or mappings name -> either; a
            folder's run is named by the folder's name (its path where two names collide), a
            `CELResult` given alone by its `model:task`.

    Example:
        >>> t = tidy("cel_ioi", "cel_greater_than")
        >>> t[t["table"] == "confirmation"].pivot_table("value", ["run", "size"], "metric")
    """
    parts = []
    for name, run in named_runs(runs):
        if isinstance(run, (str, os.PathLike)):
            data, tables = read_folder(run)
            parts.append(tidy_table(data["config"], tables, name))
        else:
            parts.append(tidy_table(run.config.to_dict(), result_tables(run), name))
    if not parts:
        return pd.DataFrame(columns=list(TIDY_COLUMNS))
    return pd.concat(parts, ignore_index=True)


def named_runs(runs) -> list[tuple[str, object]]:
    """`(name, run)` for each of `runs` as `tidy` names them: a folder (str or Path) by its
    folder's name (its path where two names collide), a `CELResult` by its `model:task`, a
    mapping's items by their keys."""
    named: list[tuple[str, object]] = []
    for run in runs:
        if isinstance(run, Mapping):
            named += [(str(k), v) for k, v in run.items()]
        elif isinstance(run, (str, os.PathLike)):
            named.append((Path(run).name, run))
        else:
            named.append((f"{run.config.model}:{run.config.task}", run))
    names = [n for n, _ in named]
    return [(str(run) if isinstance(run, (str, os.PathLike)) and names.count(name) > 1
             else name, run) for name, run in named]


def tidy_table(config: Mapping, tables: Mapping[str, pd.DataFrame], run: str = "") -> pd.DataFrame:
    """One run's wide tables as the long table of `tidy`.

    Args:
        config: the run's config as a dict (`CELConfig.to_dict()`, or `config.json`'s).
        tables: table name -> wide table (`heads`, `combos`, `confirmation`, `side_effects`;
            missing or empty ones add no rows).
        run: the value of the `run` column.
    """
    task = str(config.get("task", ""))
    rows: list[pd.DataFrame] = []
    heads = tables.get("heads", pd.DataFrame())
    if not heads.empty:
        one = heads.assign(size=1, heads=heads["head_name"])
        rows += _long(one, "heads", "select", task)
        for other in config.get("others", ()):
            rows += _long(one, "heads", "all", other, suffix=f"_{other}")
    combos = tables.get("combos", pd.DataFrame())
    if not combos.empty:
        rows += _long(combos, "combos", "select", task, n_column="n")
    conf = tables.get("confirmation", pd.DataFrame())
    if not conf.empty:
        rows += _long(conf, "confirmation", "heldout", task)
    side = tables.get("side_effects", pd.DataFrame())
    for other, part in (side.groupby("task", sort=False) if not side.empty else ()):
        rows += _long(part, "side_effects", "all", str(other))
    if not rows:
        return pd.DataFrame(columns=list(TIDY_COLUMNS))
    out = pd.concat(rows, ignore_index=True)
    out.insert(0, "run", run)
    out = out[out["value"].notna()].reset_index(drop=True)
    out["size"] = out["size"].astype(int)
    out["n"] = out["n"].astype(int)
    return out[list(TIDY_COLUMNS)]


def _long(df: pd.DataFrame, table: str, split: str, task: str, suffix: str = "",
          n_column: str | None = None) -> list[pd.DataFrame]:
    """One long frame per metric of `df`: the metrics are the `d_<m>` columns (with
    `suffix`) that have an `n` (`d_<m>_n<suffix>`, or the shared `n_column`)."""
    if n_column is not None:
        metrics = [c[2:] for c in df.columns if c.startswith("d_") and not c.endswith(
            ("_se", "_lo", "_hi", "_n", "_p", "_p_holm", "_min", "_max"))]
    else:
        metrics = [c[2:-len(f"_n{suffix}")] for c in df.columns
                   if c.startswith("d_") and c.endswith(f"_n{suffix}")
                   and f"d_{c[2:-len(f'_n{suffix}')]}{suffix}" in df]
    out = []
    for m in metrics:
        nan = pd.Series(np.nan, index=df.index)
        out.append(pd.DataFrame({
            "table": table, "split": split, "task": task, "metric": m,
            "heads": df["heads"].astype(str), "size": df["size"],
            "value": df[f"d_{m}{suffix}"].astype(float),
            "lo": df.get(f"d_{m}_lo{suffix}", nan).astype(float),
            "hi": df.get(f"d_{m}_hi{suffix}", nan).astype(float),
            "n": df[n_column] if n_column else df[f"d_{m}_n{suffix}"],
        }))
    return out


def result_tables(result) -> dict[str, pd.DataFrame]:
    """A `CELResult`'s tables that `tidy_table` reads, by name."""
    return {name: getattr(result, name) for name in ("heads", "combos", "confirmation",
                                                     "side_effects")}


def single_heads(result, metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
    """A run's per-head screening table with each effect's `n`, and the search's value of the
    head alone where it rests on more examples.

    Args:
        result: a `CELResult` (its `heads`, `combos`, `config`).
        metrics: the metrics to show (default: the objective and the secondary).

    Returns:
        A per-head table: `layer, head, head_name`, then for each metric `d_<m>`, `d_<m>_lo`,
        `d_<m>_hi`, `d_<m>_n` (the selection examples screening measured it on) and, where an
        estimating screen was checked, `exact_d_<m>` (the head removed alone, measured), then
        `search_d_<objective>` and `search_n`: the objective's gain of the head alone as the
        search scored it on more selection examples than screening did, or on any number
        where screening only estimated it and was not checked (NaN and <NA> where it did
        not), then `candidate`
        and `candidate_rank` where the table has them. The counts are nullable integers.
    """
    heads, cfg = result.heads, result.config
    obj = cfg.objective
    metrics = metrics or tuple(m for m in (obj, cfg.secondary) if m)
    cols = ["layer", "head", "head_name"]
    for m in metrics:
        cols += [c for c in (f"d_{m}", f"d_{m}_lo", f"d_{m}_hi", f"d_{m}_n", f"exact_d_{m}")
                 if c in heads]
    out = heads[cols].copy()
    search = np.full(len(out), np.nan)
    search_n = np.full(len(out), np.nan)
    # a screening estimate (attribution) is no measurement: without its exact check the
    # search's is shown wherever it exists; an exact screen's only where it rests on more
    estimated = bool(screening_estimate(cfg.method)) and f"exact_d_{obj}" not in heads
    if not result.combos.empty and f"d_{obj}_n" in heads:
        for i, (name, n) in enumerate(zip(heads["head_name"], heads[f"d_{obj}_n"], strict=True)):
            row = set_record(result.combos, name)
            if row is not None and "n" in row and (int(row["n"]) > n or estimated):
                search[i], search_n[i] = float(row[f"d_{obj}"]), int(row["n"])
    out[f"search_d_{obj}"] = search
    out["search_n"] = search_n
    for c in [c for c in out if c.endswith("_n")]:  # counts, blank where there is none
        out[c] = pd.array(np.where(np.isnan(out[c].astype(float)), None, out[c]), dtype="Int64")
    for c in ("candidate", "candidate_rank"):
        if c in heads:
            out[c] = heads[c]
    return out
