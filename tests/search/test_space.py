"""The search space (`workbench.search.space`) raced: adaptive evaluation of the sets finds
the exhaustive computation's best sets at fewer forward-equivalents, and every best set saw
every example."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.search.planted import FIRST, SECOND
from workbench.screening.screen import screen_scorer
from workbench.search.candidates import best_sets, search_pool, select_candidates
from workbench.search.registry import get_strategy
from workbench.search.space import SearchSpace
from workbench.stats import Stats


@pytest.mark.parametrize("strategy", ["interaction", "exhaustive"])
def test_raced_search_finds_the_exhaustive_best_sets(micro, strategy):
    heads = select_candidates(
        screen_scorer(micro.scorer("select"), stats=Stats(n_boot=200)), FIRST, SECOND, 8
    )
    found = {}
    for adaptive in (False, True):
        space = SearchSpace(
            micro.scorer("select"),
            list(
                heads[heads.candidate]
                .sort_values("candidate_rank")[["layer", "head"]]
                .itertuples(index=False, name=None)
            ),
            FIRST,
            SECOND,
            max_size=3,
            seed=0,
            pool=search_pool(heads, FIRST),
            adaptive=adaptive,
        )
        get_strategy(strategy)(space)
        combos = pd.DataFrame(space.records)
        found[adaptive] = (best_sets(combos, FIRST, SECOND, 3), space.forward_eq, combos)
    assert found[True][0] == found[False][0]
    if strategy == "interaction":
        assert found[True][0][0] == micro.best
    assert found[True][1] < found[False][1]
    # every best set saw every example; the sets that did not are below their size's best
    combos = found[True][2]
    n_select = int(combos["n"].max())
    sets, _ = found[True][0]
    for names in sets.values():
        row = combos[combos["heads"] == names].iloc[-1]
        assert row["n"] == n_select
