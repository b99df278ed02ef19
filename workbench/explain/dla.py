"""What a head writes to the logits: direct logit attribution (DLA).

The residual stream at the answer position is a sum of components, and the final layer norm
is linear once its scale (`ln_final.hook_scale`, taken from the cache) is fixed, so each
component gets an exact share of the logits (`dla_components`); a head's share is its output
`z_h @ W_O[h]` read through the final layer norm onto the correct answer, the wrong answer and
their difference (`direct_logit_attribution`), next to random comparison heads of the same
layer (`comparison_heads`).

**The decomposition.** The residual stream at the answer position is
`embed + pos_embed + sum_l (sum_h z_{l,h} W_O[l,h] + b_O[l] + mlp_out[l])` (no `pos_embed` for
rotary models, no `mlp_out` for attention-only ones), and the logit of token `t` is
`(x - mean(x)) / scale . (w_ln * W_U[:, t]) + b_ln . W_U[:, t] + b_U[t]`. Centring `x` is the
same as centring the direction `w_ln * W_U[:, t]` over `d_model`, which is what we do for `LN`
and `LNPre` models (RMS norms do not centre; models without a final norm have scale 1). When
TransformerLens folded the layer norm (`fold_ln`), `w_ln`/`b_ln` are already inside
`W_U`/`b_U`, and with `center_writing_weights` every writing weight is already centred; both
cases need no special handling. The components are `embed`, `pos_embed`, each head, each
layer's `b_O`, each MLP's output (with its bias), and `b_U` (which also holds `b_ln . W_U`);
where each block normalises its attention output before adding it (Gemma-2 and Gemma-3's RMS
norm `ln1_post`), that norm too is linear once its scale is fixed, so each head's output and
`b_O` enter at the clean scale, times the norm's weight (`attention_writes`). The components
sum to the logit of the answer minus that of the wrong answer. A last component `other` is
whatever of the residual stream these do not account for, and is zero for the standard
architectures. With several acceptable (or wrong) answers, the direction is the mean of their
directions, so the attributions sum to the mean answer logit minus the mean wrong logit,
`mean_logit_diff` (the metric `logit_diff` takes `logsumexp`s instead, which no linear split
can decompose; the two agree with one answer and one wrong answer: `docs/explain.md` *Names*). When
an example has no wrong answer, its wrong answer is the clean model's highest-scoring
non-answer token (`wrong_source = "rival"`).

`attribute` splits a `capture`'s logits into these components once (`Attribution`), for
`removal` and `explain_heads` too; `logit_directions` and `final_norm_param` are the final
norm's reading of the residual stream that `circuits` and `removal` reuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.explain.capture import Capture, as_batch, capture
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.stats import Stats, effect_summary
from workbench.tables import INDEX_COLUMNS, head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task
from workbench.tasks.tokenizer import get_tokenizer

LN_CENTRED = ("LN", "LNPre")  # final norms that centre the residual stream over d_model


def _id_mask(ids: Int[Tensor, "batch k"], d_vocab: int) -> Tensor:
    """`[batch, d_vocab]` booleans, True at each row's ids (padding -1 ignored)."""
    hits = torch.zeros(ids.shape[0], d_vocab, device=ids.device)
    hits.scatter_add_(1, ids.clamp(min=0), (ids >= 0).float())
    return hits > 0


def _wrong_ids(model, cap: Capture) -> tuple[Tensor, list[str]]:
    """Each example's wrong answers (padded with -1); the clean model's best non-answer token
    (over the candidates when the task has them) where the example has none."""
    batch = cap.batch
    n, d_vocab = cap.logits.shape
    given = batch.wrong_ids
    has_wrong = (
        (given >= 0).any(-1)
        if given.shape[1]
        else torch.zeros(n, dtype=torch.bool, device=cap.logits.device)
    )
    if bool(has_wrong.all()):
        return given, ["task"] * n
    logits = cap.logits.masked_fill(_id_mask(batch.answer_ids, d_vocab), float("-inf"))
    if batch.candidate_ids is not None:
        logits = logits.masked_fill(~_id_mask(batch.candidate_ids, d_vocab), float("-inf"))
    rival = logits.argmax(-1)
    ids = torch.full((n, max(1, given.shape[1])), -1, dtype=torch.long, device=rival.device)
    ids[:, : given.shape[1]] = given
    ids[~has_wrong, 0] = rival[~has_wrong]
    return ids, ["task" if bool(h) else "rival" for h in has_wrong]


def final_norm_param(model: HookedModel, name: str) -> Float[Tensor, " d_model"] | None:
    """The final norm's weight `w` or bias `b`; None when folded away or there is no norm."""
    return getattr(getattr(model, "ln_final", None), name, None)


def post_norm_weight(model: HookedModel, layer: int) -> Float[Tensor, " d_model"] | None:
    """The weight of block `layer`'s post-attention norm (`ln1_post`: Gemma-2, Gemma-3); None
    where the block has none."""
    return getattr(getattr(model.blocks[layer], "ln1_post", None), "w", None)


def logit_directions(
    model: HookedModel, ids: Int[Tensor, "batch k"]
) -> tuple[Float[Tensor, "batch d_model"], Float[Tensor, " batch"]]:
    """The mean effective unembedding direction of each row's ids, and the constant term.

    `logit_t = x / scale . dir_t + const_t` for the final residual `x`, where `dir_t` is
    `w_ln * W_U[:, t]`, centred over `d_model` for LN models, and `const_t = b_ln . W_U[:, t]
    + b_U[t]`.
    """
    valid = (ids >= 0).float()  # (B, K)
    if bool((valid.sum(-1) == 0).any()):
        raise WorkbenchError("every example needs at least one answer and one wrong token")
    cols = model.W_U[:, ids.clamp(min=0)].permute(1, 2, 0).float()  # (B, K, d)
    const = model.b_U[ids.clamp(min=0)].float()  # (B, K)
    b = final_norm_param(model, "b")
    if b is not None:
        const = const + cols @ b.float()
    w = final_norm_param(model, "w")
    if w is not None:
        cols = cols * w.float()
    if model.cfg.normalization_type in LN_CENTRED:
        cols = cols - cols.mean(-1, keepdim=True)
    weights = valid / valid.sum(-1, keepdim=True)
    return (cols * weights[..., None]).sum(1), (const * weights).sum(1)


def attention_writes(
    model: HookedModel, cap: Capture, out: Tensor, layer: int | None = None
) -> Tensor:
    """What attention outputs `out` (before any post-attention norm) add to the residual
    stream at the answer positions, at the clean scale of the block's `ln1_post` times its
    weight; `out` itself in models without one.

    `out` is `[batch, layer, ..., d_model]` over every layer, or `[batch, ..., d_model]` for one
    `layer`.
    """
    if cap.post_scale is None:
        return out
    layers = range(model.cfg.n_layers) if layer is None else [layer]
    x = out if layer is None else out.unsqueeze(1)
    w = torch.stack([post_norm_weight(model, l).float() for l in layers])  # (L', d)
    scale = cap.post_scale[:, list(layers)]  # (B, L')
    mid = (1,) * (x.dim() - 3)
    x = x * w.view(1, len(w), *mid, -1) / scale.view(*scale.shape, *mid, 1)
    return x if layer is None else x.squeeze(1)


def _logit_parts(model, cap: Capture, direction: Tensor, const: Tensor) -> dict[str, Tensor]:
    """Each component's share of `direction`'s logit: name -> `[batch]` or `[batch, layer(,
    head)]`."""
    d = direction / cap.scale[:, None]  # (B, d)
    W_O = model.W_O.float()  # (L, H, D, d)
    heads_out = attention_writes(
        model, cap, torch.einsum("blhe,lhed->blhd", cap.z, W_O)
    )  # (B, L, H, d)
    b_O = attention_writes(model, cap, model.b_O.float().expand(len(d), -1, -1))  # (B, L, d)
    parts = {
        "embed": (cap.embed * d).sum(-1),
        "head": torch.einsum("blhd,bd->blh", heads_out, d),
        "b_O": torch.einsum("bld,bd->bl", b_O, d),
        "b_U": const,
    }
    total = cap.embed + heads_out.sum((1, 2)) + b_O.sum(1)
    if cap.pos_embed is not None:
        parts["pos_embed"] = (cap.pos_embed * d).sum(-1)
        total = total + cap.pos_embed
    if cap.mlp_out is not None:
        parts["mlp"] = torch.einsum("bld,bd->bl", cap.mlp_out, d)
        total = total + cap.mlp_out.sum(1)
    parts["other"] = ((cap.resid - total) * d).sum(-1)
    return parts


@dataclass
class Attribution:
    """Every component's direct logit attribution onto the answers and the wrong answers.

    `answer` and `wrong` map a component (`embed`, `pos_embed`, `head`, `b_O`, `mlp`, `b_U`,
    `other`) to its share of the logit, `[batch]`, `[batch, layer]` or, for `head`,
    `[batch, layer, head_index]` (nats).
    """

    answer: dict[str, Tensor]
    wrong: dict[str, Tensor]
    wrong_ids: Int[Tensor, "batch k"]  # padded with -1
    wrong_source: list[str]  # per example: "task" or "rival"

    def diff(self, key: str) -> Tensor:
        """The component's attribution onto the answers minus that onto the wrong answers."""
        return self.answer[key] - self.wrong[key]


def attribute(model: HookedModel, cap: Capture) -> Attribution:
    """Split the captured logits of the answers and wrong answers into components."""
    wrong_ids, source = _wrong_ids(model, cap)
    with torch.no_grad():
        answer = _logit_parts(model, cap, *logit_directions(model, cap.batch.answer_ids))
        wrong = _logit_parts(model, cap, *logit_directions(model, wrong_ids))
    return Attribution(answer, wrong, wrong_ids, source)


def _components_table(model, cap: Capture, att: Attribution) -> pd.DataFrame:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    ids = cap.batch.task.ids
    frames = []

    def add(component: str, name: str, layer: int, head: int, a: Tensor, w: Tensor) -> None:
        frames.append(
            pd.DataFrame(
                {
                    "id": ids,
                    "component": component,
                    "name": name,
                    "layer": layer,
                    "head": head,
                    "dla_correct": a.cpu().numpy(),
                    "dla_wrong": w.cpu().numpy(),
                }
            )
        )

    for key in ("embed", "pos_embed"):
        if key in att.answer:
            add(key, key, -1, -1, att.answer[key], att.wrong[key])
    for l in range(n_layers):
        for h in range(n_heads):
            add(
                "head",
                head_name(l, h),
                l,
                h,
                att.answer["head"][:, l, h],
                att.wrong["head"][:, l, h],
            )
        add("b_O", f"L{l}.b_O", l, -1, att.answer["b_O"][:, l], att.wrong["b_O"][:, l])
        if "mlp" in att.answer:
            add("mlp", f"L{l}.mlp", l, -1, att.answer["mlp"][:, l], att.wrong["mlp"][:, l])
    for key in ("b_U", "other"):
        add(key, key, -1, -1, att.answer[key], att.wrong[key])
    df = pd.concat(frames, ignore_index=True)
    df["dla_diff"] = df["dla_correct"] - df["dla_wrong"]
    return df


def dla_components(
    model: HookedModel, task: Task | TaskBatch | str, split: str | None = "heldout",
    batch_size: int = 32,
) -> pd.DataFrame:
    """Direct logit attribution of every component of the final residual stream.

    Returns:
        One row per (example, component): `id, component` (`embed`, `pos_embed`, `head`,
        `b_O`, `mlp`, `b_U`, `other`), `name` (e.g. `L1H2`, `L0.mlp`), `layer, head` (-1 where
        they do not apply), `dla_correct, dla_wrong, dla_diff` (nats). Summed over the
        components of one example, `dla_correct` is the answer's logit and `dla_diff` is the
        example's `mean_logit_diff` (see the module docstring).
    """
    batch = as_batch(model, task, split)
    cap = capture(model, batch, batch_size)
    return _components_table(model, cap, attribute(model, cap))


def comparison_heads(model: HookedModel, heads: Iterable[HeadSpec] | HeadSet,
                     seed: int = 0) -> HeadSet:
    """One random comparison head per head of the set: another head of the same layer that is
    not in the set (any other head if the layer has none), drawn with `seed`."""
    head_set = HeadSet.of(model, heads)
    chosen = set(head_set.heads)
    rng = np.random.default_rng(seed)
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    picks = []
    for layer, _ in head_set:
        pool = [(layer, h) for h in range(n_heads) if (layer, h) not in chosen]
        if not pool:
            pool = [(l, h) for l in range(n_layers) for h in range(n_heads) if (l, h) not in chosen]
        if not pool:
            break
        pick = pool[int(rng.integers(len(pool)))]
        chosen.add(pick)
        picks.append(pick)
    return HeadSet.of(model, picks)


def dla_table(
    model: HookedModel, cap: Capture, att: Attribution, heads: HeadSet, comparison: HeadSet
) -> pd.DataFrame:
    """`direct_logit_attribution`'s table from a capture and its `attribute`."""
    tok = get_tokenizer(model)
    batch = cap.batch
    answer = tok.str_tokens(batch.answer_ids[:, 0].tolist())
    wrong = tok.str_tokens(att.wrong_ids[:, 0].tolist())
    frames = []
    for group, head_set in (("removed", heads), ("comparison", comparison)):
        for layer, head in head_set:
            a, w = att.answer["head"][:, layer, head], att.wrong["head"][:, layer, head]
            frames.append(
                pd.DataFrame(
                    {
                        "id": batch.task.ids,
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "head_group": group,
                        "answer": answer,
                        "wrong": wrong,
                        "wrong_source": att.wrong_source,
                        "dla_correct": a.cpu().numpy(),
                        "dla_wrong": w.cpu().numpy(),
                        "dla_diff": (a - w).cpu().numpy(),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)


def direct_logit_attribution(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    comparison: Iterable[HeadSpec] | HeadSet | None | Literal["random"] = "random",
    seed: int = 0,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Direct logit attribution of each head onto the correct and the wrong answer, per example.

    Args:
        heads: the heads to attribute (`head_group = "removed"`).
        comparison: heads to report alongside (`head_group = "comparison"`): `"random"` draws
            one per head with `comparison_heads(model, heads, seed)`; None for none.

    Returns:
        One row per (example, head): `id, layer, head, head_name, head_group, answer, wrong,
        wrong_source` (`task` or `rival`), `dla_correct, dla_wrong, dla_diff` (nats).
    """
    batch = as_batch(model, task, split)
    head_set = HeadSet.of(model, heads)
    comp = resolve_comparison(model, head_set, comparison, seed)
    cap = capture(model, batch, batch_size)
    return dla_table(model, cap, attribute(model, cap), head_set, comp)


def resolve_comparison(model: HookedModel, heads: HeadSet, comparison, seed: int) -> HeadSet:
    """The comparison heads: drawn for `"random"`, else the given ones, none in `heads`."""
    if isinstance(comparison, str) and comparison == "random":
        return comparison_heads(model, heads, seed)
    comp = HeadSet.of(model, comparison)
    overlap = set(comp.heads) & set(heads.heads)
    if overlap:
        raise WorkbenchError(f"comparison heads {sorted(overlap)} are also in the head set")
    return comp


def summarize_dla(dla: pd.DataFrame, stats: Stats | None = None,
                  groups: Mapping[str, object] | None = None) -> pd.DataFrame:
    """Mean direct logit attribution per head of a `direct_logit_attribution` table, with the
    interval of `dla_diff`'s mean.

    Args:
        dla: the per-example table.
        stats: the interval's resamples, level and seed (`Stats()` by default).
        groups: example id -> cluster label, to resample clusters as the confirmation does
            (`workbench.stats.effect_summary`); None resamples examples.

    Returns:
        One row per head: `layer, head, head_name, head_group, n, dla_correct, dla_wrong,
        dla_diff, dla_diff_se, dla_diff_lo, dla_diff_hi` (nats; `_se` is the standard error
        over examples, `_lo`/`_hi` the bootstrap interval at `stats.ci`).
    """
    stats = stats or Stats()
    g = dla.groupby(list(INDEX_COLUMNS), sort=True)
    out = g.agg(
        head_group=("head_group", "first"),
        n=("id", "size"),
        dla_correct=("dla_correct", "mean"),
        dla_wrong=("dla_wrong", "mean"),
        dla_diff=("dla_diff", "mean"),
        dla_diff_se=("dla_diff", "sem"),
    )
    bounds = []
    for _, part in g:
        labels = None if groups is None else [groups.get(i) for i in part["id"]]
        x = torch.tensor(part["dla_diff"].to_numpy(dtype=np.float64))[None]  # (1, batch)
        summary = effect_summary(x, stats.n_boot, stats.seed, stats.ci, labels)
        bounds.append((float(summary["_lo"][0]), float(summary["_hi"][0])))
    out["dla_diff_lo"] = [lo for lo, _ in bounds]
    out["dla_diff_hi"] = [hi for _, hi in bounds]
    return out.reset_index()
