"""The planted micro model the search tests share (`bench.planted`): 6 layers x 4 heads, one
harmful single, one OR pair, one OR triple (the folder's conftest builds it as `micro`), and
one strategy's search of it."""

from __future__ import annotations

import dataclasses

import pandas as pd

from bench.planted import PlantSpec
from workbench.compute import Compute
from workbench.scoring.scorer import MaskScorer
from workbench.search.candidates import best_sets, candidate_heads, search_pool
from workbench.search.registry import get_strategy
from workbench.search.space import SearchSpace
from workbench.tasks.encoding import encode_task

FIRST, SECOND = "logit_diff", "logprob"
MICRO = PlantSpec(
    n_layers=6, n_heads=4, single_gains=(2.0,), pair_gains=(5.0,), triple_gains=(9.0,), seed=3
)


def search_planted(pm, heads, strategy, **settings):
    """Run `strategy` on planted model `pm` over the candidates and pool of screening table
    `heads`, with those of `settings` that it has: `(space, (best sets by size, best
    size))`."""
    batch = encode_task(pm.model, pm.task, "select")
    scorer = MaskScorer(pm.model, batch, compute=Compute(masks_per_pass=16))
    space = SearchSpace(
        scorer,
        candidate_heads(heads),
        FIRST,
        SECOND,
        max_size=3,
        seed=0,
        pool=search_pool(heads, FIRST),
    )
    run = get_strategy(strategy)
    own = {f.name for f in dataclasses.fields(run.settings_type)}
    run(space, **{k: v for k, v in settings.items() if k in own})
    return space, best_sets(pd.DataFrame(space.records), FIRST, SECOND, 3)
