"""The gaming plant (`bench/planted.py`, `PlantSpec.gaming_gains`) and the guarded search on it.

A gaming head's removal raises `logit_diff` by its gain while every `y` logit falls below the
tokens at 0: the planted best set of each size holds it, the genuine best sets do not. A
guarded search (`workbench.guards`) should find the genuine sets, an unguarded one the
gamer's (`bench/recall.py --gaming`, `docs/recall.md`).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close
from workbench.compute import Compute
from workbench.heads import HeadSet
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.tasks.encoding import encode_task

GAIN = 6.0
SPEC = PlantSpec(seed=0, gaming_gains=(GAIN,))  # 12 x 12 = 144 heads


@pytest.fixture(scope="module")
def gaming():
    return planted_model(SPEC)


def _gamer(pm):
    return next(h for h, r in pm.roles.items() if r == "gamer")


def _digest(pm) -> str:
    h = hashlib.sha256()
    for name, p in sorted(pm.model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().cpu().numpy().tobytes())
    h.update(repr(sorted(pm.best.items())).encode())
    return h.hexdigest()[:16]


def test_plants_without_a_gamer_are_unchanged():
    """`gaming_gains` defaults to none and then draws nothing: these digests of the weights
    and best sets were taken before gamers existed (and equal after)."""
    assert [_digest(planted_model(PlantSpec(seed=s))) for s in (0, 1)] == [
        "294a7c59e292144e",
        "f9f3f2498d07393b",
    ]
    pm = planted_model(PlantSpec(n_layers=24, n_heads=16, seed=2))
    assert _digest(pm) == "33999fda971b5dcf"
    assert pm.best_genuine == pm.best and pm.best_genuine_gain == pm.best_gain
    assert "gamer" not in pm.roles.values()


def test_the_gaming_plants_analytic_scores_are_its_forward_pass(gaming):
    """Random masks with every planted head, the gamer included, in and out: the forward
    pass, the per-example loop and the analytic scorer agree on every metric."""
    L, H = SPEC.n_layers, SPEC.n_heads
    rng = np.random.default_rng(1)
    masks = rng.random((16, L, H)) < 0.3
    planted = [h for h, r in gaming.roles.items() if r not in ("helpful", "noise")]
    for i, m in enumerate(masks):
        for l, h in planted:
            m[l, h] = rng.random() < 0.5
        m[_gamer(gaming)] = i % 2 == 0  # half the masks without the gamer
    masks = torch.tensor(masks).float()
    batch = encode_task(gaming.model, gaming.task, "select")
    real = MaskScorer(gaming.model, batch, compute=Compute(masks_per_pass=8)).score(masks)
    fast = gaming.scorer("select").score(masks)
    for i, m in enumerate(masks):
        removed = [(l, h) for l in range(L) for h in range(H) if m[l, h]]
        # float32 forwards: the gamer puts ~40 into the y and D directions and the
        # unembedding's bias takes it off again, so sums of size ~80 lose ~1e-5 (measured
        # max 1.5e-5 at 144 heads, `bench/recall.py --gaming --check`); 1e-4 is far below
        # any planted gain and any change of accuracy or log-prob the guards see.
        assert_close(real["logit_diff"][i], gaming.logit_diff(removed, "select"), atol=1e-4)
    for metric in real:
        assert_close(fast[metric], real[metric], atol=1e-4)


def test_removing_the_gamer_games_logit_diff(gaming):
    """Closed form: logit_diff rises by exactly the gain on every example, accuracy falls to
    0 and the answer's log-prob by more than 8 nats on every example; the clean model is
    the one without the gamer (the unembedding's bias cancels it)."""
    gamer = _gamer(gaming)
    assert_close(gaming.logit_diff([gamer]) - gaming.logit_diff(), GAIN, atol=1e-9)
    assert_close(gaming.expected_gain([gamer]), GAIN, atol=1e-12)
    scorer = gaming.scorer("select")
    clean = scorer.clean()
    gone = {m: v[0] for m, v in scorer.score(masks_of(gaming.model, [[gamer]])).items()}
    assert_close(gone["logit_diff"] - clean["logit_diff"], GAIN, atol=1e-4)
    assert float(clean["accuracy"].mean()) > 0.9 and float(gone["accuracy"].max()) == 0.0
    assert float((gone["logprob"] - clean["logprob"]).max()) < -8.0
    # u = the largest clean y logit + 8: after the removal every y logit is <= -8
    u, g = gaming._gamers[gamer]
    assert g == GAIN and u > 8.0
    y_logits = scorer._logits(torch.zeros(1, SPEC.n_layers * SPEC.n_heads))
    assert_close(float(y_logits.max()) + 8.0, u, atol=1e-4)  # the largest logit is a y's
    # the genuine best sets raise accuracy and log-prob (they only lower D)
    masks = masks_of(gaming.model, [HeadSet.of(gaming.model, n).heads
                                    for n in gaming.best_genuine.values()])
    scores = scorer.score(masks)
    for metric in ("accuracy", "logprob"):
        assert float((scores[metric] - clean[metric][None]).min()) >= -1e-6


def test_the_best_sets_hold_the_gamer_and_the_genuine_ones_do_not(gaming):
    gamer = ",".join(HeadSet.of(gaming.model, [_gamer(gaming)]).names)
    assert gaming.best_gain == {1: GAIN, 2: GAIN + 2.0, 3: GAIN + 5.0}
    assert all(gamer in names.split(",") for names in gaming.best.values())
    assert gaming.best_genuine_gain == {1: 2.0, 2: 5.0, 3: 9.0}
    assert not any(gamer in names.split(",") for names in gaming.best_genuine.values())
    roles = {n: gaming.roles[HeadSet.of(gaming.model, [n]).heads[0]]
             for names in gaming.best_genuine.values() for n in names.split(",")}
    sizes = {s: {roles[n] for n in names.split(",")} for s, names in gaming.best_genuine.items()}
    assert sizes == {1: {"single"}, 2: {"member"}, 3: {"member"}}


SEEDS = (0, 1)


@pytest.fixture(scope="module")
def searched():
    """The raced interaction search on gaming plants at 144 heads, guarded (the default
    guards of a difference objective) and not (`bench/recall.py`'s `run_gaming_plant`)."""
    from bench.recall import GAMING_ROWS, run_gaming_plant

    rows = {k: GAMING_ROWS[k] for k in ("guarded (default guards, not_worse)", "unguarded")}
    return {seed: run_gaming_plant(144, seed, rows) for seed in SEEDS}


def test_the_unguarded_search_finds_the_gamers_sets(searched):
    for seed, rows in searched.items():
        (row,) = [r for r in rows if r["strategy"] == "unguarded"]
        assert all(row[f"hit_{s}"] and row[f"gamer_{s}"] for s in (1, 2, 3)), (seed, row)


def test_the_guarded_search_never_returns_the_gamer(searched):
    for seed, rows in searched.items():
        (row,) = [r for r in rows if r["strategy"] != "unguarded"]
        assert not any(row[f"gamer_{s}"] for s in (1, 2, 3)), (seed, row)


def test_the_guarded_search_finds_the_genuine_sets(searched):
    for seed, rows in searched.items():
        (row,) = [r for r in rows if r["strategy"] != "unguarded"]
        assert all(row[f"hit_{s}"] for s in (1, 2, 3)), (seed, row)
