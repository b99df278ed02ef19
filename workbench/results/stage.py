"""The report stage of `run_cel`: `report.md`, `view.html` and what the run cost.

It runs last, once every table and the explanation are in the results folder, so that
`report.md` is written once, with the explanation's section when the explain stage wrote one
(`workbench.results.report.write_report`, plots included when the run writes them), then
`view.html` (`workbench.results.view`). Then the cost (`workbench.results.cost`): a forward
over the selection split is timed again (the faster of it and the estimate's counts), and
`config.json` records each stage's share, this stage's being the rest of the wall time. A
run without a results folder writes nothing and records no cost; under torchrun only rank 0
records one.
"""

from __future__ import annotations

import time

from workbench import distributed
from workbench.results.cost import run_cost, stage_seconds
from workbench.results.view import write_view


def report_stage(run, result, store) -> dict:
    """Write `report.md` and `view.html` into a prepared run's results folder (`store`, open
    and locked) and record `result.cost` in its `config.json`. Writes no result table:
    returns `{}`."""
    folder = store.folder
    if folder is None:
        return {}
    result.write_report(folder, run.plots)
    write_view(folder)  # view.html: the tables and plots, offline
    if run.estimate is None or not distributed.is_main():
        return {}
    again = run.forward_seconds()  # the faster of the two counts (a burst slows one)
    now = time.perf_counter()
    # from the command's start where it loaded the model (its `load` stage), else from
    # `prepare_run`: a model given to `run_cel` was loaded before the run
    start = run.started if run.launched is None else run.launched
    before = sum(((store.previous or {}).get("timings") or {}).values())  # earlier runs'
    seconds = stage_seconds(result.timings, load=run.started - start,
                            explain=run.seconds.get("explain", 0.0), wall=now - start,
                            before=float(before))
    if run.launched is None:
        del seconds["load"]
    result.cost = run_cost(seconds, (run.estimate.seconds_per_forward, again),
                           run.estimate.likely)
    store.save(result.run_file())
    return {}
