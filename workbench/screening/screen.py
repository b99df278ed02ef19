"""Stage 1 of CEL: the effect on a task of removing each attention head alone.

An effect is always **ablated minus clean**, averaged over examples, so a *positive* effect on
the task's metric means that removing the head *helps*. Per-head tables follow
`workbench.tables` (`layer, head, head_name` first) and then, for each metric `<m>`:

| column        | meaning                                                         |
|---------------|-----------------------------------------------------------------|
| `d_<m>`       | mean over examples of (ablated - clean)                         |
| `d_<m>_se`    | its standard error, `std(ddof=1) / sqrt(n)`                     |
| `d_<m>_lo/hi` | paired bootstrap percentile interval (95 % by default)          |
| `d_<m>_n`     | the examples the numbers rest on                                |

Units: `accuracy` is a fraction in [0, 1] (so `d_accuracy = 0.05` is five points), `logprob`
and `logit_diff` are in nats. Effects on the extra tasks passed as `others` carry the suffix
`_<task name>` (`d_accuracy_<task>`, `d_accuracy_se_<task>`, ...); those tasks are scored on
all their examples, since they are never used to select heads.

The screening methods (one record each in `workbench.screening.methods`, registered in
`workbench.screening.registry`):

- `exact`: one mask per head through `MaskScorer` with prefix reuse (`workbench.scoring.scorer`):
  equal to one full `run_with_hooks` per head up to float error, at about 0.4 of its cost
  for GPT-2-sized models (`bench/screen.py`);
- `attribution`: a first-order estimate for all heads from one forward and one backward pass
  per metric (`workbench.screening.attribution`);
- `naive`: the reference, one full `run_with_hooks` over the whole model per head with full
  logits. For tests and benchmarks.

Custom metrics: pass `metric(model, data) -> per-example scores` and any `data` it
understands, to screen any hooked model that exposes `blocks.{l}.attn.hook_z`
(HookedTransformer, HookedEncoder, TransformerBridge in compatibility mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, compute_head_means
from workbench.compute import QUIET, Compute
from workbench.deprecation import deprecated, renamed_keywords
from workbench.errors import WorkbenchError
from workbench.heads import HeadSet, HeadSpec, all_heads
from workbench.hooked import HookedModel
from workbench.metrics.scores import task_metric
from workbench.options import RaceRule
from workbench.racing import ATOL, SCREEN_RULES, OpenFn, RacePlan, first_slice, race
from workbench.scoring.scorer import CustomMetric, MaskScorer, Scorer, masks_of
from workbench.screening.registry import get_method
from workbench.stats import Stats, effect_summary
from workbench.tables import head_table
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.task import Task, load_task

STAT_SUFFIXES = ("", "_se", "_lo", "_hi")


def effect_column(metric: str, stat: str = "", task: str | None = None) -> str:
    """`effect_column("accuracy", "_lo", "add") == "d_accuracy_lo_add"`."""
    return f"d_{metric}{stat}" + (f"_{task}" if task else "")


def effect_columns(
    diffs: Mapping[str, Tensor], n_layers: int, n_heads: int, stats: Stats,
    task: str | None = None,
) -> dict[str, Tensor]:
    """The per-head columns of one task: `effect_summary` of each metric's per-example
    differences `[n_layers * n_heads, batch]`, each column `[n_layers, n_heads]`."""
    columns = {}
    for m, diff in diffs.items():
        for stat, values in effect_summary(diff, stats.n_boot, stats.seed, stats.ci).items():
            columns[effect_column(m, stat, task)] = values.view(n_layers, n_heads)
    return columns


@dataclass(frozen=True)
class ScreenRace:
    """Race exact screening on `metric` (`workbench.racing`): on the task a head stops being
    scored once `rule` is decided for that metric (`RaceRule`: `hurts`, until its removal
    clearly hurts; `pool`, until its membership of the search pool is decided)."""

    metric: str
    rule: RaceRule | str = RaceRule.HURTS

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", RaceRule.parse(self.rule))

    def open_fn(self) -> OpenFn:
        return SCREEN_RULES[self.rule.value](self.metric)


@dataclass(frozen=True)
class ScreenScope:
    """The part of the main task's head x example table that `screen_heads` fills.

    Attributes:
        split: the examples of the task (`"select"`, `"heldout"`, None for all; ignored for
            custom data).
        heads: the heads screened (the others get NaN rows); None: every head. Attribution
            always estimates every head.
    """

    split: str | None = "select"
    heads: Iterable[HeadSpec] | HeadSet | None = None


def resolve_task(task) -> Task:
    """A `Task` from a `Task`, a task name in `tasks/`, or a path."""
    if isinstance(task, Task):
        return task
    if isinstance(task, (str, os.PathLike)):
        return load_task(task)
    raise WorkbenchError(
        f"a task must be a Task, a task name or a task file path; got {type(task).__name__}"
    )


def prepare_data(model: HookedModel, task, split: str | None, metric: CustomMetric | None):
    """Encode a task (or pass through custom data) and name it.

    Returns:
        `(data, name)`: a `TaskBatch` of `split` for tasks; the object itself for custom data
        with a custom metric (then `split` is ignored).
    """
    if isinstance(task, TaskBatch):
        if split is not None:
            idx = [i for i, e in enumerate(task.task.examples) if e.split == split]
            if not idx:
                raise WorkbenchError(f"task {task.task.name!r} has no examples in split {split!r}")
            task = task.rows(idx)
        return task, task.task.name
    if isinstance(task, (Task, str, os.PathLike)):
        t = resolve_task(task)
        return encode_task(model, t, split), t.name
    if metric is not None:
        return task, getattr(task, "name", "data")
    raise WorkbenchError(
        f"task must be a Task, TaskBatch, task name or path (or any data with a custom metric); "
        f"got {type(task).__name__}"
    )


def _other_items(others) -> list[tuple[str | None, object]]:
    if isinstance(others, Mapping):
        return list(others.items())
    if isinstance(others, (str, os.PathLike, Task, TaskBatch)):
        others = [others]
    return [(None, o) for o in others]


def score_single_heads(
    scorer: Scorer,
    heads=None,
    plan: RacePlan | None = None,
    counter: dict | None = None,
    desc: str = "screening",
) -> dict[str, Tensor]:
    """Per-example effects of removing each head alone under `scorer`, `{metric: [n_layers *
    n_heads, batch]}` (NaN rows for heads not in `heads`), raced when `open_fn` is given
    (see `single_head_diffs`)."""
    model = scorer.model
    L, H = model.cfg.n_layers, model.cfg.n_heads
    chosen = all_heads(model) if heads is None else HeadSet.of(model, heads)
    plan = plan or RacePlan()
    raced = race(scorer, masks_of(model, [[h] for h in chosen]), plan.open_fn, plan.seed,
                 plan.ci, progress=scorer.compute.progress, desc=desc,
                 max_examples=plan.max_examples)
    if counter is not None:
        counter["forward_eq"] = counter.get("forward_eq", 0.0) + raced.forward_eq
    rows = torch.tensor([l * H + h for l, h in chosen], dtype=torch.long)
    diffs = {}
    for name, v in raced.diffs.items():
        full = torch.full((L * H, v.shape[1]), float("nan"), device=v.device, dtype=v.dtype)
        full[rows.to(v.device)] = v
        diffs[name] = full
    return diffs


def screen_scorer(
    scorer: Scorer, stats: Stats | None = None, race_on: ScreenRace | None = None
) -> pd.DataFrame:
    """The single-head screening table of one task (`screen_heads`'s schema for the main
    task) from any `Scorer`, e.g. the planted benchmark models' closed-form scorer; raced as
    `screen_heads` races (None: every head on every example)."""
    stats = stats or Stats()
    cfg = scorer.model.cfg
    plan = RacePlan(race_on.open_fn() if race_on else None, stats.seed, stats.ci)
    diffs = score_single_heads(scorer, None, plan)
    return head_table(effect_columns(diffs, cfg.n_layers, cfg.n_heads, stats), cfg.n_layers,
                      cfg.n_heads)


def exact_diffs(model: HookedModel, data, ablation, metric, heads, compute, plan, counter, desc,
                reuse_prefix: bool = True):
    """One mask per head through a `MaskScorer` (raced when `open_fn` is given)."""
    scorer = MaskScorer(model, data, ablation, metric, reuse_prefix=reuse_prefix,
                        compute=compute)
    clean = scorer.clean()
    diffs = score_single_heads(scorer, heads, plan, counter, desc)
    scorer.release()
    return clean, diffs


def naive_diffs(*args, **kwargs):
    """Exact scoring without prefix reuse: one full forward with full logits per head."""
    return exact_diffs(*args, **kwargs, reuse_prefix=False)


def single_head_diffs(
    model: HookedModel,
    data,
    method: str = "exact",
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
    metric: CustomMetric | None = None,
    heads=None,
    compute: Compute | None = None,
    *,
    plan: RacePlan | None = None,
    counter: dict | None = None,
    desc: str = "screening",
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clean scores `{metric: [batch]}` and per-example single-head effects
    `{metric: [n_layers * n_heads, batch]}` (NaN rows for heads not in `heads`). The
    scorer's residual cache is freed before returning.

    With a `plan` whose `open_fn` is set (exact and naive methods) the heads are raced
    (`workbench.racing.race`): a head `open_fn` closes keeps NaN for the examples it was not
    scored on; the plan's `max_examples` scores every head (attribution: estimates every head)
    on that many examples of the racing order only. `counter["forward_eq"]` adds up the
    passes spent."""
    return get_method(method).function()(
        model, data, Ablation.of(ablation), metric, heads, compute or QUIET, plan or RacePlan(),
        counter, desc,
    )


def as_screen_race(race_on) -> ScreenRace | None:
    """`screen_heads`' `race_on` as a `ScreenRace` (or None). Before 0.2.0 it was the metric's
    name, with the rule as `race_rule`: a name still works, with a `DeprecationWarning`."""
    if isinstance(race_on, str):
        deprecated("screen_heads(..., race_on=<metric name>)",
                   f"screen_heads(..., race_on=ScreenRace({race_on!r}))")
        return ScreenRace(race_on)
    return race_on


# keywords of screen_heads that moved: into its `stats`, `compute` and `race_on` (0.2.0), and
# into its `ablation` and `scope`
@renamed_keywords(
    holders={"stats": lambda s: s or Stats(), "compute": lambda c: c or QUIET,
             "race_on": as_screen_race, "ablation": Ablation.of,
             "scope": lambda s: s or ScreenScope()},
    kind="ablation.kind", means="ablation.means", per_position="ablation.per_position",
    split="scope.split", heads="scope.heads",
    n_boot="stats.n_boot", ci="stats.ci", seed="stats.seed",
    max_rows="compute.max_rows", masks_per_pass="compute.masks_per_pass",
    progress="compute.progress", token_budget="compute.token_budget",
    cache_bytes="compute.cache_bytes", offload="compute.offload", race_rule="race_on.rule",
)
def screen_heads(
    model: HookedModel,
    task,
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
    method: str = "exact",
    scope: ScreenScope | None = None,
    others: Sequence | Mapping = (),
    metric: CustomMetric | None = None,
    stats: Stats | None = None,
    race_on: ScreenRace | None = None,
    compute: Compute | None = None,
) -> pd.DataFrame:
    """The effect of removing each head alone, on a task and on extra tasks.

    Args:
        model: a hooked model exposing `blocks.{l}.attn.hook_z`.
        task: a `Task`, `TaskBatch`, task name or path; or any data for a custom `metric`.
        ablation: how a head is removed (`Ablation`, or its kind alone). Mean ablation of
            `task` uses the ablation's `means`, by default the mean `z` over the screened split
            of `task`; each of `others` uses the mean over its own prompts.
        method: `"exact"`, `"attribution"` or `"naive"` (see the module docstring).
        scope: the split of `task` and the heads screened (`ScreenScope()`: the select split,
            every head).
        others: extra tasks (scored on all their examples), or a `{name: data}` mapping.
        metric: a custom `metric(model, data) -> [batch]` scores (or a dict of them).
        stats: the paired bootstrap's resamples, level and seed (`Stats()` by default).
        race_on: race exact screening (`ScreenRace`): on the task a head stops being scored
            once the race's rule is decided for its metric; each of `others` is scored only
            on as many examples as the task's first racing look, and only for the heads whose
            removal does not clearly hurt the task (its per-head columns decide nothing; the
            others are NaN). None scores every head on every example. The `d_<m>_n` columns
            say how many examples each number rests on.
        compute: budgets and progress bars (`workbench.compute.Compute`; None: the device's
            budgets, no progress bars).

    Returns:
        A per-head table (see the module docstring). `df.attrs` holds `clean` (the clean mean
        of each metric per task), `n_examples` per task, `method`, `kind` and `forward_eq`
        (passes over each task's examples spent).

    Example:
        >>> df = screen_heads(model, "ioi", "mean")
        >>> df.sort_values("d_logit_diff", ascending=False).head()
    """
    method = get_method(method).name
    ablation = Ablation.of(ablation)
    kind, means = ablation.kind, ablation.means
    scope = scope or ScreenScope()
    if not isinstance(scope, ScreenScope):
        raise WorkbenchError(f"scope must be a ScreenScope (split, heads) or None; got {scope!r}")
    split, heads = scope.split, scope.heads
    stats = stats or Stats()
    compute = compute or QUIET
    race_on = as_screen_race(race_on)
    if race_on is not None and not isinstance(race_on, ScreenRace):
        raise WorkbenchError(f"race_on must be a ScreenRace or None; got {race_on!r}")
    data, name = prepare_data(model, task, split, metric)
    if kind is AblationKind.MEAN and means is None:
        if not isinstance(data, TaskBatch):
            raise WorkbenchError(
                "mean ablation with custom data needs its means: pass "
                "ablation=Ablation('mean', compute_head_means(...))"
            )
        means = compute_head_means(model, data.tokens, data.lengths)
    columns: dict[str, Tensor] = {}
    attrs = {
        "clean": {},
        "n_examples": {},
        "method": method,
        "kind": kind.value,
        "task": name,
        "per_position": ablation.per_position,
        "forward_eq": {},
    }
    items = [(None, data, name)]
    for other_name, other in _other_items(others):
        other_data, default_name = prepare_data(model, other, None, metric)
        items.append((other_name or default_name, other_data, other_name or default_name))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    pool: dict[tuple[int, int], bool] = {}  # filled by the main task (it comes first)
    for suffix, d, label in items:
        item_means = means
        if suffix is not None and kind is AblationKind.MEAN and isinstance(d, TaskBatch):
            item_means = compute_head_means(model, d.tokens, d.lengths)  # its own prompts
        item_ablation = Ablation(kind, item_means, ablation.per_position)
        # the main task races on its decision; a side task's per-head columns decide nothing
        # (the found sets' side effects are measured on every example in confirmation), so
        # they rest on as many examples as the task's first look (the first of the racing
        # order): on SmolLM2 the 38 of induction's first slice cost ioi's whole screening
        # each task its own metric (a multi-token side task of a single-token task, ...);
        # a metric on a TaskBatch scores rows one by one, so its slices can be raced
        item_metric = task_metric(metric, d)
        rule, limit, item_heads = None, None, heads
        if race_on is not None and (item_metric is None or isinstance(d, TaskBatch)):
            if suffix is None:
                rule = race_on.open_fn()
            else:
                limit = first_slice(len(data))
                # and only for the heads a search can pick: those whose removal does not
                # clearly hurt the task (`search_pool`'s rule); the others' side columns
                # are NaN with n = 0
                item_heads = [h for h in (all_heads(model) if heads is None
                                          else HeadSet.of(model, heads)) if pool.get(h)]
        counter: dict = {}
        clean, diffs = single_head_diffs(
            model, d, method, item_ablation, item_metric, item_heads, compute,
            plan=RacePlan(rule, stats.seed, stats.ci, limit), counter=counter,
            desc=f"screening {label}",
        )
        attrs["forward_eq"][label] = counter.get("forward_eq", float("nan"))
        attrs["clean"][label] = {m: float(torch.nanmean(v.float())) for m, v in clean.items()}
        attrs["n_examples"][label] = int(next(iter(clean.values())).shape[0])
        columns.update(effect_columns(diffs, L, H, stats, suffix))
        if suffix is None and rule is not None:  # the main task raced: its pool is known
            hi = columns[effect_column(race_on.metric, "_hi")].cpu()  # (L, H)
            pool = {(l, h): bool(hi[l, h] >= -ATOL) for l in range(L) for h in range(H)}
    df = head_table(columns, L, H)
    df.attrs.update(attrs)
    return df


def naive_effects(
    model: HookedModel,
    data,
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
    heads=None,
) -> dict[str, np.ndarray]:
    """The reference: mean effect of each head from one full `run_with_hooks` per head,
    `{metric: [n_layers, n_heads]}` (NaN for heads not in `heads`)."""
    _, diffs = single_head_diffs(model, data, "naive", ablation, heads=heads)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return {m: torch.nanmean(d, dim=-1).view(L, H).cpu().numpy() for m, d in diffs.items()}
