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
cheapest. A masked pass restarts at its first ablated layer `l` from cached residuals and runs
`(L - l) / L` of the blocks; at the low end the last block counts nothing (there it runs its
MLP at the answer position only), a set whose layers are unknown (a finalist, a found set)
may sit in the last layer and shared prefixes may run its blocks for other sets too, so it
counts nothing more; single heads are every layer's (`(L - 1) / 2L` on average); random sets
count their mean share less two standard errors over the sets drawn (`random_share`); the
knockouts (~30 % of the pool each) start in the first layer, the one assumption the low end
makes about screening's outcome. A forward is timed now as the scorers run one
(`measure_forward`: the masks tiled per pass as a CPU or GPU tiles them, per token), so the
bound holds at the load of the moment it was measured; a machine that gets faster later (other
jobs end) can beat it. The high end is every candidate on every example, every set restarted
at its first layer: no bound, the size of a run that races nothing.

**A multiple-choice main task** (`workbench.metrics.choices`) is scored through its choice
metric, which never restarts at a layer: each of its masked passes runs the prompts through
every block, and, where some choice is longer than one token, a second pass over the choice
rows on the prompts' key-value cache (a one-token choice is read at the prompt's last
position: no second pass). So each pass on its selection or held-out rows costs
`1 + choice_share` of a plain forward (`(L - 1) / L` of that at the low end), where
`choice_share` is the choice pass's tokens over the prompt pass's (`choice_tokens`), whatever
layer its mask starts at. Its forward-equivalents are counted as the run counts them (a mask
on `r` rows is `r / N`, both passes together); `choice_forwards` is the number of model
forwards one scoring of a batch runs.

A run that screens and searches at a lower precision (`CELConfig.search_dtype`,
`workbench.precision`) runs those two stages on its bfloat16 copy, whose forward costs less
(about half on an AVX-512 BF16 CPU, more on one without): so the forward is timed on the copy
too (built then, and kept for screening), and screening's and the search's costs are counted
in the model's own forwards scaled by the ratio of the two (`searched_share`). Their
forward-equivalents do not change with the precision.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from workbench.compute import default_masks_per_pass
from workbench.confirmation.baseline import set_looks
from workbench.confirmation.confirm import TRADEOFF_EXAMPLES
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
Span = tuple[float, float]
SE_MARGIN = 2.0  # standard errors below the mean share of random sets, at the low end
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


def plain_share(n_layers: int) -> Span:
    """A pass from the first layer: all of a forward, its last block less at the low end."""
    return (n_layers - 1) / n_layers, 1.0


def single_share(n_layers: int) -> Span:
    """One mask per head of every layer, on average: a head of layer `l` restarts there,
    `(L - l) / L` of a forward (`(L - 1 - l) / L` at the low end)."""
    return (n_layers - 1) / (2 * n_layers), (n_layers + 1) / (2 * n_layers)


def random_share(n_layers: int, n_heads: int, size: int, n_sets: int) -> Span:
    """What `n_sets` random sets of `size` distinct heads (of `n_layers x n_heads`) cost per
    set, as a share of a forward: each restarts at its first ablated layer. The low end is
    the mean of `(L - 1 - first) / L` less `SE_MARGIN` standard errors over `n_sets` (at
    least 0); the high end the mean of `(L - first) / L` plus as many (at most 1)."""
    L, total = n_layers, n_layers * n_heads
    size = min(size, total)
    first = [0.0] * L  # P(the first ablated layer is l)
    for l in range(L):
        above = math.comb((L - l) * n_heads, size) - math.comb((L - l - 1) * n_heads, size)
        first[l] = above / math.comb(total, size)
    mean = sum(p * (L - l) / L for l, p in enumerate(first))
    var = sum(p * ((L - l) / L - mean) ** 2 for l, p in enumerate(first))
    margin = SE_MARGIN * math.sqrt(var / max(1, n_sets))
    return max(0.0, mean - 1 / L - margin), min(1.0, mean + margin)


def choice_tokens(batch) -> tuple[int, int]:
    """`(prompt tokens, choice-pass tokens)` one scoring of a multiple-choice batch runs
    (`workbench.metrics.choices`, shared path): every prompt's real tokens, and every choice
    of more than one token but its last (`(0, 0)` for a batch without choices)."""
    seqs = getattr(batch, "choice_seqs", None)
    if seqs is None:
        return 0, 0
    tail = sum(len(c) - 1 for choices in seqs for c in choices if len(c) > 1)
    return int(batch.lengths.sum()), tail


def choice_forwards(batch) -> int:
    """The model forwards one scoring of a multiple-choice batch runs (shared path): per group
    of examples whose choices fill at most `ROWS_PER_PASS` rows, one over the prompts, and one
    over the choice rows where some choice of the group is longer than one token."""
    from workbench.metrics.choices import row_groups

    return sum(1 + any(len(c) > 1 for i in group for c in batch.choice_seqs[i])
               for group in row_groups(batch))


def choice_share(run) -> float | None:
    """A multiple-choice main task's choice-pass tokens over its prompt tokens, on the
    selection split (0 with one-token choices); None for another task."""
    prompt, tail = choice_tokens(run.select)
    return None if getattr(run.select, "choice_seqs", None) is None else tail / max(1, prompt)


def _main_share(run, share: Span) -> Span:
    """What one masked pass on the main task costs, as a share of a forward: `share` (it
    restarts at its layer), or for a multiple-choice task every block and its choice pass."""
    extra = choice_share(run)
    if extra is None:
        return share
    low, high = plain_share(run.model.cfg.n_layers)
    return low * (1 + extra), high * (1 + extra)


def _screen(run, n_heads: int, first: float) -> Part:
    config, L = run.config, run.model.cfg.n_layers
    n_sel = max(1, len(run.select))
    method = get_method(config.method)
    main = method.cost(ScreenCostInputs(n_heads, _n_metrics(run), first))
    part = _part(main, _main_share(run, single_share(L) if method.restarts
                                   else plain_share(L)))
    if not method.exact and config.check_attribution:  # every head on every example
        part += _part((n_heads, n_heads), _main_share(run, single_share(L)))
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


def _search(run, n_heads: int, first: float, knockout: float) -> Part | None:
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
        part += (_part((fixed, fixed), _main_share(run, plain_share(L)))
                 + _part((0.0, raced), (0.0, _main_share(run, (0.0, 1.0))[1])))
        if strategy.certain:
            certain = max(certain, raced * first)
    return part + Part((certain, 0.0), (0.0, 0.0))


def _confirm(run, n_heads: int) -> Part:
    """The clean passes, the best sets, both random baselines (capped at all sets of a
    size, drawn in looks, raced from `baseline_examples`) and the trade-off table."""
    config, cfg = run.config, run.model.cfg
    L, H = cfg.n_layers, cfg.n_heads
    n_sel, n_held = max(1, len(run.select)), max(1, len(run.heldout))
    side = [len(task.examples) for task in run.others.values()]
    held, others = n_held / n_sel, sum(side) / n_sel
    main_plain = _main_share(run, plain_share(L))
    part = _part((held, held), main_plain) + _part((others, others), plain_share(L))  # clean
    best = _main_share(run, (0.0, 1.0))[1]  # the best sets: layers unknown
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
        low, _ = _main_share(run, random_share(L, H, k, looked))
        _, high = _main_share(run, random_share(L, H, k, n_k))
        # all heads: the first look on its first slice; the pool's: none more at the least
        part += Part((looked * first_held * held, 2 * n_k * held),
                     (looked * first_held * held * low, 2 * n_k * held * high))
        if n_trade:  # the found set (layers unknown) and each baseline's sample
            sample = min(n_trade, n_k)
            low, _ = random_share(L, H, k, sample)
            low_main, _ = _main_share(run, (low, 1.0))
            sampled = held_sampled + side_sampled
            part += Part(((1 + sample) * sampled, (1 + 2 * sample) * sampled),
                         (sample * (held_sampled * low_main + side_sampled * low),
                          (1 + 2 * sample) * (held_sampled * best + side_sampled)))
    return part


def _stages(run) -> dict[str, Part | None]:
    """Each stage's `Part`: forward-equivalents and their cost in plain forwards."""
    config, cfg = run.config, run.model.cfg
    n_heads = cfg.n_layers * cfg.n_heads
    n_sel = max(1, len(run.select))
    first = first_slice(n_sel) / n_sel if config.adaptive else 1.0
    knockout = (first_slice(n_sel, config.knockout_examples) / n_sel if config.adaptive
                else 1.0)
    return {"screen": _screen(run, n_heads, first),
            "search": _search(run, n_heads, first, knockout),
            "confirm": _confirm(run, n_heads)}


def stage_forwards(run) -> dict[str, Span | None]:
    """Each stage's forward-equivalents for a prepared run (`workbench.pipeline.CELRun`), as
    `(low, high)`: the least the run can count (every raced candidate stopped on its first
    slice, every count that depends on screening's outcome at its least), and every
    candidate on every example (without racing the two agree where nothing depends on
    screening); None for a stage without a rule. Counted as the results folder counts them
    (`summary["forward_eq"]`): a mask on `r` examples is `r / N` of a pass, whatever layer it
    restarts at."""
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


def measure_forward(run, model=None) -> float:
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

    @property
    def seconds(self) -> Span:
        """The whole run's `(low, high)` in seconds (stages without a rule left out)."""
        known = [c for c in self.costs.values() if c is not None]
        return (sum(c[0] for c in known) * self.seconds_per_forward,
                sum(c[1] for c in known) * self.seconds_per_forward)

    @property
    def likely(self) -> dict[str, float] | None:
        """Each stage's likely seconds: its low end times `LIKELY` (at most its high end);
        None where a forward is too short for passes to be what a run spends its time on
        (`LIKELY_MIN_FORWARD_S`) or a stage has no rule."""
        if self.seconds_per_forward < LIKELY_MIN_FORWARD_S or any(
                c is None for c in self.costs.values()):
            return None
        return {stage: c * self.seconds_per_forward
                for stage, c in likely_costs(self.costs).items()}

    def stage_seconds(self, stage: str) -> Span | None:
        """A stage's `(low, high)` in seconds (None without a rule)."""
        cost = self.costs.get(stage)
        return None if cost is None else (cost[0] * self.seconds_per_forward,
                                          cost[1] * self.seconds_per_forward)

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
        how = ("a masked pass restarts at its layer" if self.choice_share is None else
               "a masked pass runs every block" + (
                   f", and its choice pass {self.choice_share:.0%} of its tokens more"
                   if self.choice_share else ": one-token choices"))
        return (f"estimate: {', '.join(parts)} forward-equivalents, from the least the run "
                f"can cost (a bound at this load) to none stopped; a forward over the "
                f"{self.n_select} selection examples measured {self.seconds_per_forward:.2g} s "
                f"now ({how})")


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
    already holds), from one measured forward (and one on the searcher when screening or the
    search runs at a lower precision: `searched_share`)."""
    stages = {k: v for k, v in _stages(run).items() if k not in done}
    seconds = measure_forward(run)
    share = searched_share(run, seconds) if any(k in stages for k in SEARCHED) else 1.0
    costs = {k: None if v is None else
             (v.cost if k not in SEARCHED else (v.cost[0] * share, v.cost[1] * share))
             for k, v in stages.items()}
    return RunEstimate({k: None if v is None else v.count for k, v in stages.items()},
                       costs, seconds, len(run.select), choice_share(run))
