"""What a CEL run will cost, said before it starts: forwards and time per stage.

A run's cost is counted in forward-equivalents (as `bench/real.py` and the results folder's
`summary["forward_eq"]` count it): one pass of the model over the selection split; a mask
scored on `r` examples of a split counts `r / N` of one, where `N` is the selection split's
size (so held-out and side-task examples count against the selection split's). Each stage's
count follows from the config alone:

- screen: one mask per head (exact), or about three passes per metric for the forward and
  backward of attribution (plus one mask per head when `check_attribution`), and one mask
  per head on the first slice of every side task (`side_screening`);
- search: per strategy, the sets it scores (`exhaustive`: every set among the top `top_m`;
  `interaction`: its knockout masks on the first slice and its finalist sets, within
  `default_budget`; `greedy` and `beam`: one set per candidate per size, times the beam);
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

import math
import time
from dataclasses import dataclass

import torch

from workbench.baseline import set_looks
from workbench.confirmation import TRADEOFF_EXAMPLES
from workbench.racing import first_slice
from workbench.search import default_budget, max_finalists

# attribution's forward and backward pass per metric, through the full unembedding at every
# position: on SmolLM2 (33 examples) its two metrics took about 9 forward-equivalents' time
ATTRIBUTION_EQ = 5.0
MEASURE_ROWS = 32  # examples in the measured forward (scaled to the whole split)
LONG_RUN_S = 60.0  # `workbench cel` prints the estimate of a run expected to take longer
STAGES = ("screen", "search", "confirm")
Span = tuple[float, float]


def _sets(k: int, max_size: int) -> int:
    return sum(math.comb(k, s) for s in range(1, max_size + 1))


def _restart(k: int) -> float:
    """What a pass masking `k` heads in random layers costs, as a share of a forward: it
    restarts at the first masked layer from cached residuals, on average `k / (k + 1)` of
    the way from the top."""
    return k / (k + 1)


def _search_eq(config, n_heads: int, first: float,
               knockout: float) -> tuple[Span, Span] | None:
    """The search's forward-equivalents `(low, high)` (every raced set stopped on its first
    slice, none stopped) and their cost in plain forwards; None when a strategy has no
    rule."""
    low = high = cost_low = cost_high = 0.0
    sets_cost = _restart(config.max_size)
    for name in config.strategies:
        fixed, raced = 0.0, 0.0  # knockouts and regressions are not raced
        if name == "exhaustive":
            raced = _sets(min(config.top_m, n_heads), config.max_size)
        elif name == "interaction":
            budget = config.search_budget or default_budget(n_heads, config.max_size)
            masks = config.n_masks or max(64, min(4 * n_heads, budget // 2))
            fixed = masks * knockout  # ~30 % of the pool: they restart near the bottom
            raced = _sets(max_finalists(max(0, budget - masks), config.max_size, n_heads),
                          config.max_size)
        elif name == "greedy":
            raced = n_heads * config.max_size
        elif name == "beam":
            raced = n_heads * config.max_size * config.beam_width
        elif name == "compressed_sensing":
            fixed = config.n_masks or max(64, 4 * n_heads)
            raced = _sets(config.top_m, config.max_size)
        else:
            return None
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
    if config.method.value == "exact":
        count = (n_heads * first + side_screen, n_heads + side_screen)
        screen = (count, (count[0] * one_head, count[1] * one_head))
    else:
        # the objective and its tie-break metric, one backward each, and the exact check
        exact = n_heads if config.check_attribution else 0
        fixed = ATTRIBUTION_EQ * 2 + exact + side_screen
        cost = ATTRIBUTION_EQ * 2 + (exact + side_screen) * one_head
        screen = ((fixed, fixed), (cost, cost))
    # held out: the clean run and the best set of each size, then both random baselines
    # (raced); side tasks: the clean run and the best sets; the trade-off table: a sample of
    # each baseline's sets on the held-out split and every side task
    sets = _restart(config.max_size)
    clean_best = (1 + config.max_size) * (n_held + sum(side)) / n_sel
    sampled = min(n_held, TRADEOFF_EXAMPLES) + sum(min(n, TRADEOFF_EXAMPLES) for n in side)
    tradeoff = (config.max_size * 2 * min(config.tradeoff_sets, config.n_random // 4) * sampled
                / n_sel)
    randoms = 2 * config.n_random * config.max_size * n_held / n_sel
    # drawn in looks, a baseline may stop at its first look's sets (`workbench.baseline`)
    looked = set_looks(config.n_random, config.adaptive and config.random_looks)[0]
    fewest = randoms * looked / max(1, config.n_random) * first_held
    sure = clean_best + tradeoff
    confirm = ((sure + fewest, sure + randoms),
               (clean_best + (tradeoff + fewest) * sets, clean_best + (tradeoff + randoms) * sets))
    knockout = (first_slice(n_sel, config.knockout_examples) / n_sel if config.adaptive
                else 1.0)
    return {"screen": screen, "search": _search_eq(config, n_heads, first, knockout),
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
