"""bench/peers.py: the methods compared on one shared held-out confirmation, on a tiny Llama
whose head L1H2 is planted to interfere (`tiny_models`: its removal raises the logit
difference on every prompt). CHG's tests skip without the optional `peers` extra."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import assert_close
from workbench.confirmation.confirm import ConfirmPlan, confirm_sets
from workbench.heads import HeadSet
from workbench.scoring.scorer import MaskScorer, masks_of
from workbench.search.strategies.compressed_sensing import lasso
from workbench.stats import Stats
from workbench.tasks.encoding import encode_task


def _bench():
    path = Path(__file__).resolve().parent.parent / "bench" / "peers.py"
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


peers = _bench()
needs_chg = pytest.mark.skipif(peers.chg_available() is not None,
                               reason=str(peers.chg_available()))


@pytest.fixture(scope="module")
def tiny():
    hf, model, task = peers.tiny_models(seed=0)
    return hf, model, encode_task(model, task, "select"), encode_task(model, task, "heldout")


def test_the_planted_head_is_the_one_whose_removal_helps_most(tiny):
    """What the CHG test below relies on, measured by the workbench, not assumed."""
    _, model, select, _ = tiny
    scorer = MaskScorer(model, select)
    heads = [(l, h) for l in range(2) for h in range(4)]
    gains = (scorer.score(masks_of(model, [[h] for h in heads]))["logit_diff"]
             - scorer.clean()["logit_diff"]).mean(-1)
    assert heads[int(gains.argmax())] == peers.PLANT
    assert float(gains.max()) > 0.3
    assert float(np.sort(gains.numpy())[-2]) < 0.05


def test_every_method_is_confirmed_against_the_same_random_sets_scored_once(tiny):
    _, model, _, heldout = tiny
    a = peers.MethodResult("a", np.zeros((2, 4)), {1: [(1, 2)], 2: [(0, 1), (1, 2)]})
    b = peers.MethodResult("b", np.zeros((2, 4)), {1: [(0, 3)], 2: [(0, 0), (1, 1)]})
    pool = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (1, 3)]
    shared = peers.SharedScorer(MaskScorer(model, heldout))
    table = peers.confirm_methods(shared, [a], "logit_diff", "logprob", 5, Stats(seed=3),
                                  pool=pool)
    scored_for_a = shared.n_scored
    table_b = peers.confirm_methods(shared, [b], "logit_diff", "logprob", 5, Stats(seed=3),
                                    pool=pool)
    # b's run scored only b's own two sets: every random and pool set came from memory
    assert shared.n_scored - scored_for_a <= 2
    for col in ("random_mean", "random_q95", "pool_random_mean", "n_random", "n_pool_random"):
        assert table[col].tolist() == table_b[col].tolist(), col
    # and the numbers are those an unshared, unraced confirmation gives
    direct, _ = confirm_sets(MaskScorer(model, heldout),
                             {k: HeadSet.of(model, s) for k, s in b.sets.items()},
                             ConfirmPlan("logit_diff", "logprob", n_random=5, stats=Stats(seed=3),
                                         pool=pool))
    for col in ("d_logit_diff", "random_mean", "percentile", "pool_percentile", "p_holm"):
        assert_close(table_b[col].to_numpy(), direct[col].to_numpy(), atol=1e-6, msg=col)


def test_rank_agreement_equals_scipy_on_a_hand_case():
    """scipy.stats.spearmanr / kendalltau (tau-b) give these numbers, worked by hand:
    no ties: d = (1, 1, 1, 1, 0), rho = 1 - 6 * 4 / (5 * 24) = 0.8; 8 concordant and 2
    discordant pairs, tau = 0.6. Ties: average ranks (1, 2.5, 2.5, 4) and (1, 4, 2.5, 2.5),
    rho = 2.25 / 4.5 = 0.5; S = 3 - 1 = 2 over sqrt((6 - 1)(6 - 1)), tau-b = 0.4. A NaN pair
    is left out."""
    def method(name, scores):
        return peers.MethodResult(name, np.asarray(scores, dtype=float), {})

    table = peers.rank_agreement([method("x", [1, 2, 3, 4, 5]), method("y", [2, 1, 4, 3, 5])])
    assert_close(table[["spearman", "kendall_tau_b"]].to_numpy()[0], [0.8, 0.6])
    table = peers.rank_agreement([method("x", [1, 2, 2, 3, np.nan]),
                                  method("y", [1, 3, 2, 2, 7])])
    assert_close(table[["spearman", "kendall_tau_b"]].to_numpy()[0], [0.5, 0.4])


def test_top_sets_take_the_highest_scores_and_leave_nans_last():
    scores = np.array([[0.1, np.nan], [0.3, -0.2]])
    assert peers.top_sets(scores, 3) == {1: [(1, 0)], 2: [(0, 0), (1, 0)],
                                         3: [(0, 0), (1, 0), (1, 1)]}


def test_top_sets_of_positive_scores_only_have_as_many_sizes_as_positive_heads():
    scores = np.array([[0.0, 0.2], [-0.1, 0.0]])
    assert peers.top_sets(scores, 3, positive=True) == {1: [(0, 1)]}
    assert peers.top_sets(np.zeros((2, 2)), 3, positive=True) == {}


def test_cs_peer_std_is_the_peer_fit_on_standardised_gains_and_scale_free():
    rng = np.random.default_rng(1)
    x = rng.random((100, 8)) < 0.2
    y = 0.03 * x[:, 5] + 0.01 * x[:, 2] + 0.002 * rng.standard_normal(100)
    fits = []
    for scale in (1.0, 40.0):
        base = peers.MethodResult("cs_peer", np.zeros((2, 4)), {},
                                  notes={"masks": x, "gains": scale * y})
        fits.append(peers.cs_peer_std(base, 3))
    assert_close(fits[0].scores, fits[1].scores, atol=1e-6)
    assert_close(fits[0].scores.ravel(),
                 lasso(x.astype(float), y / y.std(), peers.CS_PEER.alpha), atol=1e-9)
    assert fits[0].sets[1] == [(1, 1)]  # head 5 of 8 = L1H1, the larger effect
    assert not lasso(x.astype(float), y, peers.CS_PEER.alpha).any()  # the raw fit selects none


def test_the_cs_peer_runs_at_llm_components_settings(tiny):
    """100 masks, each head out with probability 0.02, Lasso alpha 0.01 (scikit-learn's
    objective: on an orthogonal design the coefficients are the least-squares ones shrunk by
    alpha / (x'x / n))."""
    assert peers.CS_PEER == peers.CSSettings(n_masks=100, knockout_p=0.02, alpha=0.01)
    x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    y = np.array([2.0, 1.0, -2.0, -1.0]) + 5.0  # the intercept is fitted
    assert_close(lasso(x, y, 0.01), [1.98, 0.98], atol=1e-6)
    _, model, select, _ = tiny
    meter = peers.Meter(len(select))
    with peers.metered(meter):
        res = peers.cs_peer(model, select, "logit_diff", 3, 0, meter)
    assert res.notes["settings"] == asdict(peers.CS_PEER)
    # 100 masks over the whole split: 100 passes, less the layers each mask's restart skips
    assert 50.0 <= res.forward_eq <= 100.0


@needs_chg
def test_chg_gated_forward_at_0_and_1_equals_the_workbench_scorer(tiny):
    hf, model, select, _ = tiny
    removed = [(0, 1), (1, 2)]
    gates = torch.ones(2, 4)
    for l, h in removed:
        gates[l, h] = 0.0
    scorer = MaskScorer(model, select)
    ours = scorer.score(masks_of(model, [removed]))["logit_diff"][0]
    assert_close(peers.chg_gated_scores(hf, select, "logit_diff", gates), ours, atol=1e-4)
    assert_close(peers.chg_gated_scores(hf, select, "logit_diff", torch.ones(2, 4)),
                 scorer.clean()["logit_diff"], atol=1e-4)


@needs_chg
def test_chg_labels_the_planted_head_interfering(tiny):
    """Removing L1H2 raises the logit difference by ~0.6 nats (measured above), so by the
    paper's meaning it interferes: its gate closes even in the stage that pushes gates toward
    keeping (0.1.0's "positive" stage), and it is CHG's first head. The stages' signs: with
    the L1 term strong, the "positive" stage keeps every head at least as open as the
    "negative" one, and most heads open where the other closes them (the L1 term acts on
    logits clamped to [-4, 4], so a gate the unregularised stage shut stays shut in both)."""
    hf, _, select, _ = tiny
    res = peers.chg(hf, select, "logit_diff", 3, 0, peers.CHGBudget(updates=20, batch_size=16))
    layer, head = peers.PLANT
    assert res.notes["labels"][layer, head] == "interfering"
    assert res.sets[1] == [peers.PLANT]
    assert res.notes["keep_gate"][layer, head] < 0.1
    assert res.forward_eq == pytest.approx(3.0 * 3 * 20 * 16 / len(select))


@needs_chg
def test_chg_stage_positive_pushes_gates_toward_keeping(tiny):
    """0.1.0's stage signs, against its docstrings: from gates at 0.5 (its regularised stages'
    start before the unregularised one is copied in) and a strong L1 term, stage "positive"
    opens the heads the objective barely cares about and "negative" closes them."""
    hf, _, select, _ = tiny
    budget = peers.CHGBudget(updates=10, batch_size=16, l1_weight=20.0)
    trainer = peers.chg_trainer(hf, select, "logit_diff", budget, {})
    for stage in ("positive", "negative"):
        for _ in trainer.fit_stage(stage, 10, show_progress=False):
            pass
    others = np.ones((2, 4), dtype=bool)
    others[peers.PLANT] = False
    keep = trainer.mask_logits_pos.detach().sigmoid().numpy()[others]
    remove = trainer.mask_logits_neg.detach().sigmoid().numpy()[others]
    assert (keep > 0.9).all() and (remove < 0.1).all()


def test_paired_differences_are_the_gain_of_one_set_minus_the_other(tiny):
    _, model, _, heldout = tiny
    ref = peers.MethodResult("cel", np.zeros((2, 4)), {1: [peers.PLANT], 2: [(0, 1), (1, 2)]})
    other = peers.MethodResult("x", np.zeros((2, 4)), {1: [(0, 0)], 2: [(0, 1), (1, 2)]})
    scorer = MaskScorer(model, heldout)
    table = peers.paired_differences(scorer, [ref, other], "logit_diff", Stats(seed=0))
    assert table["size"].tolist() == [1]  # size 2 is the same set: nothing to compare
    scores = scorer.score(masks_of(model, [[(0, 0)], [peers.PLANT]]))["logit_diff"]
    assert_close(table["difference"].iloc[0], float((scores[0] - scores[1]).mean()), atol=1e-6)
    assert table["hi"].iloc[0] < 0 and table["p_two_sided"].iloc[0] < 0.01


@needs_chg
def test_chg_gates_gemma3_heads_at_their_stated_width():
    """Gemma-3's heads are wider than `hidden_size / num_attention_heads` (256 against 160 on
    the 270m model), which 0.1.0's adapters assume; `chg_adapter` reads the stated width.
    A gate at 0 must equal zeroing that head's `o_proj` input columns in transformers."""
    from causal_head_gating import CHG
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                           head_dim=16, max_position_embeddings=64, sliding_window=4,
                           layer_types=["sliding_attention", "full_attention"])
    torch.manual_seed(0)
    hf = Gemma3ForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (3, 7))
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with torch.no_grad():
        gated = CHG(hf, adapter=peers.chg_adapter(hf))(ids, gates)
        hf.model.layers[1].self_attn.o_proj.weight[:, 2 * 16:3 * 16] = 0.0
        zeroed = hf(ids).logits
    assert gated.shape[-1] == 64
    assert_close(gated.reshape(zeroed.shape), zeroed, atol=1e-5)
