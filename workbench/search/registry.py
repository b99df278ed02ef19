"""The search strategies' registry: each strategy is one record, declared in its own module.

A strategy is a `Strategy`: its name, the function that runs it on a `SearchSpace`, a
one-line summary (the command line's help), the settings it alone reads (`Setting`s), its
cost in forward-equivalents before the run (`workbench.estimate`; `certain` where the sets it
races do not depend on what screening finds), and whether it searches among single-head
screening's top candidates (`ranked`: then raced screening must rank every
candidate, `workbench.screening.stage.screen_race_rule`). The built-in strategies are the modules of
`workbench.search.strategies`, found and imported on first use; each calls `register` once.
A strategy defined elsewhere (a user's module, a test) registers the same way, and from then
on the config, the command line, the pipeline and the estimate know it by name.

This module imports neither torch nor pandas, and neither do the strategy modules at import
time, so the command line can list and check strategy names in a fraction of a second.

Settings shared by several strategies (`top_m`, `max_size`, `search_budget`, `n_masks`,
`knockout_p`, `knockout_examples`) are `CELConfig` fields and `SearchSpace` attributes. A
strategy's own settings are declared by it: a `Setting` with `field=True` is a `CELConfig`
field of the same name (settings older than this registry, e.g. `beam_width`), any other
lives in `CELConfig.strategy_settings[strategy][setting]` and gets the command-line flag
`--<strategy>-<setting>` (underscores as dashes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.options import choose
from workbench.plugins import Registry, resolve


@dataclass(frozen=True)
class Setting:
    """One setting of a strategy.

    Attributes:
        name: a Python identifier (the flag is `--<strategy>-<name>`).
        default: the value when none is given (None: the strategy chooses at run time).
        help: what it does, in one sentence.
        kind: `int` or `float`.
        low: the smallest value allowed (inclusive), or None.
        field: a `CELConfig` field and `SearchSpace` attribute of the same name (settings older
            than this registry), rather than an entry of `strategy_settings`.
    """

    name: str
    default: int | float | None
    help: str
    kind: type = int
    low: float | None = None
    field: bool = False

    def parse(self, value, strategy: str):
        """`value` checked and converted (a string from the command line too), else one
        `WorkbenchError` naming the strategy, the setting and what is allowed."""
        if value is None:
            return None
        what = f"{strategy} setting {self.name!r}"
        expected = f"{'an integer' if self.kind is int else 'a number'}" + (
            f" >= {self.low:g}" if self.low is not None else "")
        try:
            if isinstance(value, bool):
                raise ValueError
            number = self.kind(value) if isinstance(value, str) else value
            if self.kind is int and (not isinstance(number, int) or isinstance(number, bool)):
                raise ValueError
            number = self.kind(number)
        except (TypeError, ValueError):
            raise WorkbenchError(f"{what} must be {expected}; got {value!r}") from None
        if not math.isfinite(number) or (self.low is not None and number < self.low):
            raise WorkbenchError(f"{what} must be {expected}; got {value!r}")
        return number


@dataclass(frozen=True)
class CostInputs:
    """What a strategy's cost estimate reads: the config, the model's head count, the
    selection split's size, and the share of it that a raced set's first look (`first`) and
    a knockout mask (`knockout`) are scored on (1.0 each without racing)."""

    config: object
    n_heads: int
    n_select: int = 1
    first: float = 1.0
    knockout: float = 1.0


# A strategy's cost: `(fixed, raced)`: forward-equivalents that racing cannot cut
# (knockout masks, training) and the number of head sets it scores in races.
Cost = tuple[float, float]


@dataclass(frozen=True)
class Strategy:
    """A search strategy (module docstring). Calling it runs it: `strategy(space)` with its
    settings' defaults, `strategy(space, steps=50)` with some given."""

    name: str
    run: Callable[..., None] | str
    summary: str
    cost: Callable[[CostInputs, Mapping], Cost]  # with the resolved own settings
    ranked: bool = False
    settings: tuple[Setting, ...] = field(default=())
    # its raced sets are scored whatever screening finds (`exhaustive`: every set among the
    # top_m candidates, which are always top_m), so the estimate's low end counts them; False
    # where their number depends on it (finalists: as many as show an effect, none at least)
    certain: bool = False
    # the heads whose sets it scored, from a finished run's summary and config (the heatmap
    # outlines them): None, every screening candidate (`summary["candidates"]`)
    searched: Callable[[Mapping, object], list[str]] | None = None

    def resolve(self, given: Mapping | None = None) -> dict:
        """Every own setting's value (those with `field=False`; a field setting is a
        `CELConfig` field, and the strategy reads it from the `SearchSpace`): `given`
        (checked) where it has one, else the default."""
        given = dict(given or {})
        known = {s.name: s for s in self.settings if not s.field}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise WorkbenchError(f"strategy {self.name!r} has no settings {unknown}; expected "
                                 f"some of {sorted(known)}")
        return {name: s.parse(given.get(name, s.default), self.name)
                for name, s in known.items()}

    def function(self) -> Callable[..., None]:
        """The function that runs the strategy: `run` itself, or the function a
        `"module:function"` string names (`workbench.plugins.resolve`)."""
        return resolve(self.run)

    def __call__(self, space, **settings) -> None:
        self.function()(space, self.resolve(settings))


STRATEGIES = Registry("search strategy", "workbench.search.strategies")


def register(strategy: Strategy) -> Strategy:
    """Add `strategy` to the registry (two strategies may not share a name)."""
    return STRATEGIES.register(strategy)


def unregister(name: str) -> None:
    """Remove a strategy registered by `register` (tests register toy strategies)."""
    STRATEGIES.unregister(name)


def strategies() -> Mapping[str, Strategy]:
    """Every registered strategy by name (read-only)."""
    return STRATEGIES.records()


def strategy_list() -> tuple[str, ...]:
    """The registered strategies' names, sorted."""
    return STRATEGIES.names()


def get_strategy(name: str) -> Strategy:
    """The strategy named `name`, else one `WorkbenchError` listing the known names."""
    return STRATEGIES.get(name)


def searched_heads(summary: Mapping, config) -> dict[str, list[str]]:
    """The heads each of a finished run's strategies scored sets of, by strategy (its record's
    `searched`, else every screening candidate); a strategy unknown here, or a summary
    without what its record reads (a folder of an older version), gives every candidate."""
    candidates = list(summary.get("candidates", []))
    out = {}
    for name in getattr(config, "strategies", ()):
        strategy = strategies().get(name)
        try:
            heads = strategy.searched(summary, config) if strategy and strategy.searched \
                else candidates
        except (KeyError, TypeError):
            heads = candidates
        out[name] = list(heads)
    return out


def strategy_names(value) -> tuple[str, ...]:
    """A tuple of known strategy names from one name or several."""
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names:
        raise WorkbenchError("at least one search strategy is needed")
    return tuple(choose(s, strategy_list(), "search strategy") for s in names)


def strategy_settings(names, given: Mapping | None) -> dict[str, dict]:
    """The `strategy_settings` of a config, checked: for each strategy named in `given`, its
    own settings that are not `CELConfig` fields. Strategies absent from `names` may not
    have settings (they would not run)."""
    given = {} if given is None else dict(given)
    out = {}
    for name, values in given.items():
        strategy = get_strategy(name)
        if name not in names:
            raise WorkbenchError(f"settings for strategy {name!r}, which this run does not use; "
                                 f"its strategies are {list(names)}")
        if not isinstance(values, Mapping):
            raise WorkbenchError(f"strategy_settings[{name!r}] must be a mapping of setting "
                                 f"names to values; got {values!r}")
        fields = sorted(s.name for s in strategy.settings if s.field)
        clash = sorted(set(values) & set(fields))
        if clash:
            raise WorkbenchError(f"{clash} of strategy {name!r} are CELConfig fields; give them "
                                 "as such, not in strategy_settings")
        resolved = strategy.resolve(values)
        out[name] = {k: resolved[k] for k in values}
    return out
