"""Did removing a head help through its own output, or through later layers?

`ablation_outcomes` ablates the whole head set once and sorts the examples into those it
fixes (wrong -> right), breaks (right -> wrong) and leaves alone, with each example's change
in every metric (`d_<metric>`, as the confirmation defines it); `set_effect` is their mean
with its interval, computed as the confirmation computes its `d_<metric>` columns
(`workbench.stats.effect_summary`), so on the same set, examples and ablation it is the
confirmation's number. `removal_vs_dla` then ablates each head alone (zero or mean ablation at
`hook_z`, as in `workbench.ablation`) and splits the change in `mean_logit_diff` (the mean
answer logit minus the mean wrong logit: the quantity direct logit attribution splits exactly,
`docs/explain.md` *Names*) per example into the head's *direct effect*, the change in its own
direct logit attribution when its output is replaced by the ablated one at the clean
final-norm scale (and the clean scale of a post-attention norm,
`workbench.explain.dla.attention_writes`; `-dla_diff` for zero ablation), and the *indirect
effect*, the rest, which went through later layers or the final norm's scale; beside it the
change in the metric `logit_diff` itself. Mean ablation uses the means over the task's
`select` split (where CEL chose the heads, as `run_cel` does) unless means are given
(`default_means`); `removal_table` builds the table from a `capture` and its `attribute`, for
`explain_heads`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import Ablation, AblationKind, HeadMeans, compute_head_means
from workbench.deprecation import renamed_keywords
from workbench.explain.capture import Capture, as_batch, attach_outcome, capture
from workbench.explain.dla import (
    Attribution,
    attention_writes,
    attribute,
    logit_directions,
)
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.logits import answer_logits, is_bridge
from workbench.metrics.scores import evaluate, logit_diff, logprob
from workbench.scoring.cache import clean_resid_pre
from workbench.stats import Stats, effect_summary
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task, load_task

OUTCOMES = ("fixed", "broken", "unchanged")
# the metrics whose change `ablation_outcomes` records per example and `set_effect` averages
SET_METRICS = ("accuracy", "logprob", "logit_diff", "prob_diff")


def default_means(
    model: HookedModel, task: Task | TaskBatch | str, kind: AblationKind, means: HeadMeans | None
) -> HeadMeans | None:
    """Means for mean ablation when none are given: over the `select` split of `task` (the
    task as given, before a split is picked: where CEL chose the heads, and the means `run_cel`
    ablates with), or over all of its examples if it has no such split."""
    if kind is not AblationKind.MEAN or means is not None:
        return means
    if isinstance(task, str):
        task = load_task(task)
    source = task.task if isinstance(task, TaskBatch) else task
    if any(e.split == "select" for e in source.examples):
        source = source.subset("select")
    return compute_head_means(model, source)


@renamed_keywords(holders={"ablation": Ablation.of}, kind="ablation.kind",
                  means="ablation.means")
def ablation_outcomes(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
) -> pd.DataFrame:
    """Which examples ablating the whole head set fixes, breaks or leaves alone (mean
    ablation without means: `default_means`).

    Returns:
        One row per example: `id, split, group, correct_clean, correct_ablated, outcome`
        (`"fixed"` for wrong -> right, `"broken"` for right -> wrong, else `"unchanged"`), and
        for each metric `m` of `SET_METRICS` `m_clean, m_ablated, d_m` (`d_m = m_ablated -
        m_clean`, the per-example change the confirmation's `d_m` averages; `accuracy` is
        `correct`; NaN where the metric does not apply: `logit_diff` and `prob_diff` without a
        wrong answer; nats for log-probs and logits).
    """
    batch = as_batch(model, task, split)
    ablation = Ablation.of(ablation)
    means = default_means(model, task, ablation.kind, ablation.means)
    clean = evaluate(model, batch)
    abl = evaluate(model, batch, heads=HeadSet.of(model, heads), kind=ablation.kind,
                   means=means, per_position=ablation.per_position)
    before, after = clean["correct"].to_numpy(), abl["correct"].to_numpy()
    outcome = np.where(after > before, "fixed", np.where(after < before, "broken", "unchanged"))
    out = {"id": clean["id"], "split": clean["split"], "group": clean["group"],
           "correct_clean": before, "correct_ablated": after, "outcome": outcome,
           "d_accuracy": (after - before).astype(float)}
    for m in SET_METRICS[1:]:  # evaluate's columns of the same names
        out |= {f"{m}_clean": clean[m], f"{m}_ablated": abl[m], f"d_{m}": abl[m] - clean[m]}
    return pd.DataFrame(out)


def set_effect(outcomes: pd.DataFrame, heads: HeadSet | str, kind: AblationKind | str,
               stats: Stats | None = None, groups=None) -> pd.DataFrame:
    """The whole set's effect, as the confirmation reports it: each metric's mean change over
    the examples of `ablation_outcomes` with its standard error and interval
    (`workbench.stats.effect_summary`, clustered by `groups` when given) and the examples it
    rests on.

    Returns:
        One row: `heads, kind`, then for each metric `m` of `SET_METRICS` that applies to some
        example `d_m, d_m_se, d_m_lo, d_m_hi, d_m_n` (the confirmation table's columns of the
        same names).
    """
    stats = stats or Stats()
    row: dict = {"heads": str(heads), "kind": AblationKind.parse(kind).value}
    for m in SET_METRICS:
        d = torch.tensor(outcomes[f"d_{m}"].to_numpy(dtype=np.float32))[None]  # (1, batch)
        if not bool((~torch.isnan(d)).any()):
            continue
        summary = effect_summary(d, stats.n_boot, stats.seed, stats.ci, groups)
        for suffix, v in summary.items():
            row[f"d_{m}{suffix}"] = int(v[0]) if suffix == "_n" else float(v[0])
    return pd.DataFrame([row])


def _fill_output(
    model, ablation: Ablation, layer: int, head: int, pos: Tensor
) -> Float[Tensor, "batch d_model"]:
    """What the ablated head writes at each answer position instead of its own output."""
    W_O = model.W_O[layer, head].float()
    means = ablation.means
    if ablation.kind is AblationKind.ZERO:
        return torch.zeros(len(pos), W_O.shape[-1], device=W_O.device)
    if ablation.per_position:
        return means.per_position[pos, layer, head].float() @ W_O
    return (means.averaged[layer, head].float() @ W_O).expand(len(pos), -1)


def _mean_logit(logits: Tensor, ids: Tensor) -> Tensor:
    valid = (ids >= 0).float()
    return (logits.gather(1, ids.clamp(min=0)) * valid).sum(-1) / valid.sum(-1)


def removal_table(
    model: HookedModel,
    cap: Capture,
    att: Attribution,
    heads: HeadSet,
    ablation: Ablation,
    outcomes: pd.DataFrame | None,
    batch_size: int,
) -> pd.DataFrame:
    """`removal_vs_dla`'s table from a capture and its `attribute` (`ablation` with its
    means)."""
    batch = cap.batch
    answer_ids, wrong_ids = batch.answer_ids, att.wrong_ids
    clean_diff = _mean_logit(cap.logits, answer_ids) - _mean_logit(cap.logits, wrong_ids)
    clean_lp, clean_ld = logprob(cap.logits, batch), logit_diff(cap.logits, batch)
    d_answer, _ = logit_directions(model, answer_ids)
    d_wrong, _ = logit_directions(model, wrong_ids)
    removed = _removal_logits(model, batch, list(heads), ablation, batch_size)
    frames = []
    for layer, head in heads:
        logits = removed[(layer, head)]
        with torch.no_grad():
            own = torch.einsum("be,ed->bd", cap.z[:, layer, head], model.W_O[layer, head].float())
            delta_out = attention_writes(
                model,
                cap,
                _fill_output(model, ablation, layer, head, batch.answer_pos) - own,
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
                    "d_mean_logit_diff": delta_diff.cpu().numpy(),
                    "indirect_effect": (delta_diff - direct).cpu().numpy(),
                    "d_logit_diff": (logit_diff(logits, batch) - clean_ld).cpu().numpy(),
                    "d_logprob": (logprob(logits, batch) - clean_lp).cpu().numpy(),
                }
            )
        )
    df = pd.concat(frames, ignore_index=True)
    return attach_outcome(df, outcomes)


def _removal_logits(model, batch: TaskBatch, heads: list, ablation: Ablation, batch_size: int
                    ) -> dict[tuple[int, int], Tensor]:
    """Each head's answer logits with it alone removed, per mini-batch of `batch_size`: one
    clean pass up to the highest head's layer keeps the residual entering each head's layer,
    and each head's pass restarts there (the layers before it are the clean run's, computed
    on the same rows: the same numbers as a pass from the embedding, in ~(L - l) / L of its
    time). A TransformerBridge, which cannot start at a layer, runs each from the embedding."""
    layers = sorted({layer for layer, _ in heads})
    restart = not is_bridge(model) and layers[-1] > 0
    hooks = {h: ablation.hooks(model, [h]) for h in heads}
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


@renamed_keywords(holders={"ablation": Ablation.of}, kind="ablation.kind",
                  means="ablation.means", per_position="ablation.per_position")
def removal_vs_dla(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    ablation: Ablation | AblationKind | str = AblationKind.ZERO,
    outcomes: pd.DataFrame | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Did removing each head help directly, or through later layers?

    Each head is ablated alone (`ablation`; mean ablation without means uses the means over
    the task's `select` split, `default_means`). Its *direct effect* is the change in its own
    direct logit attribution to `mean_logit_diff` (its output replaced by the ablated one, at
    the clean final-norm scale): `-dla_diff` for zero ablation. The rest of the change,
    `indirect_effect`, went through later layers or the final norm's scale. The names are
    defined once, in `docs/explain.md` *Names*.

    Returns:
        One row per (example, head): `id, layer, head, head_name, [outcome,] dla_correct,
        dla_diff, direct_effect, d_mean_logit_diff, indirect_effect, d_logit_diff, d_logprob`
        (nats; `d_* = ablated - clean`; `d_mean_logit_diff = direct_effect +
        indirect_effect`; `d_logit_diff` and `d_logprob` are the metrics' changes, NaN where
        `logit_diff` does not apply).
    """
    batch = as_batch(model, task, split)
    ablation = Ablation.of(ablation)
    ablation = replace(ablation, means=default_means(model, task, ablation.kind, ablation.means))
    cap = capture(model, batch, batch_size)
    return removal_table(model, cap, attribute(model, cap), HeadSet.of(model, heads), ablation,
                         outcomes, batch_size)
