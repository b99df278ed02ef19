"""Benchmark: how a default CEL run's cost grows with the number of heads and of examples.

A run's cost is measured three ways, all in the same process:

- **wall** seconds of `run_cel` (setup, the three stages, the results folder; not the model's
  load nor the CLI's explanation);
- **forward-times**: wall over one clean float32 forward over the selection split, measured
  in the same process just before and just after the run (the smaller;
  `workbench.estimate.measure_forward`), so seconds of different machines compare;
- **forward-equivalents** (fwd-eq): every row that entered a block, over `L` x the
  selection split's rows (`bench/real.py`'s `count_blocks`): the forwards the run computed,
  whatever they cost on this machine.

Beside them, the pre-run estimate (`workbench.estimate.estimate_run`) of the same prepared run:
its forward-equivalents (racing's best case to none stopped) and its plain forwards (a
masked pass restarts at its layer), whose sum is its prediction of forward-times.

Cells (`--cells`): `embedded` (the main job: 16 heads, 600 selection examples, three side
tasks), `embedded@N` (the same on `--max-examples N`), `planted:LxH` and `planted:LxH@F`
(`bench/planted.py`'s planted model with real forward passes, F fillers: `4 F` selection
examples; every head is zero-ablated through the model, no analytic scores), and the real
models `smollm2-135m`, `gemma-3-270m` (ioi with induction beside it, every default;
15-40 minutes each on a loaded 2-core CPU). Each measured cell appends one JSON line to
`--record` (with the machine, its load, the threads and the date).

`--table` reads the records (and `DOCUMENTED`: figures measured elsewhere, each with its
source) and fits `cost = c * heads^a` over the cells at their own default example counts, and
`cost = c * examples^b` within one model over its `@N` cells, by least squares on the logs,
printing each point's residual (measured / fitted), then the predictions for 512 heads
(Llama-3.2-1B, 16 x 32) and 1024 (Llama-3-8B, 32 x 32).

    .venv/bin/python bench/scaling.py --cells embedded embedded@75 embedded@150 embedded@300 \
        planted:12x12 planted:24x16 planted:32x32 --record bench/scaling.jsonl
    .venv/bin/python bench/scaling.py --table --record bench/scaling.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout: bench.*

from bench.planted import PlantSpec, planted_model  # noqa: E402
from bench.real import Meter, count_blocks, metered  # noqa: E402
from workbench.estimate import estimate_run, measure_forward  # noqa: E402
from workbench.pipeline import prepare_run, run_prepared  # noqa: E402
from workbench.precision import CPU_BF16_FLAGS, cpu_flags  # noqa: E402
from workbench.screening.screen import resolve_task  # noqa: E402

STAGES = ("screen", "search", "confirm")
# Runs measured before this script, each with its source: the reference runs on an idle
# Intel Xeon with AMX (two threads), where `workbench cel` timed end to end (the model's
# load and the explanation included) and the run's header measured the forward; their
# forward-equivalents are those the same defaults counted on this project's AMD EPYC
# (`run_cel` only; docs/speed.md, docs/two-families.md).
DOCUMENTED = [
    {"cell": "smollm2-135m", "heads": 270, "n_select": 154, "wall_s": 452.0, "forward_s": 2.5,
     "fwd_eq": 212.8, "machine": "Intel Xeon (AMX, avx512_bf16), 2 threads, idle",
     "date": "2026-12-06", "source": "Xeon runs (wall, forward); docs/speed.md (fwd-eq)"},
    {"cell": "gemma-3-270m", "heads": 72, "n_select": 180, "wall_s": 437.0, "forward_s": 3.1,
     "fwd_eq": 169.5, "machine": "Intel Xeon (AMX, avx512_bf16), 2 threads, idle",
     "date": "2026-12-06", "source": "Xeon runs (wall, forward); docs/two-families.md (fwd-eq)"},
]
TARGETS = {"Llama-3.2-1B (16 x 32)": 512, "Llama-3-8B (32 x 32)": 1024}


def machine() -> str:
    """The CPU model and its bfloat16 flags, e.g. `AMD EPYC (avx512_bf16)`."""
    name = platform.processor() or "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    flags = [f for f in CPU_BF16_FLAGS if f in cpu_flags()]
    return f"{name} ({', '.join(flags) or 'no bf16 flags'})"


def cell_inputs(cell: str):
    """`(model, task, others, settings)` of a cell name (see the module docstring)."""
    name, _, at = cell.partition("@")
    settings = {"max_examples": int(at)} if at and not name.startswith("planted") else {}
    if name == "embedded":
        from workbench.loading import load_model
        from workbench.zoo import DEFAULT_TASK, SIDE_TASKS

        return (load_model("embedded", device="cpu"), resolve_task(DEFAULT_TASK),
                [resolve_task(t) for t in SIDE_TASKS], settings)
    if name.startswith("planted:"):
        layers, heads = (int(x) for x in name.split(":")[1].split("x"))
        fillers = int(at) if at else PlantSpec.n_fillers
        pm = planted_model(PlantSpec(n_layers=layers, n_heads=heads, n_fillers=fillers))
        return pm.model, pm.task, [], settings
    from workbench.loading import load_model

    return (load_model(name, device="cpu"), resolve_task("ioi"), [resolve_task("induction")],
            settings)


def measure(cell: str, threads: int) -> dict:
    """One default run of `cell`, metered: wall, forward, forward-times, fwd-eq, estimate."""
    model, task, others, settings = cell_inputs(cell)
    run = prepare_run(model, task, others, progress=False, threads=threads, **settings)
    with run.compute.threads_set():
        before = measure_forward(run)
        estimate = estimate_run(run)
    meter = Meter(len(run.select))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with metered(meter), count_blocks(model, meter):
        result = run_prepared(run, plots=False)
    wall = time.perf_counter() - t0
    with run.compute.threads_set():
        after = measure_forward(run)
    forward = min(before, after)
    cfg = model.cfg
    return {
        "cell": cell, "heads": cfg.n_layers * cfg.n_heads, "layers": cfg.n_layers,
        "n_select": len(run.select), "n_heldout": len(run.heldout),
        "wall_s": wall, "forward_s": forward, "forward_s_before_after": [before, after],
        "forward_times": wall / forward, "fwd_eq": meter.blocks,
        "stage_s": {s: result.timings.get(s, math.nan) for s in STAGES},
        "stage_fwd_eq": {s: meter.work.get(s, 0.0) for s in STAGES},
        "estimate_fwd_eq": {s: list(v) for s, v in estimate.forwards.items() if v},
        "estimate_forwards": {s: list(v) for s, v in estimate.costs.items() if v},
        "best": result.summary.get("best_heads", ""),
        "machine": machine(), "threads": threads, "load": [load, os.getloadavg()[0]],
        "torch": torch.__version__, "date": datetime.date.today().isoformat(),
    }


def estimate_only(cell: str, threads: int) -> dict:
    """The pre-run estimate of `cell`'s default run, without running it: forward-equivalents
    and plain forwards per stage (racing's best case, none stopped), and the forward."""
    model, task, others, settings = cell_inputs(cell)
    run = prepare_run(model, task, others, progress=False, threads=threads, **settings)
    with run.compute.threads_set():
        estimate = estimate_run(run)
    cfg = model.cfg
    return {"cell": cell, "heads": cfg.n_layers * cfg.n_heads, "n_select": len(run.select),
            "forward_s": estimate.seconds_per_forward,
            "estimate_fwd_eq": {s: list(v) for s, v in estimate.forwards.items() if v},
            "estimate_forwards": {s: list(v) for s, v in estimate.costs.items() if v},
            "line": estimate.line()}


def fit(x, y) -> tuple[float, float, list[float]]:
    """`(c, a, residuals)` of `y = c x^a` by least squares on the logs; a residual is
    measured / fitted."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    a, logc = np.polyfit(lx, ly, 1)
    return float(math.exp(logc)), float(a), [float(v) for v in np.exp(ly - (logc + a * lx))]


def line_fit(x, y) -> tuple[float, float]:
    """`(A, B)` of `y = A + B x` by least squares (each stage's masks grow linearly with the
    heads: screening one per head, the search's budget `2.5 n + 500`)."""
    b, a = np.polyfit(np.asarray(x, float), np.asarray(y, float), 1)
    return float(a), float(b)


def print_fit(label: str, xs, ys, names, unit: str, targets: dict | None = None,
              linear: bool = False) -> None:
    """The power law `c x^a` (and with `linear` the line `A + B x`), each point's residual
    (measured / fitted) and the predictions at `targets`."""
    if len(xs) < 2:
        print(f"{label}: fewer than two points")
        return
    c, a, res = fit(xs, ys)
    A, B = line_fit(xs, ys) if linear else (math.nan, math.nan)
    print(f"\n{label}: {unit} = {c:.3g} x^{a:.2f}"
          + (f"; linear: {A:.3g} + {B:.3g} x" if linear else "") + f" ({len(xs)} points)")
    print("| cell | x | measured | power law | measured / power law |"
          + (" line | measured / line |" if linear else ""))
    print("|---|---|---|---|---|" + ("---|---|" if linear else ""))
    for name, x, y, r in zip(names, xs, ys, res, strict=True):
        print(f"| {name} | {x} | {y:.1f} | {c * x ** a:.1f} | {r:.2f} |"
              + (f" {A + B * x:.1f} | {y / (A + B * x):.2f} |" if linear else ""))
    for what, x in (targets or {}).items():
        print(f"prediction for {what}: {c * x ** a:.0f} {unit} (power law)"
              + (f", {A + B * x:.0f} (line)" if linear else ""))


def table(records: list[dict]) -> None:
    """The measured cells, the estimate beside them, and the fits."""
    print("| cell | heads | selection examples | wall s | forward s | forward-times | fwd-eq "
          "| estimate fwd-eq | estimate plain forwards | fwd-eq / estimate's low forwards "
          "| machine, threads, load | date |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in records:
        est = r.get("estimate_fwd_eq")
        est_eq = (f"{sum(v[0] for v in est.values()):.0f}-{sum(v[1] for v in est.values()):.0f}"
                  if est else "")
        cost = r.get("estimate_forwards")
        est_ft = (f"{sum(v[0] for v in cost.values()):.0f}-"
                  f"{sum(v[1] for v in cost.values()):.0f}" if cost else "")
        low = f"{r['fwd_eq'] / sum(v[0] for v in cost.values()):.2f}" if cost else ""
        ft = r.get("forward_times", r["wall_s"] / r["forward_s"])
        load = r.get("load")
        where = r["machine"] + (f", {r['threads']} threads, load {load[0]:.1f}" if load else "")
        print(f"| {r['cell']} | {r['heads']} | {r['n_select']} | {r['wall_s']:.0f} | "
              f"{r['forward_s']:.3g} | {ft:.0f} | {r['fwd_eq']:.1f} | {est_eq} | {est_ft} | "
              f"{low} | {where} | {r['date']}{' (' + r['source'] + ')' if 'source' in r else ''} |")
    own = [r for r in records if "@" not in r["cell"]]
    real = [r for r in own if not r["cell"].startswith("planted")]
    print_fit("forward-times against heads, real models at their default examples",
              [r["heads"] for r in real],
              [r.get("forward_times", r["wall_s"] / r["forward_s"]) for r in real],
              [r["cell"] for r in real], "forward-times", TARGETS, linear=True)
    print_fit("forward-equivalents against heads, every model at its default examples",
              [r["heads"] for r in own], [r["fwd_eq"] for r in own], [r["cell"] for r in own],
              "fwd-eq", TARGETS)
    planted = [r for r in own if r["cell"].startswith("planted")]
    print_fit("forward-equivalents against heads, planted models (the same task and examples)",
              [r["heads"] for r in planted], [r["fwd_eq"] for r in planted],
              [r["cell"] for r in planted], "fwd-eq", TARGETS, linear=True)
    for stage in STAGES:
        rows = [r for r in planted if "stage_fwd_eq" in r]
        print_fit(f"planted models, {stage}", [r["heads"] for r in rows],
                  [r["stage_fwd_eq"][stage] for r in rows], [r["cell"] for r in rows],
                  "fwd-eq", TARGETS, linear=True)
    families = {r["cell"].split("@")[0] for r in records if "@" in r["cell"]}
    for family in sorted(families):
        rows = sorted((r for r in records if r["cell"].split("@")[0] == family),
                      key=lambda r: r["n_select"])
        for key, unit in (("wall_s", "wall s"), ("forward_times", "forward-times"),
                          ("fwd_eq", "fwd-eq")):
            print_fit(f"{family}: {unit} against selection examples",
                      [r["n_select"] for r in rows], [r[key] for r in rows],
                      [r["cell"] for r in rows], unit)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cells", nargs="*", default=[])
    p.add_argument("--record", default="bench/scaling.jsonl",
                   help="JSON lines of measured cells: appended to, read by --table")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--table", action="store_true", help="print the table and the fits")
    p.add_argument("--estimate", nargs="*", default=[], metavar="CELL",
                   help="print the pre-run estimate of these cells' default runs (no run)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    for cell in args.cells:
        row = measure(cell, args.threads)
        print(json.dumps(row), flush=True)
        with open(args.record, "a") as f:
            f.write(json.dumps(row) + "\n")
    for cell in args.estimate:
        print(json.dumps(estimate_only(cell, args.threads)), flush=True)
    if args.table:
        path = Path(args.record)
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] \
            if path.is_file() else []
        table([*records, *DOCUMENTED])


if __name__ == "__main__":
    main()
