"""`run_cel`: the main job, one list of stages over one validated config, resumable from a
results folder.

`prepare_run` validates the config, samples the tasks and encodes the main task before any
forward pass; `run_prepared` then runs `STAGES` in order, each a `Stage` record whose module
holds its work:

1. setup (`setup_stage`, here): what the run is, recorded in the results folder before any
   stage computes (an earlier run's folder with another config is refused);
2. screen (`workbench.screening.stage`): the effect of removing each head alone on the
   selection split (and on every side task), and the candidate pool;
3. search (`workbench.search.stage`): head sets scored jointly on the selection split by the
   config's strategies (its scoring calls saved as they go and replayed by a rerun after an
   interrupt, `workbench.search.replay`);
4. confirm (`workbench.confirmation.stage`, which saves each finished size so that an
   interrupted confirmation resumes from it): the best set of each size re-scored on the
   held-out split, against random sets of the same size, with side effects on the other
   tasks and the trade-off of found and random sets (`workbench.results.tradeoff`);
5. explain (`workbench.explain.stage`): what the best set's heads do (`run_cel(...,
   explain=False)` turns it off);
6. report (`workbench.results.stage`): `report.md`, written once, `view.html` and the cost.

The command line (`workbench cel`) goes through the same two calls, so a folder written from
Python and one written from the shell are the same. Adding a stage is one entry of `STAGES`
and its module.

Each stage builds the scorers of the split it uses and drops them when it ends, so cached
activations of one split never sit in memory beside another's. With mean ablation every task
is ablated with the means over its own prompts (the selection split for the main task) unless
`means` is given for the main task. A resumable stage's tables are written to the results
folder as soon as it is done, with a record of the inputs that made them (see
`workbench.results.store`); a rerun reuses a stage only when config, model, tasks and upstream
files are unchanged.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workbench import progress
from workbench.ablation import HeadMeans
from workbench.compute import Compute
from workbench.config import CELConfig
from workbench.confirmation.stage import confirm_stage, score_means
from workbench.deprecation import caller_stacklevel, renamed_keywords
from workbench.environment import run_environment
from workbench.errors import TaskWarning, WorkbenchError
from workbench.estimate import estimate_run
from workbench.explain.stage import explain_stage
from workbench.guards import (
    MAIN,
    check_guards,
    labels,
    run_guards,
    task_metrics,
)
from workbench.hooked import HookedModel
from workbench.metric_records import base_metric, default_secondary
from workbench.metrics.run_checks import before_search
from workbench.metrics.scores import builtin_metric
from workbench.prepare import CELRun, prepare_run
from workbench.prepare import check_counterfactuals as check_counterfactuals  # the CLI's
from workbench.results.fingerprint import digest, model_fingerprint, task_fingerprint
from workbench.results.result import CELResult
from workbench.results.stage import report_stage
from workbench.results.store import ResultStore, read_run_file
from workbench.scoring.scorer import CustomMetric
from workbench.screening.registry import get_method
from workbench.screening.stage import check_heads, screen_stage
from workbench.search.stage import search_stage
from workbench.tasks.task import Task


@dataclass(frozen=True)
class Stage:
    """One stage of the main job.

    Attributes:
        name: its name in `CELResult.timings`, the progress lines and the cost.
        tables: the result tables it makes (`CELResult` attributes, saved as `<table>.csv`
            and recorded in `config.json`); none for a stage that writes files of its own.
        run: `run(run, result, store) -> {table: DataFrame}` on the prepared run
            (`CELRun`), the result so far and the open results folder
            (`workbench.results.store.ResultStore`).
        resumable: a rerun takes its tables from the results folder when their inputs are
            unchanged, instead of running it; its seconds add up over the runs that made
            them (`CELResult.timings`), and the estimate and the progress lines count it.
        check: for a resumable stage, `check(run, tables, folder)` on tables read back.
    """

    name: str
    tables: tuple[str, ...]
    run: Callable[..., dict]
    resumable: bool = False
    check: Callable[..., None] | None = None


def setup_stage(run: CELRun, result: CELResult, store: ResultStore) -> dict:
    """The run's record in its results folder, before any stage computes: a folder that holds
    a run with another config is refused; an earlier run's summary and timings are taken up;
    the splits, task files, clean scores and environment are saved. Its seconds count from
    `prepare_run` on (encoding the tasks, the estimate's forward, the clean pass)."""
    config = run.config
    if store.previous is not None:
        diff = config.differences(CELConfig.from_dict(store.previous["config"]))
        if diff:
            raise WorkbenchError(
                f"{str(store.folder)!r} holds a CEL run with a different config (differs in "
                f"{diff}); use another --out folder, delete this one, or rerun with "
                "--overwrite (run_cel(..., out_dir=Output(folder, overwrite=True))) to replace it"
            )
        result.summary = store.previous.get("summary", {})
        result.timings = store.previous.get("timings", {})
    result.environment = {**run_environment(run.model, run.compute.threads,
                                            store.previous),  # and setup's threads
                          **result.environment}
    result.summary.update({
        "objective": config.objective,
        "secondary": config.secondary,
        "splits": {"select": run.select.task.ids, "heldout": run.heldout.task.ids},
        "prepend_bos": run.select.prepend_bos,  # the BOS choice in effect
        "answer_tokens": run.select.task.answer_tokens,  # as fitted to this tokenizer
        **({"lm_eval": run.select.task.meta["lm_eval"]}  # a task lm-eval built: how to re-score
           if "lm_eval" in run.select.task.meta else {}),
        # where the tasks were read from (None: built in memory): `workbench explain`
        # reloads the main task from there
        "task_file": run.main.file,
        "side_task_files": {name: t.file for name, t in run.others.items()},
    })
    if run.small:  # splits or side tasks below MIN_SPLIT_EXAMPLES (none: no key)
        result.summary["few_examples"] = run.small
    result.summary.setdefault("n_examples", {})["select"] = len(run.select)
    result.summary.setdefault("clean", {})["select"] = score_means(run.clean_select)
    _add_time(result, "setup", run.started)
    store.save(result.run_file())
    return {}


# The main job, in order (module docstring). A table that only runs with side tasks make
# (`SIDE_TABLES`) is empty, and not saved, in a run without them.
STAGES: tuple[Stage, ...] = (
    Stage("setup", (), setup_stage),
    Stage("screen", ("heads",), screen_stage, resumable=True, check=check_heads),
    Stage("search", ("combos",), search_stage, resumable=True),
    Stage("confirm", ("confirmation", "side_effects", "tradeoff"), confirm_stage,
          resumable=True),
    Stage("explain", (), explain_stage),
    Stage("report", (), report_stage),
)
SIDE_TABLES = ("side_effects", "tradeoff")


@dataclass(frozen=True)
class Output:
    """Where a run writes, and what (`run_cel`'s `out_dir`).

    Attributes:
        folder: the results folder: stage files are written as they finish and a rerun with
            the same config resumes from them, then the explanation, `report.md`,
            `view.html` and the cost (the folder `workbench cel` writes); None keeps
            everything in memory and writes nothing.
        overwrite: empty an earlier CEL results folder in `folder` first, once this run holds
            its lock (refused while another run holds it).
        plots: write plots when saving.
        explain: explain the best set into `folder` (`workbench.explain.stage`; the command
            line's `--no-explain` is False).
    """

    folder: str | Path | None = None
    overwrite: bool = False
    plots: bool = True
    explain: bool = True

    @classmethod
    def of(cls, value: Output | str | Path | None) -> Output:
        """`value` as an `Output`: a folder (or None) with the defaults."""
        return value if isinstance(value, Output) else cls(value)


# keywords of run_cel that moved into its `out_dir` (an `Output`)
@renamed_keywords(holders={"out_dir": Output.of}, overwrite="out_dir.overwrite",
                  plots="out_dir.plots", explain="out_dir.explain")
def run_cel(
    model: HookedModel,
    task,
    others: Sequence = (),
    config: CELConfig | None = None,
    *,
    out_dir: str | Path | Output | None = None,
    metric: CustomMetric | None = None,
    means: HeadMeans | None = None,
    compute: Compute | None = None,
    **settings,
) -> CELResult:
    """Capability Enhancement Localization: screen heads, search sets, confirm held out.

    Args:
        model: a hooked model (any with `blocks.{l}.attn.hook_z`; next-token tasks need a
            HookedTransformer or a TransformerBridge).
        task: a `Task`, task name or path, with `select` and `heldout` splits.
        others: tasks for side effects (scored on all their examples; names must differ).
        config: the run's settings; or give them as keyword `settings`, any `CELConfig` field
            (`kind`, `method`, `max_size`, `strategies` (or `strategy`), `n_random`, `seed`,
            `objective`, `rank_by`, `top_m`, `beam_width`, `n_masks`, `knockout_p`,
            `search_budget`, `n_boot`, `ci`, `check_attribution`, `model_name` for the name
            recorded), validated before any forward pass. Any `Compute` field (`max_rows`,
            `token_budget`, `progress`, `threads`, ...) given here sets `compute`.
        out_dir: the results folder, or an `Output` (the folder, `overwrite`, `plots`,
            `explain`): stage files are written as they finish and a rerun with the same
            config resumes from them, then the explanation, `report.md`, `view.html` and the
            cost (the folder `workbench cel` writes); None keeps everything in memory and
            writes nothing.
        metric: a custom `metric(model, TaskBatch) -> [batch]` scores (or a dict of them);
            by default `choice_metric` for a multiple-choice task, `multi_token_metric` for
            one with `answer_tokens: multi`.
        means: head means for mean-ablating the main task (default: over its selection
            split's prompts); side tasks always use the means over their own prompts.
        compute: how to compute (rows per forward, progress); defaults otherwise.

    Returns:
        A `CELResult` (also saved to `out_dir` when given).

    Example:
        >>> result = run_cel(model, "ioi", others=["induction"], kind="mean", out_dir="cel_ioi")
        >>> result.confirmation[["size", "heads", "d_accuracy", "percentile"]]
    """
    run = prepare_run(model, task, others, config, metric=metric, means=means, compute=compute,
                      **settings)
    out = Output.of(out_dir)
    return run_prepared(run, out_dir=out.folder, plots=out.plots, overwrite=out.overwrite,
                        explain=out.explain)


def run_prepared(
    run: CELRun, *, out_dir: str | Path | None = None, plots: bool = True,
    overwrite: bool = False, explain: bool = True,
) -> CELResult:
    """Run a `prepare_run` result's stages (`STAGES`; see `run_cel` for the arguments). With
    `out_dir`, the cost's forward is timed first unless `run.estimate` holds one."""
    run.plots, run.explain = plots, explain
    with run.compute.threads_set():
        if out_dir is not None and run.estimate is None:
            run.estimate = estimate_run(run, stages_done(out_dir, overwrite))
        return _run_stages(run, out_dir, overwrite)


def stages_done(out: str | Path, overwrite: bool = False) -> tuple[str, ...]:
    """The resumable stages whose tables a results folder records (a rerun with the same
    config takes them up; none once `overwrite` empties it)."""
    if overwrite or not (Path(out) / "config.json").is_file():
        return ()
    try:
        files = read_run_file(Path(out)).get("files", {})
    except WorkbenchError:
        return ()
    return tuple(s.name for s in STAGES if s.resumable and s.tables[0] in files)


def _run_stages(run: CELRun, out_dir, overwrite: bool) -> CELResult:
    # the objective is checked against the metrics the task scores before the folder is
    # opened, so that a refused run creates none
    if run.means is None:
        run.means = run.means_of(run.select)
    setup = run.scorer(run.select, run.means)
    run.clean_select = setup.clean()
    setup.release()
    run.config = _resolve_metrics(run.config, list(run.clean_select), run.metric, run.main,
                                  run.model, run.others)
    for note in before_search(run, builtin_metric(run.metric),
                              get_method(run.config.method).gradients):
        warnings.warn(note, TaskWarning, stacklevel=caller_stacklevel())
    seed = run.config.seed
    with ResultStore(out_dir, overwrite=overwrite) as store:
        result = CELResult(config=run.config, seeds={"bootstrap": seed, "random_sets": seed,
                                                     "compressed_sensing": seed})
        for stage in STAGES:
            _run_stage(stage, run, result, store)
    return result


def _run_stage(stage: Stage, run: CELRun, result: CELResult, store: ResultStore) -> None:
    """Run `stage`, or, when it is resumable and the results folder holds its tables made
    from the same inputs, take them from there; its tables go into `result` and the folder."""
    cfg = run.config.to_dict()
    wanted = [t for t in stage.tables if run.others or t not in SIDE_TABLES]
    if stage.resumable:
        loaded = {t: store.load(t, cfg) for t in wanted}
        if all(df is not None for df in loaded.values()):
            if stage.check is not None:
                stage.check(run, loaded, store.folder)
            for name in stage.tables:
                setattr(result, name, loaded.get(name, pd.DataFrame()))
            return
    choice = run.compute.retake_threads(run.model.cfg.device)  # "auto": the cores idle now
    if choice is not None:
        result.environment.setdefault("stage_threads", {})[stage.name] = choice.record()
    t = time.perf_counter()
    with progress.stage(stage.name, run.compute.progress and stage.resumable):
        tables = stage.run(run, result, store)
    run.seconds[stage.name] = time.perf_counter() - t
    for name, df in tables.items():
        setattr(result, name, df)
    if stage.resumable:  # its checkpoint, if it kept one, goes
        _add_time(result, stage.name, t)
        saved = {n: df for n, df in tables.items() if n not in SIDE_TABLES or not df.empty}
        store.save(result.run_file(), finished=(stage.name,), **saved)


def _resolve_metrics(config: CELConfig, names: list[str], metric, main: Task, model,
                     others: dict[str, Task]) -> CELConfig:
    """Fill in the task, the objective and tie-break metric, and the fingerprints."""
    # a normalized metric ranks sets exactly as its base metric does (a positive rescaling)
    default = base_metric(main.metric)
    custom = metric is not None and not builtin_metric(metric)
    if custom:
        default = names[0]  # a user metric: its first score
    objective = config.objective or default
    objective = base_metric(objective)
    if objective not in names:
        raise WorkbenchError(
            f"objective {objective!r} is not a metric of this run; expected one of {names}"
        )
    secondary = config.secondary or default_secondary(objective, names)
    guards = run_guards(config.guards, objective, names, metric)
    main_metrics = names if custom else [m for m in names if m in task_metrics(main)]
    check_guards(guards, {MAIN: main_metrics,
                          **{n: task_metrics(t) for n, t in others.items()}})
    return dataclasses.replace(
        config, task=main.name, others=tuple(others), objective=objective, secondary=secondary,
        guards=tuple(labels(guards)),
        model_fingerprint=model_fingerprint(model), task_fingerprint=task_fingerprint(main),
        others_fingerprint=digest([task_fingerprint(t) for t in others.values()]),
    )


def _add_time(result: CELResult, stage: str, start: float) -> None:
    result.timings[stage] = result.timings.get(stage, 0.0) + time.perf_counter() - start

