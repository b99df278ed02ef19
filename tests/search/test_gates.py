"""Learned head gates (`workbench.search.strategies.gates`): the gated forward against finite
differences and against `MaskScorer`, the hard-concrete samples, and the `gates` search strategy."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from bench.planted import PlantSpec, planted_model
from tests.helpers import assert_close, tiny_model
from workbench import WorkbenchError
from workbench.ablation import Ablation, compute_head_means
from workbench.compute import Compute
from workbench.logits import answer_logits
from workbench.metrics.scores import METRICS
from workbench.scoring.scorer import MaskScorer
from workbench.screening.screen import screen_heads
from workbench.search.candidates import best_sets, candidate_heads, search_pool, select_candidates
from workbench.search.finalists import default_budget
from workbench.search.gate_training import (
    GateSettings,
    gate_hooks,
    gate_search,
    gated_scores,
    hard_concrete,
    open_probability,
    train_gates,
)
from workbench.search.registry import strategies
from workbench.search.space import SearchSpace
from workbench.search.strategies.gates import FWD_BWD_COST
from workbench.stats import Stats
from workbench.tasks.encoding import encode_task

FIRST, SECOND = "logit_diff", "logprob"


@pytest.fixture(scope="module")
def model64():
    """The tiny MLP + LayerNorm model in float64, so finite differences resolve 1e-6."""
    return tiny_model(attn_only=False, seed=1, dtype=torch.float64)


@pytest.fixture(scope="module")
def select_batch(model64, tiny_task):
    return encode_task(model64, tiny_task, "select")


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_gate_gradients_equal_finite_differences(model64, tiny_task, select_batch, kind):
    """autograd's gradient of the mean logprob (and of logit_diff, per example gates) with
    respect to interior gates equals central finite differences (`gradcheck`, float64)."""
    means = compute_head_means(model64, tiny_task) if kind == "mean" else None
    batch = select_batch.rows(slice(0, 6))
    L, H = model64.cfg.n_layers, model64.cfg.n_heads
    gen = torch.Generator().manual_seed(0)
    shared = 0.1 + 0.8 * torch.rand(1, L, H, generator=gen, dtype=torch.float64)
    per_example = 0.1 + 0.8 * torch.rand(len(batch), L, H, generator=gen, dtype=torch.float64)

    # `score_logits` rounds logits to float32, too coarse for finite differences: the
    # metrics are applied to the float64 logits of the gated forward
    def logits(g):
        return answer_logits(model64, batch, gate_hooks(model64, g, Ablation(kind, means)))

    def mean_logprob(g):
        return METRICS["logprob"](logits(g), batch).mean()

    def logit_diffs(g):
        return METRICS["logit_diff"](logits(g), batch)

    assert torch.autograd.gradcheck(mean_logprob, (shared.requires_grad_(),), eps=1e-6, atol=1e-6)
    assert torch.autograd.gradcheck(
        logit_diffs, (per_example.requires_grad_(),), eps=1e-6, atol=1e-6
    )
    # not a comparison of zeros: every head moves the logprob
    (grad,) = torch.autograd.grad(mean_logprob(shared), shared)
    assert (grad.abs() > 1e-6).all()


@pytest.mark.parametrize("kind", ["zero", "mean"])
def test_gates_at_zero_and_one_equal_mask_scorer(attn_model, tiny_task, kind):
    """Gates of exactly 0/1 give `MaskScorer`'s naive-reference scores of the mask `1 - g`,
    one gate row shared by the batch or one row per example."""
    means = compute_head_means(attn_model, tiny_task) if kind == "mean" else None
    batch = encode_task(attn_model, tiny_task, "select")
    L, H = attn_model.cfg.n_layers, attn_model.cfg.n_heads
    gen = torch.Generator().manual_seed(1)
    masks = (torch.rand(6, L, H, generator=gen) < 0.4).float()
    masks[0] = 0.0  # the clean run
    masks[1] = 1.0  # every head removed
    ref = MaskScorer(attn_model, batch, Ablation(kind, means), reuse_prefix=False).score(masks)
    with torch.no_grad():
        for i, mask in enumerate(masks):
            got = gated_scores(attn_model, batch, (1.0 - mask)[None], Ablation(kind, means))
            for metric in ref:
                assert_close(got[metric], ref[metric][i], msg=f"mask {i}, {metric}")
        # one mask per example: example j gets mask j % 6
        rows = torch.arange(len(batch)) % len(masks)
        got = gated_scores(attn_model, batch, 1.0 - masks[rows], Ablation(kind, means))
    for metric in ref:
        expected = ref[metric][rows, torch.arange(len(batch))]
        assert_close(got[metric], expected, msg=metric)


def test_hard_concrete_samples_match_the_l0_probability():
    """Samples lie in [0, 1], are exactly 0 or 1 with positive frequency, and are open
    (> 0) with the probability the L0 penalty uses."""
    log_alpha = torch.tensor([-2.0, 0.0, 1.0, 3.0])
    gen = torch.Generator().manual_seed(0)
    n = 40_000
    u = torch.rand(n, 4, generator=gen).clamp(1e-6, 1 - 1e-6)
    z = hard_concrete(log_alpha, u)
    assert float(z.min()) == 0.0 and float(z.max()) == 1.0
    assert ((z > 0) & (z < 1)).any()
    frac_open = (z > 0).double().mean(0)
    p = open_probability(log_alpha).double()
    # binomial standard error at n = 40000 is at most 0.0025; 4 of them
    assert_close(frac_open, p, atol=0.01, rtol=0.0)
    assert (frac_open.diff() > 0).all()  # more open as log_alpha grows


def _planted_space(pm, **kw):
    heads = select_candidates(
        screen_heads(pm.model, pm.task, stats=Stats(n_boot=200)), FIRST, SECOND, 8
    )
    scorer = MaskScorer(
        pm.model, encode_task(pm.model, pm.task, "select"), compute=Compute(masks_per_pass=16)
    )
    kw = {"max_size": 3, **kw}
    return SearchSpace(
        scorer, candidate_heads(heads), FIRST, SECOND, seed=0, pool=search_pool(heads, FIRST), **kw
    )


@pytest.fixture(scope="module")
def single_plant():
    """4 x 4 heads: one harmful single (2.0 nats), helpful and noise heads, nothing else."""
    return planted_model(
        PlantSpec(
            n_layers=4,
            n_heads=4,
            single_gains=(2.0,),
            pair_gains=(),
            triple_gains=(),
            backup=None,
            seed=1,
        )
    )


def test_gates_find_a_planted_single(single_plant):
    pm = single_plant
    (single,) = [h for h, r in pm.roles.items() if r == "single"]
    space = _planted_space(pm)
    gate_search(space)
    sets, best = best_sets(pd.DataFrame(space.records), FIRST, SECOND, 3)
    assert sets[1] == pm.best[1] == f"L{single[0]}H{single[1]}"
    # larger sets add noise heads that happen to help on this split, never without the single
    assert all(pm.best[1] in sets[k].split(",") for k in (2, 3))
    notes = space.notes["gates"]
    assert next(iter(notes["push"])) == pm.best[1]  # the largest push
    # the budget (2.5 n + 500) pays for training and every set scored
    n_ex = space.n_examples
    steps = notes["settings"]["steps"]
    train = steps * FWD_BWD_COST * min(8, n_ex) / n_ex
    assert_close(notes["forward_eq"]["training"], train)
    n_sets = len({r["heads"] for r in space.records})
    assert train + n_sets <= notes["budget"] == default_budget(16)
    assert_close(space.forward_eq, train + n_sets)  # not raced: every set on every example


def test_gates_are_seeded(single_plant):
    """The same seed gives the same pushes; another seed gives other samples."""
    pm = single_plant
    batch = encode_task(pm.model, pm.task, "select")
    pool = [(l, h) for l in range(4) for h in range(4)]
    fit = [
        train_gates(pm.model, batch, FIRST, pool, GateSettings(steps=20), seed=s) for s in (0, 0, 1)
    ]
    assert torch.equal(fit[0].push, fit[1].push)
    assert torch.equal(fit[0].log_alpha, fit[1].log_alpha)
    assert not torch.equal(fit[0].push, fit[2].push)
    assert_close(fit[0].forward_eq, 20 * FWD_BWD_COST * 8 / len(batch))


@pytest.mark.slow
def test_push_sees_an_or_pair_that_the_gradient_at_one_does_not():
    """On the planted micro model (a single, an OR pair, an OR triple) the members'
    gradients at every gate open are 0 (saturated), but their push after training is
    positive and above every noise head's."""
    pm = planted_model(
        PlantSpec(
            n_layers=6,
            n_heads=4,
            single_gains=(2.0,),
            pair_gains=(5.0,),
            triple_gains=(9.0,),
            seed=3,
        )
    )
    batch = encode_task(pm.model, pm.task, "select")
    keep = torch.ones(1, 6, 4, requires_grad=True)
    (grad,) = torch.autograd.grad(gated_scores(pm.model, batch, keep)[FIRST].mean(), keep)
    members = [m for group in pm.groups for m in group[0]]
    noise = [h for h, r in pm.roles.items() if r == "noise"]
    single = next(h for h, r in pm.roles.items() if r == "single")
    assert max(abs(float(grad[0][m])) for m in members) < 1e-12
    assert abs(float(grad[0][single])) > 1.0
    pool = members + noise + [single]
    fit = train_gates(pm.model, batch, FIRST, pool, GateSettings(), seed=0)
    push_noise = max(float(fit.push[h]) for h in noise)
    # seeds 0-2: members' push 1.58-4.07, the largest noise push 0.014-0.017
    assert min(float(fit.push[m]) for m in members) > max(10 * push_noise, 0.5)


def test_bad_gate_settings_are_clear_errors(single_plant, attn_model, tiny_task):
    for bad, match in [
        ({"steps": 0}, "gate steps must be a positive integer"),
        ({"batch_size": 0}, "gate batch_size must be a positive integer"),
        ({"lr": -0.1}, "gate lr must be a finite number > 0"),
        ({"penalty": float("nan")}, "gate penalty must be a finite number >= 0"),
        ({"init": float("inf")}, "gate init"),
    ]:
        with pytest.raises(WorkbenchError, match=match):
            GateSettings(**bad)
    space = _planted_space(single_plant)
    with pytest.raises(WorkbenchError, match="search budget 40 leaves no room"):
        gate_search(space, GateSettings(steps=200, search_budget=40))  # 200 x 3 x 8 / 64 = 75 > 40
    # accuracy without a secondary metric has no gradient
    heads = select_candidates(
        screen_heads(attn_model, tiny_task, stats=Stats(n_boot=50)), "accuracy", None, 4
    )
    scorer = MaskScorer(attn_model, encode_task(attn_model, tiny_task, "select"))
    space = SearchSpace(scorer, candidate_heads(heads), "accuracy", None, max_size=2)
    with pytest.raises(WorkbenchError, match="differentiable target"):
        gate_search(space)
    # a custom metric runs the model itself: no logits to differentiate
    custom = MaskScorer(
        attn_model,
        encode_task(attn_model, tiny_task, "select"),
        metric=lambda m, d: torch.zeros(len(d)),
    )
    with pytest.raises(WorkbenchError, match="needs the task's logits"):
        gate_search(SearchSpace(custom, [], "metric", None))


def test_gates_is_a_registered_strategy():
    assert strategies()["gates"].function() is gate_search


def test_gates_default_budget_is_the_interaction_searchs(single_plant):
    """Sets of at most 2 heads get half the budget, as `default_budget` gives interaction."""
    space = _planted_space(single_plant, max_size=2)
    gate_search(space, GateSettings(steps=5))
    assert space.notes["gates"]["budget"] == default_budget(16, 2) < default_budget(16)
