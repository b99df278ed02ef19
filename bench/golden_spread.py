"""Benchmark: how far other CPU kernels move the golden results folders (`tests/golden.py`).

The goldens hold to the byte only on the CPU that froze them (`tests/golden/cpu.json`); on
another CPU, MKL and torch's vectorised kernels sum float32 in another order and the last
bits move. No second CPU is at hand, so this emulates one on this machine: it re-runs every
golden case under kernel variants that reorder float32 sums, each in its own process (the
variables below are read when torch and MKL load):

- `aten-avx2`, `aten-default`: `ATEN_CPU_CAPABILITY`, torch's own vectorised kernels
  (softmax, layer norm, reductions, elementwise) at AVX2 width or unvectorised. The
  unvectorised `normal_` draws other last bits, so under `aten-default` the tiny cases'
  random model itself differs (its fingerprint, in the config block, too): a CPU without
  AVX2 would fail the goldens' config check, as it should (another model);
- `mkl-avx2`: `MKL_ENABLE_INSTRUCTIONS=AVX2`, MKL's GEMM without AVX-512;
- `mkl-cbwr-avx2`, `mkl-cbwr-compatible`: `MKL_CBWR`, MKL's reproducible code paths
  (AVX2, and the SSE2 one an unknown CPU gets);
- `onednn-avx2`: `ONEDNN_MAX_CPU_ISA=AVX2`, oneDNN's kernels;
- `threads-2`: two torch threads instead of one (a sum split over threads);
- `all`: AVX2 everywhere (torch, MKL's both settings, oneDNN) and two threads at once.

`frozen` runs with the environment unchanged: it must reproduce the goldens to the byte,
else the comparison measures something other than kernels. Each variant's line says whether
it changed any byte at all: one that changed none emulates nothing (on an AMD CPU MKL takes
its AVX2 path already, so `mkl-avx2` is such a one).

For each case, table and numeric column it reports the largest absolute difference from the
frozen copy, in float32 ulps (`eps32 = 2**-23` times a scale) of three scales:

- `ulps`: of the scale `tests/golden.py`'s other-CPU comparison uses, the larger of the
  column's largest |value| in the frozen table and the run's largest |clean metric|
  (`run_scale`: log-probs and logit differences of a few units). An effect is a difference
  of means of per-example log-probs, logits and probabilities, and carries their float32
  rounding however small it is itself; so this is the figure the bound
  (`tests.golden.OTHER_CPU_ULPS`) is set from;
- `column's`: of the column's largest |value| alone. On the tiny model, whose effects are
  all near 1e-3, the kernels move a column by hundreds of these;
- `value's own`: of |value| itself, per value (the Intel run's 1e-8 on values near 1e-4
  read as 1.2e-4 relative, ~1000 of these, but ~0.02 `ulps`).

It also says whether any decision column (strings, booleans, counts: `column_kind`) or
p-value / percentile column changed at all; whether report.md changed beyond its numbers
(its text with the numbers masked), and by how many units of their last printed digit its
numbers moved (and how many `ulps` beyond one such unit); whether config.json's `config`
block changed, how far its other numbers moved (in `ulps`, the largest number beside each as
the column) and whether anything else in it changed but the tables' digests; and whether
each case passes `tests.golden.folder_problems(..., same_cpu=False)`, the comparison
`tests/test_golden.py` makes on another CPU.

    python -m bench.golden_spread                        # every variant, every case
    python -m bench.golden_spread --variants frozen aten-avx2 --cases tiny_zero_exact
    python -m bench.golden_spread --json spread.json     # also every column's figures
    python -m bench.golden_spread --keep /tmp/spread     # keep the folders; a rerun with the
                                                         # same --keep only analyses them

About 35 s per variant on one thread (the embedded main job is most of it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.golden import (  # noqa: E402
    CASES,
    EPS32,
    GOLDEN_DIR,
    MAIN_JOB,
    OTHER_CPU_ULPS,
    TABLES,
    column_kind,
    column_scale,
    config_text,
    folder_problems,
    mask_numbers,
    printed_unit,
    read_table,
    report_text,
    run_case,
    run_scale,
)

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2"}
# name: (environment variables, torch threads)
VARIANTS = {
    "frozen": ({}, 1),
    "aten-avx2": ({"ATEN_CPU_CAPABILITY": "avx2"}, 1),
    "aten-default": ({"ATEN_CPU_CAPABILITY": "default"}, 1),
    "mkl-avx2": ({"MKL_ENABLE_INSTRUCTIONS": "AVX2"}, 1),
    "mkl-cbwr-avx2": ({"MKL_CBWR": "AVX2"}, 1),
    "mkl-cbwr-compatible": ({"MKL_CBWR": "COMPATIBLE"}, 1),
    "onednn-avx2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, 1),
    "threads-2": ({}, 2),
    "all": (AVX2, 2),
}
CLEARED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", *AVX2)


def run_child(out: Path, threads: int, cases: list[str]) -> None:
    """In the child process: run `cases` into `out/<case>/` as the golden test does, but on
    `threads` torch threads, keeping the files the goldens keep."""
    import tests.golden as golden
    import workbench.cli

    golden.TINY["threads"] = threads
    cli_main = workbench.cli.main

    def main(argv):  # run_case pins the main job to `--threads 1`
        argv = list(argv)
        argv[argv.index("--threads") + 1] = str(threads)
        return cli_main(argv)

    workbench.cli.main = main
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            got = run_case(case, Path(tmp) / case)
            dest = out / case
            dest.mkdir(parents=True)
            for table in TABLES:
                if (got / table).exists():
                    shutil.copyfile(got / table, dest / table)
            (dest / "report.md").write_text(report_text(got / "report.md"))
            (dest / "config.json").write_text(config_text(got / "config.json"))


def run_variant(name: str, cases: list[str], folder: Path) -> Path:
    """Run the child for variant `name` in its own process, into `folder/name`; return it."""
    env_vars, threads = VARIANTS[name]
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(env_vars)
    env["PYTHONPATH"] = str(ROOT)
    out = folder / name
    cmd = [sys.executable, "-m", "bench.golden_spread", "--child", str(out),
           "--threads", str(threads), "--cases", *cases]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"variant {name} failed:\n{done.stderr[-3000:]}")
    return out


def ulps(diff: float, scale: float) -> float:
    """`diff` in float32 ulps of `scale`."""
    return diff / (EPS32 * scale) if scale else (math.inf if diff else 0.0)


def table_spread(got_text: str, want_text: str, run: float) -> dict:
    """Per column of one table: how far `got` is from `want` (see the module's doc)."""
    import numpy as np

    got, want = read_table(got_text), read_table(want_text)
    out = {"numeric": {}, "decision_changed": [], "stat_changed": []}
    if list(got.columns) != list(want.columns) or len(got) != len(want):
        out["decision_changed"].append("<columns or rows>")
        return out
    for col in want.columns:
        kind = column_kind(col, want[col])
        if kind == "decision":
            if got[col].astype(str).tolist() != want[col].astype(str).tolist():
                out["decision_changed"].append(col)
            continue
        a, b = got[col].to_numpy(float), want[col].to_numpy(float)
        if (np.isnan(a) != np.isnan(b)).any():
            out["decision_changed"].append(f"{col} (NaN)")
            continue
        ok = ~np.isnan(b)
        diff, ref = np.abs(a[ok] - b[ok]), b[ok]
        if not len(diff) or diff.max() == 0:
            continue
        if kind == "stat":
            out["stat_changed"].append(col)
        scale = column_scale(want[col])
        moved = diff > 0
        out["numeric"][col] = {
            "kind": kind, "max_abs": float(diff.max()), "scale": scale,
            "ulps_column": ulps(float(diff.max()), scale),
            "ulps": ulps(float(diff.max()), max(scale, run)),
            "ulps_value": float(max(ulps(d, abs(w)) for d, w in zip(diff[moved], ref[moved],
                                                                     strict=True))),
            "n_moved": int(moved.sum())}
    return out


def report_spread(got: str, want: str, run: float) -> dict:
    """report.md: is its text the same with the numbers masked; how many numbers moved, by
    how many units of their last printed digit, and by how many ulps of the bound's scale
    beyond one such unit."""
    (got_text, got_nums), (want_text, want_nums) = mask_numbers(got), mask_numbers(want)
    if got_text != want_text or len(got_nums) != len(want_nums):
        return {"text_same": False, "moved": 0, "units": 0.0, "ulps_beyond": 0.0,
                "integers_moved": 0}
    pairs = [(g, w) for g, w in zip(got_nums, want_nums, strict=True) if g != w]
    units, beyond, integers = [], [], 0
    for g, w in pairs:
        x, y, unit = float(g), float(w), min(printed_unit(g), printed_unit(w))
        units.append(abs(x - y) / unit)
        beyond.append(ulps(max(abs(x - y) - unit, 0.0), max(abs(x), abs(y), run)))
        integers += printed_unit(g) == printed_unit(w) == 1
    return {"text_same": True, "moved": len(pairs), "units": max(units, default=0.0),
            "ulps_beyond": max(beyond, default=0.0), "integers_moved": integers}


def json_spread(got, want, run: float, scale: float = 0.0, path: str = "") -> list:
    """config.json: (path, ulps of the bound's scale) of each float that moved, and
    (path, inf) of anything else that changed (the scale as `json_problems` takes it)."""
    if isinstance(want, float) or isinstance(got, float):
        try:
            if math.isnan(got) and math.isnan(want) or got == want:
                return []
            return [(path, ulps(abs(got - want), max(scale, run)))]
        except TypeError:
            return [(path, math.inf)]
    if isinstance(got, dict) and isinstance(want, dict) and list(got) == list(want):
        pairs = [(f"{path}.{k}", got[k], want[k]) for k in want]
    elif isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        pairs = [(f"{path}[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want, strict=True))]
    else:
        return [] if got == want else [(path, math.inf)]
    inner = max((abs(w) for _, _, w in pairs if isinstance(w, float) and math.isfinite(w)),
                default=0.0)
    return [m for where, g, w in pairs for m in json_spread(g, w, run, inner, where)]


def folder_spread(out: Path, case: str) -> dict:
    want = GOLDEN_DIR / case
    want_cfg = json.loads((want / "config.json").read_text())
    got_cfg = json.loads((out / "config.json").read_text())
    run = run_scale(want_cfg)
    result = {"run_scale": run, "bytes_changed": [], "tables": {}}
    for name in (*TABLES, "report.md", "config.json"):
        if (want / name).exists() and (out / name).read_bytes() != (want / name).read_bytes():
            result["bytes_changed"].append(name)
    for table in TABLES:
        if (want / table).exists():
            result["tables"][table] = table_spread((out / table).read_text(),
                                                   (want / table).read_text(), run)
    result["report"] = report_spread((out / "report.md").read_text(),
                                     (want / "report.md").read_text(), run)
    result["config_same"] = got_cfg["config"] == want_cfg["config"]
    for cfg in (got_cfg, want_cfg):
        cfg.pop("config")
        for entry in cfg.get("files", {}).values():
            entry.pop("sha256", None)  # digests of the tables' bytes, which moved
            entry.pop("inputs", None)
    result["json_moved"] = json_spread(got_cfg, want_cfg, run)
    result["problems"] = folder_problems(out, case, same_cpu=False)
    return result


def print_variant(name: str, spread: dict) -> dict:
    """Print one variant's findings; return its totals."""
    changed = [c for c, r in spread.items() if r["bytes_changed"]]
    print(f"\n== {name}: bytes changed in {len(changed)} of {len(spread)} cases"
          + ("" if changed else " (emulates nothing)"))
    worst = {"max_abs": 0.0, "ulps": 0.0, "ulps_column": 0.0, "decisions": 0, "stats": 0,
             "report_text": 0, "report_units": 0.0, "report_ulps": 0.0, "config": 0,
             "json_ulps": 0.0, "json_other": 0, "failed": 0}
    for case, r in spread.items():
        for table, t in r["tables"].items():
            for col, c in sorted(t["numeric"].items(), key=lambda kv: -kv[1]["ulps"]):
                for key in ("max_abs", "ulps", "ulps_column"):
                    worst[key] = max(worst[key], c[key])
                print(f"  {case}/{table} {col}: max |d| {c['max_abs']:.3g} = {c['ulps']:.3g} "
                      f"ulps of max(column {c['scale']:.3g}, run {r['run_scale']:.3g}) "
                      f"({c['ulps_column']:.3g} of the column's, {c['ulps_value']:.3g} of the "
                      f"value's own; {c['n_moved']} moved)")
            for col in t["decision_changed"]:
                worst["decisions"] += 1
                print(f"  {case}/{table} DECISION CHANGED: {col}")
            for col in t["stat_changed"]:
                worst["stats"] += 1
                print(f"  {case}/{table} p-value/percentile changed: {col}")
        rep = r["report"]
        if not rep["text_same"]:
            worst["report_text"] += 1
            print(f"  {case}/report.md TEXT CHANGED (beyond numbers)")
        elif rep["moved"]:
            worst["report_units"] = max(worst["report_units"], rep["units"])
            worst["report_ulps"] = max(worst["report_ulps"], rep["ulps_beyond"])
            print(f"  {case}/report.md: {rep['moved']} printed numbers moved ("
                  f"{rep['integers_moved']} integers), at most {rep['units']:.3g} units of "
                  f"their last digit, {rep['ulps_beyond']:.3g} ulps beyond one unit")
        if not r["config_same"]:
            worst["config"] += 1
            print(f"  {case}/config.json CONFIG BLOCK CHANGED")
        floats = [u for _, u in r["json_moved"] if math.isfinite(u)]
        for path, u in r["json_moved"]:
            if not math.isfinite(u):
                worst["json_other"] += 1
                print(f"  {case}/config.json NON-NUMBER CHANGED: {path}")
        if floats:
            worst["json_ulps"] = max(worst["json_ulps"], max(floats))
            print(f"  {case}/config.json: {len(floats)} numbers moved, at most "
                  f"{max(floats):.3g} ulps")
        if r["problems"]:
            worst["failed"] += 1
            print(f"  {case}: FAILS the other-CPU comparison: {r['problems'][:3]}")
    print(f"  -> worst: max |d| {worst['max_abs']:.3g}, {worst['ulps']:.3g} ulps of the bound's"
          f" scale ({worst['ulps_column']:.3g} of a column's own); decisions changed "
          f"{worst['decisions']}, p/percentile columns changed {worst['stats']}; report: "
          f"text changed {worst['report_text']}, numbers <= {worst['report_units']:.3g} "
          f"printed units and {worst['report_ulps']:.3g} ulps beyond one; config blocks "
          f"changed {worst['config']}, config.json numbers <= {worst['json_ulps']:.3g} ulps, "
          f"other changes {worst['json_other']}; cases failing the other-CPU comparison "
          f"{worst['failed']}")
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--cases", nargs="+", default=[MAIN_JOB, *CASES])
    parser.add_argument("--json", type=Path, help="write every variant's figures here")
    parser.add_argument("--keep", type=Path, help="keep each variant's folders here "
                        "(<keep>/<variant>/<case>), and analyse any already there instead "
                        "of running that variant again")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.child, args.threads, args.cases)
        return 0
    results, totals = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants:
            out = (args.keep or Path(tmp)) / name
            if not all((out / case / "config.json").exists() for case in args.cases):
                shutil.rmtree(out, ignore_errors=True)
                run_variant(name, args.cases, out.parent)
            results[name] = {case: folder_spread(out / case, case) for case in args.cases}
            totals[name] = print_variant(name, results[name])
            sys.stdout.flush()
    print(f"\n{'variant':20s} {'max |d|':>9s} {'ulps':>6s} {'col ulps':>8s} {'decisions':>9s} "
          f"{'p/pct':>5s} {'report':>6s} {'config':>6s} {'json':>5s} {'fails':>5s}")
    for name, w in totals.items():
        print(f"{name:20s} {w['max_abs']:9.3g} {w['ulps']:6.3g} {w['ulps_column']:8.3g} "
              f"{w['decisions']:9d} {w['stats']:5d} {w['report_ulps']:6.3g} {w['config']:6d} "
              f"{w['json_ulps']:5.3g} {w['failed']:5d}")
    print(f"(ulps: of max(column's largest |value|, run's largest |clean metric|); the bound "
          f"is {OTHER_CPU_ULPS})")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "totals": totals}, indent=1,
                                        default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
