"""Benchmark: does each search strategy find the planted best head sets at 144-1024 heads?

Planted-truth models (`bench/planted.py`): attention-only, no LayerNorm, every logit known;
three harmful singles (gains 2.0, 1.6, 1.2 nats of logit_diff), two OR pairs (5.0, 3.5), one
OR triple (9.0), a partial backup (2.5, of which 60 % comes back through the backup), 40 % of
the other heads helpful and the rest noise heads whose effect depends on the prompt's filler.
Heads are placed at random by seed. The planted best sets are: size 1 the 2.0 single, size 2
the 5.0 pair, size 3 the triple (neither a pair nor a single shows anything for the triple).

Per strategy and model size, over `--seeds` random plants: the share of plants whose best set
of each size (by `best_sets`, objective logit_diff, tie-break logprob, as the pipeline ranks)
is exactly the planted one; forward-equivalents on the selection split (masks scored: the n
single-head screens plus the search; the interaction search's default budget is `2.5 n + 500`
masks, `default_budget`); and the search's CPU time.
`exhaustive`, `greedy`, `beam` and `compressed_sensing` use the `top_m = 8` candidates of
`select_candidates` and the defaults of `run_cel`; `interaction` searches the pool of
`search_pool`, once with every set scored on every example and once raced as `run_cel` does
by default (`adaptive`: knockouts on the first slice of examples, sets raced within each size,
`workbench.racing`). Screening is raced as in `run_cel` (`--exhaustive-screen`: not); a
forward-equivalent is one pass over the selection split, so a mask scored on a slice of it
counts its share.

Scores come from `AnalyticScorer` (the planted numbers pushed through the same
`score_logits`, equal to the model's forward pass to 2e-5, checked by `--check`), so a
1024-head plant costs seconds instead of an hour of forward passes on a CPU. CPU time is
therefore the search's own work plus the analytic scores, not model forwards; the cost of
forwards is the forward-equivalents column.

    .venv/bin/python bench/recall.py --quick     # 144 heads, 3 plants (about a minute)
    .venv/bin/python bench/recall.py             # 144, 384, 1024 heads, 10 plants each
    .venv/bin/python bench/recall.py --variants  # the interaction search's choices, one by one
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout: bench.planted

from bench.planted import PlantSpec, planted_model  # noqa: E402
from workbench.candidates import best_sets, candidate_heads, search_pool, select_candidates
from workbench.compute import Compute  # noqa: E402
from workbench.encoding import encode_task  # noqa: E402
from workbench.pipeline import screen_race_rule  # noqa: E402
from workbench.scoring import MaskScorer  # noqa: E402
from workbench.screening import ScreenRace, screen_scorer  # noqa: E402
from workbench.search import STRATEGIES, SearchSpace, default_budget
from workbench.stats import Stats  # noqa: E402

SHAPES = {144: (12, 12), 384: (24, 16), 1024: (32, 32)}
FIRST, SECOND = "logit_diff", "logprob"
ROWS = {
    "exhaustive, top_m 8": ("exhaustive", {}),
    "greedy": ("greedy", {}),
    "beam": ("beam", {}),
    "compressed_sensing": ("compressed_sensing", {}),
    "interaction, every set on every example": ("interaction", {"adaptive": False}),
    "interaction (pipeline default: raced)": ("interaction", {}),
}
# The interaction search's design choices, each changed alone (`--variants`).
VARIANTS = {
    "interaction, knockout_p 0.1": ("interaction", {"knockout_p": 0.1}),
    "interaction, knockout_p 0.5": ("interaction", {"knockout_p": 0.5}),
    "interaction, p 5/n (compressed_sensing's)": ("interaction", {"knockout_p": "5/n"}),
    "interaction, all heads (no pool)": ("interaction", {"pool": None}),
    "interaction, no screening finalists": ("interaction", {"screen_share": 0.0}),
    "interaction, half screening finalists": ("interaction", {"screen_share": 0.5}),
}


class CountingScorer:
    """Counts forward-equivalents: masks x examples scored / examples in the split."""

    def __init__(self, scorer) -> None:
        self.inner, self.model, self.count = scorer, scorer.model, 0.0
        self.data, self.compute = scorer.data, scorer.compute

    def clean(self):
        return self.inner.clean()

    def score(self, masks, progress: bool = False, desc: str = "masks", rows=None):
        n = len(self.data)
        self.count += int(masks.shape[0]) * (n if rows is None else len(rows)) / n
        return self.inner.score(masks, progress, desc, rows=rows)


def check_forward(pm, n_masks: int = 8, seed: int = 0) -> float:
    """Max |analytic - forward| logit_diff over random masks with every planted head in play."""
    L, H = pm.spec.n_layers, pm.spec.n_heads
    rng = np.random.default_rng(seed)
    masks = torch.tensor(rng.random((n_masks, L, H)) < 0.3).float()
    batch = encode_task(pm.model, pm.task, "select")
    real = MaskScorer(
        pm.model, batch, compute=Compute(masks_per_pass=n_masks, max_rows=1 << 16)
    ).score(masks)
    fast = pm.scorer("select").score(masks)
    return float((real["logit_diff"] - fast["logit_diff"]).abs().max())


def run_plant(
    n_heads: int,
    seed: int,
    rows: dict[str, tuple],
    max_size: int = 3,
    noise_sd: float = 0.1,
    adaptive: bool = True,
) -> list[dict]:
    L, H = SHAPES[n_heads]
    pm = planted_model(PlantSpec(n_layers=L, n_heads=H, seed=seed, noise_sd=noise_sd))
    screen = CountingScorer(pm.scorer("select"))
    t0 = time.process_time()
    # raced as run_cel races it for these strategies (`screen_race_rule`)
    heads = screen_scorer(
        screen,
        race_on=ScreenRace(FIRST, screen_race_rule([name for name, _ in rows.values()]))
        if adaptive
        else None,
        stats=Stats(n_boot=200, seed=seed),
    )
    t_screen = time.process_time() - t0
    heads = select_candidates(heads, FIRST, SECOND, 8)
    pool = search_pool(heads, FIRST)
    out = []
    for label, (name, kw) in rows.items():
        scorer = CountingScorer(pm.scorer("select"))
        scorer.clean()
        kw = {"pool": pool, "adaptive": adaptive, **kw}
        if kw.get("knockout_p") == "5/n":
            kw["knockout_p"] = min(0.25, 5.0 / n_heads)
        space = SearchSpace(
            scorer, candidate_heads(heads), FIRST, SECOND, max_size=max_size, seed=seed, **kw
        )
        t0 = time.process_time()
        STRATEGIES[name](space)
        cpu = time.process_time() - t0
        sets, _ = best_sets(pd.DataFrame(space.records), FIRST, SECOND, max_size)
        row = {
            "heads": n_heads,
            "strategy": label,
            "seed": seed,
            "forward_eq": screen.count + scorer.count,
            "screen_eq": screen.count,
            "cpu_s": cpu + t_screen,
            "pool": len(pool),
            "candidates": len(space.candidates),
        }
        for size in range(1, max_size + 1):
            row[f"hit_{size}"] = sets.get(size) == pm.best.get(size)
        out.append(row)
    return out


def table(df: pd.DataFrame, max_size: int = 3) -> str:
    lines = [
        "| heads | strategy | "
        + " | ".join(f"size {s} found" for s in range(1, max_size + 1))
        + " | fwd-eq mean (max) | of which screening | budget (masks) | CPU s / plant | n plants |",
        "|---|---|" + "---|" * max_size + "---|---|---|---|---|",
    ]
    for (n, label), g in df.groupby(["heads", "strategy"], sort=False):
        hits = " | ".join(f"{int(g[f'hit_{s}'].sum())}/{len(g)}" for s in range(1, max_size + 1))
        lines.append(
            f"| {n} | {label} | {hits} | {g['forward_eq'].mean():.0f} "
            f"({g['forward_eq'].max():.0f}) | {g['screen_eq'].mean():.0f} | {default_budget(n)} "
            f"| {g['cpu_s'].mean():.1f} | {len(g)} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="144 heads, 3 plants")
    p.add_argument("--heads", type=int, nargs="*", default=None, choices=sorted(SHAPES))
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--strategies", nargs="*", default=None, help="row strategy names")
    p.add_argument("--variants", action="store_true", help="only the interaction variants")
    p.add_argument("--noise-sd", type=float, default=0.1, help="noise heads' largest sd")
    p.add_argument("--check", action="store_true", help="check analytic scores by forwards")
    p.add_argument("--csv", default=None, help="also write the per-plant rows here")
    p.add_argument(
        "--exhaustive-screen",
        action="store_true",
        help="screen every head on every example (default: raced, as run_cel)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    sizes = args.heads or ([144] if args.quick else sorted(SHAPES))
    n_seeds = args.seeds or (3 if args.quick else 10)
    rows = VARIANTS if args.variants else ROWS
    rows = {k: v for k, v in rows.items() if args.strategies is None or v[0] in args.strategies}
    if args.check:
        for n in sizes:
            L, H = SHAPES[n]
            err = check_forward(planted_model(PlantSpec(n_layers=L, n_heads=H, seed=0)))
            print(f"{n} heads: max |analytic - forward| logit_diff = {err:.2e}")
    records = []
    for n in sizes:
        for seed in range(n_seeds):
            rows_done = run_plant(
                n, seed, rows, noise_sd=args.noise_sd, adaptive=not args.exhaustive_screen
            )
            records += rows_done
            for r in rows_done:  # per plant, so a long run that is cut short still reports
                hits = "".join("x" if r[f"hit_{s}"] else "." for s in (1, 2, 3))
                print(
                    f"{n} heads, plant {seed}, {r['strategy']}: sizes 1-3 found {hits}, "
                    f"fwd-eq {r['forward_eq']:.0f}, CPU {r['cpu_s']:.1f} s",
                    flush=True,
                )
    df = pd.DataFrame(records)
    if args.csv:
        df.to_csv(args.csv, index=False)
    print(table(df))


if __name__ == "__main__":
    main()
