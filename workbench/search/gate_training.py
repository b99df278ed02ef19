"""Learned head gates: a search strategy that trains a continuous mask, then scores sets exactly.

Each head gets a gate `g` in [0, 1] that mixes its output at `hook_z`: `z -> g z + (1 - g)
fill` (fill 0 for zero ablation, the head's mean for mean ablation, its counterfactual `z`
for resample), so `g = 1` keeps the head and `g = 0` removes it exactly as a 0/1 mask does
(masks use the opposite convention: 1 = ablated). This is the learnable-mask view of head
importance (Michel et al. 2019), of Causal Head Gating (Nam et al. 2025) and of Edge Pruning
(Bhaskar et al. 2024): gradients of the task with respect to the gates say which heads to
remove, for the cost of forward and backward passes rather than one forward per head set.

Why gradients alone are not enough, and what is done about it. At the model's own point
(every gate at 1) the gradient of a head is first-order attribution (Michel et al.'s
importance). A head that matters only together with another (an OR pair: either member
alone keeps the behaviour) has gradient 0 there: the behaviour is saturated. On the planted
models of `bench/recall.py` every OR member's gradient at `g = 1` is exactly 0 in float32,
at 144 to 1024 heads (`docs/recall.md`). So the gates are *stochastic* and *learned*:
hard-concrete gates (Louizos et al. 2018) with a learned log-odds `log_alpha` per head,
each example of each step drawing its own gate sample, an L0 penalty (the expected number
of open gates) pushing toward removal, Adam on `log_alpha`. Heads that the task needs stay
open; the others drift toward removal, and the samples then remove pairs and triples
together often enough for the gradient to see them. A head's *push* is the mean of
`-d target / d g` over every sample of training, taken at the sampled value also where it
is exactly 0 or 1 (positive: closing the gate raised the target): the gradient analogue of
the interaction search's knockout main effects, at the learned gate distribution instead
of at `g = 1`. (Deterministic sigmoid gates with an L1 penalty missed the planted pairs and
triples: their steps jump over the narrow band of gate values where the gradient is not 0.)

Rounding to sets: the pool heads with positive push, in push order (after the first
`screen_share` of single-head screening's candidates, as the interaction search picks its
finalists), as many as the budget left after training allows for every set of size
1..`max_size`; every such set is scored exactly through the `SearchSpace`, as every
strategy's sets are. Budget accounting: one forward plus backward over an example counts
3 forward-equivalents (the backward's two matrix products per forward one; with frozen
weights the backward needs only one of them, so 3 is an upper bound; the wall-time ratio
measured 2.2-2.8 on the planted models), and a step over
`batch_size` of the `n` selection examples counts `3 batch_size / n`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import partial

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, compute_resample_z
from workbench.errors import WorkbenchError
from workbench.heads import Head
from workbench.hooked import HookedModel
from workbench.logits import answer_logits
from workbench.metric_records import names_where, record, scored_names
from workbench.metrics.scores import get_metric, score_logits
from workbench.search.finalists import finalist_sets, max_finalists, pick_finalists
from workbench.search.strategies.gates import (
    DEFAULT_STEPS,
    FWD_BWD_COST,
    GateSettings,
    training_steps,
)
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch

# Hard-concrete stretch interval and temperature (Louizos et al. 2018's defaults, also Edge
# Pruning's): samples of `sigmoid((logit u + log_alpha) / BETA)` stretched to (GAMMA, ZETA)
# and clipped to [0, 1], so a gate is exactly 0 or 1 with positive probability.
GAMMA, ZETA, BETA = -0.1, 1.1, 2.0 / 3.0
@dataclass
class GateFit:
    """What gate training returns.

    Attributes:
        log_alpha: the learned log-odds, `[layer, head_index]` (NaN off the pool).
        push: mean `-d target / d g` over every gate sample, `[layer, head_index]` (NaN off
            the pool); positive where closing the gate raised the target.
        steps: the steps taken; forward_eq: their cost (module docstring).
    """

    log_alpha: Float[Tensor, "layer head_index"]
    push: Float[Tensor, "layer head_index"]
    steps: int
    forward_eq: float


def hard_concrete(log_alpha: Tensor, u: Tensor) -> Tensor:
    """Hard-concrete gate samples (1 = keep) for uniform noise `u` in (0, 1)."""
    s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / BETA)
    return (s * (ZETA - GAMMA) + GAMMA).clamp(0.0, 1.0)


def open_probability(log_alpha: Tensor) -> Tensor:
    """P(gate > 0) of a hard-concrete gate: the L0 norm's expectation, per head."""
    return torch.sigmoid(log_alpha - BETA * math.log(-GAMMA / ZETA))


def _gate_hook(
    z: Float[Tensor, "batch pos head_index d_head"], hook, gate: Tensor, fill: Tensor | None
):
    g = gate[:, None, :, None].to(device=z.device, dtype=z.dtype)  # (B or 1, 1, H, 1)
    if fill is None:
        return z * g
    f = fill.to(device=z.device, dtype=z.dtype)
    if f.ndim == 2:  # averaged means: [head, d]
        f = f[None, None]
    elif f.ndim == 3:  # per-position means: [pos, head, d]
        if f.shape[0] < z.shape[1]:
            raise WorkbenchError(
                f"per-position means cover {f.shape[0]} positions but the input has "
                f"{z.shape[1]}; compute the means on prompts of this length"
            )
        f = f[None, : z.shape[1]]
    else:  # resample: [batch, pos, head, d], this batch's rows
        f = f[:, : z.shape[1]]
    return z * g + f * (1 - g)


def gate_hooks(
    model: HookedModel,
    gates: Float[Tensor, "batch layer head_index"],
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
) -> list[tuple[str, object]]:
    """Hooks at every layer's `hook_z` that mix each head by its gate (1 = keep, 0 = removed).

    Args:
        gates: one row of gates per example of the batch, or a single row for all of them;
            any dtype, differentiable.
        ablation: what a closed gate lets in; for resample ablation its `resample` is the
            counterfactual `z` of this batch's rows (`compute_resample_z`).
    """
    ablation = Ablation.of(ablation)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    if gates.ndim != 3 or tuple(gates.shape[1:]) != (L, H):
        raise WorkbenchError(
            f"gates must be [batch, n_layers={L}, n_heads={H}]; got {tuple(gates.shape)}"
        )
    heads = list(range(H))
    return [
        (
            f"blocks.{l}.attn.hook_z",
            partial(
                _gate_hook,
                gate=gates[:, l],
                fill=ablation.fill(l, heads),
            ),
        )
        for l in range(L)
    ]


def gated_scores(
    model: HookedModel,
    batch: TaskBatch,
    gates: Float[Tensor, "batch layer head_index"],
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
) -> dict[str, Float[Tensor, " batch"]]:
    """Every metric of `score_logits`, per example, with each head mixed by its gate; with
    gates of exactly 0 and 1 these are `MaskScorer`'s scores of the mask `1 - gates`.
    Differentiable in `gates` (accuracy is piecewise constant)."""
    hooks = gate_hooks(model, gates, ablation)
    return score_logits(answer_logits(model, batch, hooks), batch)


def train_gates(
    model: HookedModel,
    batch: TaskBatch,
    target: str,
    pool: Sequence[Head],
    settings: GateSettings,
    seed: int = 0,
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
) -> GateFit:
    """Train hard-concrete gates on `pool`'s heads (the other heads stay open) to raise the
    mean `target` with an L0 penalty toward removal; record every head's push.

    Args:
        batch: the examples to train on (the selection split).
        target: a metric of `workbench.metrics.scores.METRICS` other than accuracy.
        ablation: what a closed gate lets in.
        seed: seeds the example order and every gate sample.
    """
    ablation = Ablation.of(ablation)
    kind = ablation.kind
    metric = get_metric(target)
    if not record(target).differentiable:
        usable = ", ".join(names_where("differentiable", scored_names()))
        raise WorkbenchError(
            f"gates need a differentiable target ({usable}); got {target}, whose record says "
            "it has no useful gradient: give the task a secondary metric"
        )
    if not pool:
        raise WorkbenchError("gate training needs at least one head in the pool")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    steps = settings.steps or DEFAULT_STEPS
    n = len(batch)
    b = min(settings.batch_size, n)
    device = batch.tokens.device
    idx = torch.tensor([l * H + h for l, h in pool], device=device)
    log_alpha = torch.full((len(pool),), float(settings.init), device=device, requires_grad=True)
    opt = torch.optim.Adam([log_alpha], lr=settings.lr)
    rng = np.random.default_rng([seed, 17])
    resample = compute_resample_z(model, batch) if kind is AblationKind.RESAMPLE else None
    push = torch.zeros(len(pool), device=device, dtype=torch.float64)
    for _ in range(steps):
        rows = torch.as_tensor(rng.choice(n, size=b, replace=False), device=device)
        u = torch.as_tensor(rng.uniform(1e-6, 1 - 1e-6, size=(b, len(pool))), device=device)
        sample = hard_concrete(log_alpha, u.float())  # (b, P)
        leaf = sample.detach().requires_grad_(True)
        gates = torch.ones(b, L * H, device=device).index_copy(1, idx, leaf).view(b, L, H)
        sub = batch.rows(rows)
        hooks = gate_hooks(model, gates, ablation if resample is None
                           else replace(ablation, resample=resample[rows]))
        value = metric(answer_logits(model, sub, hooks).float(), sub)  # (b,)
        total = value[~torch.isnan(value)].sum()
        if total.requires_grad:
            (d_gate,) = torch.autograd.grad(total, leaf)  # (b, P): d target_i / d g
        else:  # no example has a value (all NaN): nothing to learn from this step
            d_gate = torch.zeros_like(leaf)
        push -= d_gate.double().sum(0)
        opt.zero_grad()
        # d(-mean target)/d log_alpha through the sample, plus the penalty's gradient
        (grad,) = torch.autograd.grad(sample, log_alpha, grad_outputs=-d_gate / b)
        pen = settings.penalty * open_probability(log_alpha).sum()
        (grad_pen,) = torch.autograd.grad(pen, log_alpha)
        log_alpha.grad = grad + grad_pen
        opt.step()
    full_alpha = torch.full((L * H,), float("nan"), device=device)
    full_push = torch.full((L * H,), float("nan"), device=device, dtype=torch.float64)
    full_alpha[idx] = log_alpha.detach()
    full_push[idx] = push / (steps * b)
    eq = steps * FWD_BWD_COST * b / n + (1.0 if resample is not None else 0.0)
    return GateFit(full_alpha.view(L, H), full_push.view(L, H), steps, eq)


def gate_search(space, settings: GateSettings | Mapping | None = None) -> None:
    """The `gates` strategy (module docstring): train gates on the pool, round them to the
    finalists the rest of the budget pays for, score every set of size 1..`max_size` among
    them exactly (raced when `space.adaptive`).

    The budget is `settings.search_budget` (default
    `workbench.search.finalists.default_budget`, interaction's), in forward-equivalents:
    training takes at most half of it unless `settings.steps` says otherwise, and adds its
    cost to `space.forward_eq`.
    """
    if not isinstance(settings, GateSettings):
        settings = GateSettings(**(settings or {}))
    scorer, model = space.scorer, space.model
    if getattr(scorer, "metric", None) is not None or not isinstance(scorer.data, TaskBatch):
        raise WorkbenchError(
            "the gates strategy needs the task's logits: a scorer over an encoded TaskBatch "
            "without a custom metric; use another strategy with a custom metric"
        )
    pool = space.pool_heads()
    if not pool:
        space.notes["gates"] = {"pool": 0}
        return
    budget = space.search_budget(settings.search_budget)
    target = space.regression_target
    n = space.n_examples
    ablation = getattr(scorer, "ablation", None) or Ablation(getattr(scorer, "kind", "zero"))
    kind = ablation.kind
    extra = 1.0 if kind is AblationKind.RESAMPLE else 0.0  # the counterfactual forward
    steps, step_eq = training_steps(budget, n, settings.steps, settings.batch_size, extra)
    left = budget - math.ceil(steps * step_eq + extra)
    if steps < 1 or left < 1:
        raise WorkbenchError(
            f"search budget {budget} leaves no room for gate training and sets: {steps} steps of "
            f"{min(settings.batch_size, n)} examples cost {steps * step_eq:.1f} "
            f"forward-equivalents; give a larger budget, or fewer steps or a smaller batch_size"
        )
    fit = train_gates(
        model,
        scorer.data,
        target,
        pool,
        GateSettings(**{**asdict(settings), "steps": steps}),
        seed=space.seed,
        ablation=ablation,
    )
    space.forward_eq += fit.forward_eq
    train_eq = space.forward_eq
    push = {h: float(fit.push[h]) for h in pool}
    pushed = sorted((h for h in pool if push[h] > 0), key=lambda h: -push[h])  # stable
    in_pool = set(pool)
    screened = [h for h in space.candidates if h in in_pool]
    k = max_finalists(left, space.max_size, len(set(screened) | set(pushed)))
    finalists = pick_finalists(screened, pushed, k, settings.screen_share)
    space.notes["gates"] = {
        "pool": len(pool),
        "budget": budget,
        "target": target,
        "settings": {**settings.training(), "steps": steps},
        "finalists": [head_name(*h) for h in finalists],
        "push": {head_name(*h): push[h] for h in pushed[: max(len(finalists), 20)]},
    }
    sets = finalist_sets(finalists, space.max_size)
    if sets:
        space.score_sets(sets, "gates")
    space.notes["gates"]["forward_eq"] = {
        "training": fit.forward_eq,
        "finalists": space.forward_eq - train_eq,
    }
