"""Tests of the theory model: Bayes log-odds, gradients, feature use, ablations, the trade-off.

Fast runs use small sizes (2 seeds, a few hundred SGD steps, batch 1000); the numbers they
assert come from the construction, not from a particular run: small init must give the
trade-off with the right signs, a clean task cue must give none.
"""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd
import pytest
import torch
from torch.func import functional_call

from tests.helpers import assert_close
from workbench.errors import WorkbenchError
from workbench.tables import check_head_table
from workbench.theory import (
    Basis,
    MultiHeadAttentionModel,
    SweepResult,
    TheoryConfig,
    ablation_table,
    bayes_log_odds,
    bayes_loss,
    feature_coefficients,
    logistic_loss,
    make_batch,
    run_condition,
    summarise,
    train,
)
from workbench.theory.bayes import CONFLICT_LOG_ODDS
from workbench.theory.data import CUES


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


FAST = dict(seeds=(0, 1), steps=400, batch_size=1000, n_eval=20_000, n_probe=2000, n_records=0)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The model is tiny: on a busy 2-core machine, torch's default of one thread per core
    makes these tests several times slower, not faster. Restored after the module."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


CLEAN_TOL = 0.01  # nats; see test_clean_cue_control_has_no_gain


@pytest.fixture(scope="module")
def small_init_run():
    torch.manual_seed(0)
    return run_condition(TheoryConfig(init_scale=1e-3, **FAST), device="cpu")


# --- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [
    {"n_heads": 0}, {"d_head": 0}, {"cue": "loud"}, {"parametrisation": "qk"},
    {"batch_size": 999}, {"n_eval": 0}, {"init_scale": 0.0}, {"lr": float("nan")},
    {"sigma": -1.0}, {"seeds": ()}, {"seeds": (1, 1)}, {"n_filler": -1},
])
def test_config_rejects_bad_values(changes):
    with pytest.raises(WorkbenchError):
        TheoryConfig(**changes)


def test_config_round_trips_through_json():
    config = TheoryConfig(n_heads=3, cue="clean", seeds=(4, 2), init_scale=0.5)
    again = TheoryConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    with pytest.raises(WorkbenchError, match="unknown TheoryConfig keys"):
        TheoryConfig.from_dict({"n_head": 4})


def test_every_cue_has_a_bayes_term():
    assert set(CUES) == set(CONFLICT_LOG_ODDS)


# --- data -----------------------------------------------------------------------------------

def test_batch_follows_the_construction():
    config = TheoryConfig(cue_strength=1.0)
    b = make_batch(config, 200_000, _gen(0))
    assert (b.task[: len(b) // 2] == 1).all() and (b.task[len(b) // 2:] == -1).all()
    assert_close(b.x[:, 1, Basis.E_S], b.u_s)
    assert_close(b.x[:, 2, Basis.E_C], b.u_c)
    assert_close(b.x[:, :, Basis.SINK:Basis.FILLER + 1].sum(-1), torch.ones(len(b), 7))
    assert_close(b.q[:, Basis.CUE], b.m)
    # the conflicting feature predicts y with opposite signs and not at all on average
    corr = lambda a, c: float(torch.corrcoef(torch.stack([a, c]))[0, 1])  # noqa: E731
    a, bb = b.task > 0, b.task < 0
    assert corr(b.u_c[a], b.y[a]) == pytest.approx(1 / math.sqrt(2), abs=0.01)
    assert corr(b.u_c[bb], b.y[bb]) == pytest.approx(-1 / math.sqrt(2), abs=0.01)
    assert corr(b.u_c, b.y) == pytest.approx(0.0, abs=0.01)
    # the noisy cue names the right task with probability Phi(gamma) = 0.8413 at gamma = 1
    assert float(((b.m > 0) == (b.task > 0)).float().mean()) == pytest.approx(0.8413, abs=0.005)
    with pytest.raises(WorkbenchError, match="even"):
        make_batch(config, 7, _gen(0))


# --- Bayes log-odds -------------------------------------------------------------------------

@pytest.mark.parametrize("cue", ["noisy", "clean", "none"])
def test_bayes_log_odds_are_calibrated(cue):
    """Monte Carlo: among samples whose closed-form posterior P(y=+1) falls in a bin, the
    fraction with y = +1 matches the bin's mean posterior (3 binomial standard errors)."""
    config = TheoryConfig(cue=cue, mu_shared=0.5)
    b = make_batch(config, 400_000, _gen(1), dtype=torch.float64)
    p = torch.sigmoid(bayes_log_odds(b, config))
    bins = torch.bucketize(p, torch.linspace(0, 1, 11)[1:-1])
    for k in range(10):
        sel = bins == k
        n = int(sel.sum())
        if n < 2000:
            continue
        observed = float((b.y[sel] > 0).double().mean())
        expected = float(p[sel].mean())
        se = math.sqrt(expected * (1 - expected) / n)
        assert abs(observed - expected) < 3 * se + 1e-3, (cue, k, observed, expected)


def test_bayes_log_odds_beat_perturbed_predictors():
    """Log loss is a proper scoring rule: on the same Monte Carlo sample the posterior has a
    lower loss than any other predictor, e.g. a wrong cue strength, a rescaling or the
    first-order approximation 2 z tanh(gamma m)."""
    config = TheoryConfig()
    b = make_batch(config, 400_000, _gen(2), dtype=torch.float64)
    best = float(bayes_loss(b, config))
    shared = 2 * b.u_s
    candidates = {
        "gamma x 1.5": shared + CONFLICT_LOG_ODDS["noisy"](b.u_c, b, 1.5),
        "gamma x 0.6": shared + CONFLICT_LOG_ODDS["noisy"](b.u_c, b, 0.6),
        "scaled 1.1": 1.1 * bayes_log_odds(b, config),
        "scaled 0.9": 0.9 * bayes_log_odds(b, config),
        "tanh approximation": shared + 2 * b.u_c * torch.tanh(b.m),
        "ignore conflict": shared,
    }
    for name, logits in candidates.items():
        assert float(logistic_loss(logits, b.y).mean()) > best + 1e-4, name
    # information ordering: knowing the task exactly helps, knowing nothing about it hurts
    losses = {cue: float(bayes_loss(make_batch(TheoryConfig(cue=cue), 400_000, _gen(3),
                                               dtype=torch.float64), TheoryConfig(cue=cue)))
              for cue in ("clean", "noisy", "none")}
    assert losses["clean"] < losses["noisy"] - 0.02 < losses["none"] - 0.04


# --- model ----------------------------------------------------------------------------------

def _naive_forward(model, x, q):
    """Loop over seeds, heads and samples with torch.softmax: the reference."""
    m = model.score_matrix()
    v = model.params["v"]
    out = torch.zeros(model.n_seeds, x.shape[0], model.n_heads, dtype=x.dtype)
    for s in range(model.n_seeds):
        for h in range(model.n_heads):
            for b in range(x.shape[0]):
                attn = torch.softmax(x[b] @ m[s, h] @ q[b], dim=0)
                out[s, b, h] = attn @ (x[b] @ v[s, h])
    return out


@pytest.mark.parametrize("parametrisation", ["kq", "bilinear"])
def test_model_matches_naive_loop(parametrisation):
    config = TheoryConfig(seeds=(0, 3), n_heads=3, init_scale=1.0,
                          parametrisation=parametrisation)
    model = MultiHeadAttentionModel(config, device="cpu", dtype=torch.float64)
    b = make_batch(config, 6, _gen(4), dtype=torch.float64)
    with torch.no_grad():
        assert_close(model.head_outputs(b.x, b.q), _naive_forward(model, b.x, b.q), atol=1e-10)
        assert_close(model.attention(b.x, b.q).sum(-1), torch.ones(2, 6, 3), atol=1e-12)
        mask = torch.tensor([1.0, 0.0, 1.0])
        heads = model.head_outputs(b.x, b.q)
        assert_close(model(b.x, b.q, head_mask=mask), heads[..., 0] + heads[..., 2])
    with pytest.raises(WorkbenchError, match="head_mask"):
        model(b.x, b.q, head_mask=torch.ones(4))


def test_micro_model_by_hand():
    """One head whose score puts all attention on the conflict token and whose value reads
    e_c outputs exactly u_c; a second head reading the sink outputs its value's sink entry."""
    config = TheoryConfig(seeds=(0,), n_heads=2, parametrisation="bilinear")
    model = MultiHeadAttentionModel(config, dtype=torch.float64)
    with torch.no_grad():
        model.params["W"].zero_()
        model.params["W"][0, 0, Basis.CONFLICT, Basis.BIAS] = 50.0
        model.params["W"][0, 1, Basis.SINK, Basis.BIAS] = 50.0
        model.params["v"].zero_()
        model.params["v"][0, 0, Basis.E_C] = 1.0
        model.params["v"][0, 1, Basis.SINK] = -0.25
        b = make_batch(config, 10, _gen(5), dtype=torch.float64)
        out = model.head_outputs(b.x, b.q)
    assert_close(out[0, :, 0], b.u_c, atol=1e-12)
    assert_close(out[0, :, 1], torch.full((10,), -0.25, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("parametrisation", ["kq", "bilinear"])
def test_gradient_matches_finite_differences(parametrisation):
    config = TheoryConfig(seeds=(0,), n_heads=2, d_head=2, init_scale=0.7,
                          parametrisation=parametrisation)
    model = MultiHeadAttentionModel(config, dtype=torch.float64)
    b = make_batch(config, 8, _gen(6), dtype=torch.float64)
    names = list(model.params)

    def loss(*tensors):
        params = {f"params.{n}": t for n, t in zip(names, tensors, strict=True)}
        logits = functional_call(model, params, (b.x, b.q))
        return logistic_loss(logits, b.y).mean()

    inputs = tuple(model.params[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


def test_seeds_are_independent():
    """A seed trains to the same parameters alone or alongside other seeds."""
    common = dict(steps=20, batch_size=200, n_records=0, init_scale=0.3, n_probe=100)
    both = train(TheoryConfig(seeds=(0, 1), **common), device="cpu").model
    alone = train(TheoryConfig(seeds=(1,), **common), device="cpu").model
    for name in both.params:
        assert_close(both.params[name][1], alone.params[name][0], atol=1e-6)


# --- analysis -------------------------------------------------------------------------------

def test_feature_coefficients_recover_a_linear_read_out():
    config = TheoryConfig()
    b = make_batch(config, 1000, _gen(7))
    coef = torch.tensor([[0.5, 2.0, -1.0], [0.1, 0.0, 3.0]])  # (task, feature) for one head
    design = torch.stack([torch.ones_like(b.u_s), b.u_s, b.u_c], -1)
    per_task = torch.where((b.task > 0)[:, None], design @ coef[0][:, None],
                           design @ coef[1][:, None])  # (B, 1)
    out = feature_coefficients(per_task[None], b)
    assert out.shape == (1, 1, 2, 3)
    assert_close(out[0, 0], coef, atol=1e-4)


def test_tables_follow_the_head_schema(small_init_run):
    r = small_init_run
    for table in (r.features, r.ablations):
        assert list(table.columns[:4]) == ["layer", "head", "head_name", "seed"]
        for _, one in table.groupby("seed"):
            check_head_table(one.drop(columns="seed").reset_index(drop=True))
        assert (table["layer"] == 0).all()


def test_ablation_table_matches_masked_forward(small_init_run):
    r = small_init_run
    config = r.config
    b = make_batch(config, 2000, _gen(8))
    table = ablation_table(r.train.model, b)
    a = b.task > 0
    with torch.no_grad():
        full = logistic_loss(r.train.model(b.x, b.q)[:, a], b.y[a]).mean(-1)
        for h in range(config.n_heads):
            mask = torch.ones(config.n_heads)
            mask[h] = 0
            ablated = logistic_loss(r.train.model(b.x, b.q, head_mask=mask)[:, a], b.y[a]).mean(-1)
            got = table[table["head"] == h]["d_loss_A"].to_numpy()
            assert_close(got, ablated - full, atol=1e-5)


# --- the trade-off --------------------------------------------------------------------------

def test_small_init_concentrates_conflict_and_trades_tasks(small_init_run):
    """From small init, each seed ends near the Bayes optimum with the conflicting feature in
    two heads; ablating the +c head helps task B and hurts task A, and the mirror."""
    s = small_init_run.seeds
    assert (s["gap"] > -2e-3).all(), "no model can beat the Bayes loss beyond sampling noise"
    assert (s["gap"] < 0.02).all()
    assert (s["conflict_top2"] > 0.75).all()
    assert (s["head_A"] != s["head_B"]).all()
    assert (s["ablate_A_d_loss_B"] < -0.01).all() and (s["ablate_A_d_loss_A"] > 0.05).all()
    assert (s["ablate_B_d_loss_A"] < -0.01).all() and (s["ablate_B_d_loss_B"] > 0.05).all()
    assert (s["ablate_A_d_acc_B"] > 0).all() and (s["ablate_B_d_acc_A"] > 0).all()
    assert (s["leak_A"] > 0).all() and (s["leak_B"] < 0).all()
    assert s["tradeoff"].all()


def test_clean_cue_control_has_no_gain():
    """With the task known exactly, the joint optimum is optimal for each task, so no single
    head's ablation lowers either task's loss."""
    # 800 steps: the claim is about the optimum, and at 400 steps one seed is not there yet.
    # Tolerance CLEAN_TOL: the data stream comes from torch.randn, whose vectorised CPU kernels
    # round differently on Intel and AMD, so the trained model and its 20k-sample evaluation
    # differ by CPU. Measured: over data seeds 0-2 and n_eval 20k-80k (standing in for other
    # streams) gain_best <= 4.7e-4 on Intel; 1.56e-3 on an AMD EPYC; the conflicting condition
    # of the same size gains 0.038-0.071 (the small-init test above). 0.01 is 6x the largest
    # clean value seen and under 1/3 of the smallest conflicting one.
    r = run_condition(TheoryConfig(init_scale=1e-3, cue="clean", **{**FAST, "steps": 800}),
                      device="cpu", tol=CLEAN_TOL)
    s = r.seeds
    assert (s["gap"] < 0.01).all()
    assert (s["gain_best"] < CLEAN_TOL).all()
    assert not s["tradeoff_any"].any()
    assert (r.ablations[["d_loss_A", "d_loss_B"]].to_numpy() > -CLEAN_TOL).all()


@pytest.mark.slow
def test_two_heads_cannot_hold_three_roles():
    """H = 2 (the default training run): both heads must also carry the shared feature, so
    +c and -c cannot each get a head that is removable at a gain, and the mirrored trade-off
    of H = 4 does not appear, although the model is near the Bayes optimum. (The default
    batch matters: with batch 1000 seed 1 sits on a plateau, gap 0.03, until ~5000 steps.)"""
    config = TheoryConfig(n_heads=2, init_scale=1e-3, seeds=(0,), n_eval=20_000, n_records=0)
    s = run_condition(config, device="cpu").seeds
    assert (s["gap"] < 0.005).all()
    assert not s["tradeoff"].any()


# --- sweep and command ----------------------------------------------------------------------

def test_summarise_counts_fractions():
    seeds = pd.DataFrame({
        "condition": ["a", "a", "a", "b"], "seed": [0, 1, 2, 0],
        **{k: [0.0, 1.0, 2.0, 5.0] for k in
           ("gap", "conflict_top2", "ablate_A_d_loss_A", "ablate_A_d_loss_B", "ablate_A_d_acc_B",
            "ablate_B_d_loss_B", "ablate_B_d_loss_A", "ablate_B_d_acc_A", "gain", "gain_acc",
            "gain_best")},
        **{k: [True, False, True, False] for k in
           ("tradeoff_A", "tradeoff_B", "tradeoff", "tradeoff_any")},
    })
    out = summarise(seeds).set_index("condition")
    assert out.loc["a", "n_seeds"] == 3 and out.loc["b", "n_seeds"] == 1
    assert out.loc["a", "gap"] == pytest.approx(1.0) and out.loc["a", "gap_max"] == 2.0
    assert out.loc["a", "frac_tradeoff"] == pytest.approx(2 / 3)
    assert out.loc["b", "frac_tradeoff_any"] == 0.0


def test_command_writes_results_folder(tmp_path, capsys):
    from workbench.theory.cli import add_parser

    parser = argparse.ArgumentParser(prog="workbench")
    add_parser(parser.add_subparsers(dest="command"))
    out = tmp_path / "res"
    args = parser.parse_args(["theory", "--quick", "--seeds", "1", "--steps", "30",
                              "--out", str(out), "--device", "cpu"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "small_init" in printed and "large_init" in printed
    files = {p.name for p in out.iterdir()}
    assert {"summary.csv", "seeds.csv", "features.csv", "ablations.csv", "history.csv",
            "configs.json", "summary.png", "feature_trajectories.png"} <= files
    assert "tradeoff_vs_init.png" not in files  # one head count: no grid to plot
    loaded = SweepResult.load(out)
    assert_close(loaded.summary()["gap"].to_numpy(),
                 pd.read_csv(out / "summary.csv")["gap"].to_numpy(), atol=1e-12)
    configs = json.loads((out / "configs.json").read_text())
    assert TheoryConfig.from_dict(configs["large_init"]).init_scale == 1.0
    assert len(pd.read_csv(out / "summary.csv")) == 2
    assert not list(tmp_path.glob("*.tmp"))
    # a rerun replaces a results folder; a folder with anything else in it is never touched
    rerun = ["theory", "--quick", "--seeds", "1", "--steps", "10", "--device", "cpu",
             "--no-figures", "--out"]
    assert args.func(parser.parse_args([*rerun, str(out)])) == 0
    assert not (out / "summary.png").exists() and (out / "summary.csv").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(WorkbenchError, match="not theory results"):
        args.func(parser.parse_args([*rerun, str(mine)]))
    assert (mine / "notes.txt").read_text() == "keep me"
    with pytest.raises(WorkbenchError):
        args.func(parser.parse_args(["theory", "--seeds", "0"]))


def test_unknown_device_is_rejected():
    from workbench.loading import resolve_device

    with pytest.raises(WorkbenchError, match="device"):
        resolve_device("tpu9")
    assert resolve_device("cpu") == torch.device("cpu")
