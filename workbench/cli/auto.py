"""The run's `auto` choices that depend on the loaded model or on the folder it resumes:
`--racing auto` (`decide_racing`) and `--search-dtype auto` (`resolves_search_dtype`).
`workbench.cli.commands` imports this module once the model is loaded (it imports torch)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workbench import distributed, racing  # racing.auto_racing: tests replace it
from workbench.options import SearchDtype
from workbench.results.store import read_run_file
from workbench.scoring.scorer import MaskScorer


def decide_racing(run, resumed: Path | None) -> str | None:
    """`--racing auto`: `run.config.adaptive` from a first slice measured on a GPU
    (`workbench.racing.auto_racing`), or a resumed folder's choice; the line to print."""
    if resumed is not None:
        on, why = bool(read_run_file(resumed)["config"].get("adaptive", True)), None
    else:
        scorer = MaskScorer(run.model, run.select, compute=run.compute.replace(progress=False))
        on, why = racing.auto_racing(scorer, distributed.is_distributed())
    run.config = dataclasses.replace(run.config, adaptive=on)
    return why


def resolves_search_dtype(options: dict, resumed: Path | None) -> bool:
    """Whether `options` (`run_cel` settings) ask for `--search-dtype auto` and a fresh run
    resolves it (`workbench.pipeline.prepare_run`); under `auto` a resumed run (`resumed`: its
    folder) takes the folder's choice instead, set into `options` (float32 where the folder's
    config has no `search_dtype`)."""
    if SearchDtype.parse(options.get("search_dtype", SearchDtype.FLOAT32)) is not SearchDtype.AUTO:
        return False
    if resumed is None:
        return True
    options["search_dtype"] = str(read_run_file(resumed)["config"].get("search_dtype",
                                                                         "float32"))
    return False
