"""The interaction search (`workbench.search.strategies.interaction`) on the planted micro
model: its finalists, its main effects against least squares, its budget, and its raced
knockouts on the first examples of racing's order."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.helpers import assert_close
from tests.search.planted import FIRST, SECOND, search_planted
from workbench import WorkbenchError
from workbench.racing import example_order, first_slice
from workbench.screening.screen import screen_scorer
from workbench.search.candidates import candidate_heads, search_pool, select_candidates
from workbench.search.registry import get_strategy
from workbench.search.space import SearchSpace, _names
from workbench.stats import Stats


def test_interaction_finalists_include_the_top_screening_candidates(micro, micro_screen):
    """The finalists are `pick_finalists` of the screening candidates in the pool and the
    knockouts' order (the SmolLM2 greater_than miss: the best single head was screening's
    first candidate but not among the knockouts' top heads)."""
    from workbench.search.finalists import pick_finalists

    heads = select_candidates(micro_screen, FIRST, SECOND, 3)
    budget = 100 + 24  # 100 masks, 24 sets left: 4 finalists (4 + 6 + 4 sets of size 1-3)
    plain, _ = search_planted(micro, heads, "interaction", search_budget=budget, n_masks=100,
                              screen_share=0)
    mixed, _ = search_planted(micro, heads, "interaction", search_budget=budget, n_masks=100,
                              screen_share=0.75)
    knocked = plain.notes["interaction"]["finalists"]  # the knockouts' top 4, in order
    pool = search_pool(heads, FIRST)
    screened = [f"L{l}H{h}" for l, h in candidate_heads(heads) if (l, h) in pool]
    assert len(knocked) == 4 and len(screened) == 3
    # ceil(0.75 * 4) = 3 from screening, then the knockouts' best not yet chosen
    assert mixed.notes["interaction"]["finalists"] == pick_finalists(screened, knocked, 4, 0.75)
    assert mixed.notes["interaction"]["finalists"][:3] == screened
    # here screening's third candidate (a noise head) was not among the knockouts' top 4
    assert set(screened) - set(knocked)


def test_main_effects_equal_least_squares():
    from workbench.search.strategies.interaction import _main_effects

    rng = np.random.default_rng(5)
    x = rng.random((300, 12)) < 0.3
    y = 0.5 + x @ rng.normal(0, 1, 12) + 2.0 * (x[:, 0] & x[:, 1]) + rng.normal(0, 0.1, 300)
    design = np.column_stack([np.ones(300), x.astype(float)])
    ref = np.linalg.lstsq(design, y, rcond=None)[0][1:]
    assert_close(_main_effects(x, y, ridge=0.0), ref, atol=1e-9)
    # the default ridge (1e-3 of the mean column variance) moved effects by 1.8e-3 here
    assert_close(_main_effects(x, y), ref, atol=1e-2)


def test_interaction_respects_its_budget(micro, micro_screen):
    space, _ = search_planted(micro, micro_screen, "interaction", search_budget=300, n_masks=100)
    assert len({r["heads"] for r in space.records}) <= 300
    assert space.notes["interaction"]["n_masks"] == 100
    # a budget the knockouts alone use up is refused, not turned into an empty search
    with pytest.raises(WorkbenchError, match="leaves no room for finalist sets after 64"):
        search_planted(micro, micro_screen, "interaction", search_budget=60)


@pytest.mark.parametrize("knockout_examples", [4, 16, None])
def test_knockouts_are_scored_on_their_first_examples_in_racing_order(micro, knockout_examples):
    """Raced knockouts see the first `knockout_examples` examples of racing's order (None: the
    first racing slice, as before knockouts had their own count); their recorded gains are
    those examples' means."""
    heads = select_candidates(
        screen_scorer(micro.scorer("select"), stats=Stats(n_boot=200)), FIRST, SECOND, 8
    )
    inner = micro.scorer("select")
    calls = []

    class Recording:
        model, data, compute = inner.model, inner.data, inner.compute

        def clean(self):
            return inner.clean()

        def score(self, masks, progress=False, desc="masks", rows=None):
            calls.append((masks.clone(), None if rows is None else rows.clone()))
            return inner.score(masks, progress, desc, rows=rows)

    space = SearchSpace(Recording(), [], FIRST, SECOND, max_size=3, seed=3,
                        pool=search_pool(heads, FIRST), adaptive=True)
    get_strategy("interaction")(space, knockout_examples=knockout_examples)
    n = int(inner.clean()[FIRST].shape[0])
    want = example_order(n, 3)[: first_slice(n) if knockout_examples is None
                               else min(n, knockout_examples)]
    masks, rows = calls[0]  # the knockouts come first
    assert torch.equal(rows, want)
    assert space.notes["interaction"]["knockout_examples"] == len(want)
    full = inner.score(masks)[FIRST] - inner.clean()[FIRST][None]
    # the knockouts' records come first, one per mask drawn (a repeated draw is scored once)
    knock = {r["heads"]: r for r in space.records[: space.notes["interaction"]["n_masks"]]}
    recorded = [knock[_names(map(tuple, m.nonzero().tolist()))] for m in masks]
    np.testing.assert_allclose([r[f"d_{FIRST}"] for r in recorded],
                               full[:, want].mean(-1).numpy(), rtol=1e-6, atol=1e-6)
    assert all(r["n"] == len(want) for r in recorded)
