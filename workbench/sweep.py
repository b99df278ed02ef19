"""A CEL sweep: the same run over a grid of models x tasks x ablation kinds, in one table.

CEL's empirical claim is about many models, not one: removing some heads improves a task in
models of different families. A sweep runs `run_cel` once per cell of the grid, each cell in
its own results folder `out/<model>__<task>__<kind>/`, and gathers the best set of every cell
into one table (`sweep.csv`) and one figure (`sweep.png`):

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

Tasks are per model when none are named (`workbench.tasks.names.own_tasks`): the embedded
family runs its own language's default task, every other model the hub tasks, each with the
model's other tasks as side tasks; so `run_sweep(["smollm2-135m", "embedded"])` sweeps each
on its own tasks.
With named tasks the grid is every model x every task, and a cell whose task the model's
tokenizer cannot encode (an embedded-language task on SmolLM2, IOI's English on the embedded
vocabulary) is skipped with the reason, as are side tasks that do not fit.

A sweep resumes per cell: a cell whose folder holds a complete result (`CELResult.load` finds
every table and the report) is not run again, and an unfinished cell resumes from its stage
files (`run_cel`). Under torchrun the unfinished cells are dealt to the ranks in turn
(`workbench.distributed`), each rank runs its cells alone, and rank 0 writes the table once
every rank is done; with fewer unfinished cells than ranks (`split="auto"`), every rank runs
every cell together, each cell's head masks split across the ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from workbench import distributed
from workbench.config import DEFAULT_THREADS, CELConfig
from workbench.errors import WorkbenchError
from workbench.options import AblationKind, SweepSplit
from workbench.results.plots import save_figure
from workbench.results.result import CONFIG_FILE, REPORT_FILE, CELResult, mark_best
from workbench.results.tradeoff import SIDE_COLUMNS, side_summary
from workbench.search.registry import strategy_names
from workbench.tables import save_table

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
# The CELConfig fields a sweep's options may set (each cell sets its model, task, side tasks
# and kind); a finished cell's config must match those the sweep gives.
_CONFIG_OPTIONS = tuple(
    f.name
    for f in dataclasses.fields(CELConfig)
    if f.name not in ("model", "task", "others", "kind") and not f.name.endswith("_fingerprint")
)


def _slug(name: str, drop_suffix: str = "") -> str:
    base = Path(str(name)).name if ("/" in str(name) or "\\" in str(name)) else str(name)
    if drop_suffix and base.endswith(drop_suffix):
        base = base[: -len(drop_suffix)]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-") or "x"


@dataclass(frozen=True)
class SweepCell:
    """One cell of a sweep: a model (name or path), a task (name or path), an ablation kind,
    and its side tasks when they are the model's own (None: the sweep's)."""

    model: str
    task: str
    kind: str
    others: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        """The cell's folder name, `<model>__<task>__<kind>`."""
        return f"{_slug(self.model)}__{_slug(self.task, '.jsonl')}__{self.kind}"


def sweep_cells(
    models: Sequence[str], tasks: Sequence[str] | None = None, kinds: Sequence[str] = ("zero",)
) -> list[SweepCell]:
    """The grid in order (models, then tasks, then kinds); folder names must be distinct.
    `tasks` None gives each model its own tasks and side tasks (`tasks.names.own_tasks`)."""
    from workbench.tasks.names import own_tasks

    checks = (("models", models), ("tasks", tasks), ("kinds", kinds))
    for what, values in checks if tasks is not None else (checks[0], checks[2]):
        if isinstance(values, str) or not len(values):
            raise WorkbenchError(f"a sweep needs a non-empty list of {what}; got {values!r}")
    kinds = [AblationKind.parse(k).value for k in kinds]
    cells = []
    for m in dict.fromkeys(map(str, models)):
        if tasks is None:
            mine, side = own_tasks(m)
            side = side if side is not None else mine
        else:
            mine, side = [str(t) for t in tasks], None
        for t in dict.fromkeys(mine):
            others = None if side is None else tuple(o for o in side if o != t)
            cells += [SweepCell(m, t, k, others) for k in dict.fromkeys(kinds)]
    seen: dict[str, SweepCell] = {}
    for c in cells:
        if c.name in seen:
            raise WorkbenchError(
                f"sweep cells {seen[c.name]} and {c} would share the folder {c.name!r}; give "
                "models and tasks distinct names"
            )
        seen[c.name] = c
    return cells


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


def _mismatch(result: CELResult, cell: SweepCell, options: dict) -> list[str]:
    """The config fields in which a finished cell differs from what the sweep asks of it (None:
    the run's own choice, except the example counts)."""
    wanted = {"kind": cell.kind}
    for key in _CONFIG_OPTIONS:
        if options.get(key) is not None:
            wanted[key] = options[key]
    for key in ("max_examples", "side_examples"):  # None (all examples) is a choice too
        wanted[key] = options.get(key)
    if "strategy" in options:
        wanted["strategies"] = options["strategy"]
    if "strategies" in wanted:
        wanted["strategies"] = strategy_names(wanted["strategies"])
    have = result.config.to_dict()  # options as strings, which equal the `Option` members
    have.update({k: getattr(result.config, k) for k in wanted.keys() - have.keys()})
    have["strategies"] = tuple(have["strategies"])
    return [k for k, v in wanted.items() if have.get(k) != v]


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
        f"{_slug(r.model)} / {_slug(r.task, '.jsonl')} / {r.kind}" for r in table.itertuples()
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


class _Unfit(WorkbenchError):
    """The cell's task cannot be encoded with the model's tokenizer."""


def _misfit(model, task, fits: dict) -> str:
    """Why `task` does not fit `model`'s tokenizer ("" when it does), cached in `fits`."""
    from workbench.tasks.encoding import encode_task

    if task.name not in fits:
        try:
            for split in ("select", "heldout"):
                encode_task(model, task, split)
            fits[task.name] = ""
        except WorkbenchError as e:
            fits[task.name] = str(e)
    return fits[task.name]


def _run_cell(cell, folder, models, tasks, others, device, dtype, progress, options) -> str:
    """Run one cell; returns a note naming the side tasks left out (they do not fit the
    model), and raises `_Unfit` when the cell's own task does not."""
    from workbench.compute import Compute
    from workbench.loading.model import load_model
    from workbench.pipeline import run_cel
    from workbench.tasks.task import load_task

    if cell.model not in models:
        models.clear()  # one model in memory at a time
        # loaded (a GGUF file converted) on the run's threads, as run_cel then computes
        with Compute(threads=options.get("threads", DEFAULT_THREADS)).threads_set():
            models[cell.model] = (load_model(cell.model, device=device, dtype=dtype), {})
    model, fits = models[cell.model]
    for t in [cell.task, *others]:
        if t not in tasks:
            tasks[t] = load_task(t)
    why = _misfit(model, tasks[cell.task], fits)
    if why:
        raise _Unfit(f"task does not fit this model's tokenizer: {why}")
    others = [o for o in others if o != cell.task]
    left_out = [o for o in others if _misfit(model, tasks[o], fits)]
    run_cel(
        model,
        tasks[cell.task],
        others=[tasks[o] for o in others if o not in left_out],
        kind=cell.kind,
        out_dir=folder,
        model_name=cell.model, progress=progress,
        explain=False,  # a sweep compares cells; `workbench explain CELL` explains one
        **options,
    )
    return f"side tasks left out (they do not fit the tokenizer): {', '.join(left_out)}" \
        if left_out else ""


def run_sweep(
    models: Sequence[str],
    tasks: Sequence[str] | None = None,
    kinds: Sequence[str] = ("zero",),
    out: str | Path = "sweep_results",
    others: Sequence[str] | None = None,
    *,
    device: str = "auto",
    dtype: str | None = None,
    progress: bool = True,
    plot: bool = True,
    split: SweepSplit | str = SweepSplit.AUTO,
    **cel_options,
) -> pd.DataFrame:
    """Run CEL on every cell of models x tasks x kinds and gather the best sets in one table.

    Args:
        models: model names or paths (anything `load_model` accepts).
        tasks: task names or paths; each cell's task is confirmed on its held-out split. None:
            each model's own tasks (`workbench.tasks.names.own_tasks`). A cell whose task does not
            fit the model's tokenizer is skipped (`status` says so), not failed.
        kinds: ablation kinds (`"zero"`, `"mean"`).
        out: the sweep folder: one results folder per cell, `sweep.csv` and `sweep.png`.
        others: side-effect tasks of every cell; None uses the cell model's other own tasks
            (`tasks` None) or the sweep's other tasks. Those that do not fit a model are left
            out of its cells (`note` names them).
        device, dtype: where and in what precision models are loaded.
        progress: progress bars (rank 0 only).
        plot: write `sweep.png` and each cell's plots.
        split: a `SweepSplit`; under torch.distributed, `"cells"` deals the cells to the
            ranks, `"masks"` runs each cell on all ranks with its head masks split across
            them, `"auto"` splits cells when there are at least as many unfinished cells as
            ranks, else masks.
        **cel_options: passed to `run_cel` (`max_size`, `strategy`, `n_random`, `seed`, ...);
            `threads` (`workbench.compute.Compute`) also while a model loads.

    Returns:
        The table of `sweep.csv` (see the module docstring), one row per cell in grid order.

    Example:
        >>> table = run_sweep(["embedded", "gpt2"], ["embedded_map"], kinds=["zero", "mean"])
        >>> table = run_sweep(["smollm2-135m", "embedded"])  # each model on its own tasks
    """
    for key in ("kind", "out_dir", "model_name", "others", "progress"):
        if key in cel_options:
            raise WorkbenchError(f"run_sweep sets run_cel's {key!r} itself; got {key}=...")
    split = SweepSplit.parse(split)
    cells = sweep_cells(models, tasks, kinds)
    out = Path(out)
    side = list(dict.fromkeys(map(str, others))) if others is not None else None
    # Rank 0 decides which cells are left (before anyone writes) and tells the others.
    plan: tuple[list[int], str | None] = ([], None)
    if distributed.is_main():
        out.mkdir(parents=True, exist_ok=True)
        pending, errors = [], []
        for i, c in enumerate(cells):
            done = finished_result(out / c.name)
            if done is None:
                pending.append(i)
            elif _mismatch(done, c, cel_options):
                errors.append(f"{c.name} ({', '.join(_mismatch(done, c, cel_options))})")
        plan = (
            pending,
            f"finished cells in {str(out)!r} were run with other options: {'; '.join(errors)}; "
            "use another --out folder"
            if errors
            else None,
        )
    pending, error = distributed.broadcast_object(plan)
    if error:
        raise WorkbenchError(error)
    by_cells = split is SweepSplit.CELLS or (
        split is SweepSplit.AUTO and len(pending) >= distributed.world_size()
    )
    mine = distributed.cells_of_rank(len(pending)) if by_cells else range(len(pending))
    loaded_models: dict = {}
    loaded_tasks: dict = {}
    failures, skipped, notes = [], {}, {}
    for j in mine:
        cell = cells[pending[j]]
        if side is not None:
            cell_others = side
        elif cell.others is not None:
            cell_others = list(cell.others)
        else:
            cell_others = [str(t) for t in dict.fromkeys(tasks)]
        try:
            with contextlib.ExitStack() as stack:
                if by_cells:  # this rank alone, no collectives
                    stack.enter_context(distributed.local())
                    folder = out / cell.name
                else:  # all ranks together; rank 0 writes
                    folder = stack.enter_context(distributed.rank_out_dir(out / cell.name))
                notes[cell.name] = _run_cell(
                    cell,
                    folder,
                    loaded_models,
                    loaded_tasks,
                    [o for o in cell_others if o != cell.task],
                    distributed.local_device(device),
                    dtype,
                    progress and distributed.is_main(),
                    {**cel_options, "plots": plot},
                )
        except _Unfit as e:
            skipped[cell.name] = str(e)
        except Exception as e:  # reported after every rank is done, so none waits forever
            failures.append((cell.name, f"{type(e).__name__}: {e}"))
    if not by_cells:  # every rank saw the same cells; rank 0 reports them
        failures, skipped, notes = (failures, skipped, notes) if distributed.is_main() else \
            ([], {}, {})
    parts = distributed.gather_objects((failures, skipped, notes))
    failures = [f for part in parts for f in part[0]]
    skipped = {k: v for part in parts for k, v in part[1].items()}
    notes = {k: v for part in parts for k, v in part[2].items() if v}
    table = None
    if distributed.is_main():
        table = sweep_table(out, cells, skipped, dict(failures), notes)
        save_sweep(table, out, plot=plot)
    table = distributed.broadcast_object(table)
    if failures:
        raise WorkbenchError(
            f"{len(failures)} of {len(cells)} sweep cells failed "
            f"({'; '.join(f'{name}: {why}' for name, why in failures)}); the "
            f"others are in {str(out / TABLE_FILE)!r} and a rerun resumes"
        )
    return table


__all__ = [
    "COLUMNS",
    "SHOWN_COLUMNS",
    "SweepCell",
    "finished_result",
    "run_sweep",
    "save_sweep",
    "shown_table",
    "sweep_cells",
    "sweep_plot",
    "sweep_table",
]
