"""What each metric is: one `Metric` record per metric, the single source of its properties.

A metric's function says how it is computed (`workbench.metrics.scores`); its record says how
the rest of the workbench treats it: which way is better, whether it is a difference between
the answer and a wrong answer (so it can rise while both answers fall), whether a task needs
wrong answers for it, whether it has a gradient (attribution, gates), whether it guards a
difference objective by default (`workbench.results.tradeoff.gamed`), whether it is a 0/1
score per example (too coarse to regress on: the searches' knockout regressions use the
secondary metric instead), for a 0/1 metric without a gradient its differentiable companion,
the kinds of task it is defined on, and, for a derived metric, the metric it rescales. Every
list of metric names (task headers, the objective's choices, the guard, table orders, the
command line's help) is derived from these records.

Three kinds of task score three families of metrics, under different names so that a name means
one number everywhere: a next-token task (`answer`, `wrong`) scores `accuracy` (the argmax
token, or greedy exact match for a multi-token answer), `logit_diff`, `prob_diff` and
`normalized_logit_diff`; a multiple-choice task (`choices`, `gold`) scores lm-eval's `acc` and
`acc_norm`, `ll_margin` and `acc_norm_margin`; a generation task (`target`) scores
`exact_match`, the greedy generation's extracted answer against the target (no gradient and
no margin of it: screening and attribution rank its heads by `logprob`, the search and the
confirmation score real generations). `logprob`, the answer's teacher-forced log-probability
summed over its tokens, is all three: a multiple-choice task's answer is its gold choice, a
generation task's `target_delimiter + target`. A task, a guard or an objective names only its
own kind's metrics, and no table of a task shows another kind's.

A custom metric (a `metric(model, data)` given to `run_cel` or `screen_heads`) declares the
same fields for the scores it returns with `declare`:

    @declare(Metric("margin", "answer logit minus the runner-up's", difference=True))
    def margin(model, batch): ...

A score without a record (a custom metric that declares nothing) is treated as a plain,
continuous, higher-is-better metric that is neither a difference nor a guard.

This module imports no torch: the command line and the task format read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from workbench.errors import WorkbenchError
from workbench.options import did_you_mean


@dataclass(frozen=True)
class Metric:
    """The properties of one metric (module docstring).

    Attributes:
        name: the score's name (`d_<name>` columns).
        summary: what it measures, in one line (the command line's help).
        higher_is_better: the direction of improvement; every registered metric is.
        difference: a difference between the answer and wrong answers (`logit_diff`,
            `prob_diff`): it rises when the wrong answers fall faster than the answer.
        needs_wrong: defined only on examples with a wrong answer.
        differentiable: has a useful gradient (accuracy's is 0 almost everywhere).
        guards: when the objective is a difference, a significant fall of this metric on the
            main task flags a set as gaming the objective (`gamed`).
        coarse: a 0/1 score per example: regressions on knockout masks use the secondary
            metric instead.
        base: for a derived metric, the registered metric it rescales by a positive factor
            (so a search maximising one maximises the other), else None.
        companion: for a 0/1 metric without a gradient, a differentiable score of the same
            metric function that is positive exactly where this one is 1 (a margin):
            attribution estimates this metric's change as the flips of the companion's sign
            under the companion's linear estimate. None: no such score.
        kinds: the kinds of task it is defined on (`NEXT_TOKEN`, `MULTIPLE_CHOICE`,
            `GENERATION`).
    """

    name: str
    summary: str = ""
    higher_is_better: bool = True
    difference: bool = False
    needs_wrong: bool = False
    differentiable: bool = True
    guards: bool = False
    coarse: bool = False
    base: str | None = None
    companion: str | None = None
    kinds: tuple[str, ...] = ("next-token",)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise WorkbenchError(f"a metric's name must be an identifier; got {self.name!r}")
        if not self.higher_is_better:
            raise WorkbenchError(
                f"metric {self.name!r}: CEL maximises every metric, so a record must have "
                "higher_is_better=True; negate a lower-is-better score instead")


NEXT_TOKEN, MULTIPLE_CHOICE, GENERATION = "next-token", "multiple-choice", "generation"
_ALL = (NEXT_TOKEN, MULTIPLE_CHOICE, GENERATION)
# The registered metrics, in the order tables and reports list them.
METRIC_RECORDS: tuple[Metric, ...] = (
    Metric("accuracy", "1 when the argmax is an acceptable answer (a fraction in [0, 1])",
           differentiable=False, guards=True, coarse=True),
    Metric("logprob", "log-probability of the answer set (a choice task: of the gold choice; "
           "a generation task: of the target, teacher-forced), in nats", guards=True,
           kinds=_ALL),
    Metric("logit_diff", "logsumexp(answer logits) - logsumexp(wrong logits), in nats",
           difference=True, needs_wrong=True),
    Metric("prob_diff", "probability of the answers minus that of the wrong answers",
           difference=True, needs_wrong=True),
    Metric("normalized_logit_diff", "logit_diff over the clean model's mean logit_diff",
           difference=True, needs_wrong=True, base="logit_diff"),
    Metric("acc", "1 when the gold choice has the highest summed log-likelihood (lm-eval's "
           "acc)", differentiable=False, guards=True, coarse=True, companion="ll_margin",
           kinds=(MULTIPLE_CHOICE,)),
    Metric("acc_norm", "acc with each log-likelihood divided by its choice's length in "
           "characters (lm-eval's acc_norm)", differentiable=False, guards=True, coarse=True,
           companion="acc_norm_margin", kinds=(MULTIPLE_CHOICE,)),
    Metric("ll_margin", "gold choice's log-likelihood minus the best wrong choice's, in nats",
           difference=True, needs_wrong=True, kinds=(MULTIPLE_CHOICE,)),
    Metric("acc_norm_margin", "gold choice's log-likelihood per character minus the best "
           "wrong choice's, in nats per character", difference=True, needs_wrong=True,
           kinds=(MULTIPLE_CHOICE,)),
    Metric("exact_match", "1 when the answer extracted from the greedy generation equals the "
           "target (lm-eval's exact_match)", differentiable=False, guards=True, coarse=True,
           kinds=(GENERATION,)),
)
_BY_NAME = {m.name: m for m in METRIC_RECORDS}


def metric_names(kind: str | None = None) -> tuple[str, ...]:
    """Every registered metric's name, derived ones included, in table order; with `kind`
    (`NEXT_TOKEN`, `MULTIPLE_CHOICE`, `GENERATION`), those defined on that kind of task."""
    return tuple(m.name for m in METRIC_RECORDS if kind is None or kind in m.kinds)


def scored_names(kind: str = NEXT_TOKEN) -> tuple[str, ...]:
    """The metrics a forward scores on a task of `kind` (its registered metrics that are not
    derived)."""
    return tuple(m.name for m in METRIC_RECORDS if m.base is None and kind in m.kinds)


def record(name: str, custom: Callable | None = None) -> Metric:
    """The record of score `name`: the one `custom` declares, else the registered one, else
    a plain continuous metric (module docstring)."""
    declared = getattr(custom, "metric_records", {}) if custom is not None else {}
    if name in declared:
        return declared[name]
    return _BY_NAME.get(name) or Metric(name)


def registered(name: str) -> Metric | None:
    """The registered record of `name`, or None."""
    return _BY_NAME.get(name)


def base_metric(name: str) -> str:
    """The metric `name` rescales (itself when it is not derived)."""
    found = _BY_NAME.get(name)
    return found.base if found is not None and found.base else name


def names_where(flag: str, names: Iterable[str] | None = None,
                custom: Callable | None = None) -> tuple[str, ...]:
    """The metrics among `names` (default: the registered ones) whose record has `flag`
    true, e.g. `names_where("guards")`."""
    names = metric_names() if names is None else tuple(names)
    return tuple(n for n in names if getattr(record(n, custom), flag))


def table_order(names: Iterable[str]) -> list[str]:
    """`names` with the registered metrics first, in their order, then the rest sorted."""
    order = {n: i for i, n in enumerate(metric_names())}
    return sorted(names, key=lambda m: (order.get(m, len(order)), m))


def declare(*records: Metric) -> Callable:
    """Decorator: attach `records` to a custom metric function (module docstring), e.g.
    `@declare(Metric("margin", difference=True))`. A record may not redefine a registered
    metric's properties under its name."""
    for r in records:
        if not isinstance(r, Metric):
            raise WorkbenchError(f"declare takes Metric records; got {r!r}")
        known = _BY_NAME.get(r.name)
        if known is not None and replace(r, summary=known.summary) != known:
            raise WorkbenchError(f"metric {r.name!r} is registered with other properties; "
                                 "give the custom score another name")

    def attach(fn: Callable) -> Callable:
        fn.metric_records = {**getattr(fn, "metric_records", {}), **{r.name: r for r in records}}
        return fn

    return attach


def help_text() -> str:
    """The registered metrics in one line for the command line's help."""
    return "; ".join(f"{m.name}: {m.summary}" for m in METRIC_RECORDS)


def task_kind(task) -> str:
    """`MULTIPLE_CHOICE` for a task whose examples have choices, `GENERATION` for one whose
    examples have targets, else `NEXT_TOKEN`."""
    if getattr(task, "is_multiple_choice", False):
        return MULTIPLE_CHOICE
    return GENERATION if getattr(task, "is_generation", False) else NEXT_TOKEN


def check_objective(objective: str | None, task: str | None = None,
                    has_wrong: bool = True, kind: str | None = None) -> None:
    """Refuse an objective (`--objective`, `run_cel(objective=...)` with no custom metric)
    that is no registered metric, that is not defined on task `task`'s `kind` (None: any),
    or that needs wrong answers when the task has none (`has_wrong`); None (the task's own
    metric) passes. Checked before a model loads."""
    if objective is None:
        return
    if objective not in _BY_NAME:
        raise WorkbenchError(
            f"objective {objective!r} is not a metric; expected one of {', '.join(_BY_NAME)}"
            f"{did_you_mean(objective, _BY_NAME)} (a custom metric is given from Python: "
            "run_cel(..., metric=...))")
    if kind is not None and kind not in _BY_NAME[objective].kinds:
        raise WorkbenchError(
            f"objective {objective!r} is not defined on {kind} task {task!r}; expected one of "
            f"{', '.join(metric_names(kind))}")
    if _BY_NAME[objective].needs_wrong and not has_wrong:
        raise WorkbenchError(
            f"objective {objective!r} compares the answer with wrong answers, and task "
            f"{task!r} has none; expected one of "
            f"{', '.join(m.name for m in METRIC_RECORDS if not m.needs_wrong)}")


def default_secondary(objective: str, names: Sequence[str]) -> str | None:
    """The metric that breaks the objective's ties when the config names none: the answer's
    log-prob, else accuracy, else the first other metric of the run (`names`)."""
    for candidate in ("logprob", "accuracy") if objective != "logprob" else ("accuracy",):
        if candidate in names and candidate != objective:
            return candidate
    others = [n for n in names if n != objective]
    return others[0] if others else None
