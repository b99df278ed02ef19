"""What a CEL run will cost, said before it starts: forwards and time per stage, as a range
whose low end is a bound, and a likely time (the low end times factors fitted to real runs,
`LIKELY`).

A run's cost is counted in forward-equivalents (as `bench/real.py` and the results folder's
`summary["forward_eq"]` count it): one pass of the model over the selection split; a mask
scored on `r` examples of a split counts `r / N` of one, where `N` is the selection split's
size (so held-out and side-task examples count against the selection split's). Each stage is
a sum of parts (`Part`), each with a count `(low, high)` and a cost in plain forwards
`(low, high)`, from the config and the model's shape alone:

- screen: the screening method's own cost (its record's `cost`,
  `workbench.screening.registry`: one mask per head for `exact`, on racing's first slice at
  the least; attribution's forward and one backward per metric), one mask per head for an
  estimate's exact check (`check_attribution`), and the side tasks' per-head columns, which
  only the heads of the search pool get (none at the least: the pool is known only after
  screening);
- search: per strategy, its record's `cost` (`workbench.search.registry`): the passes racing
  cannot cut (knockout masks on their slice, gate training) and the sets it races. Only a
  strategy whose record says its sets do not depend on what screening finds (`certain`:
  `exhaustive`'s sets among the top `top_m`) adds sets to the low end; the interaction
  search's finalists are as many as heads show a positive main effect, none at the least;
- confirm: the clean held-out and side-task passes, the best set of each size on both, the
  random baselines (per size `min(n_random, C(n_heads, k))` sets, capped as
  `workbench.confirmation.baseline.random_head_sets` caps them at all sets of that size; the
  pool's sets reuse the random ones, none at the least) and the trade-off table's samples.

**The low end is a bound** (checked against every measured run: `docs/speed.md`): every
raced candidate stopped on its first slice, every count at its least, and every pass at its
cheapest (`workbench.pass_cost`: a next-token pass restarts at its first ablated layer, the
last block counting nothing; a set whose layers are unknown, a finalist or a found set,
counts nothing more; random sets their mean share less two standard errors; a
multiple-choice or generation pass runs every block; a generation pass has every row end at
its first token). The knockouts (~30 % of the pool each) start in the first layer, the one
assumption the low end makes about screening's outcome. A forward is timed now as the scorers
run one (`measure_forward`: the masks tiled per pass as a CPU or GPU tiles them, per token),
so the bound holds at the load of the moment it was measured. The high end is every
candidate on every example, every set restarted at its first layer, every generated row
`max_new_tokens` long: no bound, the size of a run that races nothing. A generation task's
clean scoring is timed too (`pass_cost.measure_decode`): the likely cost of every pass.

A run that screens and searches at a lower precision (`CELConfig.search_dtype`) runs those
stages on its bfloat16 copy: the forward is timed on the copy too (built then, kept for
screening) and their costs scale by the ratio of the two forwards (`searched_share`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from workbench.compute import default_masks_per_pass
from workbench.confirmation.baseline import set_looks
from workbench.confirmation.confirm import TRADEOFF_EXAMPLES
from workbench.hooked import HookedModel
from workbench.pass_cost import (
    DecodeCost,
    Span,
    choice_share,
    main_share,
    measure_decode,
    plain_share,
    random_share,
    single_share,
    teacher_forced_share,
)
from workbench.precision import lowers
from workbench.progress import LONG_RUN_S as LONG_RUN_S  # the bar for printing the estimate
from workbench.progress import about
from workbench.racing import first_slice
from workbench.screening.registry import ScreenCostInputs, get_method
from workbench.search.registry import CostInputs, get_strategy

MEASURE_ROWS = 32  # selection examples in the measured forward (tiled, scaled per token)
# the most tokens of the measured pass: a GPU's token budget tiles many more masks, and
# timing such a pass would cost more than the estimate is worth (`measure_forward`)
MEASURE_TOKENS = 1 << 16
STAGES = ("screen", "search", "confirm")
SEARCHED = ("screen", "search")  # the stages that run at `CELConfig.search_dtype`
# The likely cost: each stage's low end (in plain forwards) times what default runs on real
# models measured over it, the geometric mean of four float32 runs on this project's 2-core
# CPUs (SmolLM2 x ioi twice, SmolLM2 x greater_than, Gemma-3 x ioi; their ratios: screen
# 4.2-5.3, search 1.6-3.0, confirm 3.8-5.6). `bench/estimate_fit.py` refits them from run
# folders; docs/speed.md, "The likely cost", has the fit and its check on runs not in it.
LIKELY = {"screen": 4.6, "search": 2.0, "confirm": 4.5}
# each fitted run, left out of its stage's fit, measured this much of what the others predict
LIKELY_SPREAD = (0.7, 1.7)
# below this forward a run's time is Python's and not its passes' (the embedded model's
# forward takes 0.09 s and its run 5x the likely cost), so no likely cost is said
LIKELY_MIN_FORWARD_S = 0.5


@dataclass(frozen=True)
class Part:
    """Some of a stage's work: forward-equivalents `(low, high)` and their cost in plain
    forwards `(low, high)`."""

    count: Span
    cost: Span

    def __add__(self, other: Part) -> Part:
        return Part((self.count[0] + other.count[0], self.count[1] + other.count[1]),
                    (self.cost[0] + other.cost[0], self.cost[1] + other.cost[1]))


NOTHING = Part((0.0, 0.0), (0.0, 0.0))


def _part(count: Span, share: Span) -> Part:
    """A part of `count` forward-equivalents, each costing `share` of a forward."""
    return Part(count, (count[0] * share[0], count[1] * share[1]))


def _screen(run, n_heads: int, first: float, main: Span | None) -> Part:
    """The method's own passes (a gradient method's on a generation task: the teacher-forced
    pass alone), an estimate's exact check and the side tasks' pool columns."""
    config, L = run.config, run.model.cfg.n_layers
    n_sel = max(1, len(run.select))
    method = get_method(config.method)
    count = method.cost(ScreenCostInputs(n_heads, _n_metrics(run), first))
    own = (teacher_forced_share(run) if method.gradients else None) or main
    part = _part(count, own or (single_share(L) if method.restarts else plain_share(L)))
    if not method.exact and config.check_attribution:  # every head on every example
        part += _part((n_heads, n_heads), main or single_share(L))
    if config.side_screening and run.others:  # the pool's heads only: none at the least
        side = sum(n_heads * (first_slice(len(t.examples)) if config.adaptive
                              else len(t.examples)) / n_sel for t in run.others.values())
        part += _part((0.0, side), single_share(L))
    return part


def _n_metrics(run) -> int:
    """The metrics a screening method differentiates on the main task: accuracy and log-prob,
    and the logit and probability differences where the task has wrong answers (a custom
    metric: one, at the least)."""
    if run.metric is not None:
        return 1
    wrong = getattr(run.select, "wrong_ids", None)
    return 4 if wrong is not None and wrong.shape[-1] > 0 else 2


def _search(run, n_heads: int, first: float, knockout: float, main: Span | None) -> Part:
    """Each strategy's fixed passes (knockouts, training: from the first layer) and raced
    sets (layers unknown: nothing at the low end; counted only where the record is
    `certain`, and then once: the strategies share one cache)."""
    config, L = run.config, run.model.cfg.n_layers
    inputs = CostInputs(config, n_heads, len(run.select), first, knockout)
    part, certain = NOTHING, 0.0
    for name in config.strategies:
        strategy = get_strategy(name)
        fixed, raced = strategy.cost(inputs, strategy.resolve(
            config.strategy_settings.get(name, {})))
        part += (_part((fixed, fixed), main or plain_share(L))
                 + _part((0.0, raced), (0.0, (main or (0.0, 1.0))[1])))
        if strategy.certain:
            certain = max(certain, raced * first)
    return part + Part((certain, 0.0), (0.0, 0.0))


def _confirm(run, n_heads: int, main: Span | None) -> Part:
    """The clean passes, the best sets, both random baselines (capped at all sets of a
    size, drawn in looks, raced from `baseline_examples`) and the trade-off table."""
    config, cfg = run.config, run.model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    n_sel, n_held = max(1, len(run.select)), max(1, len(run.heldout))
    side = [len(task.examples) for task in run.others.values()]
    held, others = n_held / n_sel, sum(side) / n_sel
    main_plain = main or plain_share(L)
    part = _part((held, held), main_plain) + _part((others, others), plain_share(L))  # clean
    best = (main or (0.0, 1.0))[1]  # the best sets: layers unknown
    part += Part((config.max_size * (held + others),) * 2,
                 (0.0, config.max_size * (held * best + others)))
    first_held = (first_slice(n_held, config.baseline_examples) / n_held if config.adaptive
                  else 1.0)
    n_trade = min(config.tradeoff_sets, config.n_random // 4) if side else 0
    held_sampled = min(n_held, TRADEOFF_EXAMPLES) / n_sel
    side_sampled = sum(min(n, TRADEOFF_EXAMPLES) for n in side) / n_sel
    for k in range(1, config.max_size + 1):
        n_k = min(config.n_random, math.comb(n_heads, min(k, n_heads)))
        if n_k == 0:
            continue
        exhaustive = n_k == math.comb(n_heads, min(k, n_heads))
        looked = set_looks(n_k, config.adaptive and config.random_looks and not exhaustive)[0]
        low, _ = main or random_share(L, H, k, looked)
        _, high = main or random_share(L, H, k, n_k)
        # all heads: the first look on its first slice; the pool's: none more at the least
        part += Part((looked * first_held * held, 2 * n_k * held),
                     (looked * first_held * held * low, 2 * n_k * held * high))
        if n_trade:  # the found set (layers unknown) and each baseline's sample
            sample = min(n_trade, n_k)
            low, _ = random_share(L, H, k, sample)
            low_main, _ = main or (low, 1.0)
            sampled = held_sampled + side_sampled
            part += Part(((1 + sample) * sampled, (1 + 2 * sample) * sampled),
                         (sample * (held_sampled * low_main + side_sampled * low),
                          (1 + 2 * sample) * (held_sampled * best + side_sampled)))
    return part


def _stages(run, main: Span | None = None) -> dict[str, Part | None]:
    """Each stage's `Part`: forward-equivalents and their cost in plain forwards. `main`: what
    every masked pass on the main task costs (`main_share(run)` unless given: a measured
    decode), None where a pass restarts at its layer (so `main or share`)."""
    config, cfg = run.config, run.model.cfg
    n_heads = cfg.n_layers * cfg.n_heads
    n_sel = max(1, len(run.select))
    first = first_slice(n_sel) / n_sel if config.adaptive else 1.0
    knockout = (first_slice(n_sel, config.knockout_examples) / n_sel if config.adaptive
                else 1.0)
    main = main_share(run) if main is None else main
    return {"screen": _screen(run, n_heads, first, main),
            "search": _search(run, n_heads, first, knockout, main),
            "confirm": _confirm(run, n_heads, main)}


def stage_forwards(run) -> dict[str, Span | None]:
    """Each stage's forward-equivalents for a prepared run (`workbench.pipeline.CELRun`), as
    `(low, high)`: the least the run can count and every candidate on every example; None
    for a stage without a rule. Counted as the results folder counts them
    (`summary["forward_eq"]`): a mask on `r` examples is `r / N` of a pass."""
    return {stage: (None if p is None else p.count) for stage, p in _stages(run).items()}


def stage_costs(run) -> dict[str, Span | None]:
    """Each stage's cost in plain forwards for a prepared run, as `(low, high)` (a pass
    restarted at layer `l` counts `(L - l) / L`; None for a stage without a rule): what
    `estimate_run` multiplies by the measured forward, at the model's own precision."""
    return {stage: (None if p is None else p.cost) for stage, p in _stages(run).items()}


def likely_costs(costs: dict[str, Span], factors: dict[str, float] = LIKELY
                 ) -> dict[str, float]:
    """Each stage's likely cost in plain forwards: its low end times its factor (`LIKELY`,
    or factors being fitted: `bench/estimate_fit.py`), at most its high end."""
    return {stage: min(low * factors[stage], high) for stage, (low, high) in costs.items()}


def measure_forward(run, model: HookedModel=None) -> float:
    """Seconds of one plain forward over the selection split, timed as the scorers run one:
    up to `MEASURE_ROWS` selection examples tiled as many times as the scorers tile masks of
    that batch (`workbench.compute.default_masks_per_pass`, at most `MEASURE_TOKENS` tokens),
    timed per padded token and scaled to the split's real tokens (the scorers batch by
    length, so they pad less).

    The timed pass stops before the unembedding (`return_type=None`), as the scorers unembed
    only the answer positions; it follows an untimed one-example pass (the first forward
    pays for allocations: 1.4x the next on SmolLM2), and of two timed passes the faster
    counts (another job's burst slows one, not the model). Run under the run's threads, on
    `model` when given (the run's searcher), else on the run's model."""
    model = run.model if model is None else model
    tokens = run.select.tokens[:MEASURE_ROWS].to(model.cfg.device)
    rows, width = tokens.shape
    budget, _ = run.compute.budgets(model.cfg)
    tiles = run.compute.masks_per_pass or default_masks_per_pass(
        model, rows, width, min(budget, MEASURE_TOKENS))
    tiles = max(1, min(tiles, MEASURE_TOKENS // max(1, rows * width)))
    tiled = tokens.repeat(tiles, 1)
    cuda = str(model.cfg.device).startswith("cuda")
    times = []
    with run.compute.threads_set(), torch.no_grad():
        for batch in (tokens[:1], tiled, tiled):
            t0 = time.perf_counter()
            model(batch, return_type=None)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    per_token = min(times[1:]) / tiled.numel()
    real = float(run.select.lengths.sum()) if hasattr(run.select, "lengths") else \
        rows * width * len(run.select) / max(1, rows)
    return per_token * real


@dataclass(frozen=True)
class RunEstimate:
    """Per stage, forward-equivalents `(low, high)` (`stage_forwards`) and their cost in
    plain forwards; and the measured seconds of one plain forward over the selection split."""

    forwards: dict[str, Span | None]
    costs: dict[str, Span | None]
    seconds_per_forward: float
    n_select: int
    choice_share: float | None = None  # a multiple-choice main task's (`choice_share`)
    decode: DecodeCost | None = None  # a generation main task's clean scoring, timed
    typical: dict[str, Span | None] | None = None  # the costs with every pass at `decode`

    @property
    def seconds(self) -> Span:
        """The whole run's `(low, high)` in seconds (stages without a rule left out)."""
        known = [c for c in self.costs.values() if c is not None]
        return (sum(c[0] for c in known) * self.seconds_per_forward,
                sum(c[1] for c in known) * self.seconds_per_forward)

    @property
    def likely(self) -> dict[str, float] | None:
        """Each stage's likely seconds: its low end (a generation task's with every pass at
        the clean decode's cost, `typical`) times `LIKELY`, at most its high end; None where a
        forward is too short for passes to be what a run spends its time on
        (`LIKELY_MIN_FORWARD_S`) or a stage has no rule."""
        costs = {k: c if self.typical is None or c is None else (self.typical[k][0], c[1])
                 for k, c in self.costs.items()}
        if self.seconds_per_forward < LIKELY_MIN_FORWARD_S or any(
                c is None for c in self.costs.values()):
            return None
        return {stage: c * self.seconds_per_forward
                for stage, c in likely_costs(costs).items()}

    def stage_seconds(self, stage: str) -> Span | None:
        """A stage's `(low, high)` in seconds (None without a rule)."""
        cost, s = self.costs.get(stage), self.seconds_per_forward
        return None if cost is None else (cost[0] * s, cost[1] * s)

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
            parts.append(f"{stage} {_span(*f, '{:,.0f}')} "
                         f"({_span(*self.stage_seconds(stage), None)})")
        likely = self.likely
        if likely:
            stages = ", ".join(f"{k} {about(v)}" for k, v in likely.items())
            lo, hi = LIKELY_SPREAD
            parts[0] = (f"likely {about(sum(likely.values()))} ({stages}; default runs "
                        f"on real models took {lo:g}-{hi:g}x their likely time); {parts[0]}")
        return (f"estimate: {', '.join(parts)} forward-equivalents, from the least the run "
                f"can cost (a bound at this load) to none stopped; a forward over the "
                f"{self.n_select} selection examples measured {self.seconds_per_forward:.2g} s "
                f"now ({self._how()})")

    def _how(self) -> str:
        """What a masked pass on the main task costs, in words."""
        d = self.decode
        if d is not None:
            return (f"a masked pass decodes, every block, and scores its target teacher-forced:"
                    f" {d.span[0]:.1f}-{d.span[1]:.0f} forwards' time, from every row ending at "
                    f"once to every row writing {d.max_new_tokens} tokens; the clean model's took"
                    f" {d.share:.1f} a mask on {d.rows} examples decoded as {d.copies} masks' rows"
                    f" together ({d.forwards} forwards, {d.new_tokens:.1f} new tokens each), the "
                    "pass the likely time prices")
        if self.choice_share is None:
            return "a masked pass restarts at its layer"
        return "a masked pass runs every block" + (
            f", and its choice pass {self.choice_share:.0%} of its tokens more"
            if self.choice_share else ": one-token choices")


def _span(low: float, high: float, fmt: str | None) -> str:
    if fmt is None:
        return _duration(high) if _duration(low) == _duration(high) else \
            f"{_duration(low)}-{_duration(high).lstrip('~')}"
    a, b = fmt.format(low), fmt.format(high)
    return a if a == b else f"{a}-{b}"


def _duration(seconds: float) -> str:
    """A time rounded down at the low end's digits (a bound stays one once printed)."""
    if seconds < 90:
        return f"~{math.floor(seconds):.0f} s"
    if seconds < 5400:
        return f"~{math.floor(seconds / 60):.0f} min"
    return f"~{math.floor(seconds / 360) / 10:.1f} h"


def searched_share(run, seconds: float) -> float:
    """What a forward of the model that screens and searches costs, as a share of one of the
    run's model (`seconds`, `measure_forward(run)`): 1 at the model's own precision, else the
    ratio of a forward timed on its lower-precision copy (`run.searcher()`, built now and
    kept for screening) to `seconds`."""
    if not lowers(run.model, run.config.search_dtype):
        return 1.0
    return measure_forward(run, run.searcher()) / seconds


def estimate_run(run, done: tuple[str, ...] = ()) -> RunEstimate:
    """The estimate of a prepared run's stages not in `done` (stages a results folder
    already holds), from one measured forward (one more on the searcher when screening or the
    search runs at a lower precision, `searched_share`; a generation task's clean decode,
    `measure_decode`)."""
    stages = {k: v for k, v in _stages(run).items() if k not in done}
    seconds = measure_forward(run)
    share = searched_share(run, seconds) if any(k in stages for k in SEARCHED) else 1.0

    def costs(parts: dict) -> dict[str, Span | None]:
        return {k: None if v is None else (v.cost if k not in SEARCHED else
                                           (v.cost[0] * share, v.cost[1] * share))
                for k, v in parts.items() if k not in done}

    decode = measure_decode(run, seconds)
    typical = None if decode is None else costs(_stages(run, (decode.share,) * 2))
    return RunEstimate({k: None if v is None else v.count for k, v in stages.items()},
                       costs(stages), seconds, len(run.select), choice_share(run), decode,
                       typical)
