"""What a CEL run will cost, said before it starts: forwards and time per stage.

A run's cost is counted in forward-equivalents (as `bench/real.py` and the results folder's
`summary["forward_eq"]` count it): one pass of the model over the selection split; a mask
scored on `r` examples of a split counts `r / N` of one, where `N` is the selection split's
size (so held-out and side-task examples count against the selection split's). Each stage's
count follows from the config alone:

- screen: the screening method's own cost (its record's `cost`,
  `workbench.screening.registry`: one mask per head for `exact`, about five passes per
  metric for attribution's forward and backward), one mask per head for an estimate's exact
  check (`check_attribution`), and one mask per head on the first slice of every side task
  (`side_screening`);
- search: per strategy, its record's `cost` (`workbench.search.registry`): the passes racing
  cannot cut (knockout masks on their slice, gate training) and the sets it races
  (`exhaustive`: every set among the top `top_m`; `interaction` and `gates`: the finalist
  sets their budget pays for; `greedy` and `beam`: one set per candidate per size, times the
  beam);
- confirm: the best set of each size and up to `2 n_random` random sets per size on the
  held-out split, the best sets on every side task, and the trade-off table's sample of
  `tradeoff_sets` sets per size and baseline on `TRADEOFF_EXAMPLES` examples of the held-out
  split and of every side task.

Racing (`adaptive`, the default) stops candidates once they are decided, at the earliest on
a first slice of the examples, so each count is a range: every raced candidate stopped on its
first slice, or none stopped. The interaction search's finalists are counted as many as its
budget allows; it takes fewer when fewer heads show a positive main effect, so its low end
is not a bound, only its high end. Time is each stage's cost in plain forwards (a masked
pass restarts at its first masked layer from cached residuals: `k / (k + 1)` of a forward on
average for `k` heads) times the seconds of a forward measured now over the selection split
(`measure_forward`), so it also says how loaded the machine is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from workbench.confirmation.baseline import set_looks
from workbench.confirmation.confirm import TRADEOFF_EXAMPLES
from workbench.racing import first_slice
from workbench.screening.registry import ScreenCostInputs, get_method
from workbench.search.registry import CostInputs, get_strategy

MEASURE_ROWS = 32  # examples in the measured forward (scaled to the whole split)
LONG_RUN_S = 60.0  # `workbench cel` prints the estimate of a run expected to take longer
STAGES = ("screen", "search", "confirm")
Span = tuple[float, float]


def _restart(k: int) -> float:
    """What a pass masking `k` heads in random layers costs, as a share of a forward: it
    restarts at the first masked layer from cached residuals, on average `k / (k + 1)` of
    the way from the top."""
    return k / (k + 1)


def _search_eq(config, n_heads: int, n_select: int, first: float,
               knockout: float) -> tuple[Span, Span]:
    """The search's forward-equivalents `(low, high)` (every raced set stopped on its first
    slice, none stopped) and their cost in plain forwards, from each strategy's own cost
    (the `cost` of its `workbench.search.registry.Strategy`)."""
    low = high = cost_low = cost_high = 0.0
    sets_cost = _restart(config.max_size)
    inputs = CostInputs(config, n_heads, n_select, first, knockout)
    for name in config.strategies:
        strategy = get_strategy(name)
        # knockouts and training are not raced; the sets are
        fixed, raced = strategy.cost(inputs, strategy.resolve(
            config.strategy_settings.get(name, {})))
        low, high = low + fixed + raced * first, high + fixed + raced
        cost_low += fixed + raced * first * sets_cost
        cost_high += fixed + raced * sets_cost
    return (low, high), (cost_low, cost_high)


def stage_forwards(run) -> dict[str, tuple[float, float] | None]:
    """Each stage's forward-equivalents for a prepared run (`workbench.pipeline.CELRun`), as
    `(low, high)`: every raced candidate stopped on its first slice, or none stopped (without
    racing the two agree); None for a stage without a rule (an unknown strategy). Counted as
    the results folder counts them (`summary["forward_eq"]`): a mask on `r` examples is
    `r / N` of a pass, whatever layer it restarts at."""
    return {stage: (None if f is None else f[0]) for stage, f in _stages(run).items()}


def _stages(run) -> dict[str, tuple[Span, Span] | None]:
    """Each stage's forward-equivalents `(low, high)` and their cost in plain forwards (a
    masked pass restarts at its first masked layer, `_restart`)."""
    config, cfg = run.config, run.model.cfg
    n_heads = cfg.n_layers * cfg.n_heads
    one_head = _restart(1) * (1 + 1 / cfg.n_layers)  # layer l restarts (L - l) / L of the way
    n_sel, n_held = max(1, len(run.select)), max(1, len(run.heldout))
    first = first_slice(n_sel) / n_sel if config.adaptive else 1.0
    first_held = (first_slice(n_held, config.baseline_examples) / n_held if config.adaptive
                  else 1.0)
    side = [len(task.examples) for task in run.others.values()]
    side_screen = sum(n_heads * (first_slice(n) if config.adaptive else n) / n_sel
                      for n in side) if config.side_screening else 0.0
    # the method's own cost on the main task (the objective and its tie-break metric), an
    # estimate's exact check, and the side tasks' per-head columns on their first slice
    method = get_method(config.method)
    main = method.cost(ScreenCostInputs(n_heads, 2, first))
    per_pass = one_head if method.restarts else 1.0
    check = n_heads if not method.exact and config.check_attribution else 0
    count = (main[0] + check + side_screen, main[1] + check + side_screen)
    screen = (count, tuple(m * per_pass + (check + side_screen) * one_head for m in main))
    # held out: the clean run and the best set of each size, then both random baselines
    # (raced); side tasks: the clean run and the best sets; the trade-off table: a sample of
    # each baseline's sets on the held-out split and every side task
    sets = _restart(config.max_size)
    clean_best = (1 + config.max_size) * (n_held + sum(side)) / n_sel
    sampled = min(n_held, TRADEOFF_EXAMPLES) + sum(min(n, TRADEOFF_EXAMPLES) for n in side)
    tradeoff = (config.max_size * 2 * min(config.tradeoff_sets, config.n_random // 4) * sampled
                / n_sel)
    randoms = 2 * config.n_random * config.max_size * n_held / n_sel
    # drawn in looks, a baseline may stop at its first look's sets
    # (`workbench.confirmation.baseline`)
    looked = set_looks(config.n_random, config.adaptive and config.random_looks)[0]
    fewest = randoms * looked / max(1, config.n_random) * first_held
    sure = clean_best + tradeoff
    confirm = ((sure + fewest, sure + randoms),
               (clean_best + (tradeoff + fewest) * sets, clean_best + (tradeoff + randoms) * sets))
    knockout = (first_slice(n_sel, config.knockout_examples) / n_sel if config.adaptive
                else 1.0)
    return {"screen": screen, "search": _search_eq(config, n_heads, n_sel, first, knockout),
            "confirm": confirm}


def measure_forward(run) -> float:
    """Seconds of one plain forward over the selection split: a forward of the model over up
    to `MEASURE_ROWS` selection examples, timed and scaled to the whole split.

    The timed pass stops before the unembedding (`return_type=None`), as the scorers unembed
    only the answer positions; it follows an untimed one-example pass (the first forward
    pays for allocations: 1.4x the next on SmolLM2), and of two timed passes the faster
    counts (another job's burst slows one, not the model)."""
    tokens = run.select.tokens[:MEASURE_ROWS].to(run.model.cfg.device)
    cuda = str(run.model.cfg.device).startswith("cuda")
    times = []
    with torch.no_grad():
        for rows in (tokens[:1], tokens, tokens):
            t0 = time.perf_counter()
            run.model(rows, return_type=None)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return min(times[1:]) * max(1, len(run.select)) / max(1, len(tokens))


@dataclass(frozen=True)
class RunEstimate:
    """Per stage, forward-equivalents `(low, high)` (`stage_forwards`) and their cost in
    plain forwards; and the measured seconds of one plain forward over the selection split."""

    forwards: dict[str, Span | None]
    costs: dict[str, Span | None]
    seconds_per_forward: float
    n_select: int

    @property
    def seconds(self) -> Span:
        """The whole run's `(low, high)` in seconds (stages without a rule left out)."""
        known = [c for c in self.costs.values() if c is not None]
        return (sum(c[0] for c in known) * self.seconds_per_forward,
                sum(c[1] for c in known) * self.seconds_per_forward)

    def line(self) -> str:
        """One line: each stage's forward-equivalents and time, and what one costs."""
        parts = []
        for stage in STAGES:
            if stage not in self.forwards:
                continue
            f = self.forwards[stage]
            if f is None:
                parts.append(f"{stage} ? (no rule for its strategy)")
                continue
            t = [x * self.seconds_per_forward for x in self.costs[stage]]
            parts.append(f"{stage} {_span(*f, '{:,.0f}')} ({_span(*t, None)})")
        return (f"estimate: {', '.join(parts)} forward-equivalents, from racing's best case to "
                f"none stopped; a forward over the {self.n_select} selection examples measured "
                f"{self.seconds_per_forward:.2g} s now (a masked pass restarts at its layer)")


def _span(low: float, high: float, fmt: str | None) -> str:
    if fmt is None:
        return _duration(high) if _duration(low) == _duration(high) else \
            f"{_duration(low)}-{_duration(high).lstrip('~')}"
    a, b = fmt.format(low), fmt.format(high)
    return a if a == b else f"{a}-{b}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def estimate_run(run, done: tuple[str, ...] = ()) -> RunEstimate:
    """The estimate of a prepared run's stages not in `done` (stages a results folder
    already holds), from one measured forward."""
    stages = {k: v for k, v in _stages(run).items() if k not in done}
    return RunEstimate({k: None if v is None else v[0] for k, v in stages.items()},
                       {k: None if v is None else v[1] for k, v in stages.items()},
                       measure_forward(run), len(run.select))
