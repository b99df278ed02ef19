"""Preparing a CEL run: `prepare_run` and the `CELRun` it returns, before any forward pass.

`run_cel` runs in two steps (`workbench.pipeline`): `prepare_run` validates the config (from a
`CELConfig` or keyword settings), samples the main and side tasks, checks that the ablation
fits them (resample ablation needs counterfactual prompts; position-dependent ablations refuse
multiple-choice and generation tasks) and encodes the main task's splits for the model; the
`CELRun` it returns holds what every stage needs, and `run_prepared` runs the stages on it.
The command line reports the example counts in between, from the same encoding.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from workbench import distributed
from workbench.ablation import Ablation, AblationKind, HeadMeans, compute_head_means
from workbench.compute import Compute
from workbench.config import CELConfig
from workbench.deprecation import caller_stacklevel
from workbench.errors import FewExamplesWarning, TaskWarning, WorkbenchError
from workbench.estimate import RunEstimate, measure_forward
from workbench.guards import Guard, parse_guards
from workbench.hooked import HookedModel
from workbench.metric_records import check_objective, task_kind
from workbench.metrics.run_checks import check_choice_ablation, multi_token_note
from workbench.metrics.scores import task_metric
from workbench.precision import resolved, search_model
from workbench.scoring.scorer import CustomMetric, MaskScorer
from workbench.screening.screen import resolve_task
from workbench.search.candidates import rank_order
from workbench.stats import Stats
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

    @property
    def ablation(self) -> Ablation:
        """The run's ablation with the main task's means (`means`)."""
        return Ablation(self.config.kind, self.means, self.config.per_position)

    def scorer(self, data, means: HeadMeans | None = None, model: HookedModel=None) -> MaskScorer:
        """A scorer of `data` under the run's ablation, with `means` (those of `data`'s
        prompts for mean ablation)."""
        ablation = Ablation(self.config.kind, means, self.config.per_position)
        return MaskScorer(self.model if model is None else model, data, ablation,
                          task_metric(self.metric, data), compute=self.compute)

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


def prepare_run(
    model: HookedModel,
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
    check_choice_ablation(Ablation(config.kind, per_position=config.per_position),
                          [main, *other_tasks.values()])
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
