"""`run_cel`: the three CEL stages over one validated config, resumable from a results folder.

1. screen (`screen_stage`): the effect of removing each head alone on the selection split
   (and on every side task), and the candidate pool;
2. search (`search_stage`): head sets scored jointly on the selection split by the config's
   strategies (its scoring calls saved as they go and replayed by a rerun after an interrupt,
   `workbench.search.replay`);
3. confirm (`confirm_stage`, `workbench.confirmation.stage`, which saves each finished size
   so that an interrupted confirmation resumes from it): the best set of each size re-scored
   on the held-out split, against random sets of the same size, with side effects on the
   other tasks and the trade-off of found and random sets (`workbench.results.tradeoff`).

The config (`CELConfig`) is built and validated before any forward pass. Each stage builds
the scorers of the split it uses and drops them when it ends, so cached activations of one
split never sit in memory beside another's. With mean ablation every task is ablated with
the means over its own prompts (the selection split for the main task) unless `means` is
given for the main task. Each stage's table is written to the results folder as soon as it
is done, with a record of the inputs that made it (see `workbench.results.store`); a rerun reuses a
stage only when config, model, tasks and upstream files are unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from workbench import distributed, progress
from workbench.ablation import AblationKind, HeadMeans, compute_head_means
from workbench.compute import Compute
from workbench.config import CELConfig
from workbench.confirmation.stage import confirm_stage, score_means
from workbench.deprecation import caller_stacklevel
from workbench.environment import environment, thread_choice
from workbench.errors import FewExamplesWarning, WorkbenchError
from workbench.guards import (
    MAIN,
    Guard,
    check_guards,
    labels,
    parse_guards,
    run_guards,
    task_metrics,
)
from workbench.metrics.records import base_metric, check_objective, default_secondary
from workbench.metrics.scores import multi_token_metric, task_metric
from workbench.precision import resolved, search_model
from workbench.results.fingerprint import digest, model_fingerprint, task_fingerprint
from workbench.results.result import CELResult
from workbench.results.store import ResultStore
from workbench.results.view import write_view
from workbench.scoring.scorer import CustomMetric, MaskScorer
from workbench.screening.registry import get_method
from workbench.screening.screen import ScreenRace, resolve_task, screen_heads, single_head_diffs
from workbench.search.candidates import (
    candidate_heads,
    rank_order,
    search_pool,
    select_candidates,
)
from workbench.search.registry import get_strategy
from workbench.search.replay import SearchCheckpoint
from workbench.search.space import SearchSpace
from workbench.stats import Stats, helpful_agreement, rank_correlation
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.format import small_splits, small_splits_note
from workbench.tasks.task import Task


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
            with the same config resumes from them; None keeps everything in memory.
        metric: a custom `metric(model, TaskBatch) -> [batch]` scores (or a dict of them);
            for a task with `answer_tokens: multi`, `multi_token_metric` by default.
        means: head means for mean-ablating the main task (default: over its selection
            split's prompts); side tasks always use the means over their own prompts.
        compute: how to compute (rows per forward, progress); defaults otherwise.
        plots: write plots when saving.
        overwrite: empty an earlier CEL results folder in `out_dir` first, once this run
            holds its lock (refused while another run holds it).

    Returns:
        A `CELResult` (also saved to `out_dir` when given).

    Example:
        >>> result = run_cel(model, "ioi", others=["induction"], kind="mean", out_dir="cel_ioi")
        >>> result.confirmation[["size", "heads", "d_accuracy", "percentile"]]
    """
    run = prepare_run(model, task, others, config, metric=metric, means=means, compute=compute,
                      **settings)
    return run_prepared(run, out_dir=out_dir, plots=plots, overwrite=overwrite)


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
        check_objective(config.objective, main.name, any(e.wrong for e in main.examples))
    side_n = config.side_examples if config.side_examples is not None else config.max_examples
    other_tasks = {name: t.sample_per_split(side_n, config.seed)
                   for name, t in _other_tasks(others).items()}
    select = encode_task(model, main, "select")
    # the task as fitted to this tokenizer (`workbench.tasks.fit`): a single-token file can
    # become multi-token (addition's digits on SmolLM2), and is then scored on every token
    if metric is None and select.task.answer_tokens == "multi":
        metric = multi_token_metric  # exact scores over every answer position
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
    overwrite: bool = False,
) -> CELResult:
    """Run a `prepare_run` result's three stages (see `run_cel` for the arguments)."""
    with run.compute.threads_set():
        return _run_stages(run, out_dir, plots, overwrite)


def _run_stages(run: CELRun, out_dir, plots: bool, overwrite: bool) -> CELResult:
    model, config, main, other_tasks = run.model, run.config, run.main, run.others
    metric, t0 = run.metric, run.started
    # the objective is checked against the metrics the task scores before the folder is
    # opened, so that a refused run creates none
    if run.means is None:
        run.means = run.means_of(run.select)
    setup = run.scorer(run.select, run.means)
    clean_select = setup.clean()
    setup.release()
    run.config = config = _resolve_metrics(config, list(clean_select), metric, main, model,
                                           other_tasks)
    with ResultStore(out_dir, overwrite=overwrite) as store:
        result = CELResult(config=config, seeds={"bootstrap": config.seed,
                                                 "random_sets": config.seed,
                                                 "compressed_sensing": config.seed})
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
        result.environment = _environment(run, store.previous)
        result.summary.update({
            "objective": config.objective,
            "secondary": config.secondary,
            "splits": {"select": run.select.task.ids, "heldout": run.heldout.task.ids},
            "prepend_bos": run.select.prepend_bos,  # the BOS choice in effect (issue 20)
            "answer_tokens": run.select.task.answer_tokens,  # as fitted to this tokenizer
            # where the tasks were read from (None: built in memory): `workbench explain`
            # reloads the main task from there
            "task_file": main.file,
            "side_task_files": {name: t.file for name, t in other_tasks.items()},
        })
        if run.small:  # splits or side tasks below MIN_SPLIT_EXAMPLES (none: no key)
            result.summary["few_examples"] = run.small
        result.summary.setdefault("n_examples", {})["select"] = len(run.select)
        result.summary.setdefault("clean", {})["select"] = score_means(clean_select)
        _add_time(result, "setup", t0)
        store.save(result.run_file())
        cfg = config.to_dict()

        result.heads = _resumed(store, cfg, "heads", "screen", screen_stage, run, result)
        _check_heads(result.heads, model, store.folder)
        result.combos = _resumed(store, cfg, "combos", "search",
                                 functools.partial(search_stage, store=store), run, result)
        run.searcher_model = None  # a lower-precision copy is not needed past the search

        confirmation = store.load("confirmation", cfg)
        side_effects = store.load("side_effects", cfg) if other_tasks else pd.DataFrame()
        # a folder confirmed before the trade-off table existed is confirmed again
        tradeoff = store.load("tradeoff", cfg) if other_tasks else pd.DataFrame()
        if confirmation is None or side_effects is None or tradeoff is None:
            t = time.perf_counter()
            with progress.stage("confirm", run.compute.progress):
                # resumes from the sizes an interrupted run saved
                confirmation, side_effects, tradeoff = confirm_stage(run, result, store)
            _add_time(result, "confirm", t)
            tables = {"confirmation": confirmation}
            if not side_effects.empty:
                tables["side_effects"] = side_effects
            if not tradeoff.empty:
                tables["tradeoff"] = tradeoff
            result.confirmation, result.side_effects = confirmation, side_effects
            store.save(result.run_file(), finished=("confirm",), **tables)
        result.confirmation, result.side_effects = confirmation, side_effects
        result.tradeoff = tradeoff
        if store.folder is not None:
            result.write_report(store.folder, plots)
            write_view(store.folder)  # view.html: the tables and plots, offline
    return result


def _resumed(store: ResultStore, cfg: dict, table: str, stage: str, run_stage, run: CELRun,
             result: CELResult) -> pd.DataFrame:
    """A stage's table from the results folder when its inputs are unchanged, else computed
    by `run_stage(run, result)`, timed as `stage` and saved."""
    df = store.load(table, cfg)
    if df is None:
        t = time.perf_counter()
        with progress.stage(stage, run.compute.progress):
            df = run_stage(run, result)
        _add_time(result, stage, t)
        store.save(result.run_file(), finished=(stage,), **{table: df})  # its checkpoint goes
    return df


def screen_stage(run: CELRun, result: CELResult) -> pd.DataFrame:
    """Stage 1: the single-head screening table with the candidates marked."""
    config = run.config
    race = ScreenRace(run.order[0], screen_race_rule(config.strategies))
    heads = screen_heads(run.searcher(), run.select, config.kind, config.method, split=None,
                         others=run.others if config.side_screening else (),
                         metric=run.metric, means=run.means, per_position=config.per_position,
                         stats=run.stats, race_on=race if config.adaptive else None,
                         compute=run.compute)
    result.summary.setdefault("forward_eq", {})["screen"] = heads.attrs.get("forward_eq", {})
    if not get_method(config.method).exact and config.check_attribution:
        # an estimate is checked against exact screening: rank correlation, helpful heads
        _, exact = single_head_diffs(run.searcher(), run.select, "exact", config.kind, run.means,
                                     run.metric, per_position=config.per_position,
                                     compute=run.compute, desc="exact check")
        rho, agreement = {}, {}
        for m, d in exact.items():
            heads[f"exact_d_{m}"] = torch.nanmean(d, -1).cpu().numpy()
            rho[m] = rank_correlation(heads[f"d_{m}"], heads[f"exact_d_{m}"])
            exact_table = heads[["layer", "head"]].assign(**{f"d_{m}": heads[f"exact_d_{m}"]})
            agreement[m] = helpful_agreement(heads, exact_table, m)
        result.summary["attribution_rank_correlation"] = rho
        result.summary["attribution_agreement"] = agreement
    heads = select_candidates(heads, *run.order, config.top_m,
                              guards=[g for g in run.guards if g.on_main])
    result.summary["candidates"] = [head_name(*h) for h in candidate_heads(heads)]
    return heads


def screen_race_rule(strategies) -> str:
    """What raced screening decides: the candidates' ranks (`"hurts"`) when a strategy
    searches among them (its record is `ranked`), else only the search pool (`"pool"`,
    `workbench.racing`)."""
    return "hurts" if any(get_strategy(s).ranked for s in strategies) else "pool"


def search_stage(run: CELRun, result: CELResult, store: ResultStore | None = None
                 ) -> pd.DataFrame:
    """Stage 2: every head set the strategies scored on the selection split. With `store`,
    its scoring calls are saved as they go and an interrupted run's are replayed
    (`workbench.search.replay`)."""
    config = run.config
    low = run.searcher()  # the knockouts only rank heads: at `search_dtype`, like screening
    with SearchCheckpoint(store, config.to_dict(), result) as saved:
        space = SearchSpace(saved.wrap(run.scorer(run.select, run.means), "main"),
                            candidate_heads(result.heads),
                            config.objective, config.secondary, rank_by=config.rank_by,
                            max_size=config.max_size, top_m=config.top_m,
                            beam_width=config.beam_width, n_masks=config.n_masks,
                            knockout_p=config.knockout_p, budget=config.search_budget,
                            knockout_examples=config.knockout_examples,
                            seed=config.seed, adaptive=config.adaptive, ci=config.ci,
                            progress=run.compute.progress,
                            pool=search_pool(result.heads, run.order[0], second=run.order[1],
                                             guards=[g for g in run.guards if g.on_main]),
                            guards=tuple(g for g in run.guards if g.on_main),
                            guard_rule=config.guard_rule,
                            ranker=None if low is run.model else saved.wrap(
                                run.scorer(run.select, run.means, low), "main_ranks"))
        for name in config.strategies:
            get_strategy(name)(space, **config.strategy_settings.get(name, {}))
        for used in filter(None, (space.scorer, space.ranker)):
            used.release()
        side_guards = [g for g in run.guards if not g.on_main]
        if side_guards:  # the best sets' side-task guards, on each side task's selection split
            space.check_side_guards(side_guards, {g.task: saved.wrap(
                run.scorer(*_split_data(run, g.task, "select")), g.task)
                for g in side_guards})
    result.summary.update(space.notes)
    result.summary.setdefault("forward_eq", {})["search"] = space.forward_eq
    result.timings["search"] = result.timings.get("search", 0.0) + saved.seconds  # earlier runs'
    return pd.DataFrame(space.records)


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
    if metric is not None and metric is not multi_token_metric:
        default = names[0]  # a user metric: its first score
    objective = config.objective or default
    objective = base_metric(objective)
    if objective not in names:
        raise WorkbenchError(
            f"objective {objective!r} is not a metric of this run; expected one of {names}"
        )
    secondary = config.secondary or default_secondary(objective, names)
    guards = run_guards(config.guards, objective, names, metric)
    main_metrics = names if metric is not None and metric is not multi_token_metric else [
        m for m in names if m in task_metrics(main)]
    check_guards(guards, {MAIN: main_metrics,
                          **{n: task_metrics(t) for n, t in others.items()}})
    return dataclasses.replace(
        config, task=main.name, others=tuple(others), objective=objective, secondary=secondary,
        guards=tuple(labels(guards)),
        model_fingerprint=model_fingerprint(model), task_fingerprint=task_fingerprint(main),
        others_fingerprint=digest([task_fingerprint(t) for t in others.values()]),
    )


def _split_data(run: CELRun, task: str, split: str) -> tuple[TaskBatch, HeadMeans | None]:
    """A side task's split, encoded for the run's model, and its mean-ablation means (over its
    own prompts, as side tasks are ablated)."""
    data = encode_task(run.model, run.others[task], split)
    return data, run.means_of(data)


def _check_heads(heads: pd.DataFrame, model, folder: Path | None) -> None:
    n = model.cfg.n_layers * model.cfg.n_heads
    if len(heads) != n:
        raise WorkbenchError(f"{str(folder)!r}: heads.csv has {len(heads)} rows; this model has "
                             f"{n} heads")


def _environment(run: CELRun, previous: dict | None) -> dict:
    """What this run computes on (`workbench.environment.environment`); a resumed run on
    another machine or setup keeps the earlier ones it resumed from under `earlier`."""
    env = environment(run.model, thread_choice(run.compute.threads))
    before = dict((previous or {}).get("environment") or {})
    earlier = before.pop("earlier", [])
    if before and before != env:
        earlier = [*earlier, before]
    return {**env, "earlier": earlier} if earlier else env


def _add_time(result: CELResult, stage: str, start: float) -> None:
    result.timings[stage] = result.timings.get(stage, 0.0) + time.perf_counter() - start

