"""Generation scoring, as lm-eval 0.4 scores a `generate_until` task, and its ranking companion.

A generation task's model writes: each prompt is decoded greedily (`greedy_generate`, with the
task's `max_new_tokens` and stop sequences), the task's extractor reads the answer from the
text, and `exact_match` compares it with the target (`GenerationSettings.score`: lm-eval's
options, whitespace stripped). Hooks attached by the caller (a head set's ablation at
`blocks.{l}.attn.hook_z`) act at every decoding step, so a head set's `exact_match` is what
the model writes without those heads.

`exact_match` is 0/1 with no gradient, and no margin of it is positive exactly where it is 1
(the extractor and the stop sequences stand between the logits and the answer). Its ranking
companion is `logprob`: the teacher-forced log-probability of `target_delimiter + target`
after the prompt, summed over its tokens, as a multi-token answer's or a gold choice's (it is
computed as a one-choice multiple-choice log-likelihood, `choice_logliks`, so each prompt
runs once, on a key-value cache where the model allows). It is one pass and differentiable:
attribution screening estimates it and ranks the heads by it, differentiating
`generation_logprob_metric` (no decode: its `exact_match` column stays NaN,
`workbench.search.candidates.estimated_metric`), while the search and the confirmation
score real generations (several masks per call: `generation_masks_metric` decodes their
rows together, `greedy_generate_masks`). A set can raise the target's log-prob and still
change what the model writes; the confirmation's `exact_match` is the number that counts.

A position-dependent ablation (per-position means, resampling) cannot follow the decoded
positions and is refused for generation tasks before a run (`workbench.metrics.run_checks`).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import Ablation
from workbench.errors import WorkbenchError
from workbench.generation.decode import greedy_generate, naive_generate
from workbench.generation.masked import greedy_generate_masks
from workbench.hooked import HookedModel
from workbench.metrics.choices import choice_logliks
from workbench.tasks.encoding import TaskBatch

# A generation task's scores, in table order (`workbench.metric_records`).
GENERATION_SCORES = ("logprob", "exact_match")


def _check(batch: TaskBatch) -> None:
    if not batch.task.is_generation or batch.answer_seqs is None:
        raise WorkbenchError(f"task {batch.task.name!r} is not a generation task (its examples "
                             "have no 'target')")


def target_batch(batch: TaskBatch) -> TaskBatch:
    """The batch as a one-choice multiple-choice batch whose choice is each example's
    `target_delimiter + target`: what `target_logprob` scores."""
    _check(batch)
    return replace(batch, choice_seqs=[[seqs[0]] for seqs in batch.answer_seqs])


def target_logprob(model: HookedModel, batch: TaskBatch,
                   shared: bool | None = None) -> Float[Tensor, " batch"]:
    """Each example's teacher-forced log-probability of `target_delimiter + target` after its
    prompt (nats), differentiable; `shared` as in `choice_logliks` (None: on a cache where the
    model allows)."""
    return choice_logliks(model, target_batch(batch), shared)[:, 0]


def generations(model: HookedModel, batch: TaskBatch, naive: bool = False) -> list[str]:
    """Each example's greedy continuation under the hooks attached, cut before the first stop
    sequence (`greedy_generate`; `naive`: the reference `naive_generate`)."""
    _check(batch)
    settings = batch.task.generation
    decode = naive_generate if naive else greedy_generate
    return decode(model, batch.prompts(), settings.max_new_tokens, settings.until).texts


def _exact_match(batch: TaskBatch, texts: list[str]) -> Float[Tensor, " batch"]:
    settings = batch.task.generation
    scores = [settings.score(t, e.target) for t, e in zip(texts, batch.task.examples, strict=True)]
    return torch.tensor(scores, dtype=torch.float32, device=batch.tokens.device)


def generation_metric(model: HookedModel, batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """A generation task's scores as a custom metric for `MaskScorer` and `run_cel` (module
    docstring): `exact_match` of the greedy generation, and the target's `logprob`. Each
    example's scores depend on its own row only, so a scorer may score a slice of rows."""
    return {"exact_match": _exact_match(batch, generations(model, batch)),
            "logprob": target_logprob(model, batch)}


def generation_logprob_metric(model: HookedModel,
                              batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """`generation_metric` as attribution differentiates it (its `attribution_metric`): the
    target's `logprob`, and `exact_match` NaN without decoding (it has no gradient, so its
    estimate is NaN whatever the generations are)."""
    logp = target_logprob(model, batch)
    return {"exact_match": torch.full_like(logp.detach(), float("nan")), "logprob": logp}


generation_metric.attribution_metric = generation_logprob_metric


def generation_masks_metric(model: HookedModel, batch: TaskBatch,
                            masks: Float[Tensor, "n_masks layer head_index"],
                            ablation: Ablation) -> dict[str, Float[Tensor, "n_masks batch"]]:
    """`generation_metric` under each of `masks` (1 = ablated), the masks' rows decoded
    together (`greedy_generate_masks`; its `masks_metric`, which `MaskScorer` calls for a
    zero or averaged-mean ablation); the target's `logprob` is one pass per mask."""
    _check(batch)
    settings = batch.task.generation
    prompts = batch.prompts()
    texts = greedy_generate_masks(model, prompts, masks, settings.max_new_tokens,
                                  settings.until, ablation).texts
    n = len(prompts)
    exact, logp = [], []
    for m in range(len(masks)):
        exact.append(_exact_match(batch, texts[m * n:(m + 1) * n]))
        with model.hooks(fwd_hooks=ablation.mask_hooks(model, masks[m:m + 1])):
            logp.append(target_logprob(model, batch))
    return {"exact_match": torch.stack(exact), "logprob": torch.stack(logp)}


generation_metric.masks_metric = generation_masks_metric


def naive_generation_metric(model: HookedModel,
                            batch: TaskBatch) -> dict[str, Float[Tensor, " batch"]]:
    """`generation_metric` by the reference paths: no cache, one row at a time."""
    return {"exact_match": _exact_match(batch, generations(model, batch, naive=True)),
            "logprob": target_logprob(model, batch, shared=False)}


def evaluate_generation(model: HookedModel, batch: TaskBatch, fwd_hooks=()) -> pd.DataFrame:
    """Score every example of a generation batch under `fwd_hooks` (`evaluate` calls it with
    a head set's ablation hooks).

    Returns:
        One row per example: `id, split, group`, `exact_match` (0/1), `logprob` (nats),
        `prediction` (the extracted answer) and `generation` (the text it was read from).
    """
    with torch.no_grad(), model.hooks(fwd_hooks=list(fwd_hooks)):
        texts = generations(model, batch)
        logp = target_logprob(model, batch).cpu().numpy()
    extract = batch.task.generation.extract
    exs = batch.task.examples
    return pd.DataFrame({
        "id": [e.id for e in exs], "split": [e.split for e in exs],
        "group": [e.group for e in exs],
        "exact_match": _exact_match(batch, texts).cpu().numpy().astype(int), "logprob": logp,
        "prediction": [extract(t) for t in texts], "generation": texts,
    })
