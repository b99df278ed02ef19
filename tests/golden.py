"""Golden results folders: what CEL wrote before the redesign of issue 31, frozen to the byte.

Each case runs CEL into a folder; its `heads`, `combos`, `confirmation`, `side_effects` and
`tradeoff` CSVs (the last since issue 35, which also added columns to the confirmation and
side-effects tables and left every earlier column unchanged), `tidy.csv` (since issue 33,
which also renamed three columns, two of them put on the percent scale (x 100), and left
every other number unchanged), `report.md` (less its timings line) and `config.json` (less
its timings, its task files by file name) must equal the frozen copies under
`tests/golden/<case>/` exactly: tolerance 0, so any change to a number, a column, an RNG
stream or the config's JSON is caught. `tests/test_golden.py` compares; `python -m
tests.golden` re-freezes (only for a change that is meant to alter results, said in its
commit).

The cases: the embedded main job (`workbench cel`, all defaults), and a tiny fixture model
(2 layers x 4 heads with MLPs and random biases) under zero, mean and resample ablation,
exact and attribution screening, racing on and off.

Floating-point sums differ in their last bits between CPU kernels (Intel and AMD MKL), so
the frozen bytes hold on the CPU they were made on: the folder records that CPU's
signature, and on another the test compares numbers to 1e-6 relative instead (a refactor
that changes a number changes it by far more; a kernel's reordered sum by ~1e-7).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
TABLES = ("heads.csv", "combos.csv", "confirmation.csv", "side_effects.csv", "tradeoff.csv",
          "tidy.csv")
SIGNATURE_FILE = "cpu.json"

# run_cel settings of the tiny cases: every stage runs, in seconds
# (one torch thread, as the goldens were frozen: sums split over threads round differently)
TINY = dict(max_size=2, top_m=4, n_random=30, n_boot=200, progress=False, plots=False,
            threads=1)
CASES = {
    "tiny_zero_exact": dict(kind="zero", method="exact"),
    "tiny_mean_exact": dict(kind="mean", method="exact"),
    "tiny_resample_exact": dict(kind="resample", method="exact"),
    "tiny_zero_attribution": dict(kind="zero", method="attribution"),
    "tiny_mean_attribution": dict(kind="mean", method="attribution"),
    "tiny_zero_exact_no_racing": dict(kind="zero", method="exact", adaptive=False),
    "tiny_mean_exact_no_racing": dict(kind="mean", method="exact", adaptive=False,
                                      strategies=("exhaustive", "greedy", "beam")),
}
MAIN_JOB = "embedded_main_job"


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
            **TINY, **CASES[name])
    return out


def report_text(path: Path) -> str:
    """report.md without its timings line (wall times differ run to run)."""
    lines = path.read_text().splitlines()
    return "\n".join(line for line in lines if not line.startswith("Timings (s):")) + "\n"


def config_text(path: Path) -> str:
    """config.json without its timings, and with the task files it records by file name only
    (their folders differ by checkout and temporary folder), as JSON text with sorted keys."""
    data = json.loads(path.read_text())
    data.pop("timings", None)
    summary = data.get("summary", {})
    if summary.get("task_file"):
        summary["task_file"] = Path(summary["task_file"]).name
    for name, file in summary.get("side_task_files", {}).items():
        summary["side_task_files"][name] = Path(file).name if file else file
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


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
