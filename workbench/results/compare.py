"""Results folders side by side: `compare` (the `workbench compare A B [C ...]` command).

Runs on two model families, under two ablations or on two tasks are compared by the sets they
confirmed. `compare` reads each run (a results folder, checked as `CELResult.load` checks it,
or a `CELResult`), turns its tables into the long form of `workbench.results.export.tidy`
(`tidy_table`), and gives one row per (run, confirmed set size):

- `run`, `model`, `task`, `objective`, `kind`, `method`: the run: its name (the folder's, as
  `tidy` names it), model, main task, the metric it improved, ablation kind, screening method;
- `status`: `confirmed`, or `not confirmed yet` (an unfinished run: one row, no numbers);
- `size`, `heads`: the confirmed set;
- `best`, `top_candidate`, `significant`, `gamed`: the run's flags (`CELResult.best`,
  `mark_best`): significant is `p_holm < alpha` on the objective; a gamed set's objective rose
  while accuracy or log-prob fell significantly;
- `n`: the held-out examples behind the objective's change;
- `p_holm`, `percentile`, `random_pct_ge`: the objective's Holm-corrected one-sided p-value;
  the rank among random sets of the same size;
- `d_<m>`, `d_<m>_lo`, `d_<m>_hi`, `d_<m>_n`: the held-out change of every metric the run
  measured (ablated - clean, in the metric's own units) with its interval and n; one column
  per metric, so runs on different objectives never share a column;
- `side_worst_<m>`, `side_worst_<m>_task` (accuracy, log-prob), `side_harmed`, `side_tasks`:
  the most negative change among the side tasks and where; the side tasks hurt significantly
  (two-sided `p_holm < alpha`, negative) in either; the side tasks;
- `n_select`, `n_heldout`, `task_fingerprint`, `model_fingerprint`: the examples of each
  split, and which task and model made the run;
- `time_s`, `environment`, `env_*`: the run's time (its stages' timings, where recorded) and
  the environment block of its `config.json` (threads, device, dtype, versions, CPU, GPU) in
  one line and per key; `-` where the run recorded none.

Runs are never mixed silently: each row names its task and objective, the metric columns are
per metric, `compare_lines` prints one block per (task, objective) and says when runs of one
task used different examples (their task fingerprints differ: a sample of the task, or an
edited file), and `compare_plot` draws each (task, objective) in its own panel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workbench.errors import WorkbenchError
from workbench.metric_records import METRIC_RECORDS
from workbench.results.export import named_runs, result_tables, tidy_table
from workbench.results.plots import save_figure
from workbench.results.result import mark_best
from workbench.results.store import read_folder
from workbench.tables import save_table

COMPARE_FILE = "compare.csv"
COMPARE_FIGURE = "compare.png"
MISSING = "-"  # an environment the run did not record
SIDE_METRICS = ("accuracy", "logprob")  # every task has both
RUN_COLUMNS = ("run", "model", "task", "objective", "kind", "method", "status", "size",
               "heads", "best", "top_candidate", "significant", "gamed", "n", "p_holm",
               "percentile", "random_pct_ge")
MAX_ENV_VALUE = 40  # longer environment values (CPU flag lists) stay in their env_ column


def compare(*runs) -> pd.DataFrame:
    """Several CEL runs side by side: one row per (run, confirmed set size).

    Args:
        runs: results folders (str or Path), `CELResult`s, or mappings name -> either, named
            as `workbench.tidy` names them.

    Returns:
        The table of the module docstring: the objective, every metric's held-out change with
        its interval and n, the flags (`best`, `significant`, `gamed`), the side effects and
        the environment of each run.

    Raises:
        WorkbenchError: when a folder is not a CEL results folder or a table in it was
            changed after it was written.

    Example:
        >>> t = compare("cel_smollm2_ioi", "cel_gemma_ioi")
        >>> t[t["best"]][["run", "heads", "d_logit_diff", "d_accuracy", "gamed"]]
    """
    rows: list[dict] = []
    for name, run in named_runs(runs):
        if isinstance(run, (str, os.PathLike)):
            data, tables = read_folder(run)
        else:
            data, tables = run.run_file(), result_tables(run)
        rows += run_rows(name, data, tables)
    table = pd.DataFrame(rows)
    if table.empty:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    env = [c for c in table.columns if c.startswith("env_")]
    table[env] = table[env].astype(object).where(table[env].notna(), MISSING)
    metrics = _metric_order({c[2:-3] for c in table.columns
                             if c.startswith("d_") and c.endswith("_lo")})
    first = [c for c in RUN_COLUMNS if c in table]
    numbers = [f"d_{m}{s}" for m in metrics for s in ("", "_lo", "_hi", "_n")
               if f"d_{m}{s}" in table]
    rest = [c for c in table.columns if c not in first and c not in numbers and c not in env]
    table = table[first + numbers + rest + sorted(env)]
    for c in ("n", "size", *[f"d_{m}_n" for m in metrics]):
        if c in table:
            table[c] = pd.array(table[c], dtype="Int64")
    return table


def _metric_order(found) -> list[str]:
    known = [m.name for m in METRIC_RECORDS]
    return [m for m in known if m in found] + sorted(set(found) - set(known))


def run_rows(name: str, data: Mapping, tables: Mapping[str, pd.DataFrame]) -> list[dict]:
    """`compare`'s rows of one run, from its run file (`config.json`'s contents) and its
    tables (`read_folder`)."""
    cfg, summary = data["config"], data.get("summary", {})
    obj = str(cfg.get("objective", "accuracy"))
    alpha = float(summary.get("alpha", 1.0 - float(cfg.get("ci", 0.95))))
    counts = summary.get("n_examples", {})
    timings = data.get("timings") or {}
    base = {"run": name, "model": cfg.get("model"), "task": cfg.get("task"),
            "objective": obj, "kind": cfg.get("kind"), "method": cfg.get("method")}
    after = {"side_tasks": ",".join(cfg.get("others", ())),
             "n_select": counts.get("select"), "n_heldout": counts.get("heldout"),
             "task_fingerprint": cfg.get("task_fingerprint"),
             "model_fingerprint": cfg.get("model_fingerprint"),
             "time_s": float(sum(timings.values())) if timings else np.nan,
             **environment_columns(data)}
    conf = tables.get("confirmation", pd.DataFrame())
    if conf is None or conf.empty:
        return [{**base, "status": "not confirmed yet", **after}]
    conf = mark_best(conf, obj, alpha)
    long = tidy_table(cfg, tables, name)
    held = long[long["table"] == "confirmation"]
    side = long[long["table"] == "side_effects"]
    side_wide = tables.get("side_effects", pd.DataFrame())
    rows = []
    for _, c in conf.iterrows():
        heads = str(c["heads"])
        p_holm = float(c["p_holm"]) if "p_holm" in c and pd.notna(c["p_holm"]) else np.nan
        row = {**base, "status": "confirmed", "size": int(c["size"]), "heads": heads,
               "best": bool(c["best"]), "top_candidate": bool(c["top_candidate"]),
               "significant": bool(p_holm < alpha), "gamed": bool(c["gamed"]),
               "n": np.nan, "p_holm": p_holm,
               "percentile": float(c["percentile"]) if "percentile" in c else np.nan,
               "random_pct_ge": float(c["random_pct_ge"]) if "random_pct_ge" in c else np.nan}
        for r in held[held["heads"] == heads].itertuples():
            row.update({f"d_{r.metric}": r.value, f"d_{r.metric}_lo": r.lo,
                        f"d_{r.metric}_hi": r.hi, f"d_{r.metric}_n": r.n})
        row["n"] = row.get(f"d_{obj}_n", np.nan)
        row.update(_side_columns(side[side["heads"] == heads], side_wide, heads, alpha))
        rows.append({**row, **after})
    return rows


def _side_columns(side: pd.DataFrame, wide: pd.DataFrame, heads: str, alpha: float) -> dict:
    """The worst accuracy and log-prob change over the side tasks (from the long rows), and
    the side tasks hurt significantly in either (from the wide table's `p_holm`)."""
    out = {}
    for m in SIDE_METRICS:
        part = side[side["metric"] == m]
        if part.empty:
            out[f"side_worst_{m}"], out[f"side_worst_{m}_task"] = np.nan, ""
            continue
        worst = part.loc[part["value"].idxmin()]
        out[f"side_worst_{m}"], out[f"side_worst_{m}_task"] = worst["value"], worst["task"]
    harmed = []
    if wide is not None and not wide.empty:
        mine = wide[wide["heads"].astype(str) == heads]
        for _, r in mine.iterrows():
            if any(f"d_{m}_p_holm" in r and r[f"d_{m}_p_holm"] < alpha and r[f"d_{m}"] < 0
                   for m in SIDE_METRICS):
                harmed.append(str(r["task"]))
    out["side_harmed"] = ",".join(dict.fromkeys(harmed))
    return out


def environment_columns(data: Mapping) -> dict:
    """A run's environment block (`config.json`'s `environment`, where the run recorded one)
    as `env_<key>` columns, nested keys joined by `_` and lists by spaces, and in one line
    (`environment`, `-` when there is none)."""
    env = data.get("environment")
    for where in ("summary", "config"):
        env = env or (data.get(where) or {}).get("environment")
    if not isinstance(env, Mapping) or not env:
        return {"environment": MISSING}
    flat: dict[str, object] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}_{k}", v)
        elif isinstance(value, (list, tuple)):
            flat[prefix] = " ".join(map(str, value))
        else:
            flat[prefix] = value

    walk("env", env)
    shown = [f"{k[4:]} {v}" for k, v in flat.items()
             if v is not None and v != "" and len(str(v)) <= MAX_ENV_VALUE]
    return {"environment": ", ".join(shown) or MISSING, **flat}


# --- printed and drawn ----------------------------------------------------------------------

def _interval(v, lo, hi) -> str:
    if v is None or pd.isna(v):
        return MISSING
    text = f"{v:+.3g}"
    if lo is not None and hi is not None and pd.notna(lo) and pd.notna(hi):
        text += f" [{lo:+.3g}, {hi:+.3g}]"
    return text


def groups(table: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    """The table's (task, objective) groups, in the order their first run appears."""
    keys = list(dict.fromkeys(zip(table["task"].astype(str), table["objective"].astype(str),
                                  strict=True)))
    return [((t, o), table[(table["task"].astype(str) == t)
                           & (table["objective"].astype(str) == o)]) for t, o in keys]


def shown_table(part: pd.DataFrame, objective: str) -> pd.DataFrame:
    """One (task, objective) group as the command prints it: the sets with the objective's
    change and interval, n, p_holm, accuracy and log-prob, and the side effects."""
    cols = {"run": part["run"], "model": part["model"], "kind": part["kind"],
            "method": part["method"], "size": part["size"], "heads": part["heads"],
            "best": part["best"], "gamed": part["gamed"]}
    shown = pd.DataFrame(cols).astype(object).where(pd.DataFrame(cols).notna(), MISSING)
    for m in dict.fromkeys([objective, *SIDE_METRICS]):
        if f"d_{m}" in part:
            shown[f"d_{m} [lo, hi]"] = [_interval(v, lo, hi) for v, lo, hi in zip(
                part[f"d_{m}"], part[f"d_{m}_lo"], part[f"d_{m}_hi"], strict=True)]
        if m == objective:
            shown["n"] = part["n"].astype(object).where(part["n"].notna(), MISSING)
            shown["p_holm"] = [MISSING if pd.isna(p) else f"{p:.2g}" for p in part["p_holm"]]
    if "side_worst_accuracy" in part:
        shown["side worst accuracy"] = [
            MISSING if pd.isna(v) else f"{v:+.3g} {t}"
            for v, t in zip(part["side_worst_accuracy"], part["side_worst_accuracy_task"],
                            strict=True)]
        shown["side harmed"] = [h or MISSING for h in part["side_harmed"].fillna("")]
    return shown


def compare_lines(table: pd.DataFrame) -> list[str]:
    """What `workbench compare` prints: one block per (task, objective), then notes (runs of
    one task on different examples, unfinished runs) and each run's environment."""
    lines = []
    with pd.option_context("display.width", 200, "display.max_columns", 30,
                           "display.max_colwidth", 40):
        for (task, objective), part in groups(table):
            runs = list(dict.fromkeys(part["run"]))
            lines += ["", f"task {task}, objective {objective} (held out; ablated - clean): "
                      f"{', '.join(runs)}"]
            done = part[part["status"] == "confirmed"]
            if not done.empty:
                lines.append(shown_table(done, objective).to_string(index=False))
            for run in part.loc[part["status"] != "confirmed", "run"]:
                lines.append(f"  {run}: not confirmed yet (finish the run to compare it)")
            prints = part.drop_duplicates("run")["task_fingerprint"].dropna()
            if prints.nunique() > 1:
                lines.append(f"  note: these runs used different examples of {task} (task "
                             "fingerprints differ: a sample of the task, or another task file)")
        env = table.drop_duplicates("run")
        cols = ["run", "model", "task", "n_select", "n_heldout", "time_s", "environment"]
        shown = env[[c for c in cols if c in env]].copy()
        shown["time_s"] = [MISSING if pd.isna(t) else f"{t:.0f}" for t in shown["time_s"]]
        for c in ("n_select", "n_heldout"):
            shown[c] = shown[c].astype(object).where(shown[c].notna(), MISSING)
        lines += ["", "each run (examples per split, seconds, environment):",
                  shown.to_string(index=False)]
    if len(groups(table)) > 1:
        lines.append("\nruns on different tasks or objectives are in separate blocks: their "
                     "numbers are in different units or on different examples")
    return lines


def compare_plot(table: pd.DataFrame) -> Figure:
    """One figure: per (task, objective) the held-out change of each run's confirmed sets by
    size, with intervals (the best set filled, the rest open); then accuracy and the worst
    side-task accuracy change, in which every run shares its units."""
    done = table[table["status"] == "confirmed"]
    panels = [(f"{o} on {t}", o, part) for (t, o), part in groups(done)]
    if any(o != "accuracy" for _, o, _ in panels):
        panels.append(("accuracy on each run's task", "accuracy", done))
    if "side_worst_accuracy" in done and done["side_worst_accuracy"].notna().any():
        panels.append(("worst side-task accuracy", "side_worst_accuracy", done))
    fig = Figure(figsize=(max(5.0, 4.2 * len(panels)), 3.9), layout="constrained")
    if not panels:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no confirmed sets to compare", ha="center", va="center")
        ax.set_axis_off()
        return fig
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    runs = list(dict.fromkeys(table["run"]))
    colors = {r: f"C{i % 10}" for i, r in enumerate(runs)}
    for ax, (title, column, part) in zip(axes, panels, strict=True):
        value = column if column.startswith("side_") else f"d_{column}"
        for k, (run, rows) in enumerate(part.groupby("run", sort=False)):
            rows = rows.sort_values("size")
            x = rows["size"].to_numpy(float) + 0.08 * (k - (len(runs) - 1) / 2)
            y = rows[value].to_numpy(float)
            if f"{value}_lo" in rows:
                err = np.vstack([y - rows[f"{value}_lo"].to_numpy(float),
                                 rows[f"{value}_hi"].to_numpy(float) - y])
                ax.errorbar(x, y, yerr=np.abs(err), color=colors[run], capsize=3, lw=1,
                            marker="o", mfc="white", label=run)
            else:
                ax.plot(x, y, color=colors[run], marker="o", mfc="white", lw=1, label=run)
            best = rows["best"].to_numpy(bool)
            ax.plot(x[best], y[best], linestyle="none", marker="o", color=colors[run], zorder=4)
        ax.axhline(0, color="grey", lw=0.8)
        sizes = sorted({int(s) for s in part["size"].dropna()})
        ax.set_xticks(sizes)
        ax.set_xlabel("heads removed")
        ax.set_ylabel("d_accuracy, worst side task" if value.startswith("side_")
                      else f"{value} (ablated - clean)")
        ax.set_title(title, fontsize=9)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)),
               fontsize=8, frameon=False, title="run (filled: its best set)",
               title_fontsize=8)
    return fig


def save_compare(table: pd.DataFrame, out: str | Path, plot: bool = True) -> Path:
    """Write `compare.csv` (and `compare.png`) into the folder `out`; return the folder."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WorkbenchError(f"--out {str(out)!r} is a file; expected a folder")
    if (out / "config.json").is_file():
        raise WorkbenchError(f"--out {str(out)!r} is a CEL results folder; write the "
                             "comparison to a folder of its own")
    out.mkdir(parents=True, exist_ok=True)
    save_table(table, out / COMPARE_FILE)
    if plot:
        save_figure(compare_plot(table), out / COMPARE_FIGURE)
    return out
