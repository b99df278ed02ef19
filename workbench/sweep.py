"""A CEL sweep: the same run over a grid of models x tasks x ablation kinds, in one table.

CEL's empirical claim is about many models, not one: removing some heads improves a task in
models of different families. A sweep runs `run_cel` once per cell of the grid, each cell in
its own results folder `out/<model>__<task>__<kind>/`, and gathers the best set of every cell
into one table (`sweep.csv`) and one figure (`sweep.png`), whose columns
`workbench.sweep_table` describes.

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench import distributed
from workbench.config import DEFAULT_THREADS, CELConfig
from workbench.errors import WorkbenchError
from workbench.options import AblationKind, SweepSplit
from workbench.results.result import CELResult
from workbench.search.registry import strategy_names
from workbench.sweep_table import (
    COLUMNS,
    PLOT_FILE,
    SHOWN_COLUMNS,
    TABLE_FILE,
    finished_result,
    save_sweep,
    shown_table,
    slug,
    sweep_plot,
    sweep_table,
)

# The CELConfig fields a sweep's options may set (each cell sets its model, task, side tasks
# and kind); a finished cell's config must match those the sweep gives.
_CONFIG_OPTIONS = tuple(
    f.name
    for f in dataclasses.fields(CELConfig)
    if f.name not in ("model", "task", "others", "kind") and not f.name.endswith("_fingerprint")
)


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
        return f"{slug(self.model)}__{slug(self.task, '.jsonl')}__{self.kind}"


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
    from workbench.pipeline import Output, run_cel
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
    plots = options.pop("plots", True)
    run_cel(
        model,
        tasks[cell.task],
        others=[tasks[o] for o in others if o not in left_out],
        kind=cell.kind,
        # a sweep compares cells; `workbench explain CELL` explains one
        out_dir=Output(folder, plots=plots, explain=False),
        model_name=cell.model, progress=progress,
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
        plot: write `sweep.png` and each cell's plots.
        split: a `SweepSplit`; under torch.distributed, `"cells"` deals the cells to the
            ranks, `"masks"` runs each cell on all ranks with its head masks split across
            them, `"auto"` splits cells when there are at least as many unfinished cells as
            ranks, else masks.
        **cel_options: passed to `run_cel` (`max_size`, `strategy`, `n_random`, `seed`, ...),
            `workbench.compute.Compute` fields among them: `threads` also while a model
            loads, `progress` (default True) on rank 0 only.

    Returns:
        The table of `sweep.csv` (see the module docstring), one row per cell in grid order.

    Example:
        >>> table = run_sweep(["embedded", "gpt2"], ["embedded_map"], kinds=["zero", "mean"])
        >>> table = run_sweep(["smollm2-135m", "embedded"])  # each model on its own tasks
    """
    progress = cel_options.pop("progress", True)
    for key in ("kind", "out_dir", "model_name", "others"):
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
    "PLOT_FILE",
    "TABLE_FILE",
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
