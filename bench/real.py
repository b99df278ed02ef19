"""Benchmark: a whole CEL run on a real model, per stage, against the pipeline before racing.

Runs `run_cel` with its defaults (every head screened exactly, the interaction search, held-out
confirmation with 200 random sets per size from all heads and from the pool, side effects) and
prints, per stage, wall time and forward-equivalents: one forward-equivalent is one pass of
the whole model over the selection split, a masked pass that restarts at layer `l` of `L`
counts `(L - l) / L` of one, and a pass over `r` of the split's `N` examples counts `r / N`
(side tasks and the held-out split count their examples against the selection split's).

The pipeline before racing (`adaptive=False`: every candidate on every example) is

- **run** in the same process when `--old run` (small models: the embedded ones), or
- **estimated** (`--old estimate`, the default): its masks are rebuilt exactly as it would
  draw them (every head for screening, on the main task and each side task; the interaction
  search's seeded knockout masks over the same pool at its old budget of `5 n + 1000`
  masks, and as many finalists as that budget left room for, in the order of the new run's
  main effects; the seeded random sets of confirmation, from all heads and separately from
  the pool), their forward-equivalents are counted the same
  way, and the time is the forward-equivalents times the seconds per forward-equivalent the
  new run measured in the same stage. On SmolLM2 an old run takes hours, hence the estimate.

Machine load is printed (`os.getloadavg`); the figures compare within one run.

`--before-after OUT` instead runs the current defaults and the defaults before the 15-minute
speed cuts (`BEFORE`, config fields whose old values give the old computation) one after the
other, each with its results folder, report and explanation, and prints per stage the wall
and CPU seconds, forward-equivalents and the load before and after, then both confirmation
tables. Every run also prints where its forwards went (`print_profile`).

    .venv/bin/python bench/real.py --model smollm2-135m --task ioi --others induction \
        --threads 1 --before-after /tmp/ioi

    .venv/bin/python bench/real.py --model gemma-3-270m --task ioi --others induction \
        --cli /tmp/gemma_ioi     # Gemma-3's default run, end to end, with peak memory
    .venv/bin/python bench/real.py --model /path/to/smollm2-hf --task induction \
        --others greater_than
    .venv/bin/python bench/real.py --model embedded --old run
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import resource
import time
from itertools import combinations
from unittest import mock

import numpy as np
import torch

import workbench.pipeline as pipeline
from workbench import cli
from workbench.confirmation.confirm import pool_random_head_sets, random_head_sets
from workbench.estimate import estimate_run
from workbench.heads import HeadSet
from workbench.loading import load_model
from workbench.results.result import CELResult
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import resolve_task
from workbench.search.candidates import search_pool
from workbench.search.finalists import max_finalists
from workbench.tasks.encoding import encode_task

STAGES = ("screen", "search", "confirm")


class Meter:
    """Counts forward-equivalents of every `MaskScorer.score` call, by stage, and profiles
    them by part: `(stage, what was scored)` -> forward-equivalents, wall and CPU seconds and
    masks, the part named by the call's progress label (without its example count) and the
    task scored."""

    def __init__(self, n_select: int) -> None:
        self.n_select = n_select
        self.stage = "setup"
        self.eq: dict[str, float] = {}
        self.blocks = 0.0  # rows that entered a block, over all forwards (`count_blocks`)
        self.work: dict[str, float] = {}  # stage -> forward-equivalents actually run
        self.parts: dict[tuple[str, str], list[float]] = {}
        self.loads: dict[str, tuple] = {}  # stage -> (1-min load before, after)
        self.cpu: dict[str, float] = {}  # stage -> CPU seconds of the process

    def add(self, scorer: MaskScorer, masks: torch.Tensor, rows, desc: str = "masks",
            seconds: tuple[float, float] = (0.0, 0.0), blocks_before: float = 0.0) -> None:
        """Count a score call: `eq` by the restart formula (`layer_passes`), the part's
        forward-equivalents by the blocks it ran (since `blocks_before`)."""
        n_rows = len(scorer.data) if rows is None else len(rows)
        self.eq[self.stage] = self.eq.get(self.stage, 0.0) + layer_passes(
            masks, scorer.model.cfg.n_layers) * n_rows / self.n_select
        eq = self.blocks - blocks_before
        task = getattr(getattr(scorer.data, "task", None), "name", "?")
        # a raced call's label ends with its look, "(20/154 examples)"; an unraced one (the
        # interaction search's knockouts, side effects, the trade-off table) has none
        part = f"{desc.split(' (')[0]} [{task}]" + ("" if " (" in desc else ", unraced")
        entry = self.parts.setdefault((self.stage, part), [0.0, 0.0, 0.0, 0])
        entry[0] += eq
        entry[1] += seconds[0]
        entry[2] += seconds[1]
        entry[3] += int(masks.shape[0])


@contextlib.contextmanager
def count_blocks(model, meter: Meter):
    """Count every row that enters a block, in forward-equivalents (a pass of the selection
    split's rows through all `L` blocks is one; any task's rows count against it): the work
    really run, shared prefixes included."""
    L = model.cfg.n_layers

    def count(resid, hook):
        meter.blocks += resid.shape[0] / (L * meter.n_select)

    points = [model.blocks[l].hook_resid_pre for l in range(L)]
    handles = [p.register_forward_hook(lambda mod, inputs, out: count(out, None))
               for p in points]
    try:
        yield meter
    finally:
        for h in handles:
            h.remove()


def layer_passes(masks: torch.Tensor, n_layers: int) -> float:
    """Sum over masks of `(L - first ablated layer) / L` (the empty mask costs nothing)."""
    if masks.shape[0] == 0:
        return 0.0
    any_layer = masks.flatten(2).amax(-1) > 0  # (M, L)
    first = torch.where(any_layer.any(-1), any_layer.float().argmax(-1),
                        torch.full_like(any_layer[:, 0], n_layers, dtype=torch.long))
    return float((n_layers - first).sum()) / n_layers


@contextlib.contextmanager
def metered(meter: Meter):
    """Count every score call and label it with the stage running."""
    score = MaskScorer.score

    def counting(self, masks, progress=False, desc="masks", rows=None):
        wall, cpu, blocks = time.perf_counter(), time.process_time(), meter.blocks
        out = score(self, masks, progress, desc, rows=rows)
        meter.add(self, masks, rows, desc,
                  (time.perf_counter() - wall, time.process_time() - cpu), blocks)
        return out

    originals = {s: getattr(pipeline, f"{s}_stage") for s in STAGES}

    def staged(name):
        def run(*args, **kwargs):
            meter.stage = name
            before, cpu, blocks = os.getloadavg()[0], time.process_time(), meter.blocks
            try:
                return originals[name](*args, **kwargs)
            finally:
                meter.cpu[name] = meter.cpu.get(name, 0.0) + time.process_time() - cpu
                meter.work[name] = meter.work.get(name, 0.0) + meter.blocks - blocks
                meter.loads[name] = (before, os.getloadavg()[0])
                meter.stage = "setup"
        return run

    MaskScorer.score = counting
    for s in STAGES:
        setattr(pipeline, f"{s}_stage", staged(s))
    try:
        yield meter
    finally:
        MaskScorer.score = score
        for s, fn in originals.items():
            setattr(pipeline, f"{s}_stage", fn)


def print_profile(label: str, meter: Meter, timings: dict) -> None:
    """Where each stage's forwards went: every part's forward-equivalents, wall and CPU
    seconds, and the stage's time outside scoring calls (clean passes, bootstraps)."""
    print(f"profile of the {label} run (fwd-eq: blocks run, `count_blocks`)")
    print("| stage | part | masks | fwd-eq | wall s | CPU s |")
    print("|---|---|---|---|---|---|")
    for s in STAGES:
        parts = [(k[1], v) for k, v in meter.parts.items() if k[0] == s]
        for part, (eq, wall, cpu, n) in parts:
            print(f"| {s} | {part} | {n} | {eq:.1f} | {wall:.0f} | {cpu:.0f} |")
        scored = sum(v[1] for _, v in parts)
        load = meter.loads.get(s, (math.nan, math.nan))
        print(f"| {s} | (total; outside scoring {timings.get(s, 0.0) - scored:.0f} s; load "
              f"{load[0]:.1f} -> {load[1]:.1f}) | | {meter.work.get(s, 0.0):.1f} | "
              f"{timings.get(s, 0.0):.0f} | {meter.cpu.get(s, 0.0):.0f} |")


# The defaults before the 15-minute speed cuts (`--before-after` runs both in one process): the
# `CELConfig` fields whose old values give the old computation (every random set drawn, the
# knockouts and the random sets' first look on the first racing slice, 10 random sets per size
# and baseline in the trade-off table), and the `Compute` field that restarts every mask at its
# first ablated layer, each layer's masks in their own passes.
BEFORE = {"random_looks": False, "knockout_examples": None, "baseline_examples": None,
          "tradeoff_sets": 10, "share_prefix": False}


def run_labelled(label: str, model, main_task, others: dict, out: str | None,
                 settings: dict) -> tuple:
    """One `run_cel` with its results folder and report, metered: `(result, meter, wall s,
    CPU s, (load before, load after))`. Without the explanation (`explain=False`; about 34 s
    on SmolLM2 x ioi), as these figures were measured; `--cli` times the command end to end."""
    meter = Meter(len(encode_task(model, main_task, "select")))
    load = os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    with metered(meter), count_blocks(model, meter):
        result = pipeline.run_cel(model, main_task, list(others.values()), progress=True,
                                  out_dir=out, overwrite=True, explain=False, **settings)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print_profile(label, meter, result.timings)
    return result, meter, wall, cpu, (load, os.getloadavg()[0])


def before_after(model, main_task, others: dict, out: str, threads: int,
                 estimate=None) -> None:
    """The current defaults ("after") and the defaults before the speed cuts (`BEFORE`), one
    after the other in this process, per stage: wall and CPU seconds, forward-equivalents,
    the 1-minute load average before and after each stage."""
    # `threads` given: the default ("auto") would take fewer when the load is up at the start
    runs = {"after": run_labelled("after", model, main_task, others, f"{out}/after",
                                  {"threads": threads})}
    runs["before"] = run_labelled("before", model, main_task, others, f"{out}/before",
                                  {**BEFORE, "threads": threads})
    print(f"before = the defaults with {BEFORE}; torch threads {torch.get_num_threads()}; "
          "fwd-eq: every row entering a block, over L x the selection split's rows")
    print("| run | stage | wall s | CPU s | fwd-eq | load before -> after |")
    print("|---|---|---|---|---|---|")
    for label in ("before", "after"):
        result, meter, wall, cpu, load = runs[label]
        for s in ("setup", *STAGES):
            lo = meter.loads.get(s, (math.nan, math.nan))
            print(f"| {label} | {s} | {result.timings.get(s, math.nan):.0f} | "
                  f"{meter.cpu.get(s, math.nan):.0f} | {meter.work.get(s, 0.0):.1f} | "
                  f"{lo[0]:.1f} -> {lo[1]:.1f} |")
        print(f"| {label} | total (`run_cel`: setup and report, not the explanation) | "
              f"{wall:.0f} | "
              f"{cpu:.0f} | {meter.blocks:.1f} | {load[0]:.1f} -> {load[1]:.1f} |")
    if estimate is not None:  # made for the current defaults: the after run
        print_estimate_check(estimate, runs["after"][0].timings)
    for label in ("before", "after"):
        conf = runs[label][0].confirmation
        objective = runs[label][0].config.objective
        cols = [c for c in ("size", "heads", f"d_{objective}", f"d_{objective}_lo",
                            f"d_{objective}_hi", "p_holm", "percentile", "n_random",
                            "pool_percentile", "n_pool_random", "best") if c in conf]
        print(f"{label}:")
        print(conf[cols].to_string(index=False))


def old_budget(n_heads: int) -> int:
    """The interaction search's default budget before racing: `5 n + 1000` masks."""
    return 5 * n_heads + 1000


def old_estimate(model, result, main, others, n_select: int, n_heldout: int) -> dict:
    """Forward-equivalents the pipeline without racing spends on the same run."""
    cfg, config = model.cfg, result.config
    L, H = cfg.n_layers, cfg.n_heads
    singles = masks_of(model, [[(l, h)] for l in range(L) for h in range(H)])
    sizes = {name: len(encode_task(model, t)) for name, t in others.items()}
    screen = layer_passes(singles, L) * (1 + sum(sizes.values()) / n_select)
    pool = search_pool(result.heads, config.objective)
    notes = result.summary.get("interaction", {})
    budget = config.search_budget or old_budget(L * H)
    n_masks = config.n_masks or max(64, min(4 * L * H, budget // 2))
    rng = np.random.default_rng([config.seed, 13])
    x = rng.random((n_masks, len(pool))) < (config.knockout_p or 0.3)
    x[~x.any(1), 0] = True
    knock = masks_of(model, [[pool[j] for j in np.flatnonzero(r)] for r in x])
    # as many finalists as the old budget left room for, taken in the order of this run's
    # main effects (`effects` keeps at least the top 20): their layers decide the cost
    k = max_finalists(budget - n_masks, config.max_size)
    ranked = list(notes.get("effects", {})) or list(notes.get("finalists", []))
    finalists = [HeadSet.of(model, [n]).heads[0] for n in ranked[:k]]
    sets = [c for s in range(1, config.max_size + 1) for c in combinations(finalists, s)]
    search = layer_passes(knock, L) + layer_passes(masks_of(model, sets), L)
    confirm = 0.0
    for size in range(1, config.max_size + 1):
        r = random_head_sets(L, H, size, config.n_random, config.seed)
        confirm += layer_passes(masks_of(model, r), L)
        p = pool_random_head_sets(pool, size, config.n_random, config.seed)
        if p and [sorted(a) for a in p] != [sorted(a) for a in r]:
            confirm += layer_passes(masks_of(model, p), L)
    side = config.max_size * (1 + sum(sizes.values()) / n_select)  # found sets, side effects
    confirm = confirm * n_heldout / n_select + side
    return {"screen": screen, "search": search, "confirm": confirm}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a load_model name or a local folder")
    p.add_argument("--task", default=None, help="main task (default: the embedded default)")
    p.add_argument("--others", nargs="*", default=[], help="side tasks")
    p.add_argument("--old", choices=["estimate", "run"], default="estimate")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="auto")
    p.add_argument("--cli", metavar="OUT", default=None,
                   help="run the new pipeline as the command a user types, `workbench cel "
                   "--model M --task T --others ... --out OUT --overwrite` (on the model this "
                   "script loaded; its wall time then includes the report and the explanation, "
                   "and the model's load is added to it)")
    p.add_argument("--before-after", metavar="OUT", default=None,
                   help="run the current defaults and the defaults before the speed cuts "
                   "(BEFORE) one after the other, results folders OUT/after and OUT/before, "
                   "and print both per stage")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = load_model(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    task, other_names = args.task, args.others
    if task is None:  # the embedded model's main job, as `workbench cel` runs it
        from workbench.zoo import DEFAULT_TASK, SIDE_TASKS

        task, other_names = DEFAULT_TASK, other_names or list(SIDE_TASKS)
    main_task = resolve_task(task)
    others = {t.name: t for t in (resolve_task(o) for o in other_names)}
    n_select = len(encode_task(model, main_task, "select"))
    n_heldout = len(encode_task(model, main_task, "heldout"))
    print(f"model {args.model} loaded in {load_s:.0f} s; load {os.getloadavg()}")
    # the pre-run estimate, as `workbench cel` makes it (its low end is a bound: checked below)
    estimate = estimate_run(pipeline.prepare_run(model, main_task, list(others.values()),
                                                 progress=False, threads=args.threads))
    print(estimate.line())
    if args.before_after:
        before_after(model, main_task, others, args.before_after, args.threads, estimate)
        return
    runs = {}
    for label, adaptive in (("new", True), ("old", False)):
        if label == "old" and args.old != "run":
            continue
        meter = Meter(n_select)
        start = time.perf_counter()
        with metered(meter):
            if label == "new" and args.cli:
                argv = ["cel", "--model", args.model, "--task", task, "--out", args.cli,
                        "--overwrite", "--threads", str(args.threads)] + (
                            ["--others", *other_names] if other_names else [])
                # the command runs on this process's model (loaded above, `load_s`), so
                # `count_blocks` sees its forwards and the model is not held twice
                with mock.patch("workbench.loading.load_model", lambda *a, **k: model), \
                        count_blocks(model, meter):
                    code = cli.main(argv)
                if code != 0:
                    raise SystemExit(f"workbench {' '.join(argv)} failed")
                result = CELResult.load(args.cli)
            else:
                old = {} if adaptive else {
                    "search_budget": old_budget(model.cfg.n_layers * model.cfg.n_heads)}
                result = pipeline.run_cel(model, main_task, list(others.values()),
                                          adaptive=adaptive, progress=True, plots=False, **old)
        runs[label] = (result, dict(meter.eq), time.perf_counter() - start)
        print_profile(label, meter, result.timings)
    new, new_eq, new_wall = runs["new"]
    print(f"model {args.model}: {model.cfg.n_layers} x {model.cfg.n_heads} heads, task "
          f"{main_task.name} ({n_select} select, {n_heldout} held out), others "
          f"{list(others)}; load {os.getloadavg()}; {args.threads} threads; model load "
          f"{load_s:.0f} s")
    if "old" in runs:
        old, old_eq, old_wall = runs["old"]
        old_t = {s: old.timings.get(s, float("nan")) for s in STAGES}
        how = "run in the same process"
    else:
        old_eq = old_estimate(model, new, main_task, others, n_select, n_heldout)
        old_t = {s: old_eq[s] * new.timings.get(s, 0.0) / max(new_eq.get(s, 0.0), 1e-9)
                 for s in STAGES}
        old_wall = sum(old_t.values()) + new.timings.get("setup", 0.0)
        how = "estimated: its forward-equivalents x this run's seconds per forward-equivalent"
    if args.cli:
        print(f"new pipeline: `workbench cel` end to end, {new_wall:.0f} s wall after the "
              f"model's load ({load_s:.0f} s): {new_wall + load_s:.0f} s")
    print(f"old pipeline (adaptive=False): {how}")
    print("| stage | new s | new fwd-eq | old s | old fwd-eq | old / new |")
    print("|---|---|---|---|---|---|")
    for s in STAGES:
        t_new = new.timings.get(s, float("nan"))
        print(f"| {s} | {t_new:.0f} | {new_eq.get(s, 0.0):.1f} | {old_t[s]:.0f} | "
              f"{old_eq.get(s, 0.0):.1f} | {old_t[s] / t_new if t_new else math.nan:.1f} |")
    print(f"| total wall | {new_wall:.0f} | {sum(new_eq.values()):.1f} | {old_wall:.0f} | "
          f"{sum(old_eq.values()):.1f} | {old_wall / new_wall:.1f} |")
    print_estimate_check(estimate, new.timings)
    conf = new.confirmation
    cols = [c for c in ("size", "heads", f"d_{new.config.objective}",
                        f"d_{new.config.objective}_n", "percentile", "n_random_complete",
                        "p_holm") if c in conf]
    print(conf[cols].to_string(index=False))
    print(f"peak resident memory of this process: {peak_rss_mib():.0f} MiB")


def print_estimate_check(estimate, timings: dict) -> None:
    """Each stage's measured seconds beside the pre-run estimate's range and likely time: the
    low end must be below every measured stage (`workbench.estimate`, docs/speed.md)."""
    likely = estimate.likely or {}
    print("| stage | estimate low s | likely s | estimate high s | measured s | measured / low "
          "| measured / likely |")
    print("|---|---|---|---|---|---|---|")
    for s in STAGES:
        span, got = estimate.stage_seconds(s), timings.get(s, float("nan"))
        if span is None:
            continue
        low, high = span
        flag = "" if got >= low else " **below the low end**"
        mid = likely.get(s, math.nan)
        print(f"| {s} | {low:.0f} | {mid:.0f} | {high:.0f} | {got:.0f} | "
              f"{got / low if low else math.inf:.2f}{flag} | {got / mid:.2f} |")


def peak_rss_mib() -> float:
    """This process's peak resident set size (Linux reports `ru_maxrss` in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    main()
