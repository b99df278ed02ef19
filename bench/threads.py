"""Benchmark: torch's CPU threads for a whole `workbench cel`, to choose `--threads`' default.

Runs the same command (by default the main job, `workbench cel` on the embedded model with
its defaults, into a fresh folder each time) with each thread count of `--threads`, in
interleaved rounds (the order alternates from round to round, so a change of the machine's
load falls on every setting alike), each in its own process as a user would run it, and
prints per run and as medians over the rounds:

- `wall_s`: the command's wall time, start-up and model loading included;
- `cpu_s`: the CPU time of the process (user + system, `resource.RUSAGE_CHILDREN`);
- `stages_s`: the run's own timings of its stages (setup, screen, search, confirm), from
  its `config.json`;
- `load_before`: the machine's 1-minute load average when the run started (`os.getloadavg`),
  so a reader can tell an idle machine from a shared one;
- `idle_before`: the cores idle just before the run, measured as `--threads auto` measures
  them (`workbench.environment.sample_idle_cores`), and `auto`, the threads it would take.

Every run must print the same results (the held-out table is compared): threads change
speed, never numbers.

    .venv/bin/python bench/threads.py                      # 1 vs 2 threads, 3 rounds
    .venv/bin/python bench/threads.py --threads 1 2 4 --rounds 5 --csv threads.csv
    .venv/bin/python bench/threads.py -- --model smollm2-135m --task ioi --quick
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from workbench.environment import idle_threads, sample_idle_cores  # noqa: E402

STAGES = ("setup", "screen", "search", "confirm")


def run_once(threads: int, extra: list[str], folder: Path) -> dict:
    """One `workbench cel` in a child process with `--threads threads`; its times and the
    held-out table it printed."""
    out = folder / f"t{threads}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "workbench", "cel", "--out", str(out), "--quiet",
           "--threads", str(threads), *extra]
    # torch reads OMP_NUM_THREADS at import: leave it unset so --threads alone decides
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT)
    load = os.getloadavg()[0]
    idle = sample_idle_cores()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    timings = json.loads((out / "config.json").read_text())["timings"]
    table = done.stdout[done.stdout.find(" size"):done.stdout.find("held-out enhancement")]
    return {
        "threads": threads,
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        **{f"{s}_s": timings.get(s, float("nan")) for s in STAGES},
        "load_before": load,
        "idle_before": idle[0] if idle else float("nan"),
        "auto": idle_threads(idle[1], idle[0]).threads if idle else float("nan"),
        "table": table.strip(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], metavar="N")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--csv", default=None, help="also write the per-run rows here")
    p.add_argument("extra", nargs="*", help="after --: options of `workbench cel`")
    args = p.parse_args()
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()} at the start; "
          f"command: workbench cel {' '.join(args.extra) or '(the main job)'}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        for r in range(args.rounds):
            order = args.threads if r % 2 == 0 else args.threads[::-1]
            for t in order:
                row = {"round": r, **run_once(t, args.extra, Path(tmp))}
                rows.append(row)
                print(f"round {r} threads {t}: wall {row['wall_s']:.1f} s, cpu "
                      f"{row['cpu_s']:.1f} s, load before {row['load_before']:.2f}, idle cores "
                      f"{row['idle_before']:.2f} (auto: {row['auto']})", flush=True)
    tables = {row["table"] for row in rows}
    df = pd.DataFrame(rows).drop(columns="table")
    print()
    print(df.to_string(index=False, float_format="{:.1f}".format))
    medians = df.groupby("threads").median(numeric_only=True).drop(columns="round")
    print("\nmedians over rounds:")
    print(medians.to_string(float_format="{:.1f}".format))
    print(f"\nload average over the runs: {statistics.mean(df['load_before']):.2f} (min "
          f"{df['load_before'].min():.2f}, max {df['load_before'].max():.2f}); every run "
          f"printed {'the same' if len(tables) == 1 else 'DIFFERENT'} held-out table")
    if args.csv:
        df.to_csv(args.csv, index=False)
    if len(tables) != 1:
        raise SystemExit("threads changed the results")


if __name__ == "__main__":
    main()
