"""Scoring a model on a task: per-example metrics from the logits at the answer position,
`evaluate`, `summarize`.

The answer is predicted at the last real position of each right-padded prompt; the forward
that reads the logits there, at those positions alone, is `workbench.logits.answer_logits`
(also readable from here, with `logits_at` and the forward's keyword helpers).

Metrics (per example, registered in `METRICS`):

- `accuracy`: 1.0 when the argmax (over the vocabulary, or over the task's candidates) is an
  acceptable answer, else 0.0;
- `logprob`: log-probability of the answer set under the full softmax, in nats;
- `logit_diff`: `logsumexp(answer logits) - logsumexp(wrong logits)`, which is
  `logit(answer) - logit(wrong)` for one answer and one wrong answer;
- `prob_diff`: total probability of the answers minus that of the wrong answers, under the
  full softmax: Hanna et al.'s greater-than measure `sum_{y > start} p(y) - sum_{y <= start}
  p(y)`, generalised to any correct and incorrect set.

Derived metrics (records with a `base`, `workbench.metric_records`) divide a registered
metric by its clean mean:
`normalized_logit_diff = logit_diff / mean(clean logit_diff)` over the same examples, so its
mean is the ratio of means used in the IOI and activation-patching literature (1 = the clean
model, 0 = no preference). It is a positive rescaling of `logit_diff` for a fixed example set,
so a search that maximises one maximises the other.

Multi-token answers (`answer_tokens: "multi"`) are scored twice: the metrics above on each
answer's first token, and `sequence_scores` (`workbench.metrics.sequences`): the
teacher-forced log-probability of the whole answer and whether greedy decoding reproduces it
(the accuracy of a multi-token task).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import AblationKind, HeadMeans, ablation_hooks, compute_resample_z
from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import (  # noqa: F401 (re-exported: workbench.metrics.scores.logits_at)
    answer_logits,
    forward_kwargs,
    is_bridge,
    logits_at,
    shortformer_kwargs,
    unembed_at,
)
from workbench.metric_records import base_metric, metric_names
from workbench.metrics.choices import (
    CHOICE_SCORES,
    choice_metric,
    evaluate_choices,
    naive_choice_metric,
)
from workbench.metrics.generation import GENERATION_SCORES, evaluate_generation, generation_metric
from workbench.metrics.sequences import sequence_pass, sequence_scores
from workbench.options import choose
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.task import Task
from workbench.tasks.tokenizer import get_tokenizer

NEG_INF = float("-inf")


def masked_gather(logits: Float[Tensor, "batch d_vocab"], ids: Tensor) -> Tensor:
    """`logits[b, ids[b, k]]`, with -inf where `ids` is the padding -1."""
    out = logits.gather(1, ids.clamp(min=0))
    return out.masked_fill(ids < 0, NEG_INF)


def predicted_ids(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Tensor:
    """The argmax token id over the task's answer scope (its candidates, else the vocabulary):
    the token `accuracy` scores."""
    if batch.candidate_ids is None:
        return logits.argmax(-1)
    pick = masked_gather(logits, batch.candidate_ids).argmax(-1, keepdim=True)
    return batch.candidate_ids.gather(1, pick).squeeze(1)


def accuracy(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """1.0 where the argmax (over candidates if the task has them) is an acceptable answer."""
    pred = predicted_ids(logits, batch)
    return (pred[:, None] == batch.answer_ids).any(-1).to(logits.dtype)


def logprob(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """Log-probability (nats) of the set of acceptable answers under the full softmax."""
    logp = logits.log_softmax(-1)
    return masked_gather(logp, batch.answer_ids).logsumexp(-1)


def logit_diff(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """`logsumexp(answer logits) - logsumexp(wrong logits)`; NaN where there is no wrong answer."""
    if batch.wrong_ids.shape[1] == 0:
        return torch.full(
            (logits.shape[0],), float("nan"), device=logits.device, dtype=logits.dtype
        )
    right = masked_gather(logits, batch.answer_ids).logsumexp(-1)
    wrong = masked_gather(logits, batch.wrong_ids).logsumexp(-1)
    return torch.where(torch.isinf(wrong), torch.full_like(right, float("nan")), right - wrong)


def prob_diff(logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch) -> Float[Tensor, " batch"]:
    """`sum p(answers) - sum p(wrong)` (full softmax); NaN where there is no wrong answer."""
    if batch.wrong_ids.shape[1] == 0:
        return torch.full(
            (logits.shape[0],), float("nan"), device=logits.device, dtype=logits.dtype
        )
    probs = logits.softmax(-1)
    right = probs.gather(1, batch.answer_ids.clamp(min=0)).masked_fill(batch.answer_ids < 0, 0.0)
    wrong = probs.gather(1, batch.wrong_ids.clamp(min=0)).masked_fill(batch.wrong_ids < 0, 0.0)
    has_wrong = (batch.wrong_ids >= 0).any(-1)
    diff = right.sum(-1) - wrong.sum(-1)
    return torch.where(has_wrong, diff, torch.full_like(diff, float("nan")))


Metric = Callable[[Tensor, TaskBatch], Tensor]
METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "logprob": logprob,
    "logit_diff": logit_diff,
    "prob_diff": prob_diff,
}


def normalize_by_clean(
    values: Float[Tensor, "..."], clean: Float[Tensor, " batch"]
) -> Float[Tensor, "..."]:
    """`values / nanmean(clean)`: a metric as a fraction of the clean model's mean."""
    scale = torch.nanmean(clean.float())
    if not torch.isfinite(scale) or scale == 0:
        raise WorkbenchError(
            f"cannot normalize by the clean mean {float(scale)}; it must be finite and non-zero"
        )
    return values / scale


def get_metric(name: str) -> Metric:
    """A per-example metric by name (a normalized metric returns its base metric)."""
    return METRICS[base_metric(choose(name, metric_names(), "metric"))]


def score_logits(
    logits: Float[Tensor, "batch d_vocab"], batch: TaskBatch
) -> dict[str, Float[Tensor, " batch"]]:
    """Every registered metric, per example."""
    return {name: fn(logits.float(), batch) for name, fn in METRICS.items()}


def multi_token_metric(model: HookedModel, batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """The scores of a multi-token task, as a custom metric for `MaskScorer` and `run_cel`.

    `accuracy` and `logprob` are the sequence scores (`sequence_scores`: greedy exact match,
    teacher-forced log-probability over every answer position); `logit_diff` and `prob_diff`
    score the first answer token, read from the same forwards (the logits at the prompt's last
    position do not see the appended answer). Run under a mask's hooks, this is exact
    screening over all answer positions (`MaskScorer(model, batch, metric=multi_token_metric)`).
    Each example's scores depend on its own row only, so the scorer may score a slice of rows.
    """
    seq, first_logits = sequence_pass(model, batch)
    first = score_logits(first_logits, batch)
    return {
        "accuracy": seq["seq_correct"],
        "logprob": seq["seq_logprob"],
        "logit_diff": first["logit_diff"],
        "prob_diff": first["prob_diff"],
    }


def one_forward(metric):
    """Declare that a custom metric scores a `TaskBatch` with one forward over its rows, row
    `i` scoring example `i` (as the registered metrics do). Attribution screening then runs it
    on length buckets of examples, one backward each, instead of one example at a time (the
    safe default, which any row-wise metric gets right: a multi-token metric's forwards hold
    one row per answer). A declared metric that runs otherwise is refused.

        @one_forward
        def my_metric(model, batch): ...
    """
    metric.one_forward = True
    return metric


def builtin_metric(metric) -> bool:
    """Whether `metric` is one the workbench picks for a task's kind (`multi_token_metric`,
    `choice_metric`, `generation_metric`), not a user's custom metric."""
    return metric in (multi_token_metric, choice_metric, naive_choice_metric, generation_metric)


def task_metric(metric, data):
    """The metric `data` is scored with in a run whose main metric is `metric`.

    A user's custom metric applies to every task as given. Otherwise (None, or the metric a
    run picks for its main task's kind) each task gets its own: `choice_metric` for a
    multiple-choice task, `generation_metric` for a generation task, `multi_token_metric` when
    its answers are several tokens as fitted to the tokenizer (`answer_seqs`), else None (the
    registered metrics on the first answer token). So an ioi side task of a multiple-choice
    task, a multiple-choice side task of ioi, a single-token side task of a multi-token task,
    and the reverse, are each scored as they would be as the main task.
    """
    if metric is not None and not builtin_metric(metric):
        return metric
    if isinstance(data, TaskBatch) and data.choice_seqs is not None:
        return choice_metric
    if isinstance(data, TaskBatch) and data.task.is_generation:
        return generation_metric
    if isinstance(data, TaskBatch) and data.answer_seqs is not None:
        return multi_token_metric
    return None


def evaluate(
    model: HookedModel,
    task: Task | TaskBatch,
    heads=None,
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    split: str | None = None,
    batch_size: int = 128,
    per_position: bool = False,
    clean_logit_diff: float | None = None,
    resample: Tensor | None = None,
) -> pd.DataFrame:
    """Score every example of a task, optionally with heads ablated.

    Args:
        model: a HookedTransformer.
        task: a `Task` (encoded here) or an already encoded `TaskBatch`.
        heads: head specs to ablate (see `HeadSet`), or None for the clean model.
        kind: `"zero"`, `"mean"` (then `means` is required) or `"resample"` (then the batch
            needs counterfactual prompts, or `resample` their `hook_z`).
        split: `"select"`, `"heldout"` or None for all examples.
        clean_logit_diff: the clean model's mean `logit_diff` over these examples, the scale of
            `normalized_logit_diff`. None: the clean mean is computed here when `heads` is None
            or the task's metric is `normalized_logit_diff` (one extra clean pass), else the
            column is NaN.

    Returns:
        One row per example: `id, split, group, correct, logprob, logit_diff, prediction,
        prediction_vocab, prob_diff, normalized_logit_diff` (`correct` is 0/1; `logprob` in
        nats; `prediction`: the token `correct` scores, the argmax over the task's candidates
        when it has them (`predicted_ids`); `prediction_vocab`: the argmax over the whole
        vocabulary). For a multi-token task `correct` and `logprob` are the sequence scores of
        `sequence_scores`, and `first_correct`, `first_logprob` (and `prediction`) the
        first-token ones. A multiple-choice or generation task has its own columns
        (`evaluate_choices`, `evaluate_generation`).
    """
    batch = task if isinstance(task, TaskBatch) else encode_task(model, task, split)
    if isinstance(task, TaskBatch) and split is not None:
        idx = [i for i, e in enumerate(batch.task.examples) if e.split == split]
        batch = batch.rows(idx)
    if batch.choice_seqs is not None or batch.task.is_generation:
        hooks = _hooks(model, batch, heads, kind, means, per_position, resample)
        run = evaluate_choices if batch.choice_seqs is not None else evaluate_generation
        return run(model, batch, hooks)
    scores, preds, vocab_preds = _scores(model, batch, heads, kind, means, per_position,
                                         batch_size, resample)
    if clean_logit_diff is None and (heads is None or batch.task.metric == "normalized_logit_diff"):
        clean = scores if heads is None else _scores(model, batch, None, batch_size=batch_size)[0]
        finite = clean["logit_diff"][np.isfinite(clean["logit_diff"])]
        clean_logit_diff = float(finite.mean()) if len(finite) else None
    normalized = (
        np.full(len(batch), np.nan)
        if clean_logit_diff is None or not np.isfinite(clean_logit_diff) or clean_logit_diff == 0
        else scores["logit_diff"] / clean_logit_diff
    )
    tok = get_tokenizer(model)
    examples = batch.task.examples
    columns = {
        "id": [e.id for e in examples],
        "split": [e.split for e in examples],
        "group": [e.group for e in examples],
        "correct": scores["accuracy"].astype(int),
        "logprob": scores["logprob"],
        "logit_diff": scores["logit_diff"],
        "prediction": tok.str_tokens(preds.tolist()),
        "prediction_vocab": tok.str_tokens(vocab_preds.tolist()),
        "prob_diff": scores["prob_diff"],
        "normalized_logit_diff": normalized,
    }
    if batch.answer_seqs is not None:
        hooks = _hooks(model, batch, heads, kind, means, per_position, resample)
        with torch.no_grad():
            seq = sequence_scores(model, batch, hooks)
        columns["first_correct"] = columns["correct"]
        columns["first_logprob"] = columns["logprob"]
        columns["correct"] = seq["seq_correct"].cpu().numpy().astype(int)
        columns["logprob"] = seq["seq_logprob"].cpu().numpy()
    return pd.DataFrame(columns)


def _hooks(model, batch, heads, kind, means, per_position, resample) -> list:
    if heads is None:
        return []
    if AblationKind.parse(kind) is AblationKind.RESAMPLE and resample is None:
        resample = compute_resample_z(model, batch)
    return ablation_hooks(model, heads, kind, means, per_position, resample=resample)


def _scores(
    model,
    batch: TaskBatch,
    heads,
    kind: AblationKind | str = "zero",
    means: HeadMeans | None = None,
    per_position: bool = False,
    batch_size: int = 128,
    resample: Tensor | None = None,
) -> tuple[dict[str, np.ndarray], Tensor, Tensor]:
    """Every registered metric per example, and the argmax token ids over the answer scope
    (`predicted_ids`) and over the vocabulary, batch by batch."""
    resample_full = None
    if heads is not None and AblationKind.parse(kind) is AblationKind.RESAMPLE:
        resample_full = compute_resample_z(model, batch) if resample is None else resample
    parts: dict[str, list[Tensor]] = {name: [] for name in METRICS}
    preds, vocab_preds = [], []  # over the answer scope, over the vocabulary
    with torch.no_grad():
        for start in range(0, len(batch), batch_size):
            rows = slice(start, start + batch_size)
            sub = batch.rows(rows)
            rows_z = None if resample_full is None else resample_full[rows]
            hooks = ([] if heads is None else
                     ablation_hooks(model, heads, kind, means, per_position, resample=rows_z))
            logits = answer_logits(model, sub, hooks)
            for name, values in score_logits(logits, sub).items():
                parts[name].append(values)
            preds.append(predicted_ids(logits, sub))
            vocab_preds.append(logits.argmax(-1))
    scores = {name: torch.cat(v).cpu().numpy() for name, v in parts.items()}
    return scores, torch.cat(preds), torch.cat(vocab_preds)


_EXTRA_SUMMARY = ("prob_diff", "normalized_logit_diff", "first_correct", "first_logprob")


def summarize(scores: pd.DataFrame, by: str | None = "group") -> pd.DataFrame:
    """Mean and standard error of each metric, overall and per value of `by` (if present).

    Returns:
        One row per subset (`subset="all"` first): `n, accuracy, accuracy_se, logprob,
        logprob_se, logit_diff, logit_diff_se`, then the same pair for each of
        `prob_diff, normalized_logit_diff, first_correct, first_logprob` present in `scores`;
        for a multiple-choice (generation) task, of `CHOICE_SCORES` (`GENERATION_SCORES`).
    """

    def row(df: pd.DataFrame, name: str) -> dict:
        out = {"subset": name, "n": len(df)}
        pairs = [("correct", "accuracy"), ("logprob", "logprob"), ("logit_diff", "logit_diff")]
        pairs += [(c, c) for c in _EXTRA_SUMMARY if c in df]
        if "correct" not in df:  # a multiple-choice or generation task's scores
            own = GENERATION_SCORES if "exact_match" in df else CHOICE_SCORES
            pairs = [(c, c) for c in own]
        for col, label in pairs:
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
