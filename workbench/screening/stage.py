"""The screen stage of `run_cel`: the effect of removing each head alone, and the candidates.

`screen_stage` screens every head on the selection split (and on every side task, when
`side_screening` is on) with the config's method (`workbench.screening.registry`), at the
run's search precision (`CELRun.searcher`). An estimating method (attribution) is checked
against exact screening when `check_attribution` is on: their rank correlation and how far
they agree on the helpful heads go into the summary. The candidates, the heads whose single
removal helps beyond noise (`workbench.search.candidates.select_candidates`), are marked in
the table the search starts from.
"""

from __future__ import annotations

import pandas as pd
import torch

from workbench.errors import WorkbenchError
from workbench.screening.registry import get_method
from workbench.screening.screen import ScreenRace, ScreenScope, screen_heads, single_head_diffs
from workbench.search.candidates import candidate_heads, select_candidates
from workbench.search.registry import get_strategy
from workbench.stats import helpful_agreement, rank_correlation
from workbench.tables import head_name


def screen_stage(run, result, store=None) -> dict[str, pd.DataFrame]:
    """The single-head screening table of a prepared run (`workbench.pipeline.CELRun`), with
    the candidates marked: `{"heads": table}`. `store` is unused: the table is saved when
    the stage ends."""
    config = run.config
    race = ScreenRace(run.order[0], screen_race_rule(config.strategies))
    heads = screen_heads(run.searcher(), run.select, run.ablation, config.method,
                         ScreenScope(split=None),
                         others=run.others if config.side_screening else (),
                         metric=run.metric, stats=run.stats,
                         race_on=race if config.adaptive else None, compute=run.compute)
    result.summary.setdefault("forward_eq", {})["screen"] = heads.attrs.get("forward_eq", {})
    if not get_method(config.method).exact and config.check_attribution:
        # an estimate is checked against exact screening: rank correlation, helpful heads
        _, exact = single_head_diffs(run.searcher(), run.select, "exact", run.ablation,
                                     run.metric, compute=run.compute, desc="exact check")
        rho, agreement = {}, {}
        for m, d in exact.items():
            heads[f"exact_d_{m}"] = torch.nanmean(d, -1).cpu().numpy()
            rho[m] = rank_correlation(heads[f"d_{m}"], heads[f"exact_d_{m}"])
            exact_table = heads[["layer", "head"]].assign(**{f"d_{m}": heads[f"exact_d_{m}"]})
            agreement[m] = helpful_agreement(heads, exact_table, m)
        result.summary["attribution_rank_correlation"] = rho
        result.summary["attribution_agreement"] = agreement
    heads = select_candidates(heads, *run.order, config.top_m,
                              guards=[g for g in run.guards if g.on_main])
    result.summary["candidates"] = [head_name(*h) for h in candidate_heads(heads)]
    return {"heads": heads}


def check_heads(run, tables: dict[str, pd.DataFrame], folder) -> None:
    """A screening table read back from the results folder `folder` has one row per head of
    the run's model."""
    heads, cfg = tables["heads"], run.model.cfg
    n = cfg.n_layers * cfg.n_heads
    if len(heads) != n:
        raise WorkbenchError(f"{str(folder)!r}: heads.csv has {len(heads)} rows; this model has "
                             f"{n} heads")


def screen_race_rule(strategies) -> str:
    """What raced screening decides: the candidates' ranks (`"hurts"`) when a strategy
    searches among them (its record is `ranked`), else only the search pool (`"pool"`,
    `workbench.racing`)."""
    return "hurts" if any(get_strategy(s).ranked for s in strategies) else "pool"
