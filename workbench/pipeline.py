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

from workbench import distributed, progress
from workbench.ablation import AblationKind, HeadMeans, compute_head_means
from workbench.compute import Compute
from workbench.config import CELConfig
from workbench.confirmation.stage import confirm_stage, score_means
from workbench.deprecation import caller_stacklevel
from workbench.environment import run_environment
from workbench.errors import FewExamplesWarning, TaskWarning, WorkbenchError
from workbench.estimate import RunEstimate, estimate_run, measure_forward
from workbench.explain.stage import explain_stage
from workbench.guards import (
    MAIN,
    Guard,
    check_guards,
    labels,
    parse_guards,
    run_guards,
    task_metrics,
)
from workbench.metric_records import base_metric, check_objective, default_secondary, task_kind
from workbench.metrics.run_checks import before_search, check_choice_ablation, multi_token_note
from workbench.metrics.scores import builtin_metric, task_metric
from workbench.precision import resolved, search_model
from workbench.results.fingerprint import digest, model_fingerprint, task_fingerprint
from workbench.results.result import CELResult
from workbench.results.stage import report_stage
from workbench.results.store import ResultStore, read_run_file
from workbench.scoring.scorer import CustomMetric, MaskScorer
from workbench.screening.registry import get_method
from workbench.screening.screen import resolve_task
from workbench.screening.stage import check_heads, screen_stage
from workbench.search.candidates import rank_order
from workbench.search.stage import search_stage
from workbench.stats import Stats
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.format import small_splits, small_splits_note
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


@dataclass
class CELRun:
    """A CEL run prepared by `prepare_run`, before any forward pass: what every stage needs.

    Attributes:
        model: the hooked model.
        config: the validated config (its metrics are resolved when the run starts).
        main: the main task, sampled (`max_examples`) but not yet fitted to the tokenizer.
        select, heldout: the main task's splits encoded for `model` (as fitted to its
            tokenizer: `len(select)` is the number of selection examples the run uses).
        others: the side tasks by name, sampled (`side_examples`).
        metric: the custom metric, or None.
        means: the main task's mean-ablation means (None: computed when the run starts).
        compute: how the run computes.
        started: `time.perf_counter()` when preparation began (the setup time counts it).
        small: the splits and side tasks with fewer examples than intervals need, and how
            many they hold (`workbench.tasks.format.small_splits`; the run warns).
        searcher_model: what `searcher()` built, dropped when the search ends.
        launched: `time.perf_counter()` when the command that loaded the model started (the
            cost's `load` stage runs from there to `started`); None from Python.
        estimate: the pre-run estimate (`workbench.estimate.estimate_run`): its forward and
            its likely seconds go into the cost; `run_prepared` makes it when not given.
        plots, explain: whether the run writes plots and the explanation (`run_prepared`).
        clean_select: the clean scores of the selection split (per example), from setup.
        seconds: each stage's seconds in this process (the cost counts the explanation's).
        explanation: what the explain stage explained (`HeadExplanation`), or None.
    """

    model: object
    config: CELConfig
    main: Task
    select: TaskBatch
    heldout: TaskBatch
    others: dict[str, Task]
    metric: CustomMetric | None
    means: HeadMeans | None
    compute: Compute
    started: float = 0.0
    small: dict = dataclasses.field(default_factory=dict)
    searcher_model: object | None = dataclasses.field(default=None, repr=False)
    launched: float | None = None
    estimate: RunEstimate | None = None
    plots: bool = True
    explain: bool = True
    clean_select: dict | None = dataclasses.field(default=None, repr=False)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    explanation: object | None = dataclasses.field(default=None, repr=False)

    @property
    def stats(self) -> Stats:
        return Stats(self.config.n_boot, self.config.ci, self.config.seed)

    @property
    def order(self) -> tuple[str, str | None]:
        return rank_order(self.config.objective, self.config.secondary, self.config.rank_by)

    @property
    def guards(self) -> tuple[Guard, ...]:
        """The run's guards (resolved when the run starts; `workbench.guards`)."""
        return parse_guards(self.config.guards) or ()

    def scorer(self, data, means: HeadMeans | None = None, model=None) -> MaskScorer:
        return MaskScorer(self.model if model is None else model, data, kind=self.config.kind,
                          means=means, metric=task_metric(self.metric, data),
                          per_position=self.config.per_position, compute=self.compute)

    def searcher(self):
        """The model that screens and searches: the model itself, or its copy at the config's
        lower `search_dtype` (`workbench.precision.search_model`), built on first use."""
        if self.searcher_model is None:
            self.searcher_model = search_model(self.model, self.config.search_dtype)
        return self.searcher_model

    def means_of(self, data: TaskBatch) -> HeadMeans | None:
        """Mean-ablation means over `data`'s own prompts (None for other kinds)."""
        if self.config.kind is not AblationKind.MEAN:
            return None
        return compute_head_means(self.model, data.tokens, data.lengths)

    def forward_seconds(self) -> float:
        """Seconds of one plain forward over the selection split, timed now
        (`workbench.estimate.measure_forward`)."""
        return measure_forward(self)


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
                "--overwrite (run_cel(..., overwrite=True)) to replace it"
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


def run_cel(
    model,
    task,
    others: Sequence = (),
    config: CELConfig | None = None,
    *,
    out_dir: str | Path | None = None,
    metric: CustomMetric | None = None,
    means: HeadMeans | None = None,
    compute: Compute | None = None,
    plots: bool = True,
    overwrite: bool = False,
    explain: bool = True,
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
        out_dir: the results folder: stage files are written as they finish and a rerun
            with the same config resumes from them, then the explanation, `report.md`,
            `view.html` and the cost (the folder `workbench cel` writes); None keeps
            everything in memory and writes nothing.
        metric: a custom `metric(model, TaskBatch) -> [batch]` scores (or a dict of them);
            by default `choice_metric` for a multiple-choice task, `multi_token_metric` for
            one with `answer_tokens: multi`.
        means: head means for mean-ablating the main task (default: over its selection
            split's prompts); side tasks always use the means over their own prompts.
        compute: how to compute (rows per forward, progress); defaults otherwise.
        plots: write plots when saving.
        overwrite: empty an earlier CEL results folder in `out_dir` first, once this run
            holds its lock (refused while another run holds it).
        explain: explain the best set into `out_dir` (`workbench.explain.stage`; the command
            line's `--no-explain` is False).

    Returns:
        A `CELResult` (also saved to `out_dir` when given).

    Example:
        >>> result = run_cel(model, "ioi", others=["induction"], kind="mean", out_dir="cel_ioi")
        >>> result.confirmation[["size", "heads", "d_accuracy", "percentile"]]
    """
    run = prepare_run(model, task, others, config, metric=metric, means=means, compute=compute,
                      **settings)
    return run_prepared(run, out_dir=out_dir, plots=plots, overwrite=overwrite, explain=explain)


def prepare_run(
    model,
    task,
    others: Sequence = (),
    config: CELConfig | None = None,
    *,
    metric: CustomMetric | None = None,
    means: HeadMeans | None = None,
    compute: Compute | None = None,
    **settings,
) -> CELRun:
    """The first step of `run_cel` (same arguments): the config validated, the tasks sampled
    and the main task encoded for `model`, before any forward pass; `run_prepared` runs it.
    The command line reports the example counts in between, from the same encoding."""
    t0 = time.perf_counter()
    compute = Compute.split_settings(settings, compute)
    if "strategy" in settings:
        settings["strategies"] = settings.pop("strategy")
    if "model_name" in settings:
        settings["model"] = settings.pop("model_name")
    config = _settings_config(config, settings, model)
    config = dataclasses.replace(config, search_dtype=resolved(  # `auto`: the config holds it
        model, config.search_dtype, distributed.is_distributed()))
    main = resolve_task(task).sample_per_split(config.max_examples, config.seed)
    if metric is None:  # the registered metrics: the objective is checked before any forward
        check_objective(config.objective, main.name, any(e.wrong for e in main.examples),
                        task_kind(main))
    side_n = config.side_examples if config.side_examples is not None else config.max_examples
    other_tasks = {name: t.sample_per_split(side_n, config.seed)
                   for name, t in _other_tasks(others).items()}
    check_choice_ablation(config.kind, config.per_position, [main, *other_tasks.values()])
    select = encode_task(model, main, "select")
    # the task as fitted to this tokenizer (`workbench.tasks.fit`): a single-token file can
    # become multi-token (addition's digits on SmolLM2), and is then scored on every token;
    # a multiple-choice task is scored as lm-eval scores it (`workbench.metrics.choices`)
    if metric is None:
        metric = task_metric(None, select)
        for note in filter(None, [multi_token_note(select)]):  # said before the run starts
            warnings.warn(note, TaskWarning, stacklevel=caller_stacklevel())
    run = CELRun(model, config, main, select, encode_task(model, main, "heldout"), other_tasks,
                 metric, means, compute, started=t0)
    shared = set(run.select.task.ids) & set(run.heldout.task.ids)
    if shared:
        raise WorkbenchError(f"task {main.name!r}: examples {sorted(shared)[:5]} are in both the "
                             "select and heldout splits")

    check_counterfactuals(config.kind, [main, *other_tasks.values()])
    run.small = small_splits({"select": len(run.select), "heldout": len(run.heldout),
                              **{n: len(t.examples) for n, t in other_tasks.items()}})
    if run.small:  # it runs (a smoke test may want it), and says so here and in the report
        warnings.warn(f"task {main.name!r}: {small_splits_note(run.small)}",
                      FewExamplesWarning, stacklevel=caller_stacklevel())
    return run


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


def check_counterfactuals(kind: AblationKind | str, tasks: Sequence[Task]) -> None:
    """Resample ablation needs a counterfactual prompt on every example of every task; say so
    before the results folder is created."""
    if AblationKind.parse(kind) is not AblationKind.RESAMPLE:
        return
    for task in tasks:
        if not task.has_counterfactuals:
            n = sum(e.counterfactual is None for e in task.examples)
            raise WorkbenchError(
                f"resample ablation needs a 'counterfactual' prompt on every example; task "
                f"{task.name!r} has none on {n} of {len(task)} examples"
            )


def _settings_config(config: CELConfig | None, settings: dict, model) -> CELConfig:
    """The config from `config` and/or keyword settings, validated now."""
    if config is not None and settings:
        raise WorkbenchError(f"give either config= or settings {sorted(settings)}, not both")
    if config is not None:
        return config
    fields = {f.name for f in dataclasses.fields(CELConfig)}
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise WorkbenchError(f"run_cel got unknown settings {unknown}; expected CELConfig "
                             f"fields {sorted(fields - {'task', 'others'})}")
    settings.setdefault("model", _model_name(model))
    return CELConfig(task="", **settings)


def _model_name(model) -> str:
    """The name recorded for a model given as an object: TransformerLens's `model_name`, or,
    for a workbench checkpoint (whose config says "custom"), the checkpoint's own name."""
    name = str(getattr(model.cfg, "model_name", "model"))
    meta = getattr(model, "workbench_meta", None)
    if name == "custom" and isinstance(meta, dict) and meta.get("name"):
        return str(meta["name"])
    return name


def _other_tasks(others) -> dict[str, Task]:
    tasks = [resolve_task(o) for o in others]
    names = [t.name for t in tasks]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise WorkbenchError(f"side tasks must have distinct names; {dupes} given more than once "
                             "(rename one in its file header or drop it)")
    return {t.name: t for t in tasks}


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

