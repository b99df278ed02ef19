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
    .venv/bin/python bench/recall.py --gaming    # a gaming head: guarded against unguarded

`--gaming` (`run_gaming_plant`): the same plants plus one gaming head (`PlantSpec.
gaming_gains`, gain `GAMING_GAIN` = 6.0): removing it raises logit_diff by 6.0 but drops every
`y` logit below the tokens at 0, so accuracy falls to 0 and the answer's log-prob by ~10 nats.
The planted best set of each size then contains the gamer (6.0; with the 2.0 single, 8.0; with
the 5.0 pair, 11.0); the genuine best sets (`best_genuine`) are the usual single, pair and
triple. The interaction search (raced, the pipeline default) runs once with the default guards
of a difference objective (`Guard("main", "accuracy")`, `Guard("main", "logprob")`, rule
`not_worse`, candidates from `select_candidates(..., guards=)`) and once without; a guarded
search should find `best_genuine`, an unguarded one `best` (today's behaviour).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout: bench.planted

from bench.planted import PlantSpec, planted_model  # noqa: E402
from workbench.compute import Compute  # noqa: E402
from workbench.confirmation.confirm import confirm_sets, example_groups  # noqa: E402
from workbench.guards import Guard  # noqa: E402
from workbench.heads import HeadSet  # noqa: E402
from workbench.scoring.scorer import MaskScorer  # noqa: E402
from workbench.screening.screen import ScreenRace, screen_scorer  # noqa: E402
from workbench.screening.stage import screen_race_rule  # noqa: E402
from workbench.search.candidates import (  # noqa: E402
    best_sets,
    candidate_heads,
    search_pool,
    select_candidates,
)
from workbench.search.finalists import default_budget
from workbench.search.gate_training import GateSettings, gated_scores, train_gates  # noqa: E402
from workbench.search.registry import strategies
from workbench.search.space import SearchSpace
from workbench.stats import Stats  # noqa: E402
from workbench.tables import head_name  # noqa: E402
from workbench.tasks.encoding import encode_task  # noqa: E402

SHAPES = {144: (12, 12), 384: (24, 16), 1024: (32, 32)}
FIRST, SECOND = "logit_diff", "logprob"
# The gaming plant (`--gaming`): one gaming head of this gain (larger than the 2.0 single, and
# with the 2.0 single or the 5.0 pair larger than the 5.0 pair or the 9.0 triple).
GAMING_GAIN = 6.0
# A difference objective's default guards (`workbench.guards.default_guards`).
GUARDS = (Guard("main", "accuracy"), Guard("main", "logprob"))
# label -> (guards, guard rule, oracle). Diagnostic rows: `no_fall` (the guards' point
# estimates), and the oracle (unguarded, the gamer struck from screening's table and so from
# the candidates and the pool: what a guard that knew the gamer would leave to the search).
GAMING_ROWS = {
    "guarded (default guards, not_worse)": (GUARDS, "not_worse", False),
    "guarded, rule no_fall": (GUARDS, "no_fall", False),
    "oracle: unguarded, gamer struck from the pool": ((), "not_worse", True),
    "unguarded": ((), "not_worse", False),
}
ROWS = {
    "exhaustive, top_m 8": ("exhaustive", {}),
    "greedy": ("greedy", {}),
    "beam": ("beam", {}),
    "compressed_sensing": ("compressed_sensing", {}),
    "interaction, every set on every example": ("interaction", {"adaptive": False}),
    "interaction (pipeline default: raced)": ("interaction", {}),
    "gates, every set on every example": ("gates", {"adaptive": False}),
    "gates (raced)": ("gates", {}),
}
# The gates strategy's choices, each changed alone (`--gate-variants`): `gates` holds
# `GateSettings` fields.
GATE_VARIANTS = {
    "gates, no penalty": ("gates", {"gates": {"penalty": 0.0}}),
    "gates, penalty 0.2": ("gates", {"gates": {"penalty": 0.2}}),
    "gates, init 4 (nearly always open)": ("gates", {"gates": {"init": 4.0}}),
    "gates, 100 steps": ("gates", {"gates": {"steps": 100}}),
    "gates, batch 32": ("gates", {"gates": {"batch_size": 32}}),
    # equal small budgets: training (112) + 9 finalists' 129 sets; knockouts (125) + 8's 92
    "gates, budget 250": ("gates", {"search_budget": 250}),
    "interaction, budget 250 (for comparison)": ("interaction", {"search_budget": 250}),
}
# The interaction search's design choices, each changed alone (`--variants`).
VARIANTS = {
    "interaction, knockout_p 0.1": ("interaction", {"knockout_p": 0.1}),
    "interaction, knockout_p 0.5": ("interaction", {"knockout_p": 0.5}),
    "interaction, p 5/n (compressed_sensing's)": ("interaction", {"knockout_p": "5/n"}),
    "interaction, all heads (no pool)": ("interaction", {"pool": None}),
    "interaction, no screening finalists": ("interaction", {"screen_share": 0.0}),
    "interaction, half screening finalists": ("interaction", {"screen_share": 0.5}),
    "interaction, knockouts on 8 examples": ("interaction", {"knockout_examples": 8}),
    "interaction, knockouts on 4 examples": ("interaction", {"knockout_examples": 4}),
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
        # the strategy's own settings (its settings dataclass), the rest the space's
        own = {k: kw.pop(k) for k in list(kw)
               if k in {f.name for f in dataclasses.fields(strategies()[name].settings_type)}}
        own.update(kw.pop("gates", {}))
        space = SearchSpace(
            scorer, candidate_heads(heads), FIRST, SECOND, max_size=max_size, seed=seed, **kw
        )
        t0 = time.process_time()
        strategies()[name](space, **own)
        cpu = time.process_time() - t0
        gate_eq = space.notes.get("gates", {}).get("forward_eq", {}).get("training", 0.0)
        sets, _ = best_sets(pd.DataFrame(space.records), FIRST, SECOND, max_size)
        row = {
            "heads": n_heads,
            "strategy": label,
            "seed": seed,
            # gate training's forward and backward passes run on the model, not the scorer
            "forward_eq": screen.count + scorer.count + gate_eq,
            "screen_eq": screen.count,
            "cpu_s": cpu + t_screen,
            "pool": len(pool),
            "candidates": len(space.candidates),
        }
        for size in range(1, max_size + 1):
            row[f"hit_{size}"] = sets.get(size) == pm.best.get(size)
        out.append(row)
    return out


def run_gaming_plant(
    n_heads: int,
    seed: int,
    rows: dict[str, tuple] | None = None,
    gaming_gain: float = GAMING_GAIN,
    max_size: int = 3,
    noise_sd: float = 0.1,
) -> list[dict]:
    """One gaming plant (`--gaming`), the interaction search raced as `run_cel` runs it, once
    per row of `rows` (default `GAMING_ROWS`: label -> (guards, guard rule, oracle)). A
    guarded or oracle row hits a size when its best (feasible) set is `best_genuine`, the
    unguarded row when its best set is `best` (the gamer's). `why_<size>` says what became
    of the set a row should find: `found`, `infeasible` (scored on every example but failing
    a guard), `outranked`, `raced out` (dropped on a slice) or `not scored` (its heads were
    not all finalists)."""
    L, H = SHAPES[n_heads]
    spec = PlantSpec(n_layers=L, n_heads=H, seed=seed, noise_sd=noise_sd,
                     gaming_gains=(gaming_gain,))
    pm = planted_model(spec)
    gamer = next(head_name(*h) for h, r in pm.roles.items() if r == "gamer")
    screen = CountingScorer(pm.scorer("select"))
    t0 = time.process_time()
    heads = screen_scorer(
        screen,
        race_on=ScreenRace(FIRST, screen_race_rule(["interaction"])),
        stats=Stats(n_boot=200, seed=seed),
    )
    t_screen = time.process_time() - t0
    out = []
    for label, (guards, rule, oracle) in (rows or GAMING_ROWS).items():
        table = heads
        if oracle:
            table = heads[[head_name(l, h) != gamer for l, h in zip(heads["layer"], heads["head"],
                                                                     strict=True)]]
        cands = select_candidates(table.reset_index(drop=True), FIRST, SECOND, 8, guards=guards)
        pool = search_pool(cands, FIRST, guards=guards)
        scorer = CountingScorer(pm.scorer("select"))
        scorer.clean()
        space = SearchSpace(
            scorer, candidate_heads(cands), FIRST, SECOND, max_size=max_size, seed=seed,
            pool=pool, adaptive=True, guards=guards, guard_rule=rule,
        )
        t0 = time.process_time()
        strategies()["interaction"](space)
        cpu = time.process_time() - t0
        combos = pd.DataFrame(space.records)
        sets, _ = best_sets(combos, FIRST, SECOND, max_size)
        target = pm.best_genuine if guards or oracle else pm.best
        finalists = set(space.notes["interaction"]["finalists"])
        row = {
            "heads": n_heads,
            "strategy": label,
            "seed": seed,
            "forward_eq": screen.count + scorer.count,
            "screen_eq": screen.count,
            "cpu_s": cpu + t_screen,
            "pool": len(pool),
            "gamer_in_pool": _head(gamer) in pool,
            "gamer_finalist": gamer in finalists,
            "finalists": len(finalists),
        }
        for size in range(1, max_size + 1):
            found = sets.get(size)
            row[f"hit_{size}"] = found == target.get(size)
            row[f"gamer_{size}"] = found is not None and gamer in found.split(",")
            row[f"why_{size}"] = _why(combos, target.get(size), found, finalists)
        out.append(row)
    return out


def _why(combos: pd.DataFrame, want: str | None, found: str | None, finalists: set) -> str:
    """What became of the set `want` in a search's records (`run_gaming_plant`)."""
    if want is None:
        return "none planted"
    if found == want:
        return "found"
    rows = combos[combos["heads"] == want]
    if rows.empty:
        return "not scored" if not set(want.split(",")) <= finalists else "never recorded"
    size = len(want.split(","))
    top = rows[rows["n"] == rows["n"].max()].iloc[0]
    if int(top["n"]) < int(combos.loc[combos["size"] == size, "n"].max()):
        return "raced out"
    if "feasible" in top and not bool(top["feasible"]):
        return "infeasible"
    return "outranked"


def gaming_table(df: pd.DataFrame, max_size: int = 3) -> str:
    """Hits per size (`best_genuine` guarded, `best` unguarded), how many found sets hold the
    gamer, and what became of the missed sets (`_why`), per model size and row."""
    lines = [
        "| heads | search | should find | "
        + " | ".join(f"size {s} found" for s in range(1, max_size + 1))
        + " | found sets with the gamer (sizes 1-3) | misses | fwd-eq mean (max) "
        "| of which screening | CPU s / plant | n plants |",
        "|---|---|---|" + "---|" * max_size + "---|---|---|---|---|---|",
    ]
    for (n, label), g in df.groupby(["heads", "strategy"], sort=False):
        hits = " | ".join(f"{int(g[f'hit_{s}'].sum())}/{len(g)}" for s in range(1, max_size + 1))
        gamer = " / ".join(str(int(g[f"gamer_{s}"].sum())) for s in range(1, max_size + 1))
        why = pd.Series([w for s in range(1, max_size + 1) for w in g[f"why_{s}"]])
        why = why[why != "found"].value_counts()
        misses = ", ".join(f"{k} {v}" for k, v in why.items()) or "none"
        should = "best (with the gamer)" if label == "unguarded" else "best_genuine"
        lines.append(
            f"| {n} | {label} | {should} | {hits} | {gamer} | {misses} "
            f"| {g['forward_eq'].mean():.0f} ({g['forward_eq'].max():.0f}) "
            f"| {g['screen_eq'].mean():.0f} | {g['cpu_s'].mean():.1f} | {len(g)} |"
        )
    return "\n".join(lines)


def gradient_check(n_heads: int, seed: int, noise_sd: float = 0.1) -> dict:
    """Where the gradients see the planted heads: `|d mean logit_diff / d g|` at every gate
    open (`g = 1`, first-order attribution, Michel et al.'s importance) for the singles and
    the OR members, and each planted best set's worst rank in the trained gates' push order
    over the pool (0 = first), the pool and screening as in `run_plant`."""
    L, H = SHAPES[n_heads]
    pm = planted_model(PlantSpec(n_layers=L, n_heads=H, seed=seed, noise_sd=noise_sd))
    batch = encode_task(pm.model, pm.task, "select")
    keep = torch.ones(1, L, H, requires_grad=True)
    value = gated_scores(pm.model, batch, keep)[FIRST].mean()
    (grad,) = torch.autograd.grad(value, keep)
    grad = grad[0].abs()
    members = [m for group in pm.groups for m in group[0]]
    singles = [h for h, r in pm.roles.items() if r == "single"]
    heads = select_candidates(
        screen_scorer(
            pm.scorer("select"),
            race_on=ScreenRace(FIRST, screen_race_rule(["gates"])),
            stats=Stats(n_boot=200, seed=seed),
        ),
        FIRST,
        SECOND,
        8,
    )
    pool = search_pool(heads, FIRST)
    fit = train_gates(pm.model, batch, FIRST, pool, GateSettings(), seed=seed)
    order = sorted(pool, key=lambda h: -float(fit.push[h]))
    out = {
        "heads": n_heads,
        "seed": seed,
        "pool": len(pool),
        "grad_members_max": max(float(grad[m]) for m in members),
        "grad_singles_min": min(float(grad[h]) for h in singles),
    }
    for size, names in pm.best.items():
        out[f"push_rank_{size}"] = max(order.index(_head(n)) for n in names.split(","))
    return out


def null_check(strategy: str, n_plants: int = 20, cluster: bool = True) -> int:
    """How many of `n_plants` null models (4 x 4 heads, helpful and noise heads only) declare
    a significant held-out gain (`p_holm < 0.05` at some size) after raced screening, the
    strategy and the raced confirmation, clustered by filler: `tests/test_recall.py`'s null
    check, for any strategy."""
    declared = 0
    for seed in range(n_plants):
        pm = planted_model(PlantSpec.null(n_layers=4, n_heads=4, seed=seed))
        select, heldout = pm.scorer("select"), pm.scorer("heldout")
        heads = select_candidates(
            screen_scorer(
                select,
                race_on=ScreenRace(FIRST, screen_race_rule([strategy])),
                stats=Stats(n_boot=200),
            ),
            FIRST,
            SECOND,
            8,
        )
        pool = search_pool(heads, FIRST)
        space = SearchSpace(
            select, candidate_heads(heads), FIRST, SECOND, seed=0, pool=pool, adaptive=True
        )
        strategies()[strategy](space)
        sets, best = best_sets(pd.DataFrame(space.records), FIRST, SECOND, 3)
        conf, _ = confirm_sets(
            heldout,
            {s: HeadSet.of(pm.model, n) for s, n in sets.items()},
            FIRST,
            SECOND,
            best_size=best,
            n_random=0,
            pool=pool,
            groups=example_groups(heldout.data) if cluster else None,
            adaptive=True,
            stats=Stats(n_boot=200),
        )
        declared += bool((conf["p_holm"] < 0.05).any())
    return declared


def gradient_table(df: pd.DataFrame) -> str:
    lines = [
        "| heads | max over OR members of abs(grad) at g = 1 | min over singles | "
        "worst push rank: single / pair / triple (max over plants) | pool | n plants |",
        "|---|---|---|---|---|---|",
    ]
    for n, g in df.groupby("heads", sort=False):
        ranks = " / ".join(str(int(g[f"push_rank_{s}"].max())) for s in (1, 2, 3))
        lines.append(
            f"| {n} | {g['grad_members_max'].max():.1e} | {g['grad_singles_min'].min():.2f} | "
            f"{ranks} | {g['pool'].mean():.0f} | {len(g)} |"
        )
    return "\n".join(lines)


def _head(name: str) -> tuple[int, int]:
    layer, head = name[1:].split("H")
    return int(layer), int(head)


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
    p.add_argument("--gate-variants", action="store_true", help="only the gates variants")
    p.add_argument(
        "--null",
        action="store_true",
        help="only the null check: 20 null models, significant declarations per strategy",
    )
    p.add_argument(
        "--gradients",
        action="store_true",
        help="only the gradient check: gate gradients at g = 1 and planted sets' push ranks",
    )
    p.add_argument(
        "--gaming",
        action="store_true",
        help="only the gaming plant: guarded and unguarded interaction search (run_gaming_plant)",
    )
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
    rows = GATE_VARIANTS if args.gate_variants else VARIANTS if args.variants else ROWS
    rows = {k: v for k, v in rows.items() if args.strategies is None or v[0] in args.strategies}
    if args.check:
        for n in sizes:
            L, H = SHAPES[n]
            err = check_forward(planted_model(PlantSpec(n_layers=L, n_heads=H, seed=0)))
            print(f"{n} heads: max |analytic - forward| logit_diff = {err:.2e}")
    if args.null:
        for name in args.strategies or ["interaction", "gates"]:
            for cluster in (True, False):
                found = null_check(name, cluster=cluster)
                print(
                    f"{name}, {'clustered' if cluster else 'not clustered'}: {found} of 20 "
                    "null models declare a significant gain",
                    flush=True,
                )
        return
    if args.gaming:
        if args.check:
            for n in sizes:
                L, H = SHAPES[n]
                spec = PlantSpec(n_layers=L, n_heads=H, seed=0, gaming_gains=(GAMING_GAIN,))
                err = check_forward(planted_model(spec))
                print(f"{n} heads, gaming plant: max |analytic - forward| = {err:.2e}")
        found = []
        for n in sizes:
            for seed in range(n_seeds):
                done = run_gaming_plant(n, seed, noise_sd=args.noise_sd)
                found += done
                for r in done:
                    hits = "".join("x" if r[f"hit_{s}"] else "." for s in (1, 2, 3))
                    whys = ", ".join(r[f"why_{s}"] for s in (1, 2, 3))
                    print(f"{n} heads, plant {seed}, {r['strategy']}: sizes 1-3 found {hits} "
                          f"({whys}), fwd-eq {r['forward_eq']:.0f}", flush=True)
        df = pd.DataFrame(found)
        if args.csv:
            df.to_csv(args.csv, index=False)
        print(gaming_table(df))
        return
    if args.gradients:
        found = []
        for n in sizes:
            for seed in range(n_seeds):
                found.append(gradient_check(n, seed, noise_sd=args.noise_sd))
                print(found[-1], flush=True)
        print(gradient_table(pd.DataFrame(found)))
        return
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
