"""Benchmark: joined passes (`workbench.scoring.sharing.ChunkRun.joined`) against one pass group per
first ablated layer, on the mask families a CEL run scores.

One `MaskScorer` per setting over one split of a task (`--split`, default the held-out
split, where the random baselines run), on the first `--rows` examples of racing's order (a
first look), times `score` for each family of masks under `share_prefix=False` (each
layer's masks in passes of their own, the computation before joined passes) and
`share_prefix=None` (auto: joined passes, and shared prefixes where `sharing_pays`):

- `random 1/2/3`: 50 seeded random sets of that size
  (`workbench.confirmation.baseline.random_head_sets`), as the random baselines draw them;
- `scattered singles`: every sixth head alone, as screening's later looks score the heads
  still undecided;
- `finalists`: the sets of up to 3 among 15 heads of the upper layers (capped at 300), as
  the interaction search scores its finalists.

The settings run in interleaved rounds (the order alternating), so a change of the machine's
load falls on both alike; it prints each time, the medians, their ratio, the largest score
difference between the settings, and the load average before and after.

    .venv/bin/python bench/passes.py --model smollm2-135m --task ioi --threads 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from itertools import combinations

import torch

from workbench.compute import Compute
from workbench.confirmation.baseline import random_head_sets
from workbench.loading import load_model
from workbench.racing import example_order
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import resolve_task
from workbench.tasks.encoding import encode_task

SETTINGS = {"per-layer passes": False, "joined (auto)": None}


def families(n_layers: int, n_heads: int, seed: int) -> dict[str, list]:
    """The mask families of the module docstring, as head sets."""
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    upper = heads[len(heads) // 3 :: max(1, len(heads) // 45)][:15]
    out = {f"random {s}": random_head_sets(n_layers, n_heads, s, 50, seed) for s in (1, 2, 3)}
    out["scattered singles"] = [[h] for h in heads[::6]]
    out["finalists"] = [list(c) for k in (1, 2, 3) for c in combinations(upper, k)][:300]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--task", default="ioi")
    p.add_argument("--split", default="heldout")
    p.add_argument("--rows", type=int, default=16, help="examples scored (racing's order)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="auto")
    args = p.parse_args()
    model = load_model(args.model, device=args.device)
    batch = encode_task(model, resolve_task(args.task), args.split)
    rows = example_order(len(batch), 0)[: args.rows]
    scorers = {name: MaskScorer(model, batch, compute=Compute(
        progress=False, threads=args.threads, share_prefix=share))
        for name, share in SETTINGS.items()}
    masks = {k: masks_of(model, v) for k, v in
             families(model.cfg.n_layers, model.cfg.n_heads, 7).items()}
    load_before = os.getloadavg()
    times: dict[tuple[str, str], list[float]] = {}
    scores: dict[tuple[str, str], dict] = {}
    with Compute(threads=args.threads).threads_set():
        for scorer in scorers.values():  # the clean pass and the residual cache, untimed
            scorer.score(next(iter(masks.values()))[:1], rows=rows)
        for r in range(args.rounds):
            names = list(SETTINGS) if r % 2 == 0 else list(SETTINGS)[::-1]
            for family, m in masks.items():
                for name in names:
                    t0 = time.perf_counter()
                    scores[family, name] = scorers[name].score(m, rows=rows)
                    times.setdefault((family, name), []).append(time.perf_counter() - t0)
    print(f"{args.model} x {args.task} ({args.split}), {args.rows} examples, {args.threads} "
          f"threads, {args.rounds} rounds; load {load_before[0]:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after")
    print("| masks | n | per-layer passes s | joined s | per-layer / joined | max score diff |")
    print("|---|---|---|---|---|---|")
    a, b = SETTINGS
    for family, m in masks.items():
        ta = statistics.median(times[family, a])
        tb = statistics.median(times[family, b])
        diff = max(float((scores[family, a][k] - scores[family, b][k]).abs().max())
                   for k in scores[family, a])
        print(f"| {family} | {len(m)} | {ta:.1f} {[round(x, 1) for x in times[family, a]]} "
              f"| {tb:.1f} {[round(x, 1) for x in times[family, b]]} | {ta / tb:.2f} "
              f"| {diff:.1e} |")


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    main()
