"""The confirm stage of `run_cel`: the held-out confirmation, resumable from its last finished size.

`confirm_stage` re-scores the best set of each size on the held-out split against its random
baselines and measures its side effects (`workbench.confirmation.confirm.confirm_size`), then
draws the trade-off table's sets per size (`tradeoff_rows`). A size's rows depend only on
the config, the model, the tasks and the search's table (the random sets are drawn per size
and seed), so the stage saves its finished sizes as it goes: after each size's set, random
baselines and side effects, and after each size of the trade-off table, a checkpoint
(`workbench.results.store.ResultStore.save_partial`, recorded with the inputs of the
confirmation table). A rerun after an interrupt takes up the sizes saved and computes the rest;
every row is built from the values the checkpoint holds (`json_values`), whether it was just
computed or read back, so a resumed run writes the same bytes as an uninterrupted one
(`tests/confirmation/test_stage.py`). The Holm corrections across sizes, the best set and the
summary are computed once every size is in.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import pandas as pd
import torch

from workbench.confirmation.baseline import BaselineRace
from workbench.confirmation.confirm import (
    ConfirmPlan,
    check_groups,
    cluster_labels,
    confirm_size,
    finish_confirmation,
)
from workbench.confirmation.tradeoff import TRADEOFF_COLUMNS, tradeoff_rows
from workbench.guards import labels
from workbench.heads import HeadSet
from workbench.precision import lowers
from workbench.results.result import flagged_heads, mark_best
from workbench.results.store import json_values, stage_inputs
from workbench.scoring.scorer import Scorer, masks_of
from workbench.search.candidates import best_sets, closest_infeasible, search_pool, set_record
from workbench.tasks.encoding import encode_task

STAGE = "confirm"  # the checkpoint's name (`confirm.partial.json`)


def score_means(scores: dict[str, torch.Tensor]) -> dict[str, float]:
    """Each metric's mean over the examples (NaN-skipping), as floats."""
    return {m: float(torch.nanmean(v.float())) for m, v in scores.items()}


def rescored_gains(scorer: Scorer, sets: Mapping[int, object], objective: str,
                   release: bool = True) -> dict[int, float]:
    """size -> each set's mean objective gain on every example of `scorer`'s split, one mask
    per set: after a search at a lower precision (`CELConfig.search_dtype`) the selection
    gains a confirmation reports, measured on the model as loaded."""
    clean = scorer.clean()[objective]
    scores = scorer.score(masks_of(scorer.model, list(sets.values())))[objective]
    if release:
        scorer.release()
    return {size: float(torch.nanmean((scores[i] - clean).float()))
            for i, size in enumerate(sets)}


class _Checkpoint:
    """The sizes a confirmation finished, saved to and read from the results folder."""

    def __init__(self, store, run, result) -> None:
        self.store, self.result, self.started = store, result, time.perf_counter()
        self.inputs = (stage_inputs("confirmation", run.config.to_dict(), store.files)
                       if store is not None and store.folder is not None else None)
        data = store.load_partial(STAGE, self.inputs) if self.inputs is not None else None
        data = data or {}
        self.confirm = {int(e["size"]): (e["row"], e["side"]) for e in data.get("confirm", [])}
        self.tradeoff = {int(e["size"]): e["rows"] for e in data.get("tradeoff", [])}
        self.before = float(data.get("seconds", 0.0))  # spent on this stage by earlier runs
        if data:
            result.timings[STAGE] = result.timings.get(STAGE, 0.0) + self.before

    def save(self) -> None:
        if self.inputs is None:
            return
        data = {"confirm": [{"size": s, "row": r, "side": side}
                            for s, (r, side) in sorted(self.confirm.items())],
                "tradeoff": [{"size": s, "rows": rows}
                             for s, rows in sorted(self.tradeoff.items())],
                "seconds": self.before + time.perf_counter() - self.started}
        self.store.save_partial(self.result.run_file(), STAGE, self.inputs, data)


def confirm_stage(run, result, store=None) -> dict[str, pd.DataFrame]:
    """The confirm stage of a prepared run (`workbench.pipeline.CELRun`) whose `result` holds the
    search's table: held-out confirmation of the best set of each size, side effects, and the
    trade-off table (`workbench.confirmation.tradeoff.tradeoff_table`). With `store` (an open
    `workbench.results.store.ResultStore`), each finished size is saved as it goes and the
    sizes saved by an interrupted run are taken up (module docstring).

    Returns:
        `{"confirmation": ..., "side_effects": ..., "tradeoff": ...}` (the last two empty
        without side tasks); `result.summary` gets the counts, the clean scores, the best set
        and the significant sizes.
    """
    config, combos = run.config, result.combos
    sets, best_size = best_sets(combos, *run.order, config.max_size)
    # each set's gain over the most selection examples it was scored on (a set raced out on
    # a first slice and scored again later has a slice row too)
    select_gains = {size: float(set_record(combos, names)[f"d_{config.objective}"])
                    for size, names in sets.items()}
    if lowers(run.model, config.search_dtype):  # the search's numbers chose; report exact ones
        select_gains = rescored_gains(run.scorer(run.select, run.means), sets, config.objective)
    heldout = run.scorer(run.heldout, run.means)
    others = {}
    for name, task in run.others.items():
        data = encode_task(run.model, task)
        others[name] = run.scorer(data, run.means_of(data))
    # in run order (a summary read back from an interrupted run's config.json has its keys
    # sorted, and the report lists them in this order)
    summary = result.summary
    summary["n_examples"] = {"select": summary["n_examples"]["select"],
                             "heldout": len(run.heldout),
                             **{n: len(s.data) for n, s in others.items()}}
    summary["clean"] = {"select": summary["clean"]["select"],
                        "heldout": score_means(heldout.clean()),
                        **{n: score_means(s.clean()) for n, s in others.items()}}
    groups = {"heldout": cluster_labels(run.heldout, config.cluster),
              **{n: cluster_labels(s.data, config.cluster) for n, s in others.items()}}
    result.summary["clustered"] = {n: g is not None for n, g in groups.items()}
    head_sets = {s: HeadSet.of(run.model, n) for s, n in sets.items()}
    pool = search_pool(result.heads, run.order[0], second=run.order[1],
                       guards=[g for g in run.guards if g.on_main])
    other_groups = {n: g for n, g in groups.items() if n != "heldout" and g is not None}
    plan = ConfirmPlan(config.objective, config.secondary, best_size, select_gains,
                       config.n_random, run.stats, pool, groups["heldout"], other_groups,
                       BaselineRace(config.adaptive, config.adaptive and config.random_looks,
                                    config.baseline_examples), run.guards)
    check_groups(plan)
    saved = _Checkpoint(store, run, result)
    for size, head_set in sorted(head_sets.items()):
        if size not in saved.confirm:
            saved.confirm[size] = json_values(confirm_size(heldout, size, head_set, others,
                                                           plan))
            saved.save()
    rows = [saved.confirm[s][0] for s in sorted(head_sets)]
    confirmation, side_effects = finish_confirmation(
        rows, [side for s in sorted(head_sets) for side in saved.confirm[s][1]])
    # the random sets drawn into the trade-off: a quarter of the baseline, at most
    # `tradeoff_sets`, so that a quick run (few random sets) stays quick
    for size, head_set in sorted(head_sets.items()):
        if size not in saved.tradeoff:
            saved.tradeoff[size] = json_values(tradeoff_rows(
                heldout, others, size, head_set, plan,
                n_sets=min(config.tradeoff_sets, config.n_random // 4)))
            if others:  # without side tasks there is no trade-off to save
                saved.save()
    tradeoff = pd.DataFrame([r for s in sorted(head_sets) for r in saved.tradeoff[s]],
                            columns=list(TRADEOFF_COLUMNS))
    for scorer in (heldout, *others.values()):
        scorer.release()
    alpha = 1.0 - config.ci
    confirmation = mark_best(confirmation, config.objective, alpha)
    for key, column in (("best_heads", "best"), ("top_candidate", "top_candidate")):
        result.summary[key] = ",".join(flagged_heads(confirmation, column))
    significant = [int(r.size) for r in confirmation.itertuples() if r.p_holm < alpha]
    result.summary["significant_sizes"] = significant
    if run.guards:  # the guards' held-out verdict (`workbench.guards`)
        result.summary["guards"] = labels(run.guards)
        result.summary["passing_sizes"] = [int(r.size) for r in confirmation.itertuples()
                                           if r.guarded_p_holm < alpha]
        result.summary["infeasible"] = closest_infeasible(combos, run.guards, config, sets)
    result.summary["gamed_sizes"] = [int(r.size) for r in confirmation.itertuples() if r.gamed]
    result.summary["alpha"] = alpha
    return {"confirmation": confirmation, "side_effects": side_effects, "tradeoff": tradeoff}
