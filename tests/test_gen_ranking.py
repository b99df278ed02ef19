"""`bench/gen_ranking.py`, logprob's ranking of single heads against exact match's: each head's
`d_exact_match`, `d_logprob` and flips are `evaluate_generation` under that head's zero
ablation against the clean model, computed directly; its Spearman correlation is scipy's (ties
averaged); the top-k overlaps count what they say; the embedded model's quick task moves."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import load_script
from workbench.ablation import Ablation, ablation_hooks
from workbench.metrics.generation import evaluate_generation
from workbench.tasks.encoding import encode_task

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _bench():
    return load_script(ROOT / "bench" / "gen_ranking.py")


@pytest.fixture(scope="module")
def embedded_ranking():
    from workbench import load_model

    model = load_model("embedded")
    batch = encode_task(model, _bench().embedded_task(24), "select")
    return model, batch, _bench().rank_heads(model, batch)


def test_each_head_s_scores_are_evaluate_under_its_ablation(embedded_ranking):
    model, batch, ranking = embedded_ranking
    clean = evaluate_generation(model, batch)
    assert ranking.clean_exact_match == pytest.approx(clean["exact_match"].mean())
    assert len(ranking.table) == model.cfg.n_layers * model.cfg.n_heads
    for row in ranking.table.itertuples():
        got = evaluate_generation(model, batch, ablation_hooks(model, [(row.layer, row.head)]))
        d_em = got["exact_match"].mean() - clean["exact_match"].mean()
        assert row.d_exact_match == pytest.approx(d_em, abs=1e-6), (row.layer, row.head)
        assert row.flips == int((got["exact_match"] != clean["exact_match"]).sum())
        d_lp = got["logprob"].mean() - clean["logprob"].mean()
        assert row.d_logprob == pytest.approx(d_lp, abs=1e-4), (row.layer, row.head)
    # a task on which heads move exact match both ways, so the comparison says something
    assert (ranking.table["d_exact_match"] > 0).any() and (ranking.table["d_exact_match"] < 0).any()
    # a teacher-forced pass per head and the clean run's, and a decode per scoring call (the
    # heads' rows decoded together, `masks_per_call` heads a call)
    from workbench.metrics.generation import generation_metric
    from workbench.scoring.custom import masks_per_call

    per_call = masks_per_call(generation_metric, batch, Ablation())
    calls = -(-len(ranking.table) // per_call)
    assert per_call > 1 and ranking.forwards >= len(ranking.table) + 1 + calls + 1


def test_spearman_is_scipy_s_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    spearman = _bench().spearman
    for _ in range(20):
        a = rng.normal(size=12)
        b = rng.integers(-2, 3, size=12) / 24  # exact-match-like: few values, many ties
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(spearman([1, 2, 3], [0, 0, 0]))


def test_top_k_overlap_counts_the_shared_heads():
    t = pd.DataFrame({"layer": [0, 0, 1, 1, 2], "head": [0, 1, 0, 1, 0],
                      "d_logprob": [0.5, 0.4, -0.1, 0.3, -0.2],
                      "d_exact_match": [0.1, 0.0, 0.1, 0.0, -0.1], "flips": [1, 0, 1, 2, 1]})
    ranking = _bench().HeadRanking(t, 0.5, -1.0, 10, 0.0, 0)
    s = _bench().summarize(ranking, ks=(1, 2, 3))
    # logprob's top 3: L0H0, L0H1, L1H1; exact match's: L0H0, L1H0 (ties at 0.1), then L0H1
    assert (s["top1"], s["top2"], s["top3"]) == (1, 1, 2)
    assert s["top2_ties"] == (1, 2) and s["top3_ties"] == (3, 4)  # three heads tie at 0.0
    assert (s["n_moved"], s["n_flip"], s["n_em_up"], s["n_lp_up"]) == (3, 4, 2, 3)
