"""What a head moves: its OV and QK circuits, read through the embedding and unembedding.

A head's effect factors into two weight-only circuits. The OV circuit (TransformerLens's
`FactoredMatrix` `W_V W_O`, plus `b_V W_O`) says what the head writes given what it attends
to: applied to the embeddings of the tokens the head attends to most and read out through the
unembedding (with the weight of a post-attention norm, where the block has one, and the final
norm's weights and centring, as in `workbench.explain.dla`), it lists the output
tokens each source token promotes and suppresses (`ov_circuit`; a copying head promotes the
source token itself). The QK circuit (`W_Q W_K^T`, with `b_Q`, `b_K`, and per-head query and
key norms where the model has them; OLMo's norms over all heads at once are left out) says
where the head looks: the attention scores between the task's query tokens and every token in
its prompts give the source tokens the head prefers (`qk_circuit`). Both are the direct path
only, from token embeddings through each layer's `ln1`: earlier layers and position are left
out. `ov_table` and `qk_table` build the tables from a `capture` and the prompts' roles, for
`explain_heads`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.explain.attention import RoleScheme, roles_for
from workbench.explain.capture import Capture, as_batch, capture
from workbench.explain.dla import LN_CENTRED, final_norm_param, post_norm_weight
from workbench.heads import HeadSet, HeadSpec
from workbench.hooked import HookedModel
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Task
from workbench.tasks.tokenizer import get_tokenizer


def _embed_through_ln1(model, layer: int, ids: Tensor) -> Float[Tensor, "n d_model"]:
    """Token embeddings as layer `layer`'s attention reads them (through its `ln1`)."""
    x = model.W_E[ids].float()[None]  # (1, n, d)
    ln1 = getattr(model.blocks[layer], "ln1", None)
    return x[0] if ln1 is None else ln1(x)[0]


def _attn_scale(model, layer: int) -> float:
    """What layer `layer`'s attention divides its query-key scores by: a HookedTransformer's
    `attn_scale`; for a TransformerBridge, `1 / scaling` of the Hugging Face attention module
    it wraps (Hugging Face's one factor, with any per-layer scaling folded in)."""
    attn = model.blocks[layer].attn
    scale = getattr(attn, "attn_scale", None)
    if scale is not None:
        return float(scale)
    scaling = getattr(getattr(attn, "original_component", None), "scaling", None)
    if scaling is None:
        raise WorkbenchError(
            f"cannot tell layer {layer}'s attention scale: its attention ({type(attn).__name__}) "
            "has no attn_scale, nor a wrapped Hugging Face module with a `scaling` factor"
        )
    return 1.0 / float(scaling)


def _post_weight(model, layer: int, vecs: Float[Tensor, "n d_model"]) -> Tensor:
    """Attention outputs times the weight of the block's post-attention norm (`ln1_post`,
    Gemma-2 and Gemma-3), as they reach the residual stream; its scale is left out, as the
    final one is in `_to_logits`."""
    w = post_norm_weight(model, layer)
    return vecs if w is None else vecs * w.float()


def _qk_norm(model, attn, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Queries and keys through the head's own RMS norms where it has them (`use_qk_norm`:
    Gemma-3, Qwen3), as the model applies them before the scores."""
    if not getattr(model.cfg, "use_qk_norm", False):
        return q, k
    if getattr(attn, "q_norm", None) is None or getattr(attn, "k_norm", None) is None:
        raise WorkbenchError(
            f"{model.cfg.model_name}: its attention normalises queries and keys, and the QK "
            "circuit needs those norms as attn.q_norm and attn.k_norm, which this model does "
            "not expose; load it as a HookedTransformer (workbench.load_model)"
        )
    return attn.q_norm(q), attn.k_norm(k)


def _to_logits(model, vecs: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_vocab"]:
    """Read residual-stream vectors out through the final norm's weights and `W_U`.

    The final scale is left out: it is positive, so it changes no ranking or sign.
    """
    if model.cfg.normalization_type in LN_CENTRED:
        vecs = vecs - vecs.mean(-1, keepdim=True)
    w = final_norm_param(model, "w")
    if w is not None:
        vecs = vecs * w.float()
    return vecs @ model.W_U.float()


def _top_sources(cap: Capture, layer: int, head: int, n: int) -> list[tuple[int, float]]:
    """The token ids receiving the most attention from the answer position, summed over
    examples, with their mean attention per example."""
    mass: dict[int, float] = {}
    for i in range(len(cap.batch)):
        k = int(cap.batch.lengths[i])
        ids, attn = cap.batch.tokens[i, :k].tolist(), cap.attn[i, layer, head, :k].tolist()
        for tid, a in zip(ids, attn, strict=True):
            mass[tid] = mass.get(tid, 0.0) + a
    best = sorted(mass.items(), key=lambda kv: -kv[1])[:n]
    return [(tid, m / len(cap.batch)) for tid, m in best]


def _format_tokens(tok, ids: Sequence[int], values: Sequence[float]) -> str:
    return ", ".join(f"{t!r} ({v:+.2f})" for t, v in zip(tok.str_tokens(ids), values, strict=True))


def ov_table(model: HookedModel, cap: Capture, heads: HeadSet, n_sources: int,
             top_k: int) -> pd.DataFrame:
    """`ov_circuit`'s table, with the source tokens taken from a capture."""
    tok = get_tokenizer(model)
    records = []
    with torch.no_grad():
        for layer, head in heads:
            sources = _top_sources(cap, layer, head, n_sources)
            ids = torch.tensor([s for s, _ in sources], device=model.W_E.device)
            x = _embed_through_ln1(model, layer, ids)
            ov = model.OV[layer, head]  # FactoredMatrix W_V W_O, (d_model, d_model)
            bias = model.b_V[layer, head].float() @ model.W_O[layer, head].float()
            out = _to_logits(model, _post_weight(model, layer, (x @ ov).AB + bias))
            k = min(top_k, out.shape[-1])
            for j, (tid, mass) in enumerate(sources):
                row = out[j]
                up, down = row.topk(k), (-row).topk(k)
                self_rank = int((row > row[tid]).sum())
                records.append(
                    {
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "source_token": tok.str_tokens([tid])[0],
                        "source_attention": mass,
                        "promoted": _format_tokens(tok, up.indices.tolist(), up.values.tolist()),
                        "suppressed": _format_tokens(
                            tok, down.indices.tolist(), (-down.values).tolist()
                        ),
                        "self_logit": float(row[tid]),
                        "self_rank": self_rank,
                    }
                )
    return pd.DataFrame(records)


def ov_circuit(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    n_sources: int = 3,
    top_k: int = 5,
    batch_size: int = 32,
) -> pd.DataFrame:
    """What each head writes about the tokens it attends to, read out as output tokens.

    For each of the `n_sources` tokens the head attends to most (from the answer position,
    summed over the task's examples), the token's embedding goes through the layer's `ln1`, the
    OV circuit (`model.OV[layer, head]`, a `FactoredMatrix`, plus `b_V W_O`) and the
    unembedding (with the final norm's weights and centring; see the module docstring). This
    is the direct path only: earlier layers and positional embeddings are left out.

    Returns:
        One row per (head, source token): `layer, head, head_name, source_token,
        source_attention` (mean attention per example), `promoted` / `suppressed` (the `top_k`
        output tokens with the largest / smallest logit, as text with values), `self_logit`,
        `self_rank` (0 when the head promotes the source token itself most: a copying head).
    """
    batch = as_batch(model, task, split)
    cap = capture(model, batch, batch_size)
    return ov_table(model, cap, HeadSet.of(model, heads), n_sources, top_k)


def qk_table(
    model: HookedModel, batch: TaskBatch, heads: HeadSet, roles: list[list[str]], top_k: int
) -> pd.DataFrame:
    """`qk_circuit`'s table from an encoded batch and its prompts' roles (`roles_for`)."""
    tok = get_tokenizer(model)
    role_of: dict[int, Counter] = {}
    dest: Counter = Counter()
    for i in range(len(batch)):
        n = int(batch.lengths[i])
        for tid, role in zip(batch.tokens[i, :n].tolist(), roles[i], strict=True):
            role_of.setdefault(tid, Counter())[role] += 1
        dest[int(batch.tokens[i, n - 1])] += 1
    src_ids = torch.tensor(sorted(role_of), device=model.W_E.device)
    dest_ids = torch.tensor(list(dest), device=model.W_E.device)
    weights = torch.tensor(list(dest.values()), dtype=torch.float, device=model.W_E.device)
    weights = weights / weights.sum()
    records = []
    with torch.no_grad():
        for layer, head in heads:
            attn = model.blocks[layer].attn
            q = (
                _embed_through_ln1(model, layer, dest_ids) @ attn.W_Q[head].float()
                + attn.b_Q[head].float()
            )
            k = (
                _embed_through_ln1(model, layer, src_ids) @ attn.W_K[head].float()
                + attn.b_K[head].float()
            )
            q, k = _qk_norm(model, attn, q, k)
            # (n_src,), query-frequency weighted
            scores = weights @ (q @ k.T) / _attn_scale(model, layer)
            top = scores.topk(min(top_k, len(src_ids)))
            pairs = zip(top.indices.tolist(), top.values.tolist(), strict=True)
            for rank, (j, s) in enumerate(pairs):
                tid = int(src_ids[j])
                records.append(
                    {
                        "layer": layer,
                        "head": head,
                        "head_name": head_name(layer, head),
                        "rank": rank,
                        "source_token": tok.str_tokens([tid])[0],
                        "score": s,
                        "source_role": role_of[tid].most_common(1)[0][0],
                    }
                )
    return pd.DataFrame(records)


def qk_circuit(
    model: HookedModel,
    task: Task | TaskBatch | str,
    heads: Iterable[HeadSpec] | HeadSet,
    split: str | None = "heldout",
    roles: RoleScheme = "auto",
    top_k: int = 5,
) -> pd.DataFrame:
    """The source tokens each head's QK circuit prefers, for the task's query tokens.

    The query is the token at the answer position, the keys are every token that occurs in the
    task's prompts, both as embeddings through the layer's `ln1` (with `b_Q`, `b_K`); scores
    are averaged over the queries, weighted by how often each occurs. Position (learned or
    rotary) and earlier layers are left out, so a head that finds its target by position
    (e.g. the token after an earlier copy) shows this only in `attention_by_role`.

    Returns:
        One row per (head, rank): `layer, head, head_name, rank` (0 = most preferred),
        `source_token, score` (attention score, before softmax), `source_role` (the role the
        token most often has in the prompts).
    """
    batch = as_batch(model, task, split)
    return qk_table(model, batch, HeadSet.of(model, heads), roles_for(batch, roles), top_k)
