"""Guards: the search looks for sets that truly enhance the task, not sets that game its metric.

A difference objective (`logit_diff`, `prob_diff`: a record with `difference`) rises whenever
the wrong answers fall faster than the right one, so a set that breaks the model can raise it
(ACDC's authors report the same of logit difference as an optimisation target: Conmy et al.
2023, appendix C). CEL therefore searches under constraints, as constrained selection does
(Seldonian selection, Thomas et al. 2019; Learn-then-Test, Angelopoulos et al. 2021;
constrained best-arm identification): a set is *feasible* when it passes every guard, the
search maximises the objective over feasible sets only, and the held-out confirmation is the
safety test, which may answer "no set passes".

A `Guard` is a metric on a task (the main task, or a side task) and a tolerance: the set may
not lower that metric by more than the tolerance (in the metric's units: 0.02 is two points
of accuracy). When the objective is a difference, the main task's metrics whose record
`guards` (accuracy and the answer's log-prob) are guards by default, with tolerance 0.

How a guard decides, on the selection split (`GuardRule`, measured in `docs/guards.md`):

- `not_worse` (the default): the set's change must be shown not to fall below `-tolerance`
  (the lower end of its interval is at least `-tolerance`), the rule of a non-inferiority
  test, so a set must bring evidence that it does not hurt;
- `no_fall`: the change's point estimate is at least `-tolerance`;
- `no_significant_fall`: the change's interval reaches `-tolerance` (the post-hoc `gamed` rule,
  applied during the search).

Racing (`workbench.racing`) decides feasibility with the same looks and intervals as the
objective: a set whose guard interval lies below `-tolerance` is dropped at once, and the best
lower bound a set must reach is taken among the sets not yet shown infeasible.

On the held-out split each guard is a one-sided sign-flip test of "the change is above
`-tolerance`", whose p-value is 0 when no held-out example's change falls below `-tolerance`
(`workbench.confirmation.confirm.guard_pvalue`: a set that lowers no example is not worse, as on the
selection split); a set passes when the objective's test and every guard's reject, which is an
intersection-union test of level alpha, and the sizes are Holm-corrected on its p-value
(`guarded_p`, `guarded_p_holm` in `confirmation.csv`).

This module imports no torch: the command line parses guards before the model loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.metric_records import metric_names, record, task_kind
from workbench.options import Option

MAIN = "main"  # the task a guard names when it guards the main task


class GuardRule(Option, what="guard rule"):
    """How a guard decides on the selection split (module docstring)."""

    NOT_WORSE = "not_worse"
    NO_FALL = "no_fall"
    NO_SIGNIFICANT_FALL = "no_significant_fall"


DEFAULT_RULE = GuardRule.NOT_WORSE


@dataclass(frozen=True)
class Guard:
    """A metric of a task that a set may not lower by more than `tolerance`.

    Attributes:
        task: `"main"` for the main task, else a side task's name.
        metric: the metric's name.
        tolerance: the fall allowed, in the metric's units (>= 0).
    """

    task: str
    metric: str
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.tolerance, (int, float)) and math.isfinite(self.tolerance)
                and self.tolerance >= 0):
            raise WorkbenchError(f"guard {self.task}:{self.metric}: the tolerance must be a "
                                 f"number >= 0; got {self.tolerance!r}")

    @property
    def on_main(self) -> bool:
        return self.task == MAIN

    @property
    def label(self) -> str:
        """`"main:accuracy"`, `"induction:accuracy:0.02"`: the spec it parses from."""
        tol = f":{self.tolerance:g}" if self.tolerance else ""
        return f"{self.task}:{self.metric}{tol}"

    @classmethod
    def parse(cls, spec: str) -> "Guard":
        """`TASK:METRIC[:TOLERANCE]` (TASK `main` for the main task), e.g.
        `induction:accuracy:0.02`; one clear error otherwise."""
        parts = str(spec).split(":")
        if len(parts) not in (2, 3) or not all(parts[:2]):
            raise WorkbenchError(f"guard {spec!r} is not TASK:METRIC[:TOLERANCE] (e.g. "
                                 f"main:accuracy or induction:accuracy:0.02)")
        task, metric = parts[0], parts[1]
        if metric not in metric_names():
            raise WorkbenchError(f"guard {spec!r}: metric {metric!r} is unknown; expected one "
                                 f"of {list(metric_names())}")
        tolerance = 0.0
        if len(parts) == 3:
            try:
                tolerance = float(parts[2])
            except ValueError:
                raise WorkbenchError(f"guard {spec!r}: the tolerance {parts[2]!r} is not a "
                                     "number; expected a number >= 0 in the metric's units "
                                     "(0.02 = two points of accuracy)") from None
        return cls(task, metric, tolerance)


def parse_guards(specs: Iterable[str] | None) -> tuple[Guard, ...] | None:
    """Guards from their specs (None stays None: the defaults are chosen later)."""
    if specs is None:
        return None
    if isinstance(specs, str):
        specs = (specs,)
    guards = tuple(g if isinstance(g, Guard) else Guard.parse(g) for g in specs)
    seen = [(g.task, g.metric) for g in guards]
    dupes = sorted({f"{t}:{m}" for t, m in seen if seen.count((t, m)) > 1})
    if dupes:
        raise WorkbenchError(f"guards {dupes} are given more than once; give each task and "
                             "metric one guard")
    return guards


def default_guards(objective: str, metrics: Sequence[str],
                   custom: Callable | None = None) -> tuple[Guard, ...]:
    """The guards of a run that names none: when the objective's record is a difference, the
    main task's metrics (among `metrics`, those the run scores) whose record `guards`, other
    than the objective; none otherwise."""
    if not record(objective, custom).difference:
        return ()
    return tuple(Guard(MAIN, m) for m in metrics
                 if m != objective and record(m, custom).guards)


def with_defaults(guards: Sequence[Guard], defaults: Sequence[Guard]) -> tuple[Guard, ...]:
    """The run's guards when it names some: the defaults, each replaced by a named guard of the
    same task and metric (its tolerance wins), then the other named guards in their order.
    `--guard induction:accuracy:0.02` adds a side task's guard to the main task's; only an
    empty tuple (`--no-guard`) drops the defaults."""
    named = {(g.task, g.metric): g for g in guards}
    merged = [named.pop((d.task, d.metric), d) for d in defaults]
    return (*merged, *(g for g in guards if (g.task, g.metric) in named))


def run_guards(specs, objective: str, metrics: Sequence[str],
               custom: Callable | None = None) -> tuple[Guard, ...]:
    """A run's guards from its config's `guards`: None, the defaults (`default_guards`); an
    empty tuple, none; else the named guards with the defaults (`with_defaults`)."""
    guards, defaults = parse_guards(specs), default_guards(objective, metrics, custom)
    return defaults if guards is None else with_defaults(guards, defaults) if guards else ()


def check_guards(guards: Sequence[Guard], tasks: dict[str, Sequence[str]]) -> None:
    """Every guard names a task of the run and a metric that task can compute: `tasks` maps
    `"main"` and each side task's name to its metrics. One line naming the allowed values
    otherwise."""
    for g in guards:
        if g.task not in tasks:
            side = [t for t in tasks if t != MAIN]
            raise WorkbenchError(f"guard {g.label!r} names task {g.task!r}, which is not in "
                                 f"this run; expected 'main' or a side task ({side or 'none'})")
        if g.metric not in tasks[g.task]:
            raise WorkbenchError(f"guard {g.label!r}: task {g.task!r} cannot compute "
                                 f"{g.metric!r}; expected one of {list(tasks[g.task])}")


# float error of a change that is exactly 0 through a forward pass (racing's `ATOL`)
SLACK = 1e-5


def bounds(mean, se, z, smallest, largest):
    """The interval a guard judges a set's change by: `mean -/+ z se`, but never beyond the
    smallest and largest per-example change, since no resampled mean lies outside them (a set
    that lowers no example has a lower bound of at least 0, however few examples it changes;
    with a normal interval alone, a set that fixes 1 of 64 examples and breaks none had a
    lower bound of -0.015, `docs/recall.md`). Works on floats and on tensors."""
    lo, hi = mean - z * se, mean + z * se
    if isinstance(lo, float):
        return max(lo, smallest), min(hi, largest)
    return lo.maximum(smallest), hi.minimum(largest)


def decide(rule: GuardRule | str, mean: float, lo: float, hi: float, tolerance: float) -> bool:
    """Whether a set whose change on a guard's metric has mean `mean` and interval `[lo, hi]`
    (`bounds`) passes the guard under `rule` (NaN: no example to judge by, passes); a change
    within `SLACK` of the bound passes (float error)."""
    rule = GuardRule.parse(rule)
    if math.isnan(mean):
        return True
    value = {GuardRule.NOT_WORSE: lo, GuardRule.NO_FALL: mean}.get(rule, hi)
    return bool(value >= -tolerance - SLACK)


def labels(guards: Iterable[Guard]) -> list[str]:
    """The guards as their specs, for a config's JSON."""
    return [g.label for g in guards]


def task_metrics(task) -> list[str]:
    """The registered metrics a task can compute: those of its kind (next-token or multiple
    choice), and those that need a wrong answer only when some example has one (a
    `workbench.tasks.task.Task`)."""
    has_wrong = any(e.wrong for e in task.examples)
    return [m for m in metric_names(task_kind(task)) if has_wrong or not record(m).needs_wrong]
