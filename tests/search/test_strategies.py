"""Every built-in strategy on the hand-built micro model (`workbench.cli.demo`), whose
answer is known: the sets each finds, the sets each scores (exhaustive and greedy counted
exactly), and exhaustive and greedy agreeing through `run_cel`.

This file's `micro` is that model (the folder's conftest's is the planted one)."""

from __future__ import annotations

from itertools import combinations

import pandas as pd
import pytest

from tests.helpers import assert_close, micro_cel
from workbench import evaluate, summarize
from workbench.cli.demo import HARMFUL_HEAD, HELPFUL_HEADS, REDUNDANT_PAIR
from workbench.pipeline import run_cel
from workbench.scoring.scorer import MaskScorer
from workbench.screening.screen import screen_heads
from workbench.search.candidates import best_sets, candidate_heads, select_candidates
from workbench.search.registry import get_strategy, strategies
from workbench.search.space import SearchSpace
from workbench.stats import Stats
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import load_task

BEST = {1: HARMFUL_HEAD, 2: ",".join(REDUNDANT_PAIR), 3: "L0H1,L0H3,L1H1"}


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, side = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main), load_task(side)


def _accuracy(model, task, heads):
    return summarize(evaluate(model, task, heads, split="select"), by=None).loc[0, "accuracy"]


def test_micro_model_is_what_it_claims(micro):
    """The ground truth the other tests rely on, checked with the foundation's evaluate."""
    model, task, _ = micro
    clean = _accuracy(model, task, None)
    assert clean == 3 / 8
    assert _accuracy(model, task, [HARMFUL_HEAD]) == 5 / 8
    for head in REDUNDANT_PAIR:  # alone: exactly nothing, on every metric
        one = evaluate(model, task, [head], split="select")
        assert_close(
            one[["logprob", "logit_diff"]].to_numpy(),
            evaluate(model, task, None, split="select")[["logprob", "logit_diff"]],
        )
    assert _accuracy(model, task, list(REDUNDANT_PAIR)) == 6 / 8
    assert _accuracy(model, task, [HARMFUL_HEAD, *REDUNDANT_PAIR]) == 1.0
    for head in HELPFUL_HEADS:
        assert _accuracy(model, task, [head]) < clean


def _space(model, task, **kw):
    heads = select_candidates(
        screen_heads(model, task, stats=Stats(n_boot=200)), "accuracy", "logprob", 8
    )
    scorer = MaskScorer(model, encode_task(model, task, "select"))
    return SearchSpace(scorer, candidate_heads(heads), "accuracy", "logprob", **kw)


@pytest.mark.parametrize("strategy", sorted(strategies()))
def test_every_strategy_finds_the_known_sets(micro, strategy):
    model, task, _ = micro
    space = _space(model, task, max_size=3, seed=0)
    get_strategy(strategy)(space)
    combos = pd.DataFrame(space.records)
    sets, best_size = best_sets(combos, "accuracy", "logprob", 3)
    assert sets[3] == BEST[3]
    assert best_size == 3
    if strategy in ("exhaustive", "beam", "compressed_sensing"):
        assert sets == BEST
    if strategy == "compressed_sensing":
        coefs = space.notes["cs_coefficients"]
        assert set(coefs) == {HARMFUL_HEAD, *REDUNDANT_PAIR}  # the pair, with no single effect
        assert all(v > 0 for v in coefs.values())


def test_every_evaluated_set_is_recorded_with_its_score(micro):
    model, task, _ = micro
    space = _space(model, task, max_size=3)
    get_strategy("exhaustive")(space, top_m=5)
    get_strategy("greedy")(space)
    combos = pd.DataFrame(space.records)
    ex = combos[combos["strategy"] == "exhaustive"]
    pool = space.candidates[:5]
    assert len(ex) == sum(len(list(combinations(pool, k))) for k in (1, 2, 3))
    n = len(space.candidates)
    assert len(combos[combos["strategy"] == "greedy"]) == n + (n - 1) + (n - 2)
    # a recorded score is the set's selection-split accuracy, computed independently
    for _, row in combos.sample(6, random_state=0).iterrows():
        assert_close(row["ablated_accuracy"], _accuracy(model, task, row["heads"].split(",")))
        assert row["size"] == len(row["heads"].split(","))


def test_exhaustive_and_greedy_agree_through_run_cel(micro):
    model, task, side = micro
    found = {}
    for strategy in ("exhaustive", "greedy"):
        result = run_cel(
            model, task, others=[side], strategy=strategy, n_random=20, n_boot=200, progress=False
        )
        found[strategy] = result.best
    assert found["exhaustive"] == found["greedy"] == sorted([HARMFUL_HEAD, *REDUNDANT_PAIR])
