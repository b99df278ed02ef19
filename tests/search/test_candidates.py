"""Candidate heads and the search pool (`workbench.search.candidates`): the rules on
hand-written screening tables, with and without an interval for the objective."""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.search.candidates import candidate_heads, search_pool, select_candidates


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


def test_a_guarded_pool_leaves_out_heads_that_clearly_break_a_guard():
    from workbench.guards import Guard

    df = pd.DataFrame(
        {
            "layer": [0, 0, 1, 1, 2],
            "head": [0, 1, 0, 1, 0],
            "d_logit_diff_hi": [0.5, 3.0, 0.2, 0.1, 0.4],
            # head (0, 1) is a gamer: the objective rises, accuracy clearly falls
            "d_accuracy_hi": [0.0, -0.2, -0.01, np.nan, 0.1],
            "d_logprob_hi": [0.1, -1.0, 0.1, 0.2, -0.03],
        }
    )
    assert search_pool(df, "logit_diff") == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    guards = [Guard("main", "accuracy"), Guard("main", "logprob")]
    # (1, 0) falls below 0 by 0.01 on accuracy; (2, 0) by 0.03 on log-prob; NaN stays
    assert search_pool(df, "logit_diff", guards=guards) == [(0, 0), (1, 1)]
    tolerant = [Guard("main", "accuracy", 0.02), Guard("main", "logprob", 0.05)]
    assert search_pool(df, "logit_diff", guards=tolerant) == [(0, 0), (1, 0), (1, 1), (2, 0)]
    # a guard metric screening did not measure leaves the pool alone
    assert search_pool(df, "logit_diff", guards=[Guard("main", "prob_diff")]) == \
        search_pool(df, "logit_diff")
