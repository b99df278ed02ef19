"""The guard rule, chosen by measurement: the default run of a cell under each rule, and
unguarded, side by side on the held-out split (`docs/guards.md`).

    python -m bench.guards --model gemma-3-270m --task ioi --others induction
    python -m bench.guards --model smollm2-135m --task ioi --others induction --rules not_worse

Each variant is `run_cel` with all defaults but the guard rule (`--no-guard` for the
unguarded one), into its own folder under `--out` (a rerun resumes). The table lists, per
variant and size, the confirmed set, its held-out gain on the objective, accuracy and answer
log-prob with their intervals, whether it passes the guards held out (`guarded_p_holm`) and
is called best, and what the run cost: wall seconds, forward-equivalents, and forward-times
(wall time over one clean forward of the selection split, measured in the same process).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from workbench.estimate import measure_forward
from workbench.guards import GuardRule
from workbench.loading.model import load_model
from workbench.pipeline import prepare_run, run_prepared
from workbench.results.tradeoff import format_interval


def _row(variant: str, r, objective: str) -> dict:
    out = {"variant": variant, "size": int(r["size"]), "heads": r["heads"]}
    for m in (objective, "accuracy", "logprob"):
        if f"d_{m}" in r:
            out[m] = format_interval(r[f"d_{m}"], r[f"d_{m}_lo"], r[f"d_{m}_hi"])
    out["p_holm"] = r.get("p_holm")
    out["guarded_p_holm"] = r.get("guarded_p_holm")
    out["gamed"] = r.get("gamed")
    out["best"] = r.get("best")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--task", default="ioi")
    p.add_argument("--others", nargs="*", default=["induction"])
    p.add_argument("--rules", nargs="*", default=GuardRule.values())
    p.add_argument("--unguarded", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="bench_guards")
    p.add_argument("--threads", default="auto")
    args = p.parse_args()
    threads = int(args.threads) if args.threads.isdigit() else "auto"
    model = load_model(args.model, device="cpu")
    variants = [(r, {"guard_rule": r}) for r in args.rules]
    if args.unguarded:
        variants.append(("unguarded", {"guards": ()}))
    rows, costs = [], []
    for name, settings in variants:
        out = Path(args.out) / f"{args.model}_{args.task}_{name}"
        run = prepare_run(model, args.task, others=args.others, threads=threads, **settings)
        with run.compute.threads_set():
            forward = measure_forward(run)
        t0 = time.perf_counter()
        result = run_prepared(run, out_dir=out, explain=False)  # the guards' cost alone
        wall = time.perf_counter() - t0
        objective = result.config.objective
        for _, r in result.confirmation.iterrows():
            rows.append(_row(name, r, objective))
        fe = result.summary.get("forward_eq", {})
        costs.append({"variant": name, "wall_s": round(wall, 1),
                      "forward_s": round(forward, 3), "forward_times": round(wall / forward, 1),
                      "timings": json.dumps({k: round(v, 1) for k, v in result.timings.items()}),
                      "search_eq": round(float(fe.get("search", float("nan"))), 1),
                      "best": ",".join(result.best) or "none",
                      "infeasible": json.dumps(result.summary.get("infeasible", {}))})
        print(f"{name}: {wall:.0f} s, best {','.join(result.best) or 'none'}", flush=True)
    with pd.option_context("display.width", 220, "display.max_columns", 30,
                           "display.max_colwidth", 60):
        print(pd.DataFrame(rows).to_string(index=False))
        print()
        print(pd.DataFrame(costs).to_string(index=False))


if __name__ == "__main__":
    main()
