"""What a run cost, in forward-times: the whole run and each stage's share.

A forward-time is wall time over one clean forward of the selection split, both measured in
the same process (`workbench.estimate.measure_forward`: the forward the estimate line prints,
and again when the run ends; the faster counts, since on a shared machine one measurement of
SmolLM2's forward read 5.0 s where the runs beside it read 3.4 s). Seconds do not compare
across machines (the same command took 866 s on one 2-core
CPU and 452 s on another); forward-times do, to the extent the machine's speed scales every
pass alike.

`run_cost` builds `config.json`'s `cost` record from the stages' seconds:

- `load`: importing torch, loading the model and the tasks (the command line's share before
  `workbench.pipeline.prepare_run`; a model given to `run_cel` from Python was loaded before
  the run, so its cost has none);
- `setup`, `screen`, `search`, `confirm`: the pipeline's stages (`CELResult.timings`,
  accumulated over resumed runs; setup runs from `prepare_run` on: encoding the tasks, the
  estimate's forward, the clean pass);
- `explain`: the explanation of the best set (`workbench.explain.stage`);
- `report`: the rest of the wall time (tables, plots, `report.md`, `view.html`, and the
  forward measured again at the end). The report stage (`workbench.results.stage`) records
  the cost of every run with a results folder, from Python as from the command line.

    {"forward_s": 3.6, "seconds": 209.0, "forward_times": 58.1,
     "stages": {"screen": {"seconds": 61.0, "forward_times": 16.9, "share": 0.29}, ...}}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from workbench.errors import WorkbenchError

# the stages in run order: the command's load, then `workbench.pipeline.STAGES` (a test keeps
# them equal); a stage the run did not time is left out
STAGES = ("load", "setup", "screen", "search", "confirm", "explain", "report")


def run_cost(seconds: Mapping[str, float], forward_s: float | Sequence[float],
             likely: Mapping[str, float] | None = None) -> dict:
    """The `cost` record of a run whose stages took `seconds` (`{stage: s}`, names from
    `STAGES`), measured where one clean forward of the selection split took `forward_s`: one
    measurement, or several (at the run's start and at its end), of which the fastest counts
    (a burst of another job on a shared machine slows a measurement, not the machine) and
    all are recorded (`forwards_s`). `likely`: the pre-run estimate's likely seconds per
    stage (`workbench.estimate.RunEstimate.likely`), recorded beside what the stages took
    (`likely_s`), so a run checks the prediction it printed."""
    measured = [float(forward_s)] if isinstance(forward_s, (int, float)) else \
        [float(f) for f in forward_s]
    if not measured or not all(f > 0 and math.isfinite(f) for f in measured):
        raise WorkbenchError(f"a forward's seconds must be positive and finite; got {forward_s}")
    forward_s = min(measured)
    _check_stages(seconds)
    total = float(sum(max(0.0, float(s)) for s in seconds.values()))
    stages = {}
    for name in STAGES:
        if name in seconds:
            s = max(0.0, float(seconds[name]))
            stages[name] = {"seconds": round(s, 3), "forward_times": round(s / forward_s, 2),
                            "share": round(s / total, 4) if total > 0 else 0.0}
    record = {"forward_s": float(f"{forward_s:.6g}"), "seconds": round(total, 3),
              "forward_times": round(total / forward_s, 2), "stages": stages}
    if len(measured) > 1:
        record["forwards_s"] = [float(f"{f:.6g}") for f in measured]
    if likely:
        _check_stages(likely)
        record["likely_s"] = {k: round(float(v), 1) for k, v in likely.items()}
    return record


def _check_stages(names) -> None:
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        raise WorkbenchError(f"unknown stages {unknown}; expected some of {list(STAGES)}")


def cost_line(cost: Mapping) -> str:
    """One line: `cost: 58.1 forward-times (3.5 min; a forward took 3.6 s here): screen 29 %,
    ...` (stages under half a percent left out)."""
    stages = cost["stages"]  # in run order (config.json sorts its keys)
    parts = [f"{name} {stages[name]['share'] * 100:.0f} %" for name in STAGES
             if name in stages and stages[name]["share"] >= 0.005]
    likely = cost.get("likely_s")
    said = ""
    if likely:  # the stages the estimate predicted, against what they took
        took = sum(stages[k]["seconds"] for k in likely if k in stages)
        said = (f"; {', '.join(likely)} took {_seconds(took)}, the estimate said likely "
                f"{_seconds(sum(likely.values()))}")
    return (f"cost: {cost['forward_times']:.1f} forward-times ({_seconds(cost['seconds'])}; a "
            f"forward over the selection split took {cost['forward_s']:.3g} s here): "
            + ", ".join(parts) + said)


def _seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def stage_seconds(timings: Mapping[str, float], *, load: float, explain: float, wall: float,
                  before: float = 0.0) -> dict[str, float]:
    """`run_cost`'s `{stage: seconds}` for a run: `load` (before the first stage), the
    pipeline's `timings` (which hold `before` seconds recorded by earlier runs of a resumed
    folder), `explain`, and `report`: the rest of this process's `wall` time."""
    now = float(sum(timings.values())) - before  # the stages' seconds in this process
    return {"load": load, **timings, "explain": explain,
            "report": max(0.0, wall - load - explain - now)}

