"""Scoring a model on a task: logits at the answer position, per-example metrics, `evaluate`.

The answer is predicted at the last real position of each right-padded prompt. With causal
attention, padding after that position cannot change it, so prompts of different lengths are
batched without an attention mask. Only the answer positions go through the final layer norm
and the unembedding, which for large vocabularies is most of the cost of a small model.

Metrics (per example, registered in `METRICS`):

- `accuracy`: 1.0 when the argmax (over the vocabulary, or over the task's candidates) is an
  acceptable answer, else 0.0;
- `logprob`: log-probability of the answer set under the full softmax, in nats;
- `logit_diff`: `logsumexp(answer logits) - logsumexp(wrong logits)`, which is
  `logit(answer) - logit(wrong)` for one answer and one wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import AblationKind, HeadMeans, ablation_hooks
from workbench.errors import WorkbenchError
from workbench.tasks import Task, TaskBatch, encode_task

NEG_INF = float("-inf")


def _masked_gather(logits: Float[Tensor, "batch d_vocab"], ids: Tensor) -> Tensor:
    """`logits[b, ids[b, k]]`, with -inf where `ids` is the padding -1."""
    out = logits.gather(1, ids.clamp(min=0))
    return out.masked_fill(ids < 0, NEG_INF)


def accuracy(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """1.0 where the argmax (over candidates if the task has them) is an acceptable answer."""
    if batch.candidate_ids is not None:
        pick = _masked_gather(logits, batch.candidate_ids).argmax(-1, keepdim=True)
        pred = batch.candidate_ids.gather(1, pick).squeeze(1)
    else:
        pred = logits.argmax(-1)
    return (pred[:, None] == batch.answer_ids).any(-1).to(logits.dtype)


def logprob(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """Log-probability (nats) of the set of acceptable answers under the full softmax."""
    logp = logits.log_softmax(-1)
    return _masked_gather(logp, batch.answer_ids).logsumexp(-1)


def logit_diff(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """`logsumexp(answer logits) - logsumexp(wrong logits)`; NaN where there is no wrong answer."""
    if batch.wrong_ids.shape[1] == 0:
        return torch.full(
            (logits.shape[0],), float("nan"), device=logits.device, dtype=logits.dtype
        )
    right = _masked_gather(logits, batch.answer_ids).logsumexp(-1)
    wrong = _masked_gather(logits, batch.wrong_ids).logsumexp(-1)
    return torch.where(torch.isinf(wrong), torch.full_like(right, float("nan")), right - wrong)


Metric = Callable[[Tensor, TaskBatch], Tensor]
METRICS: dict[str, Metric] = {"accuracy": accuracy, "logprob": logprob, "logit_diff": logit_diff}


def get_metric(name: str) -> Metric:
    if name not in METRICS:
        raise WorkbenchError(f"metric {name!r} is unknown; expected one of {sorted(METRICS)}")
    return METRICS[name]


def score_logits(
    logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch
) -> dict[str, Float[Tensor, " batch"]]:
    """Every registered metric, per example."""
    return {name: fn(logits.float(), batch) for name, fn in METRICS.items()}


def _forward_kwargs(model) -> dict:
    # Right padding: TransformerLens only builds a padding mask for left-padded tokenizers.
    return {"padding_side": "right"} if getattr(model, "tokenizer", None) is not None else {}


def shortformer_kwargs(model, tokens: Tensor) -> dict:
    """`shortformer_pos_embed` for a forward that starts at a later layer.

    A shortformer model adds its positional embedding to every attention layer's queries and
    keys instead of to the residual stream; `model(resid, start_at_layer=l)` drops that term
    unless it is passed back in. Right-padded prompts use positions `0..pos-1`.
    """
    if getattr(model.cfg, "positional_embedding_type", None) != "shortformer":
        return {}
    return {"shortformer_pos_embed": model.pos_embed(tokens)}


def unembed_at(
    model, resid: Float[Tensor, "batch pos d_model"], pos: Tensor
) -> Float[Tensor, "batch d_vocab"]:
    """Final layer norm, unembedding and output soft-cap (Gemma-2's `cap * tanh(x / cap)`,
    when `cfg.output_logits_soft_cap > 0`) of the residual stream at one position per row:
    the logits the model's own forward returns there."""
    x = resid[torch.arange(resid.shape[0], device=resid.device), pos.to(resid.device)][:, None]
    if model.cfg.normalization_type is not None:
        x = model.ln_final(x)
    logits = model.unembed(x)[:, 0]  # (B, d_vocab)
    cap = getattr(model.cfg, "output_logits_soft_cap", None)
    if cap is not None and cap > 0:
        logits = cap * torch.tanh(logits / cap)
    return logits


def answer_logits(
    model,
    batch: TaskBatch,
    fwd_hooks: Sequence = (),
    resid: Tensor | None = None,
    start_at_layer: int | None = None,
) -> Float[Tensor, "batch d_vocab"]:
    """Logits at each prompt's answer position, optionally with hooks or from a cached layer.

    Args:
        model: a HookedTransformer.
        batch: the encoded prompts.
        fwd_hooks: `(name, fn)` pairs active during the pass.
        resid: `blocks.{start_at_layer}.hook_resid_pre`, to skip the layers before it.
        start_at_layer: where `resid` enters; None runs from the embedding.
    """
    n_layers = model.cfg.n_layers
    with model.hooks(fwd_hooks=list(fwd_hooks)):
        if resid is None:
            final = model(batch.tokens, stop_at_layer=n_layers, **_forward_kwargs(model))
        else:
            final = model(
                resid,
                start_at_layer=start_at_layer,
                stop_at_layer=n_layers,
                **shortformer_kwargs(model, batch.tokens),
            )
    return unembed_at(model, final, batch.answer_pos)


def evaluate(
    model,
    task: Task | TaskBatch,
    heads=None,
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    split: str | None = None,
    batch_size: int = 128,
    per_position: bool = False,
) -> pd.DataFrame:
    """Score every example of a task, optionally with heads ablated.

    Args:
        model: a HookedTransformer.
        task: a `Task` (encoded here) or an already encoded `TaskBatch`.
        heads: head specs to ablate (see `HeadSet`), or None for the clean model.
        kind: `"zero"` or `"mean"` (then `means` is required).
        split: `"select"`, `"heldout"` or None for all examples.

    Returns:
        One row per example: `id, split, group, correct, logprob, logit_diff, prediction`
        (`correct` is 0/1; `logprob` in nats; `prediction` is the argmax token as text).
    """
    batch = task if isinstance(task, TaskBatch) else encode_task(model, task, split)
    if isinstance(task, TaskBatch) and split is not None:
        idx = [i for i, e in enumerate(batch.task.examples) if e.split == split]
        batch = batch.rows(idx)
    hooks = ablation_hooks(model, heads, kind, means, per_position)
    parts: dict[str, list[Tensor]] = {name: [] for name in METRICS}
    preds = []
    with torch.no_grad():
        for start in range(0, len(batch), batch_size):
            sub = batch.rows(slice(start, start + batch_size))
            logits = answer_logits(model, sub, hooks)
            for name, values in score_logits(logits, sub).items():
                parts[name].append(values)
            preds.append(logits.argmax(-1))
    from workbench.tokenizer import get_tokenizer

    tok = get_tokenizer(model)
    scores = {name: torch.cat(v).cpu().numpy() for name, v in parts.items()}
    examples = batch.task.examples
    return pd.DataFrame(
        {
            "id": [e.id for e in examples],
            "split": [e.split for e in examples],
            "group": [e.group for e in examples],
            "correct": scores["accuracy"].astype(int),
            "logprob": scores["logprob"],
            "logit_diff": scores["logit_diff"],
            "prediction": tok.str_tokens(torch.cat(preds).tolist()),
        }
    )


def summarize(scores: pd.DataFrame, by: str | None = "group") -> pd.DataFrame:
    """Mean and standard error of each metric, overall and per value of `by` (if present).

    Returns:
        One row per subset (`subset="all"` first): `n, accuracy, accuracy_se, logprob,
        logprob_se, logit_diff, logit_diff_se`.
    """

    def row(df: pd.DataFrame, name: str) -> dict:
        out = {"subset": name, "n": len(df)}
        for col, label in (
            ("correct", "accuracy"),
            ("logprob", "logprob"),
            ("logit_diff", "logit_diff"),
        ):
            v = df[col].to_numpy(dtype=float)
            v = v[~np.isnan(v)]
            out[label] = float(v.mean()) if len(v) else float("nan")
            out[f"{label}_se"] = (
                float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")
            )
        return out

    rows = [row(scores, "all")]
    if by is not None and by in scores and scores[by].notna().any():
        for value, df in scores.groupby(by, sort=True):
            rows.append(row(df, str(value)))
    return pd.DataFrame(rows)
