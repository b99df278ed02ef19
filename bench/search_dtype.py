"""Benchmark: screening and search in bfloat16 against float32 (`--search-dtype`), one process.

For each dtype, in the order given and for `--rounds` rounds, the default CEL run
(`run_cel`, every default but `search_dtype`) screens and searches into its own results
folder and stops there (the confirmation is not run); each stage's wall time is printed with
the forward it cost in forward-times: the stage's seconds over one clean float32 forward over
the selection split, measured just before it (`workbench.estimate.measure_forward`), so that
a change of the machine's load between stages cancels. Then:

- the sets each dtype's search chose (`best_sets`), its search pool, candidates and
  finalists, side by side;
- the bfloat16 run resumed from its folder through the confirmation (held out, random
  baselines, side effects, trade-off table, all in float32), its confirmation table
  printed; the float32 run too when its sets differ (when they agree its confirmation is the
  same, bit for bit: `tests/test_pipeline.py`);
- the spread of bfloat16 screening against float32: per head, |d_bf16 - d_f32| over the
  largest |clean score| of the metric (the share `tests/test_precision.py` bounds).

The CPU's bfloat16 flags (`avx512_bf16`, `amx_bf16`) and torch's CPU capability are printed.

    .venv/bin/python bench/search_dtype.py --model smollm2-135m --task ioi --others induction \
        --threads 1 --out /tmp/sd_smollm2
    .venv/bin/python bench/search_dtype.py --spread        # tiny models: the tests' bound
    .venv/bin/python bench/search_dtype.py --planted 12x12 --seeds 10 --run-seeds 0 1 2 3

`--spread` measures the share on 20 tiny models (attention-only and with MLPs and random
biases, seeds 0-9; every head alone and 30 random sets each), the figure `BF16_SHARE` in
`tests/test_precision.py` rests on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

import workbench.pipeline as pipeline
from workbench.estimate import measure_forward
from workbench.precision import CPU_BF16_FLAGS, cpu_flags, search_model
from workbench.results.result import CELResult
from workbench.search.candidates import best_sets, candidate_heads, rank_order, search_pool
from workbench.tables import head_name

STAGES = ("screen", "search")


class SearchDone(Exception):
    """Raised after the search stage saved its table, to stop a run before confirmation."""


def screen_and_search(model, task, others, dtype: str, out: Path, threads: int,
                      **settings) -> dict:
    """One run's screening and search at `dtype` into `out` (other `run_cel` settings:
    `settings`), stopped before confirmation: per stage its seconds and the float32 forward
    measured just before it, and what it chose."""
    record: dict = {"dtype": dtype, "seconds": {}, "forward": {}}

    def timed(stage):
        def run(run_, result, store=None):
            record["forward"][stage.name] = measure_forward(run_)
            t0 = time.perf_counter()
            tables = stage.run(run_, result, store)
            record["seconds"][stage.name] = time.perf_counter() - t0
            record["load"] = os.getloadavg()[0]
            if stage.name == "search":
                record.update(heads=result.heads, combos=tables["combos"], config=run_.config,
                              notes=dict(result.summary))
            return tables
        return run

    def stop(*args, **kwargs):  # the search's table is saved by now
        raise SearchDone

    real = pipeline.STAGES
    pipeline.STAGES = tuple(replace(s, run=timed(s)) if s.name in STAGES else
                            replace(s, run=stop) if s.name == "confirm" else s for s in real)
    try:
        pipeline.run_cel(model, task, others, search_dtype=dtype, out_dir=out, overwrite=True,
                         plots=False, progress=False, threads=threads, **settings)
    except SearchDone:
        pass
    finally:
        pipeline.STAGES = real
    return record


def chosen(record: dict) -> dict:
    """What a run's screening and search chose: the best set of each size, the pool, the
    candidates and the interaction search's finalists."""
    config, heads = record["config"], record["heads"]
    order = rank_order(config.objective, config.secondary, config.rank_by)
    sets, _ = best_sets(record["combos"], *order, config.max_size)
    return {"sets": {k: str(v) for k, v in sets.items()},
            "pool": sorted(head_name(*h) for h in search_pool(heads, order[0], second=order[1])),
            "candidates": [head_name(*h) for h in candidate_heads(heads)],
            "finalists": record["notes"].get("interaction", {}).get("finalists", [])}


def screening_spread(a: dict, b: dict, metric: str) -> tuple[float, float, float]:
    """`(max, median, largest float32 |effect|)` of |d_<metric>| between two runs' screening
    tables, over the heads both scored on the same number of examples."""
    x, y = a["heads"], b["heads"]
    col, n = f"d_{metric}", f"d_{metric}_n"
    both = (x[n] == y[n]) & (x[n] > 0)
    gap = (x.loc[both, col] - y.loc[both, col]).abs()
    return float(gap.max()), float(gap.median()), float(x.loc[both, col].abs().max())


def spread() -> None:
    """The share of bfloat16 effects' gaps to float32 in the run's scale, on tiny models."""
    from tests.golden import tiny_inputs
    from tests.helpers import randomize_biases, tiny_model
    from workbench.scoring.scorer import MaskScorer
    from workbench.tasks.encoding import encode_task
    from workbench.tasks.task import load_task

    _, main, _ = tiny_inputs(Path(os.environ.get("TMPDIR", "/tmp")) / "bf16_spread")
    task = load_task(main)
    shares: dict[str, list[float]] = {}
    for attn_only in (True, False):
        for seed in range(10):
            model = tiny_model(attn_only=attn_only, seed=seed)
            if not attn_only:
                randomize_biases(model, seed=seed)
            data = encode_task(model, task, "select")
            L, H = model.cfg.n_layers, model.cfg.n_heads
            g = torch.Generator().manual_seed(seed)
            masks = torch.cat([torch.eye(L * H).view(-1, L, H),
                               (torch.rand(30, L, H, generator=g) < 0.3).float()])
            out = {}
            for name, m in (("f32", model), ("bf16", search_model(model, "bfloat16"))):
                scorer = MaskScorer(m, data)
                clean, scores = scorer.clean(), scorer.score(masks)
                out[name] = ({k: (scores[k] - clean[k][None]).mean(1) for k in scores}, clean)
            for k, d32 in out["f32"][0].items():
                if k == "accuracy":
                    continue
                scale = float(out["f32"][1][k].abs().max())
                shares.setdefault(k, []).append(
                    float((d32 - out["bf16"][0][k]).abs().max()) / scale)
    print("| metric | models | largest share | median share |")
    print("|---|---|---|---|")
    for k, v in shares.items():
        print(f"| {k} | {len(v)} | {max(v):.2g} | {statistics.median(v):.2g} |")


def planted_recall(shapes: list[str], seeds: int, threads: int, out: Path,
                   dtypes: tuple[str, ...] = ("float32", "bfloat16"),
                   cel_seeds: tuple[int, ...] = (0,)) -> None:
    """Recall of the planted best sets by the default screening and search in each of
    `dtypes`, on planted models run through their real forward passes (`bench/planted.py`;
    zero ablation, 64 selection examples), once per run seed of `cel_seeds` (`CELConfig.seed`:
    the knockouts' draws and racing's example order)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.planted import PlantSpec, planted_model

    print("| heads | dtype | run seed | plants | size 1 found | size 2 found | size 3 found | "
          "screen + search s |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes:
        layers, heads = (int(x) for x in shape.split("x"))
        for cel_seed in cel_seeds:
            found = {d: [0, 0, 0] for d in dtypes}
            secs = {d: 0.0 for d in found}
            for seed in range(seeds):
                pm = planted_model(PlantSpec(n_layers=layers, n_heads=heads, seed=seed))
                for dtype in found:
                    rec = screen_and_search(
                        pm.model, pm.task, [], dtype,
                        out / f"planted_{shape}_{seed}_{dtype}_{cel_seed}", threads,
                        seed=cel_seed)
                    sets = chosen(rec)["sets"]
                    secs[dtype] += sum(rec["seconds"].values())
                    for k in (1, 2, 3):
                        found[dtype][k - 1] += sets.get(k) == pm.best.get(k)
            for dtype, f in found.items():
                print(f"| {layers * heads} | {dtype} | {cel_seed} | {seeds} | " + " | ".join(
                    f"{x}/{seeds}" for x in f) + f" | {secs[dtype]:.0f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="a load_model name or path")
    p.add_argument("--task", default="ioi")
    p.add_argument("--others", nargs="*", default=["induction"])
    p.add_argument("--order", nargs="+", default=["float32", "bfloat16"],
                   choices=["float32", "bfloat16"], help="the dtypes, in the order run")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default="/tmp/search_dtype")
    p.add_argument("--no-confirm", action="store_true",
                   help="skip the bfloat16 run's confirmation")
    p.add_argument("--spread", action="store_true", help="the tiny models' spread only")
    p.add_argument("--planted", nargs="*", default=None, metavar="LxH",
                   help="planted recall in float32 and bfloat16 on these shapes (e.g. 12x12 "
                   "24x16 32x32), --seeds plants each")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--run-seeds", type=int, nargs="+", default=[0],
                   help="--planted: the runs' seeds (CELConfig.seed), each over every plant")
    args = p.parse_args()
    if args.spread:
        spread()
        return
    if args.planted is not None:
        planted_recall(args.planted or ["12x12", "24x16", "32x32"], args.seeds, args.threads,
                       Path(args.out), tuple(dict.fromkeys(args.order)), tuple(args.run_seeds))
        return
    if args.model is None:
        p.error("--model is required (or --spread)")
    from workbench.loading import load_model
    from workbench.screening.screen import resolve_task

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    flags = cpu_flags()
    print(f"CPU bf16 flags: {sorted(f for f in CPU_BF16_FLAGS if f in flags) or 'none'}; "
          f"torch {torch.__version__} capability {torch.backends.cpu.get_cpu_capability()}; "
          f"{args.threads} threads; load {os.getloadavg()}", flush=True)
    model = load_model(args.model, device=args.device)
    task = resolve_task(args.task)
    others = [resolve_task(o) for o in args.others]
    records = []
    for r in range(args.rounds):
        for dtype in args.order:
            out = Path(args.out) / f"{dtype}_{r}"
            rec = screen_and_search(model, task, others, dtype, out, args.threads)
            rec.update(out=out, round=r)
            records.append(rec)
            s, f = rec["seconds"], rec["forward"]
            print(f"round {r} {dtype}: " + ", ".join(
                f"{st} {s[st]:.0f} s = {s[st] / f[st]:.1f} forward-times (forward {f[st]:.2f} s)"
                for st in STAGES) + f"; load {rec['load']:.1f}", flush=True)
    print("| dtype | rounds | screen s | search s | screen+search s | forward-times (median) |")
    print("|---|---|---|---|---|---|")
    medians = {}
    for dtype in dict.fromkeys(args.order):
        rs = [x for x in records if x["dtype"] == dtype]
        tot = [sum(x["seconds"].values()) for x in rs]
        ft = [sum(x["seconds"][st] / x["forward"][st] for st in STAGES) for x in rs]
        medians[dtype] = statistics.median(ft)
        print(f"| {dtype} | {len(rs)} | "
              + " | ".join(f"{statistics.median(x['seconds'][st] for x in rs):.0f}"
                           for st in STAGES)
              + f" | {statistics.median(tot):.0f} | {medians[dtype]:.1f} |")
    if len(medians) == 2:
        print(f"speed-up of screening + search in forward-times: "
              f"{medians['float32'] / medians['bfloat16']:.2f}x")
    last = {x["dtype"]: x for x in records}
    picks = {d: chosen(x) for d, x in last.items()}
    for key in ("sets", "pool", "candidates", "finalists"):
        for d, c in picks.items():
            value = c[key] if key in ("sets", "finalists") else f"{len(c[key])} heads"
            print(f"{d} {key}: {value}")
        if len(picks) == 2:
            a, b = (picks[d][key] for d in ("float32", "bfloat16"))
            print(f"  {key} equal: {a == b}"
                  + ("" if a == b or key == "sets" else
                     f" (only float32: {sorted(set(a) - set(b))}; only bfloat16: "
                     f"{sorted(set(b) - set(a))})"))
    if len(last) == 2:
        for m in ("logit_diff", "logprob", "accuracy"):
            mx, med, top = screening_spread(last["float32"], last["bfloat16"], m)
            print(f"screening d_{m}: |bf16 - f32| max {mx:.3g}, median {med:.3g} (largest "
                  f"|effect| {top:.3g})")
    if args.no_confirm:
        return
    same = len(picks) == 2 and picks["float32"]["sets"] == picks["bfloat16"]["sets"]
    for dtype in ("bfloat16",) if same or len(last) < 2 else tuple(last):
        t0 = time.perf_counter()
        result = pipeline.run_cel(model, task, others, search_dtype=dtype,
                                  out_dir=last[dtype]["out"], plots=False, progress=False,
                                  threads=args.threads)
        obj = result.config.objective
        print(f"{dtype} confirmation (resumed, {time.perf_counter() - t0:.0f} s):")
        cols = [c for c in ("size", "heads", f"select_d_{obj}", f"d_{obj}", f"d_{obj}_lo",
                            f"d_{obj}_hi", "p_holm", "percentile", "pool_percentile",
                            "d_accuracy", "gamed", "best")
                if c in result.confirmation]
        cols = list(dict.fromkeys(cols))
        print(result.confirmation[cols].to_string(index=False))
        CELResult.load(last[dtype]["out"])  # the folder is whole


if __name__ == "__main__":
    main()
