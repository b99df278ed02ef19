"""Head-set search on the hand-built micro model, whose answer is known, and its parts."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch

from tests.helpers import assert_close, micro_cel
from workbench import WorkbenchError, ablated, evaluate, summarize
from workbench.cli.demo import HARMFUL_HEAD, HELPFUL_HEADS, REDUNDANT_PAIR
from workbench.compute import Compute
from workbench.heads import HeadSet
from workbench.pipeline import run_cel
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.screening.screen import screen_heads
from workbench.search.candidates import best_sets, candidate_heads, search_pool, select_candidates
from workbench.search.registry import get_strategy, strategies
from workbench.search.space import SearchSpace
from workbench.search.strategies.compressed_sensing import lasso, lasso_alpha_max, lasso_cv
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
    space = _space(model, task, max_size=3, top_m=5)
    get_strategy("exhaustive")(space)
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


def test_candidates_rule():
    df = pd.DataFrame(
        {
            "layer": [0, 0, 0, 1],
            "head": [0, 1, 2, 0],
            "head_name": ["L0H0", "L0H1", "L0H2", "L1H0"],
            "d_accuracy": [0.0, 0.1, -0.1, 0.0],
            "d_accuracy_lo": [0.0, 0.02, -0.2, -0.1],
            "d_logprob": [0.3, 0.1, 0.5, -0.2],
            "d_logprob_lo": [0.1, -0.1, 0.2, -0.3],
        }
    )
    marked = select_candidates(df, "accuracy", "logprob", top_m=1)
    # L0H1: accuracy interval above 0; L0H0: accuracy not worse and log-prob surely better.
    assert candidate_heads(marked) == [(0, 1), (0, 0)]
    marked = select_candidates(df, "accuracy", "logprob", top_m=4)
    assert candidate_heads(marked) == [(0, 1), (0, 0), (1, 0), (0, 2)]  # filled in key order
    # attribution has no accuracy estimate on a multi-token task: the log-prob ranks alone
    blind = df.assign(d_accuracy=np.nan, d_accuracy_lo=np.nan)
    marked = select_candidates(blind, "accuracy", "logprob", top_m=1)
    assert candidate_heads(marked) == [(0, 2), (0, 0)]  # both log-prob intervals above 0
    marked = select_candidates(blind, "accuracy", "logprob", top_m=3)
    assert candidate_heads(marked) == [(0, 2), (0, 0), (0, 1)]


def test_search_pool_falls_back_to_the_secondary_when_the_objective_has_no_interval():
    df = pd.DataFrame(
        {
            "layer": [0, 0, 1],
            "head": [0, 1, 0],
            "d_accuracy_hi": [0.1, -0.2, 0.0],
            "d_logprob_hi": [-0.5, 0.3, -1e-6],
        }
    )
    assert search_pool(df, "accuracy", second="logprob") == [(0, 0), (1, 0)]
    # attribution on a multi-token task: no accuracy interval, the log-prob decides
    blind = df.assign(d_accuracy_hi=np.nan)
    assert search_pool(blind, "accuracy") == []
    assert search_pool(blind, "accuracy", second="logprob") == [(0, 1), (1, 0)]


def test_lasso_recovers_a_sparse_signal():
    rng = np.random.default_rng(0)
    x = (rng.random((200, 30)) < 0.2).astype(float)
    beta = np.zeros(30)
    beta[[3, 17]] = [1.0, 0.5]
    beta[9] = -0.8
    y = 0.2 + x @ beta + rng.normal(0, 0.05, 200)
    coef = lasso_cv(x, y)
    assert_close(coef[[3, 17, 9]], beta[[3, 17, 9]], atol=0.08)
    assert np.abs(np.delete(coef, [3, 17, 9])).max() < 0.05


def test_batched_set_scores_equal_one_ablated_run(micro):
    model, task, _ = micro
    batch = encode_task(model, task, "heldout")
    sets = [["L0H3"], ["L0H1", "L1H1"], ["L1H2", "L0H0", "L0H3"], ["L1H0"]]
    tiled = MaskScorer(model, batch, compute=Compute(masks_per_pass=4)).score(masks_of(model, sets))
    clean = MaskScorer(model, batch).clean()
    for i, s in enumerate(sets):
        with ablated(model, s), torch.no_grad():
            from workbench.metrics.scores import answer_logits, score_logits

            ref = score_logits(answer_logits(model, batch), batch)
        for m in ref:
            assert_close(tiled[m][i], ref[m])
    assert (tiled["accuracy"][1] - clean["accuracy"]).sum() > 0


def test_unknown_strategy_is_a_clear_error(micro):
    model, task, _ = micro
    with pytest.raises(WorkbenchError, match="strategy 'simulated_annealing' is unknown"):
        run_cel(model, task, strategy="simulated_annealing", progress=False)
    with pytest.raises(WorkbenchError, match="strategy"):
        get_strategy("nope")
    with pytest.raises(WorkbenchError, match="max_size"):
        run_cel(model, task, max_size=0, progress=False)
    with pytest.raises(WorkbenchError, match="objective"):
        run_cel(model, task, objective="bleu", progress=False)
    assert HeadSet.of(model, BEST[3]).names == ["L0H1", "L0H3", "L1H1"]


def test_alpha_max_is_where_the_lasso_selects_its_first_head():
    rng = np.random.default_rng(0)
    x = rng.random((100, 30)) < 0.1
    y = 0.05 * x[:, 3] - 0.02 * x[:, 7] + 0.001 * rng.standard_normal(100)
    top = lasso_alpha_max(x.astype(float), y)
    assert not lasso(x.astype(float), y, top * 1.01).any()
    coef = lasso(x.astype(float), y, top * 0.9)
    assert np.flatnonzero(coef).tolist() == [3]
