"""Benchmark: how far a run's numbers move between one and two torch threads, on real models.

`--threads auto` picks the thread count from the cores idle when a run starts. Whether it may
change that count while a run goes on depends on one question: does a different count change
any number beyond float rounding? This runs the same `workbench cel --quick` job on each model
twice, in processes of their own, on 1 and on 2 threads (everything else equal and seeded),
and compares the two results folders as `bench/golden_spread.py` compares a golden case under
another kernel path: for each table and numeric column the largest absolute difference, in
float32 ulps of the scale the goldens' cross-CPU bound uses (`tests.golden.run_scale`); whether
any decision (head names, sets, flags, counts) or any report text moved; and how many numbers
of `report.md` moved, by units of their last printed digit.

    python -m bench.thread_spread --models smollm2-135m gemma-3-270m --out /tmp/threads
    python -m bench.thread_spread --from /tmp/threads       # compare folders already run

Load does not change rounding, so the figures hold on a busy machine; the times printed do not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.golden_spread import report_spread, table_spread  # noqa: E402
from tests.golden import OTHER_CPU_ULPS, TABLES, report_text, run_scale  # noqa: E402

THREADS = (1, 2)


def run(model: str, threads: int, out: Path, task: str) -> float:
    """One `workbench cel --quick` run into `out`, in its own process; its wall time."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cmd = [sys.executable, "-m", "workbench", "cel", "--model", model, "--task", task,
           "--quick", "--threads", str(threads), "--out", str(out), "--overwrite"]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{model} on {threads} threads failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def pair_spread(a: Path, b: Path) -> dict:
    """How far folder `b` is from folder `a` (module docstring)."""
    cfg = json.loads((a / "config.json").read_text())
    scale = run_scale(cfg)
    out = {"run_scale": scale, "tables": {}, "decisions": [], "worst_ulps": 0.0,
           "worst_where": ""}
    for table in TABLES:
        if (a / table).exists() != (b / table).exists():
            out["decisions"].append(f"{table} exists in one folder only")
        elif (a / table).exists():
            spread = table_spread((b / table).read_text(), (a / table).read_text(), scale)
            out["tables"][table] = spread
            out["decisions"] += [f"{table}:{c}" for c in spread["decision_changed"]]
            for col, figs in spread["numeric"].items():
                if figs["ulps"] > out["worst_ulps"]:
                    out["worst_ulps"], out["worst_where"] = figs["ulps"], f"{table}:{col}"
    # without the timings and the environment line, which differ by design
    out["report"] = report_spread(report_text(b / "report.md"), report_text(a / "report.md"),
                                  scale)
    if not out["report"]["text_same"]:
        out["decisions"].append("report.md text")
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| model | tables that moved | worst ulps (where) | bound (ulps) | decisions moved "
             "| report.md numbers moved (max units of last digit) | seconds on 1 / 2 threads |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["spread"]
        moved = sum(1 for t in s["tables"].values() if t["numeric"] or t["decision_changed"])
        lines.append(
            f"| {r['model']} | {moved} of {len(s['tables'])} | {s['worst_ulps']:.3g} "
            f"({s['worst_where'] or '-'}) | {OTHER_CPU_ULPS} | {len(s['decisions'])} "
            f"| {s['report']['moved']} ({s['report']['units']:.3g}) "
            f"| {r.get('seconds', {}).get('1', float('nan')):.0f} / "
            f"{r.get('seconds', {}).get('2', float('nan')):.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    parser.add_argument("--task", default="ioi")
    parser.add_argument("--out", type=Path, default=Path("thread_spread"))
    parser.add_argument("--from", dest="existing", type=Path, default=None,
                        help="compare the folders of an earlier --out instead of running")
    args = parser.parse_args(argv)
    folder = args.existing or args.out
    rows = []
    models = args.models if args.existing is None else sorted(
        p.name for p in folder.iterdir() if (p / "t1").is_dir())
    for model in models:
        seconds = {}
        if args.existing is None:
            for t in THREADS:
                seconds[str(t)] = run(model, t, folder / model / f"t{t}", args.task)
                print(f"{model}: {t} thread(s) took {seconds[str(t)]:.0f} s", flush=True)
            (folder / model / "seconds.json").write_text(json.dumps(seconds))
        elif (folder / model / "seconds.json").exists():
            seconds = json.loads((folder / model / "seconds.json").read_text())
        spread = pair_spread(folder / model / "t1", folder / model / "t2")
        rows.append({"model": model, "spread": spread, "seconds": seconds})
        print(json.dumps({"model": model, "decisions": spread["decisions"],
                          "worst_ulps": spread["worst_ulps"], "where": spread["worst_where"],
                          "report": spread["report"]}), flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
