"""Golden results folders: what CEL wrote before the package was regrouped, frozen to the byte.

Each case runs CEL into a folder; its `heads`, `combos`, `confirmation`, `side_effects` and
`tradeoff` CSVs (the last since the trade-off table came, which also added columns to the
confirmation and side-effects tables and left every earlier column unchanged), `tidy.csv`
(since tables say what they rest on, which also renamed three columns, two of them put on the
percent scale (x 100), and left every other number unchanged), `report.md` (less its timings
line and, since runs record their environment, the environment line under it; in the
attribution cases re-frozen once, when its single-head section came to name attribution's
numbers as estimates beside the measured `exact_d_*`: no number of it changed; in the main
job re-frozen once, when its explanation section came to name each quantity as the rest of
the folder does (`mean_logit_diff`, the set's `d_<metric>` as the confirmation gives it) and
to give `dla_diff` its interval: only that section's text changed) and
`config.json` (less its timings and environment, its task files by file
name) must equal the frozen copies under
`tests/golden/<case>/` exactly on the CPU that froze them: tolerance 0, so any change to a
number, a column, an RNG stream or the config's JSON is caught. `tests/test_golden.py`
compares; `python -m tests.golden` re-freezes (only for a change that is meant to alter
results, said in its commit).

The cases: the embedded main job (`workbench cel`, all defaults), and a tiny fixture model
(2 layers x 4 heads with MLPs and random biases) under zero, mean and resample ablation,
exact and attribution screening, racing on and off.

Floating-point sums differ in their last bits between CPU kernels (Intel and AMD MKL), so
the frozen bytes hold on the CPU they were made on: the folder records that CPU's
signature, and on another `folder_problems(..., same_cpu=False)` compares instead:

- decisions exactly: every string (heads, head names, tasks, metrics), boolean (candidate,
  best, gamed, ...) and count (`n`, every `*_n*` and `n_*` column, size, layer, head,
  candidate_rank), and where a value is missing (NaN);
- every other number (effects, intervals, means; p-values, percentiles and the random
  baselines' shares and costs too, which are made of counts) to `OTHER_CPU_ULPS` float32
  ulps of its scale: the larger of its column's largest |value| in the frozen table and the
  run's largest |clean metric| (`run_scale`). An effect is a difference of means of
  per-example log-probs, logits and probabilities, so it carries their rounding however
  small it is itself: on the tiny model, whose effects are near 1e-3, other kernels moved
  numbers by up to 1200 ulps of their column's own scale but at most 1.3 of this one;
- report.md: its text with the numbers masked exactly (every word, head name, flag and
  table cell that is not a number), its integers exactly, its other numbers to one unit in
  their last printed digit (a rounding flip) plus the same bound;
- config.json: the `config` block (a run's identity: a rerun resumes only on an equal one)
  and every non-number of the rest exactly (best heads, candidates, significant sizes,
  splits, the tables' row counts), its numbers to the same bound, the tables' digests not
  (`sha256`, and `inputs`, which hashes the config with the earlier tables' sha256): the
  tables themselves are compared.

`OTHER_CPU_ULPS` is `bench/golden_spread.py`'s measured spread with a safety factor: run on
the freezing CPU under kernels that reorder float32 sums (torch's AVX2 and unvectorised
kernels, MKL's and oneDNN's AVX2 and SSE2 paths, two threads, all at once), every case
stayed within 4.5 ulps of that scale (oneDNN's AVX2 path, and all at once) and no decision,
p-value or percentile moved; 16 is 3.6x that (docs/tolerances.md has each path's figure; the
Intel run that failed the former 1e-6 relative check moved values near 1e-4 of
heads.csv by 1e-8: 0.01 of these ulps). It is far below a real change: in the embedded job
(bound 1.2e-5 to 1.7e-5) one example of an accuracy (1/1200 at the least), one count of a
p-value (1e-4), one tie of a percentile and 1e-4 relative on an effect near 1 all fail; in
the tiny cases (bound 6.8e-6, their sums being of size 3.6) 1e-3 relative on their largest
effects, near 1e-2, fails (`tests/test_golden.py` tests both ways).
"""

from __future__ import annotations

import io
import json
import math
import platform
import re
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
TABLES = ("heads.csv", "combos.csv", "confirmation.csv", "side_effects.csv", "tradeoff.csv",
          "tidy.csv", "frontier.csv")
SIGNATURE_FILE = "cpu.json"

# run_cel settings of the tiny cases: every stage that makes a table runs, in seconds
# (one torch thread, as the goldens were frozen: sums split over threads round differently)
# The tiny cases were frozen before `run_cel` explained the best set, so they run without the
# explanation (`explain=False`, the command line's `--no-explain`). The tiny task's objective
# is `logit_diff`, a difference, so its runs would be guarded by default
# (`workbench.guards`): the cases frozen before guards existed run without them (`guards=()`,
# the command line's `--no-guard`), and `tiny_zero_exact_guarded` freezes a guarded run
# (side-task guard and tolerances included, rule `no_fall`: on this random model 15 of its 74
# sets pass, so every part of the guarded search and confirmation runs).
TINY = dict(max_size=2, top_m=4, n_random=30, n_boot=200, progress=False, plots=False,
            threads=1, guards=(), explain=False)
CASES = {
    "tiny_zero_exact": dict(kind="zero", method="exact"),
    "tiny_mean_exact": dict(kind="mean", method="exact"),
    "tiny_resample_exact": dict(kind="resample", method="exact"),
    "tiny_zero_attribution": dict(kind="zero", method="attribution"),
    "tiny_mean_attribution": dict(kind="mean", method="attribution"),
    "tiny_zero_exact_no_racing": dict(kind="zero", method="exact", adaptive=False),
    "tiny_mean_exact_no_racing": dict(kind="mean", method="exact", adaptive=False,
                                      strategies=("exhaustive", "greedy", "beam")),
    "tiny_zero_exact_guarded": dict(kind="zero", method="exact", guard_rule="no_fall",
                                    guards=("main:accuracy:0.05", "main:logprob:0.05",
                                            "side:accuracy:0.1")),
}
MAIN_JOB = "embedded_main_job"

EPS32 = 2.0 ** -23  # float32's machine epsilon: one ulp of a number in [1, 2)
# On another CPU a number may move by OTHER_CPU_ULPS float32 ulps of its scale (`tolerance`):
# 3.6x the most that bench/golden_spread.py measured under other kernels, MEASURED_ULPS
MEASURED_ULPS = 4.48
OTHER_CPU_ULPS = 16
# columns that hold decisions or counts although they are numbers (besides every column
# with an `n` word in its name: `n`, `d_accuracy_n`, `n_random`, `gain_n`, ...)
DECISION_COLUMNS = {"layer", "head", "size", "candidate_rank"}


def cpu_signature() -> dict:
    """What decides the last bits of a CPU forward here: the CPU model and torch's kernels."""
    import torch

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        model = platform.processor()
    return {"cpu": model, "torch": torch.__version__.split("+")[0],
            "capability": torch.backends.cpu.get_cpu_capability()}


def tiny_inputs(folder: Path):
    """The tiny case's model and tasks: a main task with counterfactual prompts (for
    resample ablation) and groups, and one side task, written as JSONL into `folder`."""
    import numpy as np

    from tests.helpers import randomize_biases, tiny_model

    model = tiny_model(attn_only=False, seed=1, device="cpu")  # the goldens are the CPU's
    randomize_biases(model, seed=1)
    rng = np.random.default_rng(7)
    folder.mkdir(parents=True, exist_ok=True)

    def write(name: str, n: int, length: int, groups: bool) -> Path:
        lines = [json.dumps({"task": {"name": name, "metric": "logit_diff"}})]
        for i in range(n):
            words = [f"w{int(j)}" for j in rng.integers(0, 20, size=length)]
            cf = [f"w{int(j)}" for j in rng.integers(0, 20, size=length)]
            ex = {"id": f"{name}{i}", "prompt": " ".join(words), "answer": words[0],
                  "wrong": [f"w{(int(words[0][1:]) + 3) % 20}"], "counterfactual": " ".join(cf),
                  "split": "select" if i % 2 else "heldout"}
            if groups:
                ex["group"] = f"g{i % 10}"
            lines.append(json.dumps(ex))
        path = folder / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        return path

    return model, write("main", 48, 5, True), write("side", 24, 4, False)


def run_case(name: str, out: Path) -> Path:
    """Run golden case `name` into the results folder `out`; return it."""
    import torch

    torch.manual_seed(0)
    if name == MAIN_JOB:
        from workbench.cli.parser import main

        # the CPU's goldens, on one thread
        code = main(["cel", "--out", str(out), "--quiet", "--device", "cpu", "--threads", "1"])
        if code != 0:
            raise RuntimeError(f"workbench cel exited {code}")
        return out
    from workbench.pipeline import run_cel
    from workbench.tasks.task import load_task

    model, main_path, side_path = tiny_inputs(out.parent / f"{name}_tasks")
    run_cel(model, load_task(main_path), others=[load_task(side_path)], out_dir=out,
            **{**TINY, **CASES[name]})
    return out


# report.md's lines that differ by run and machine: the timings and, under them, the
# environment they were measured on (threads, versions, CPU: `workbench.environment`)
VOLATILE_REPORT_LINES = ("Timings (s):", "Environment:")


def report_text(path: Path) -> str:
    """report.md without its timings and environment lines (wall times, threads and the
    machine differ run to run)."""
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith(VOLATILE_REPORT_LINES)) + "\n"


def config_text(path: Path) -> str:
    """config.json without its timings, environment and cost (they differ by run and machine), and
    with the task files it records by file name only (their folders differ by checkout and temporary
    folder), as JSON text with sorted keys."""
    data = json.loads(path.read_text())
    data.pop("timings", None)
    data.pop("environment", None)
    data.pop("cost", None)
    summary = data.get("summary", {})
    if summary.get("task_file"):
        summary["task_file"] = Path(summary["task_file"]).name
    for name, file in summary.get("side_task_files", {}).items():
        summary["side_task_files"][name] = Path(file).name if file else file
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


# ---- comparing a folder with its frozen copy ------------------------------------------


def read_table(text: str):
    """A results table's CSV text as a DataFrame, its floats parsed exactly as written."""
    import pandas as pd

    return pd.read_csv(io.StringIO(text), float_precision="round_trip")


def column_kind(name: str, frozen) -> str:
    """What column `name` (its frozen values `frozen`, a Series) holds: `decision` (strings,
    booleans, counts, sizes, ranks: exact on any CPU), `stat` (p-values, percentiles, the
    random baselines' shares and costs: numbers made of counts) or `number` (effects,
    intervals, means: float32 sums). Both of the last are held to the same bound, far
    below one count's step."""
    import pandas as pd

    words = name.split("_")
    if (not pd.api.types.is_numeric_dtype(frozen) or pd.api.types.is_bool_dtype(frozen)
            or name in DECISION_COLUMNS or "n" in words):
        return "decision"
    if {"p", "percentile", "pct"} & set(words) or name.endswith("forward_eq"):
        return "stat"
    return "number"


def column_scale(frozen) -> float:
    """A numeric column's largest |value| in its frozen copy (0 where it has none)."""
    import numpy as np

    values = np.abs(frozen.to_numpy(float))
    values = values[np.isfinite(values)]
    return float(values.max()) if len(values) else 0.0


def run_scale(config: dict) -> float:
    """The size of the per-example numbers a run's float32 sums add up: the largest |clean
    metric| over its splits and tasks (config.json's summary; log-probs of a few nats, logit
    differences). Every effect is a difference of means of such numbers."""
    clean = config.get("summary", {}).get("clean", {})
    values = [abs(v) for metrics in clean.values() for v in metrics.values()
              if isinstance(v, (int, float)) and math.isfinite(v)]
    return max(values, default=1.0)


def tolerance(scale: float, run: float) -> float:
    """How far another CPU may move a number of scale `scale` in a run of scale `run`."""
    return OTHER_CPU_ULPS * EPS32 * max(scale, run)


def table_problems(got: str, want: str, *, same_cpu: bool, run: float) -> list[str]:
    """How the CSV text `got` of a results table differs from its frozen copy `want`: on the
    freezing CPU any byte; on another a decision column's value, or a number by more than
    `tolerance` (the module's doc). Empty where they agree."""
    if same_cpu:
        return [] if got == want else ["differs from the frozen copy"]
    import numpy as np

    a, b = read_table(got), read_table(want)
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"columns or rows differ: {list(a.columns)} x {len(a)} against "
                f"{list(b.columns)} x {len(b)}"]
    problems = []
    for col in b.columns:
        if column_kind(col, b[col]) == "decision":
            rows = np.flatnonzero(a[col].astype(str).to_numpy() != b[col].astype(str).to_numpy())
            problems += [f"{col} row {i}: {a[col].iloc[i]!r} against {b[col].iloc[i]!r}"
                         for i in rows[:3]]
            continue
        try:
            x = a[col].to_numpy(float)
        except (TypeError, ValueError):
            problems.append(f"{col}: not numbers")
            continue
        y = b[col].to_numpy(float)
        bound = tolerance(column_scale(b[col]), run)
        with np.errstate(invalid="ignore"):
            bad = (np.isnan(x) != np.isnan(y)) | (np.abs(x - y) > bound)
        problems += [f"{col} row {i}: {x[i]!r} against {y[i]!r} (bound {bound:.3g})"
                     for i in np.flatnonzero(bad)[:3]]
    return problems


def report_problems(got: str, want: str, *, same_cpu: bool, run: float) -> list[str]:
    """How report.md's text `got` differs from its frozen copy `want`: on the freezing CPU
    any byte; on another any text with the numbers masked, any integer, and any other number
    by more than one unit in its last printed digit plus `tolerance`."""
    if same_cpu:
        return [] if got == want else ["differs from the frozen copy"]
    (got_text, got_nums), (want_text, want_nums) = mask_numbers(got), mask_numbers(want)
    if got_text != want_text or len(got_nums) != len(want_nums):
        lines = [f"{g!r} against {w!r}" for g, w in
                 zip(got_text.splitlines(), want_text.splitlines(), strict=False) if g != w]
        return ["text differs beyond its numbers: " + (lines[0] if lines else "length")]
    problems = []
    for g, w in zip(got_nums, want_nums, strict=True):
        if g == w:
            continue
        x, y = float(g), float(w)
        unit_g, unit_w = printed_unit(g), printed_unit(w)
        integers = unit_g == unit_w == 1 and "." not in g + w and "e" not in (g + w).lower()
        if integers or abs(x - y) > min(unit_g, unit_w) + tolerance(max(abs(x), abs(y)), run):
            problems.append(f"number {g} against {w}")
    return problems


def json_problems(got, want, run: float, scale: float = 0.0, path: str = "") -> list[str]:
    """How the JSON value `got` differs from `want`: any non-number and any integer exactly,
    a float by more than `tolerance(scale, run)`; inside an object or list, `scale` is the
    largest |float| among its values."""
    if isinstance(want, float) or isinstance(got, float):
        if (isinstance(got, (int, float)) and isinstance(want, (int, float))
                and not isinstance(got, bool) and not isinstance(want, bool)
                and math.isnan(got) == math.isnan(want)
                and not abs(got - want) > tolerance(scale, run)):
            return []
        return [f"{path}: {got!r} against {want!r}"]
    if isinstance(got, dict) and isinstance(want, dict):
        if list(got) != list(want):
            return [f"{path}: keys {sorted(got)} against {sorted(want)}"]
        pairs = [(f"{path}.{k}", got[k], want[k]) for k in want]
    elif isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items against {len(want)}"]
        pairs = [(f"{path}[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want, strict=True))]
    else:
        same = got == want and type(got) is type(want)
        return [] if same else [f"{path}: {got!r} against {want!r}"]
    inner = max((abs(w) for _, _, w in pairs if isinstance(w, float) and math.isfinite(w)),
                default=0.0)
    return [p for where, g, w in pairs for p in json_problems(g, w, run, inner, where)]


def config_problems(got: str, want: str, *, same_cpu: bool, run: float) -> list[str]:
    """How config.json's text `got` (as `config_text` writes it) differs from its frozen
    copy `want`: on the freezing CPU any byte; on another its `config` block, any non-number
    or a number by more than `tolerance` (the tables' digests left out)."""
    if same_cpu:
        return [] if got == want else ["differs from the frozen copy"]
    a, b = json.loads(got), json.loads(want)
    if a.get("config") != b.get("config"):
        return ["the config block differs"]
    for data in (a, b):
        for entry in data.get("files", {}).values():
            entry.pop("sha256", None)  # digests of the tables, compared themselves
            entry.pop("inputs", None)  # the config and the earlier tables' sha256
    return json_problems(a, b, run)


def folder_problems(out: Path, case: str, *, same_cpu: bool) -> list[str]:
    """Every way the results folder `out` of golden case `case` differs from its frozen
    copy (the comparisons above, `same_cpu` choosing which); empty where it is reproduced."""
    want = GOLDEN_DIR / case
    run = run_scale(json.loads((want / "config.json").read_text()))
    problems = []
    for table in TABLES:
        if (out / table).exists() != (want / table).exists():
            problems.append(f"{table}: exists {(out / table).exists()} against "
                            f"{(want / table).exists()}")
        elif (want / table).exists():
            problems += [f"{table}: {p}" for p in table_problems(
                (out / table).read_text(), (want / table).read_text(), same_cpu=same_cpu,
                run=run)]
    problems += [f"report.md: {p}" for p in report_problems(
        report_text(out / "report.md"), (want / "report.md").read_text(), same_cpu=same_cpu,
        run=run)]
    problems += [f"config.json: {p}" for p in config_problems(
        config_text(out / "config.json"), (want / "config.json").read_text(),
        same_cpu=same_cpu, run=run)]
    return problems


# a number standing alone in report.md's text (not the 1 and 0 of `L1H0`, nor the 288 of
# `'map'x288`: those are text)
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w]|\.\d)")


def mask_numbers(text: str) -> tuple[str, list[str]]:
    """`text` with each number replaced by `#`, and the numbers as written."""
    return NUMBER.sub("#", text), NUMBER.findall(text)


def printed_unit(number: str) -> float:
    """One unit in the last printed digit of `number` as written (`0.2633`: 1e-4,
    `9.999e-05`: 1e-8, `600`: 1)."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def freeze(names=None) -> None:
    """Re-run every case (or `names`) and store its files under `tests/golden/`."""
    import shutil
    import tempfile

    GOLDEN_DIR.mkdir(exist_ok=True)
    (GOLDEN_DIR / SIGNATURE_FILE).write_text(json.dumps(cpu_signature(), indent=1) + "\n")
    for name in names or [MAIN_JOB, *CASES]:
        with tempfile.TemporaryDirectory() as tmp:
            out = run_case(name, Path(tmp) / name)
            dest = GOLDEN_DIR / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            for table in TABLES:
                if (out / table).exists():
                    shutil.copyfile(out / table, dest / table)
            (dest / "report.md").write_text(report_text(out / "report.md"))
            (dest / "config.json").write_text(config_text(out / "config.json"))
        print(f"froze {name}")


if __name__ == "__main__":
    freeze(sys.argv[1:] or None)
