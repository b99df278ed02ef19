"""The screening methods' registry: each method of stage 1 is one record in its own module.

A screening method computes every head's single-removal effect on a task. It is a
`ScreenMethod` record: its name, the function that computes the effects (`run`, or a
`"module:function"` string for code that imports torch), a one-line summary, its cost in
forward-equivalents of the task's examples (`cost`), whether it needs gradients (a backward
pass through the model), whether its effects are exact (an estimate is checked against exact
screening when a run asks, `CELConfig.check_attribution`) and whether CEL runs may use it
(the naive reference is for tests and benchmarks). The built-in methods are the modules of
`workbench.screening.methods`, imported on first use; each calls `register` once. This module
and those records import no torch, so the command line lists and checks methods at once.

A method's `run` is called as `run(model, data, ablation, metric, heads, compute, plan,
counter, desc)` (`ablation` a `workbench.ablation.Ablation`) and returns `(clean, diffs)`:
clean scores `{metric: [batch]}` and per-example effects `{metric: [n_layers * n_heads,
batch]}` (`single_head_diffs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.plugins import Registry, resolve


@dataclass(frozen=True)
class ScreenCostInputs:
    """What a method's cost reads: the model's head count, the metrics scored, and the share
    of the examples of racing's first look (`first`: 1.0 without racing)."""

    n_heads: int
    n_metrics: int = 2
    first: float = 1.0


@dataclass(frozen=True)
class ScreenMethod:
    """A screening method (module docstring).

    Attributes:
        cost: `(low, high)` forward-equivalents over the task's examples (racing's best case,
            none stopped), and whether they are masked passes that restart at the head's
            layer (`restarts`, so cheaper than a forward) or whole passes.
    """

    name: str
    run: Callable | str
    summary: str
    cost: Callable[[ScreenCostInputs], tuple[float, float]]
    restarts: bool = True
    gradients: bool = False
    exact: bool = True
    cel: bool = True

    def function(self) -> Callable:
        """The function that computes the effects (`run`, imported when a string:
        `workbench.plugins.resolve`)."""
        return resolve(self.run)


METHODS = Registry("screening method", "workbench.screening.methods")


def register(method: ScreenMethod) -> ScreenMethod:
    """Add `method` to the registry (two methods may not share a name)."""
    return METHODS.register(method)


def unregister(name: str) -> None:
    """Remove a method registered by `register` (tests register toy methods)."""
    METHODS.unregister(name)


def methods() -> Mapping[str, ScreenMethod]:
    """Every registered screening method by name (read-only)."""
    return METHODS.records()


def cel_methods() -> tuple[str, ...]:
    """The methods a CEL run may screen with, sorted (the command line's choices)."""
    return tuple(sorted(n for n, m in methods().items() if m.cel))


def screening_estimate(name) -> str:
    """How a screening method's per-head effects are to be named where they are shown: ""
    for an exact method, `"attribution estimate"` for one whose record says it estimates
    (`exact` False), and so for a name not registered here (nothing says it is exact)."""
    name = getattr(name, "name", name)
    method = methods().get(name)
    return "" if method is not None and method.exact else f"{name} estimate"


def get_method(name, cel: bool = False) -> ScreenMethod:
    """The method named `name`; with `cel`, one a CEL run may use. Else one clear error."""
    name = getattr(name, "name", name)
    if cel:
        known = methods()
        if name in known and not known[name].cel:
            raise WorkbenchError(
                f"CEL screening method must be one of {list(cel_methods())}; {name!r} is the "
                "slow reference for tests and benchmarks")
        return METHODS.get(name, cel_methods())
    return METHODS.get(name)
