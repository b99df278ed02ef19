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

Each strategy owns its settings: a frozen dataclass (`Strategy.settings_type`, e.g.
`InteractionSettings`) with one field per `Setting` it declares, of the same name and default,
and which its function receives. A `Setting` with `field=True` is a `CELConfig` field of the
same name (`top_m`, `beam_width`, `n_masks`, `knockout_p`, `search_budget`,
`knockout_examples`: settings older than this registry, shared by several strategies'
records); any other lives in `CELConfig.strategy_settings[strategy][setting]` and gets the
command-line flag `--<strategy>-<setting>` (underscores as dashes). `Strategy.settings_of`
builds the dataclass a run of a config uses; a dataclass field that is no `Setting` (the
interaction search's `screen_share`) keeps its default in a run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workbench.errors import WorkbenchError
from workbench.options import choose
from workbench.plugins import Registry, resolve
from workbench.search.finalists import KNOCKOUT_EXAMPLES


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


# The settings that are `CELConfig` fields of the same names, each read by several strategies
# (their defaults are the config's).
FIELD_SETTINGS = {s.name: s for s in (
    Setting("top_m", 8, "screening candidates searched", low=1, field=True),
    Setting("n_masks", None, "knockout masks (default: chosen from the head count)", low=2,
            field=True),
    Setting("knockout_p", None, "each head's knockout probability (default: the "
            "strategy's)", kind=float, field=True),
    Setting("search_budget", None, "forward-equivalents the search may spend (default: "
            "2.5 n + 500, half for sets of at most 2)", low=1, field=True),
    Setting("knockout_examples", KNOCKOUT_EXAMPLES, "examples a raced knockout is scored on "
            "(None: the first racing slice)", low=1, field=True),
)}


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
    settings' defaults, `strategy(space, steps=50)` with some given, `strategy(space,
    strategy.settings_of(config))` as a run of `config` does."""

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
    # the frozen dataclass its function receives: a field per `Setting`, of the same name and
    # default, and any fixed part it reads; None: a dict of the settings' values
    settings_type: type | None = None

    def __post_init__(self) -> None:
        if self.settings_type is None:
            return
        if not dataclasses.is_dataclass(self.settings_type):
            raise WorkbenchError(f"strategy {self.name!r}: settings_type must be a dataclass; "
                                 f"got {self.settings_type!r}")
        defaults = {f.name: f.default for f in dataclasses.fields(self.settings_type)}
        wrong = [s.name for s in self.settings if defaults.get(s.name, s) != s.default]
        if wrong:
            raise WorkbenchError(f"strategy {self.name!r}: settings {wrong} are not fields of "
                                 f"{self.settings_type.__name__} with the same defaults")

    def resolve(self, given: Mapping | None = None) -> dict:
        """Every own setting's value (those with `field=False`; a field setting is a
        `CELConfig` field, which `settings_of` reads): `given` (checked) where it has one,
        else the default."""
        given = dict(given or {})
        known = {s.name: s for s in self.settings if not s.field}
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise WorkbenchError(f"strategy {self.name!r} has no settings {unknown}; expected "
                                 f"some of {sorted(known)}")
        return {name: s.parse(given.get(name, s.default), self.name)
                for name, s in known.items()}

    def build(self, given: Mapping | None = None):
        """The strategy's settings with `given` over the defaults: a `settings_type` (a
        `Setting`'s value checked by its `parse`, another field's as given), or, for a record
        without one, a dict of every setting's value. A name that is none of them is one
        `WorkbenchError`."""
        given = dict(given or {})
        declared = {s.name: s for s in self.settings}
        names = (declared if self.settings_type is None
                 else [f.name for f in dataclasses.fields(self.settings_type)])
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise WorkbenchError(f"strategy {self.name!r} has no settings {unknown}; expected "
                                 f"some of {sorted(names)}")
        values = {name: declared[name].parse(value, self.name) if name in declared else value
                  for name, value in given.items()}
        if self.settings_type is None:
            return {name: values.get(name, s.parse(s.default, self.name))
                    for name, s in declared.items()}
        return self.settings_type(**values)

    def settings_of(self, config):
        """The settings a run of `config` (a `CELConfig`) uses: each field setting from the
        config's field of its name, the others from `config.strategy_settings[name]`."""
        values = {s.name: getattr(config, s.name) for s in self.settings if s.field}
        return self.build({**values, **config.strategy_settings.get(self.name, {})})

    def function(self) -> Callable[..., None]:
        """The function that runs the strategy: `run` itself, or the function a
        `"module:function"` string names (`workbench.plugins.resolve`)."""
        return resolve(self.run)

    def __call__(self, space, settings=None, **given) -> None:
        """Run the strategy on `space` with `settings` (`settings_of`'s or `build`'s), else
        with `build(given)`."""
        if settings is not None and given:
            raise WorkbenchError(f"strategy {self.name!r}: give its settings or keywords, "
                                 f"not both; got {sorted(given)} with {settings!r}")
        self.function()(space, self.build(given) if settings is None else settings)


def settings_as(cls: type, settings):
    """`settings` as a strategy's settings dataclass `cls`: itself, `cls()` for None, `cls(
    **settings)` for a mapping (a strategy's function called directly)."""
    if settings is None:
        return cls()
    return cls(**settings) if isinstance(settings, Mapping) else settings


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
