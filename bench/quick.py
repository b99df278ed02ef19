"""Benchmark: what quick looks cost and what they keep.

`--budgets`: the interaction search's recall on planted models (`bench/planted.py`: harmful
singles, OR pairs and an OR triple whose members alone change nothing) at fractions of the
full budget `2.5 n + 500`, for sets of up to `--max-size` heads, on selection splits of 64
examples (the planted default, 16 fillers) and 16 (4 fillers). Screening and the search run
as `run_cel` runs them (raced); a size is found when its best set is the planted one. This is
what `workbench.search.finalists.default_budget` rests on: the budget for pairs is half the one for
triples, and it does not shrink with the examples.

`--cost`: `workbench cel` with and without `--quick` on a model (default: the embedded main
job), each in its own process, interleaved over `--rounds`: wall and CPU time, the run's
stage timings and forward-equivalents, and the machine's load average when it started.

    .venv/bin/python bench/quick.py --budgets --heads 144 384 1024 --max-size 2
    .venv/bin/python bench/quick.py --budgets --heads 144 --max-size 3
    .venv/bin/python bench/quick.py --cost
    .venv/bin/python bench/quick.py --cost --modes quick -- --model smollm2-135m --task ioi \
        --others induction
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout: bench.planted

from bench.planted import PlantSpec, planted_model  # noqa: E402
from workbench.screening.screen import ScreenRace, screen_scorer  # noqa: E402
from workbench.screening.stage import screen_race_rule  # noqa: E402
from workbench.search.candidates import (  # noqa: E402
    best_sets,
    candidate_heads,
    search_pool,
    select_candidates,
)
from workbench.search.finalists import default_budget  # noqa: E402
from workbench.search.registry import strategies  # noqa: E402
from workbench.search.space import SearchSpace  # noqa: E402
from workbench.stats import Stats  # noqa: E402

SHAPES = {144: (12, 12), 384: (24, 16), 1024: (32, 32)}
FIRST, SECOND = "logit_diff", "logprob"


def planted_recall(n_heads: int, seed: int, n_fillers: int, max_size: int,
                   fractions: list[float]) -> list[dict]:
    """One plant: the interaction search at each fraction of the full budget."""
    L, H = SHAPES[n_heads]
    pm = planted_model(PlantSpec(n_layers=L, n_heads=H, seed=seed, n_fillers=n_fillers))
    heads = screen_scorer(pm.scorer("select"),
                          race_on=ScreenRace(FIRST, screen_race_rule(["interaction"])),
                          stats=Stats(n_boot=200, seed=seed))
    heads = select_candidates(heads, FIRST, SECOND, 8)
    pool = search_pool(heads, FIRST)
    rows = []
    for fraction in fractions:
        scorer = pm.scorer("select")
        scorer.clean()
        budget = max(100, int(default_budget(n_heads, 3) * fraction))
        space = SearchSpace(scorer, candidate_heads(heads), FIRST, SECOND, max_size=max_size,
                            seed=seed, pool=pool, adaptive=True)
        strategies()["interaction"](space, search_budget=budget)
        sets, _ = best_sets(pd.DataFrame(space.records), FIRST, SECOND, max_size)
        rows.append({
            "heads": n_heads, "select_examples": len(scorer.data), "fraction": fraction,
            "budget": budget, "masks": space.notes["interaction"]["n_masks"],
            "finalists": len(space.notes["interaction"]["finalists"]), "seed": seed,
            **{f"size_{s}": sets.get(s) == pm.best.get(s) for s in range(1, max_size + 1)},
        })
    return rows


def budgets(args) -> None:
    torch.set_num_threads(1)
    rows = []
    for n_heads in args.heads:
        for n_fillers in (16, 4):  # 64 and 16 selection examples (8 answers each)
            for seed in range(args.seeds):
                rows += planted_recall(n_heads, seed, n_fillers, args.max_size, args.fractions)
    df = pd.DataFrame(rows)
    found = {f"size_{s}": (f"size_{s}", "sum") for s in range(1, args.max_size + 1)}
    table = df.groupby(["heads", "select_examples", "fraction"]).agg(
        budget=("budget", "first"), masks=("masks", "first"), finalists=("finalists", "first"),
        plants=("seed", "count"), **found)
    print(f"sets of up to {args.max_size} heads; budget = fraction x (2.5 n + 500); found: "
          "plants whose best set of that size is the planted one")
    print(table.to_string())


def run_cel(extra: list[str], quick: bool, folder: Path) -> dict:
    out = folder / ("quick" if quick else "full")
    cmd = [sys.executable, "-m", "workbench", "cel", "--out", str(out), "--overwrite",
           "--quiet", *(["--quick"] if quick else []), *extra]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    record = json.loads((out / "config.json").read_text())
    eq = record["summary"].get("forward_eq", {})
    screen = eq.get("screen", {})
    return {
        "quick": quick, "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        **{f"{k}_s": v for k, v in record["timings"].items()},
        "screen_eq": sum(screen.values()) if isinstance(screen, dict) else screen,
        "search_eq": eq.get("search"),
        "best": record["summary"].get("best_heads") or record["summary"].get("top_candidate"),
        "significant": record["summary"].get("significant_sizes"),
        "load_before": load,
        "estimate": next((line for line in done.stdout.splitlines()
                          if line.startswith("estimate:")), ""),
    }


def cost(args) -> None:
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()} at the start; "
          f"command: workbench cel {' '.join(args.extra) or '(the main job)'} [--quick]")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-quick-") as tmp:
        for r in range(args.rounds):
            modes = [m == "quick" for m in args.modes]
            for quick in (modes if r % 2 == 0 else modes[::-1]):
                row = {"round": r, **run_cel(args.extra, quick, Path(tmp))}
                rows.append(row)
                print(f"round {r} quick {quick}: wall {row['wall_s']:.1f} s, cpu "
                      f"{row['cpu_s']:.1f} s, load before {row['load_before']:.2f}", flush=True)
                if row["estimate"]:
                    print(f"  {row['estimate']}")
    df = pd.DataFrame(rows).drop(columns="estimate")
    print()
    print(df.to_string(index=False, float_format="{:.1f}".format))
    print("\nmedians:")
    print(df.groupby("quick").median(numeric_only=True).drop(columns="round").to_string(
        float_format="{:.1f}".format))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budgets", action="store_true", help="planted recall by budget")
    p.add_argument("--cost", action="store_true", help="time cel with and without --quick")
    p.add_argument("--heads", type=int, nargs="+", default=[144], choices=sorted(SHAPES))
    p.add_argument("--max-size", type=int, default=2)
    p.add_argument("--fractions", type=float, nargs="+", default=[1.0, 0.5, 0.35])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", nargs="+", choices=["quick", "full"], default=["quick", "full"],
                   help="--cost: with --quick, without, or both (default)")
    p.add_argument("extra", nargs="*", help="after --: options of `workbench cel` (--cost)")
    args = p.parse_args()
    if not (args.budgets or args.cost):
        p.error("give --budgets or --cost")
    if args.budgets:
        budgets(args)
    if args.cost:
        cost(args)


if __name__ == "__main__":
    main()
