"""The search stage of `run_cel`: head sets scored jointly on the selection split.

`search_stage` builds one `SearchSpace` (`workbench.search.space`) over the candidates that
screening marked (`search_space`) and runs the config's strategies in it
(`workbench.search.registry`), each with its own settings dataclass, built from the config's
fields and `CELConfig.strategy_settings` (`Strategy.settings_of`). The knockouts that only
rank heads run on the run's search precision (`CELRun.searcher`); the sets are compared on
the model as loaded. Its scoring calls are saved as they go (`workbench.search.replay`), so
a rerun after an interrupt replays them instead of computing them again. Side-task guards
are checked on each side task's own selection split, ablated with the means over its own
prompts.
"""

from __future__ import annotations

import pandas as pd

from workbench.search.candidates import candidate_heads, search_pool
from workbench.search.registry import get_strategy
from workbench.search.replay import SearchCheckpoint
from workbench.search.space import SearchSpace
from workbench.tasks.encoding import encode_task


def search_stage(run, result, store=None) -> dict[str, pd.DataFrame]:
    """Every head set the strategies scored on the selection split of a prepared run
    (`workbench.pipeline.CELRun`) whose `result` holds the screening table:
    `{"combos": table}`. With `store` (an open `workbench.results.store.ResultStore`), its
    scoring calls are saved as they go and an interrupted run's are replayed."""
    config = run.config
    with SearchCheckpoint(store, config.to_dict(), result) as saved:
        space = search_space(run, result, saved)
        for name in config.strategies:
            strategy = get_strategy(name)
            strategy(space, strategy.settings_of(config))
        for used in filter(None, (space.scorer, space.ranker)):
            used.release()
        side_guards = [g for g in run.guards if not g.on_main]
        if side_guards:  # the best sets' side-task guards, on each side task's selection split
            space.check_side_guards(side_guards, {g.task: saved.wrap(
                run.scorer(*_side_split(run, g.task, "select")), g.task)
                for g in side_guards})
    result.summary.update(space.notes)
    result.summary.setdefault("forward_eq", {})["search"] = space.forward_eq
    result.timings["search"] = result.timings.get("search", 0.0) + saved.seconds  # earlier runs'
    # a lower-precision copy is not needed past the search (only a stage that runs the search
    # builds it: the estimate and screening build it only when the search is still to run)
    run.searcher_model = None
    return {"combos": pd.DataFrame(space.records)}


def search_space(run, result, saved) -> SearchSpace:
    """The `SearchSpace` of a prepared run whose `result` holds the screening table: the
    main task's selection split scored through `saved` (an open `SearchCheckpoint`), the
    knockouts that only rank heads on the run's search precision (`CELRun.searcher`) where
    it is lower than the model's, the config's shared settings; each strategy's own are its
    settings dataclass (`Strategy.settings_of`)."""
    config = run.config
    low = run.searcher()  # the knockouts only rank heads: at `search_dtype`, like screening
    on_main = [g for g in run.guards if g.on_main]
    return SearchSpace(saved.wrap(run.scorer(run.select, run.means), "main"),
                       candidate_heads(result.heads), config.objective, config.secondary,
                       rank_by=config.rank_by, max_size=config.max_size, seed=config.seed,
                       adaptive=config.adaptive, ci=config.ci, progress=run.compute.progress,
                       pool=search_pool(result.heads, run.order[0], second=run.order[1],
                                        guards=on_main),
                       guards=tuple(on_main), guard_rule=config.guard_rule,
                       ranker=None if low is run.model else saved.wrap(
                           run.scorer(run.select, run.means, low), "main_ranks"))


def _side_split(run, task: str, split: str):
    """A side task's split, encoded for the run's model, and its mean-ablation means (over its
    own prompts, as side tasks are ablated)."""
    data = encode_task(run.model, run.others[task], split)
    return data, run.means_of(data)
