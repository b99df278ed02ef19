"""Did removing a head help through its own output, or through later layers?

`ablation_outcomes` ablates the whole head set once and sorts the examples into those it
fixes (wrong -> right), breaks (right -> wrong) and leaves alone. `removal_vs_dla` then
ablates each head alone (zero or mean ablation at `hook_z`, as in `workbench.ablation`) and
splits the change in the answer-minus-wrong logit difference per example into the head's
*direct effect*, the change in its own direct logit attribution when its output is replaced
by the ablated one at the clean final-norm scale (and the clean scale of a post-attention
norm, `workbench.explain.dla.attention_writes`; `-dla_diff` for zero ablation), and the
*indirect effect*, the rest, which went through later layers or the final norm's scale.
Mean ablation uses the means over the task's `select` split (where CEL chose the heads)
unless means are given (`default_means`); `removal_table` builds the table from a `capture`
and its `attribute`, for `explain_heads`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import AblationKind, HeadMeans, ablation_hooks, compute_head_means
from workbench.explain.capture import Capture, as_batch, attach_outcome, capture
from workbench.explain.dla import (
    Attribution,
    attention_writes,
    attribute,
    logit_directions,
)
from workbench.heads import HeadSet, HeadSpec
from workbench.metrics.scores import answer_logits, evaluate, is_bridge, logprob
from workbench.scoring.scorer import clean_resid_pre
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task

OUTCOMES = ("fixed", "broken", "unchanged")


def default_means(
    model, batch: TaskBatch, kind: AblationKind, means: HeadMeans | None
) -> HeadMeans | None:
    """Means for mean ablation when none are given: over the task's `select` split (where CEL
    chose the heads), or over the whole batch if it has no such split."""
    if kind is not AblationKind.MEAN or means is not None:
        return means
    task = batch.task
    if any(e.split == "select" for e in task.examples):
        task = task.subset("select")
    return compute_head_means(model, task)


def ablation_outcomes(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
) -> pd.DataFrame:
    """Which examples ablating the whole head set fixes, breaks or leaves alone.

    Returns:
        One row per example: `id, split, group, correct_clean, correct_ablated, outcome,
        logprob_clean, logprob_ablated, delta_logprob` (`outcome` is `"fixed"` for wrong ->
        right, `"broken"` for right -> wrong, else `"unchanged"`; log-probs in nats).
    """
    batch = as_batch(model, task, split)
    kind = AblationKind.parse(kind)
    means = default_means(model, batch, kind, means)
    clean = evaluate(model, batch)
    abl = evaluate(model, batch, heads=HeadSet.of(model, heads), kind=kind, means=means)
    before, after = clean["correct"].to_numpy(), abl["correct"].to_numpy()
    outcome = np.where(after > before, "fixed", np.where(after < before, "broken", "unchanged"))
    return pd.DataFrame(
        {
            "id": clean["id"],
            "split": clean["split"],
            "group": clean["group"],
            "correct_clean": before,
            "correct_ablated": after,
            "outcome": outcome,
            "logprob_clean": clean["logprob"],
            "logprob_ablated": abl["logprob"],
            "delta_logprob": abl["logprob"] - clean["logprob"],
        }
    )


def _fill_output(
    model,
    kind: AblationKind,
    means: HeadMeans | None,
    layer: int,
    head: int,
    pos: Tensor,
    per_position: bool,
) -> Float[Tensor, "batch d_model"]:
    """What the ablated head writes at each answer position instead of its own output."""
    W_O = model.W_O[layer, head].float()
    if kind is AblationKind.ZERO:
        return torch.zeros(len(pos), W_O.shape[-1], device=W_O.device)
    if per_position:
        return means.per_position[pos, layer, head].float() @ W_O
    return (means.averaged[layer, head].float() @ W_O).expand(len(pos), -1)


def _mean_logit(logits: Tensor, ids: Tensor) -> Tensor:
    valid = (ids >= 0).float()
    return (logits.gather(1, ids.clamp(min=0)) * valid).sum(-1) / valid.sum(-1)


def removal_table(
    model,
    cap: Capture,
    att: Attribution,
    heads: HeadSet,
    kind: AblationKind,
    means: HeadMeans | None,
    per_position: bool,
    outcomes: pd.DataFrame | None,
    batch_size: int,
) -> pd.DataFrame:
    """`removal_vs_dla`'s table from a capture and its `attribute`."""
    batch = cap.batch
    answer_ids, wrong_ids = batch.answer_ids, att.wrong_ids
    clean_diff = _mean_logit(cap.logits, answer_ids) - _mean_logit(cap.logits, wrong_ids)
    clean_lp = logprob(cap.logits, batch)
    d_answer, _ = logit_directions(model, answer_ids)
    d_wrong, _ = logit_directions(model, wrong_ids)
    removed = _removal_logits(model, batch, list(heads), kind, means, per_position, batch_size)
    frames = []
    for layer, head in heads:
        logits = removed[(layer, head)]
        with torch.no_grad():
            own = torch.einsum("be,ed->bd", cap.z[:, layer, head], model.W_O[layer, head].float())
            delta_out = attention_writes(
                model,
                cap,
                _fill_output(model, kind, means, layer, head, batch.answer_pos, per_position) - own,
                layer,
            )
            direct = (delta_out * (d_answer - d_wrong)).sum(-1) / cap.scale
        delta_diff = _mean_logit(logits, answer_ids) - _mean_logit(logits, wrong_ids) - clean_diff
        frames.append(
            pd.DataFrame(
                {
                    "id": batch.task.ids,
                    "layer": layer,
                    "head": head,
                    "head_name": head_name(layer, head),
                    "dla_correct": att.answer["head"][:, layer, head].cpu().numpy(),
                    "dla_diff": att.diff("head")[:, layer, head].cpu().numpy(),
                    "direct_effect": direct.cpu().numpy(),
                    "delta_logit_diff": delta_diff.cpu().numpy(),
                    "indirect_effect": (delta_diff - direct).cpu().numpy(),
                    "delta_logprob": (logprob(logits, batch) - clean_lp).cpu().numpy(),
                }
            )
        )
    df = pd.concat(frames, ignore_index=True)
    return attach_outcome(df, outcomes)


def _removal_logits(model, batch: TaskBatch, heads: list, kind: AblationKind,
                    means: HeadMeans | None, per_position: bool, batch_size: int
                    ) -> dict[tuple[int, int], Tensor]:
    """Each head's answer logits with it alone removed, per mini-batch of `batch_size`: one
    clean pass up to the highest head's layer keeps the residual entering each head's layer,
    and each head's pass restarts there (the layers before it are the clean run's, computed
    on the same rows: the same numbers as a pass from the embedding, in ~(L - l) / L of its
    time). A TransformerBridge, which cannot start at a layer, runs each from the embedding."""
    layers = sorted({layer for layer, _ in heads})
    restart = not is_bridge(model) and layers[-1] > 0
    hooks = {h: ablation_hooks(model, [h], kind, means, per_position) for h in heads}
    out: dict[tuple[int, int], list[Tensor]] = {h: [] for h in heads}
    with torch.no_grad():
        for s in range(0, len(batch), batch_size):
            sub = batch.rows(slice(s, s + batch_size))
            # a head in layer 0 runs from the embedding
            resid = clean_resid_pre(model, sub.tokens, [l for l in layers if l > 0]) \
                if restart else {}
            for layer, head in heads:
                at = resid.get(layer)
                out[(layer, head)].append(answer_logits(
                    model, sub, hooks[(layer, head)], resid=at,
                    start_at_layer=layer if at is not None else None).float())
    return {h: torch.cat(v) for h, v in out.items()}


def removal_vs_dla(
    model,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    per_position: bool = False,
    outcomes: pd.DataFrame | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Did removing each head help directly, or through later layers?

    Each head is ablated alone (`kind`; mean ablation uses `means`, by default the means over
    the task's `select` split). Its *direct effect* is the change in its own direct logit
    attribution to the answer-minus-wrong difference (its output replaced by the ablated one,
    at the clean final-norm scale): `-dla_diff` for zero ablation. The rest of the change,
    `indirect_effect`, went through later layers or the final norm's scale.

    Returns:
        One row per (example, head): `id, layer, head, head_name, [outcome,] dla_correct,
        dla_diff, direct_effect, delta_logit_diff, indirect_effect, delta_logprob` (nats;
        `delta_* = ablated - clean`; `delta_logit_diff = direct_effect + indirect_effect`).
    """
    batch = as_batch(model, task, split)
    kind = AblationKind.parse(kind)
    means = default_means(model, batch, kind, means)
    cap = capture(model, batch, batch_size)
    return removal_table(
        model,
        cap,
        attribute(model, cap),
        HeadSet.of(model, heads),
        kind,
        means,
        per_position,
        outcomes,
        batch_size,
    )
