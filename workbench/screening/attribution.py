"""Attribution screening: a first-order estimate of every head's effect from one backward.

For a metric m and a head's activation z at `hook_z`, removing the head changes m by about
`grad(m) . (z_ablated - z_clean)`, summed over positions. One forward and one backward pass
per metric give this estimate for every head at once, per example (rows of a batch do not
interact, so the gradient of the summed metric is each example's gradient). Accuracy is not
differentiable; it is estimated by linearising the answer's margin over the best competitor
and counting sign flips. The estimate is exact for a model whose logits are affine in every
head's z (one attention layer, no normalization) and is checked against exact screening on
the real models (`check_attribution`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, replacement_z
from workbench.compute import DEFAULT_TOKEN_BUDGET, QUIET, Compute
from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import logits_at
from workbench.metric_records import record, registered
from workbench.metrics.scores import masked_gather, score_logits
from workbench.racing import example_order
from workbench.scoring.batching import length_buckets
from workbench.scoring.scorer import CustomMetric, as_score_dict
from workbench.tasks.encoding import TaskBatch


def _margin(logits: Float[Tensor, "batch d_vocab"], batch) -> Float[Tensor, " batch"]:
    """Best answer logit minus best competitor logit (over candidates if the task has them);
    accuracy is `margin > 0` up to ties."""
    answer = masked_gather(logits, batch.answer_ids).amax(-1)
    is_answer = (
        torch.zeros_like(logits).scatter_add_(
            1, batch.answer_ids.clamp(min=0), (batch.answer_ids >= 0).to(logits.dtype)
        )
        > 0
    )
    others = logits.masked_fill(is_answer, float("-inf"))
    if batch.candidate_ids is not None:
        competitor = masked_gather(others, batch.candidate_ids).amax(-1)
    else:
        competitor = others.amax(-1)
    return answer - competitor


def _keep_z(z: Tensor, hook, store: dict) -> Tensor:
    if not z.requires_grad:
        z = z.detach().requires_grad_(True)
    store.setdefault(hook.name, []).append(z)  # a custom metric may run several forwards
    return z


@contextmanager
def _frozen(model) -> Iterator[None]:
    """Parameters stop requiring gradients for the duration: the backward passes then build no
    weight-gradient work (measured: 6.5 s instead of 7.6 s for three on GPT-2-small shape)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    for p in trainable:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def _companions(scores: dict, metric) -> dict[str, str]:
    """The 0/1 scores of a custom metric that have no gradient, each with the differentiable
    companion it returns beside it (`Metric.companion`: a margin positive exactly where the
    score is 1). A score without a gradient that no record describes is refused in one line:
    its estimate would be NaN for every head and nothing could rank by it (a described one
    without a companion, such as `multi_token_metric`'s greedy `accuracy`, stays NaN)."""
    out = {}
    declared = getattr(metric, "metric_records", {})
    for name, value in scores.items():
        if metric is None or value.requires_grad:
            continue
        companion = record(name, metric).companion
        if companion is not None and companion in scores:
            out[name] = companion
        elif registered(name) is None and name not in declared:
            raise WorkbenchError(
                f"custom metric score {name!r} has no gradient, so attribution cannot estimate "
                "it; declare it with @declare(Metric(" + repr(name) + ", differentiable=False, "
                "coarse=True, companion='<a margin it also returns, > 0 exactly where it is "
                "1>')), or screen with method 'exact'")
    return out


def _with_companions(scores: dict, metric) -> dict:
    """The scores attribution differentiates: all but the 0/1 ones `_companions` estimates
    through their companions."""
    skip = _companions(scores, metric)
    return {k: v for k, v in scores.items() if k not in skip}


def attribution_effects(
    model: HookedModel,
    data,
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
    metric: CustomMetric | None = None,
    compute: Compute | None = None,
) -> tuple[dict[str, Tensor], dict[str, Float[Tensor, "n_heads batch"]]]:
    """First-order estimates of every head's per-example effect.

    Args:
        model, data, ablation, metric: as for `MaskScorer`.
        compute: its `token_budget` and `max_rows` bound each forward (None: the CPU's
            defaults, whatever the device: the backward keeps every layer's activations).

    Returns:
        `(clean, diffs)`: clean per-example scores `{metric: [batch]}`, and the estimated
        ablated-minus-clean differences `{metric: [n_layers * n_heads, batch]}` (row
        `layer * n_heads + head`).
    """
    ablation = Ablation.of(ablation)
    # a metric may name what attribution differentiates instead (a generation task's: no decode)
    metric = getattr(metric, "attribution_metric", metric)
    if ablation.kind is AblationKind.RESAMPLE:
        raise WorkbenchError(
            "attribution screening supports zero and mean ablation; use method 'exact' for "
            "resample ablation"
        )
    # the backward keeps every layer's activations: the CPU budgets, whatever the device
    compute = compute or QUIET
    token_budget = compute.token_budget or DEFAULT_TOKEN_BUDGET
    max_rows = compute.max_rows or 1024
    L, H = model.cfg.n_layers, model.cfg.n_heads
    names = [f"blocks.{l}.attn.hook_z" for l in range(L)]
    if metric is None and not isinstance(data, TaskBatch):
        raise WorkbenchError(
            f"without a custom metric the data must be an encoded TaskBatch; got "
            f"{type(data).__name__}"
        )
    # Task rows are bucketed by length under the token budget, as are those of a custom metric
    # declared `one_forward`. Another custom metric on a TaskBatch runs one example at a time:
    # every forward it makes (a multi-token answer's rows) is then that example's, and its
    # estimate sums over them. Other custom data is one chunk.
    declared = metric is not None and getattr(metric, "one_forward", False)
    bucketed = metric is None or (declared and isinstance(data, TaskBatch))
    if bucketed:
        chunks = length_buckets(data.lengths, token_budget, max_rows)
    elif isinstance(data, TaskBatch):
        chunks = [([i], 0) for i in range(len(data))]
    else:
        chunks = [(None, 0)]
    clean_parts: dict[str, list[Tensor]] = {}
    diff_parts: dict[str, list[Tensor]] = {}
    for rows, width in chunks:
        store: dict[str, Tensor] = {}
        hooks = [(n, partial(_keep_z, store=store)) for n in names]
        with torch.enable_grad(), _frozen(model), model.hooks(fwd_hooks=hooks):
            if metric is not None:
                sub = data if rows is None else data.rows(rows)
                scores = as_score_dict(metric(model, sub), "attribution run")
                differentiable = _with_companions(scores, metric)
            else:
                sub = data.rows(rows)
                logits = logits_at(model, sub.tokens[:, :width], sub.answer_pos).float()
                scores = score_logits(logits, sub)
                # Accuracy is `margin > 0`; its estimate linearises the margin. Every other
                # registered metric is differentiable as it is.
                differentiable = {**scores, "accuracy": _margin(logits, sub)}
        n_rows = next(iter(scores.values())).shape[0]
        one_pass = not any(len(store.get(n, [])) != 1 or store[n][0].shape[0] != n_rows
                           for n in names)
        ran = [tuple(z.shape[:1]) for z in store.get(names[0], [])]
        if rows is None and not one_pass:
            raise WorkbenchError(
                "attribution with a custom metric on custom data needs one forward over the "
                f"data's {n_rows} rows; this metric ran {ran} (rows per forward); pass the "
                "data as a TaskBatch, or use method 'exact'"
            )
        if metric is not None and bucketed and (not one_pass or n_rows != len(rows)):
            raise WorkbenchError(
                f"the custom metric is declared `one_forward`, but on {len(rows)} examples "
                f"it ran {ran} (rows per forward) and returned {n_rows} scores; drop the "
                "declaration (attribution then runs one example at a time)"
            )
        zs = [(layer, z) for layer, n in enumerate(names) for z in store.get(n, [])]
        names_out = list(differentiable)
        for j, name in enumerate(names_out):
            value = differentiable[name]
            finite = torch.isfinite(value)
            if not value.requires_grad or not bool(finite.any()):
                est = torch.full((L * H, value.shape[0]), float("nan"), device=value.device)
            else:
                grads = torch.autograd.grad(
                    value[finite].sum(), [z for _, z in zs],
                    retain_graph=j < len(names_out) - 1, allow_unused=True,
                )
                per_head = torch.zeros(L, H, n_rows, device=value.device)
                for (layer, z), g in zip(zs, grads, strict=True):
                    if g is None:
                        continue
                    delta = replacement_z(z.detach(), ablation.kind, ablation.means, layer,
                                          ablation.per_position) - z.detach()
                    effect = torch.einsum("bthd,bthd->hb", g, delta).to(per_head.device)
                    if effect.shape[1] != n_rows:  # one example's rows all count towards it
                        effect = effect.sum(1, keepdim=True)
                    per_head[layer] += effect
                est = per_head.flatten(0, 1).float()  # (L * H, batch)
                est = est.masked_fill(~finite[None], float("nan"))
            if metric is None and not record(name).differentiable:  # accuracy's 0/1
                m = value.detach()
                est = (m[None] + est > 0).float() - (m > 0).float()[None]
            diff_parts.setdefault(name, []).append(est.detach())
            clean_parts.setdefault(name, []).append(scores[name].detach())
        for name, companion in _companions(scores, metric).items():  # 0/1 scores, by sign
            m, est = scores[companion].detach(), diff_parts[companion][-1]
            diff_parts.setdefault(name, []).append(
                (m[None] + est > 0).float() - (m > 0).float()[None])
            clean_parts.setdefault(name, []).append(scores[name].detach())
        del store, zs
    clean = {k: torch.cat(v) for k, v in clean_parts.items()}
    diffs = {k: torch.cat(v, dim=-1) for k, v in diff_parts.items()}
    if bucketed:  # back from length order to the data's row order
        order = torch.tensor([i for rows, _ in chunks for i in rows], dtype=torch.long)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order))
        clean = {k: v[inverse.to(v.device)] for k, v in clean.items()}
        diffs = {k: v[:, inverse.to(v.device)] for k, v in diffs.items()}
    return clean, diffs


def attribution_diffs(model: HookedModel, data, ablation, metric, heads, compute, plan, counter,
                      desc):
    """Attribution estimates every head from one backward per metric; with `max_examples`,
    on the first that many examples of the racing order (as exact screening scores them)."""
    n_ex = len(data) if isinstance(data, TaskBatch) else None
    if plan.max_examples is None or n_ex is None or plan.max_examples >= n_ex:
        return attribution_effects(model, data, ablation, metric, compute)
    rows = example_order(n_ex, plan.seed)[: plan.max_examples]
    clean, est = attribution_effects(model, data.rows(rows), ablation, metric, compute)
    full_clean, full_est = {}, {}
    for name, v in clean.items():
        full_clean[name] = torch.full((n_ex,), float("nan"), device=v.device, dtype=v.dtype)
        full_clean[name][rows.to(v.device)] = v
    for name, v in est.items():
        full_est[name] = torch.full((v.shape[0], n_ex), float("nan"), device=v.device,
                                    dtype=v.dtype)
        full_est[name][:, rows.to(v.device)] = v
    return full_clean, full_est
