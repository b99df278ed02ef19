"""Benchmark: fit the estimate's likely cost (`workbench.estimate.LIKELY`) to finished runs.

For each results folder of a `workbench cel` run (its `config.json` records the config and the
run's `cost`), the model is loaded and the run prepared again from the recorded config (no
forward pass of the stages), and the pre-run estimate's low end of each stage, in plain
forwards, is set beside what the stage measured in forward-times (`cost.stages`). Their ratio
is the stage's factor; the fit is the geometric mean over the fitted runs, and each run is
checked against the fit of the others (leave-one-out), the spread a user should expect.

Runs that screened and searched in bfloat16 are listed but not fitted: the estimate scales
their stages by a forward timed on the copy, which these folders do not record. `--check`
folders are set against the fit without entering it (runs made after the fit).

    .venv/bin/python bench/estimate_fit.py --fit RUN_FOLDER ... [--check RUN_FOLDER ...]

Measured figures: docs/speed.md, "The likely cost".
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from pathlib import Path

from workbench.estimate import STAGES, likely_costs


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def fit_factors(ratios: list[dict[str, float]]) -> tuple[dict[str, float], list[dict]]:
    """Per stage, the geometric mean of the runs' `measured / low` ratios, and for each run
    its ratio over the geometric mean of the other runs' (leave-one-out; NaN with one run)."""
    factors = {s: geometric_mean([r[s] for r in ratios]) for s in STAGES}
    left_out = []
    for i, r in enumerate(ratios):
        others = [o for j, o in enumerate(ratios) if j != i]
        left_out.append({s: r[s] / geometric_mean([o[s] for o in others]) if others
                         else math.nan for s in STAGES})
    return factors, left_out


def stage_rows(folders: list[str]) -> list[dict]:
    """Each folder's model, task, forward and per stage the estimate's `(low, high)` plain
    forwards beside the measured forward-times; models loaded once each."""
    import torch

    from workbench.config import CELConfig
    from workbench.estimate import stage_costs
    from workbench.loading.model import load_model
    from workbench.pipeline import prepare_run
    from workbench.screening.screen import resolve_task

    torch.set_num_threads(1)
    by_model = defaultdict(list)
    for f in folders:
        record = json.loads((Path(f) / "config.json").read_text())
        if "cost" not in record:
            raise SystemExit(f"{f}: no cost record (a run made before `workbench cel` kept one)")
        by_model[record["config"]["model"]].append((f, record))
    rows = []
    for name, runs in by_model.items():
        model = load_model(name, device="cpu")
        for folder, record in runs:
            config = CELConfig.from_dict(record["config"])
            run = prepare_run(model, resolve_task(config.task),
                              others=[resolve_task(o) for o in config.others], config=config,
                              progress=False)
            parts = stage_costs(run)
            measured = record["cost"]["stages"]
            rows.append({
                "folder": folder, "model": name, "task": config.task,
                "search_dtype": config.search_dtype, "forward_s": record["cost"]["forward_s"],
                "forward_times": record["cost"]["forward_times"],
                **{s: {"low": parts[s][0], "high": parts[s][1],
                       "measured": measured[s]["forward_times"]} for s in STAGES}})
    return rows


def predicted(row: dict, factors: dict[str, float]) -> float:
    """The likely forward-times of a row's three stages (`workbench.estimate.likely_costs`,
    as `RunEstimate.likely` counts them)."""
    return sum(likely_costs({s: (row[s]["low"], row[s]["high"]) for s in STAGES},
                            factors).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", nargs="+", required=True, help="run folders to fit on")
    parser.add_argument("--check", nargs="*", default=[], help="run folders to check only")
    args = parser.parse_args()
    rows = stage_rows(args.fit + args.check)
    # rows come grouped by model: the folder says which list it came from
    fitted = [r for r in rows if r["folder"] in args.fit and r["search_dtype"] == "float32"]
    if not fitted:
        raise SystemExit("no float32 run to fit on")
    ratios = [{s: r[s]["measured"] / r[s]["low"] for s in STAGES} for r in fitted]
    factors, left_out = fit_factors(ratios)
    print("factors: " + ", ".join(f"{s} {factors[s]:.2f}" for s in STAGES))
    print("| run | model x task | dtype | forward s | " + " | ".join(
        f"{s} measured / low" for s in STAGES) + " | left out: measured / others' fit, per "
          "stage | three stages: likely ft | measured ft | measured / likely |")
    print("|---" * 9 + "|")
    loo = {id(r): lo for r, lo in zip(fitted, left_out, strict=True)}
    for r in rows:
        role = "fit" if id(r) in loo else "check"
        ratio = " | ".join(f"{r[s]['measured'] / r[s]['low']:.2f}" for s in STAGES)
        lo = ", ".join(f"{loo[id(r)][s]:.2f}" for s in STAGES) if id(r) in loo else ""
        likely = predicted(r, factors)
        got = sum(r[s]["measured"] for s in STAGES)
        print(f"| {Path(r['folder']).name} ({role}) | {r['model']} x {r['task']} | "
              f"{r['search_dtype']} | {r['forward_s']:.3g} | {ratio} | {lo} | {likely:.0f} | "
              f"{got:.0f} | {got / likely:.2f} |")


if __name__ == "__main__":
    main()
