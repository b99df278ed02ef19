"""Stage 1 of CEL: the effect on a task of removing each attention head alone.

An effect is always **ablated minus clean**, averaged over examples, so a *positive* effect on
the task's metric means that removing the head *helps*. Per-head tables follow
`workbench.tables` (`layer, head, head_name` first) and then, for each metric `<m>`:

| column        | meaning                                                         |
|---------------|-----------------------------------------------------------------|
| `d_<m>`       | mean over examples of (ablated - clean)                         |
| `d_<m>_se`    | its standard error, `std(ddof=1) / sqrt(n)`                     |
| `d_<m>_lo/hi` | paired bootstrap percentile interval (95 % by default)          |

Units: `accuracy` is a fraction in [0, 1] (so `d_accuracy = 0.05` is five points), `logprob`
and `logit_diff` are in nats. Effects on the extra tasks passed as `others` carry the suffix
`_<task name>` (`d_accuracy_<task>`, `d_accuracy_se_<task>`, ...); those tasks are scored on
all their examples, since they are never used to select heads.

Three ways to get the numbers (`ScreenMethod`):

- `exact`: heads in layer `l` cannot change anything before layer `l`, so the clean run caches
  `blocks.{l}.hook_resid_pre` once and each ablated run restarts there with
  `start_at_layer=l`. Only the answer position matters at the end, so from the last block's
  `hook_resid_mid` on each row keeps only that position (`answer_only_hooks`): the last MLP,
  the final norm and the unembedding run on one position per row. The result equals one
  full `run_with_hooks` per head up to float error, at about 0.4 of its cost for GPT-2-sized
  models (see `bench/screen.py`). Several head masks can share one forward (`mask_hooks`
  tiles the batch); this pays on a GPU, while on a CPU the measured cost per mask was the same
  or slightly worse, so `masks_per_pass` defaults to 1 there.
- `attribution`: a first-order estimate for all heads from one forward and one backward pass
  per metric: `grad(metric) . (z_ablated - z_clean)` at every `hook_z`, per example (rows of a
  batch do not interact, so the gradient of the summed metric is each example's gradient).
  Accuracy is not differentiable; it is estimated by linearising the answer's margin over the
  best competitor and counting sign flips.
- `naive`: the reference, one full `run_with_hooks` over the whole model per head with
  full logits. For tests and benchmarks.

Custom metrics: pass `metric(model, data) -> per-example scores` (a `[batch]` tensor, named
`metric`, or a dict of them) and any `data` the metric understands, to screen any hooked model
that exposes `blocks.{l}.attn.hook_z` (HookedTransformer, HookedEncoder, TransformerBridge in
compatibility mode), not only next-token tasks. The metric runs the model itself, so exact
screening then calls it once per head under the ablation hooks (no prefix reuse).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from functools import partial

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor
from tqdm.auto import tqdm

from workbench import distributed
from workbench.ablation import (
    AblationKind,
    HeadMeans,
    ablation_hooks,
    compute_head_means,
    mask_hooks,
)
from workbench.errors import WorkbenchError
from workbench.heads import HeadSet, all_heads
from workbench.metrics import METRICS, _forward_kwargs, _masked_gather, score_logits, unembed_at
from workbench.stats import effect_summary
from workbench.tables import head_table
from workbench.tasks import Task, TaskBatch, encode_task, load_task

CustomMetric = Callable[[object, object], "Tensor | Mapping[str, Tensor]"]
STAT_SUFFIXES = ("", "_se", "_lo", "_hi")


class ScreenMethod(str, Enum):
    """How single-head effects are computed: `exact` (prefix reuse), `attribution`
    (gradient estimate), or `naive` (one full forward per head; the reference)."""

    EXACT = "exact"
    ATTRIBUTION = "attribution"
    NAIVE = "naive"

    @classmethod
    def parse(cls, method: "ScreenMethod | str") -> "ScreenMethod":
        try:
            return cls(method)
        except ValueError:
            raise WorkbenchError(
                f"screening method {method!r} is unknown; expected one of {[m.value for m in cls]}"
            ) from None


def effect_column(metric: str, stat: str = "", task: str | None = None) -> str:
    """`effect_column("accuracy", "_lo", "add") == "d_accuracy_lo_add"`."""
    return f"d_{metric}{stat}" + (f"_{task}" if task else "")


def masks_of(model, head_sets: Iterable) -> Float[Tensor, "n_sets layer head_index"]:
    """0/1 masks (1 = ablated) of head sets given as `HeadSet`s or head specs."""
    sets = [HeadSet.of(model, s) for s in head_sets]
    cfg = model.cfg
    masks = torch.zeros(len(sets), cfg.n_layers, cfg.n_heads)
    for i, s in enumerate(sets):
        for layer, head in s:
            masks[i, layer, head] = 1.0
    return masks.to(cfg.device)


@dataclass
class _Targets:
    """What `score_logits` reads from a `TaskBatch`, tiled for mask-major batches."""

    answer_ids: Tensor
    wrong_ids: Tensor
    candidate_ids: Tensor | None

    @classmethod
    def of(cls, batch: TaskBatch, repeats: int = 1, rows: slice = slice(None)) -> "_Targets":
        def tile(t):
            return None if t is None else t[rows].repeat(repeats, 1)

        return cls(tile(batch.answer_ids), tile(batch.wrong_ids), tile(batch.candidate_ids))


def _as_score_dict(out, where: str) -> dict[str, Tensor]:
    if isinstance(out, Tensor):
        out = {"metric": out}
    if not isinstance(out, Mapping) or not out:
        raise WorkbenchError(
            f"{where}: a custom metric must return a [batch] tensor or a dict of them; got "
            f"{type(out).__name__}"
        )
    scores = {}
    for name, v in out.items():
        if not isinstance(v, Tensor) or v.ndim != 1:
            shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
            raise WorkbenchError(f"{where}: metric {name!r} must be a [batch] tensor; got {shape}")
        scores[str(name)] = v
    return scores


MAX_TOKENS_PER_PASS = 65536


def _default_masks_per_pass(model, n_examples: int, n_tokens: int, max_rows: int) -> int:
    # Measured on a 2-core CPU (GPT-2-small shape, 64 x 20 tokens, 6 layers): one mask per pass
    # 3.06 s, four tiled masks 3.22 s per mask. A GPU is underused by one small batch; the
    # token budget bounds activation and attention-pattern memory for long prompts.
    if torch.device(model.cfg.device).type == "cpu":
        return 1
    by_rows = max_rows // max(1, n_examples)
    by_tokens = MAX_TOKENS_PER_PASS // max(1, n_examples * n_tokens)
    return max(1, min(by_rows, by_tokens))


def _save_hook(x: Tensor, hook, store: dict) -> None:
    store[hook.name] = x


def _gather_hook(resid: Float[Tensor, "batch pos d_model"], hook, pos: Tensor) -> Tensor:
    return resid[torch.arange(resid.shape[0], device=resid.device), pos][:, None]


def answer_only_hooks(model, pos: Tensor) -> tuple[list, Tensor]:
    """Hooks that keep only each row's answer position from the last block's `hook_resid_mid`
    on, so that block's MLP, the final norm and the unembedding run on one position per row.

    Returns:
        `(hooks, pos_after)`: the hooks (none where the model's last block is not a sequential
        attention-then-MLP block) and the positions to read the final residual at.
    """
    cfg = model.cfg
    blocks = getattr(model, "blocks", None)
    if (
        cfg.attn_only
        or getattr(cfg, "parallel_attn_mlp", False)
        or blocks is None
        or not hasattr(blocks[-1], "hook_resid_mid")
    ):
        return [], pos
    name = f"blocks.{cfg.n_layers - 1}.hook_resid_mid"
    return [(name, partial(_gather_hook, pos=pos))], torch.zeros_like(pos)


class MaskScorer:
    """Scores one task under many head masks; the clean run is done once and cached.

    Args:
        model: a hooked model with `blocks.{l}.attn.hook_z`.
        data: a `TaskBatch`, or anything `metric` accepts.
        kind: how a removed head's `z` is replaced (`AblationKind`).
        means: the head means, for mean ablation.
        metric: a custom `metric(model, data)`; None scores every metric in `METRICS` from
            the answer-position logits.
        reuse_prefix: restart each masked run at its first ablated layer (default); False runs
            the whole model with full logits per mask (the naive reference).
        masks_per_pass: masks evaluated in one tiled forward; None picks per device.
        max_rows: the most rows (masks x examples) in one forward.

    Example:
        >>> scorer = MaskScorer(model, encode_task(model, task, "select"))
        >>> scores = scorer.score(masks_of(model, [["L0H1"], ["L0H1", "L1H2"]]))
        >>> scores["accuracy"].shape  # (n_masks, n_examples)
    """

    def __init__(
        self,
        model,
        data,
        kind: AblationKind | str = AblationKind.ZERO,
        means: HeadMeans | None = None,
        metric: CustomMetric | None = None,
        reuse_prefix: bool = True,
        masks_per_pass: int | None = None,
        max_rows: int = 1024,
        per_position: bool = False,
    ) -> None:
        self.model, self.data, self.metric = model, data, metric
        self.kind = AblationKind.parse(kind)
        if self.kind is AblationKind.MEAN and means is None:
            raise WorkbenchError("mean ablation needs means: pass means=compute_head_means(...)")
        if metric is None and not isinstance(data, TaskBatch):
            raise WorkbenchError(
                f"without a custom metric the data must be an encoded TaskBatch; got "
                f"{type(data).__name__}"
            )
        if max_rows < 1:
            raise WorkbenchError(f"max_rows must be >= 1; got {max_rows}")
        self.means, self.per_position = means, per_position
        self.reuse_prefix, self.max_rows = reuse_prefix, max_rows
        self._masks_per_pass = masks_per_pass
        self._clean: dict[str, Tensor] | None = None
        self._resid: list[Tensor] | None = None  # per example chunk: (L, b, T, d)

    @property
    def n_layers(self) -> int:
        return self.model.cfg.n_layers

    def _chunks(self) -> list[slice]:
        n = len(self.data)
        step = max(1, self.max_rows)
        return [slice(s, min(n, s + step)) for s in range(0, n, step)]

    def clean(self) -> dict[str, Tensor]:
        """Per-example scores of the unablated model, `{metric: [batch]}`."""
        if self._clean is None:
            with torch.no_grad():
                if self.metric is not None:
                    self._clean = _as_score_dict(self.metric(self.model, self.data), "clean run")
                else:
                    self._clean = self._clean_with_cache()
        return self._clean

    def _clean_with_cache(self) -> dict[str, Tensor]:
        model, batch, L = self.model, self.data, self.n_layers
        parts: dict[str, list[Tensor]] = {m: [] for m in METRICS}
        self._resid = []
        for rows in self._chunks():
            if self.reuse_prefix:
                store: dict[str, Tensor] = {}
                hooks = [
                    (f"blocks.{l}.hook_resid_pre", partial(_save_hook, store=store))
                    for l in range(L)
                ]
                answer_hooks, pos = answer_only_hooks(model, batch.answer_pos[rows])
                with model.hooks(fwd_hooks=hooks + answer_hooks):
                    final = model(batch.tokens[rows], stop_at_layer=L, **_forward_kwargs(model))
                self._resid.append(
                    torch.stack([store[f"blocks.{l}.hook_resid_pre"] for l in range(L)])
                )
                logits = unembed_at(model, final, pos)
            else:  # the naive reference: full logits
                logits = model(batch.tokens[rows], **_forward_kwargs(model))
                pos = batch.answer_pos[rows]
                logits = logits[torch.arange(logits.shape[0], device=logits.device), pos]
            for name, v in score_logits(logits, _Targets.of(batch, rows=rows)).items():
                parts[name].append(v)
        return {name: torch.cat(v) for name, v in parts.items()}

    def score(
        self,
        masks: Float[Tensor, "n_masks layer head_index"],
        progress: bool = False,
        desc: str = "masks",
    ) -> dict[str, Float[Tensor, "n_masks batch"]]:
        """Per-example scores with each mask's heads ablated (1 = ablated).

        Under torch.distributed the masks are split across ranks and the scores gathered
        (`workbench.distributed.score_sharded`); the numbers are the same.
        """
        if distributed.shards_masks():
            return distributed.score_sharded(self, masks, progress, desc)
        clean = self.clean()
        masks = masks.to(self.model.cfg.device)
        n = masks.shape[0]
        n_ex = next(iter(clean.values())).shape[0]
        out = {
            name: torch.empty(n, n_ex, device=v.device, dtype=v.dtype) for name, v in clean.items()
        }
        if n == 0:
            return out
        bar = tqdm(total=n, desc=desc, disable=not progress, leave=False)
        try:
            if self.metric is not None:
                self._score_metric(masks, out, bar)
            elif self.reuse_prefix:
                self._score_prefix(masks, out, bar)
            else:
                self._score_naive(masks, out, bar)
        finally:
            bar.close()
        return out

    def _score_metric(self, masks, out, bar) -> None:
        with torch.no_grad():
            for i in range(masks.shape[0]):
                hooks = mask_hooks(
                    self.model, masks[i : i + 1], self.kind, self.means, self.per_position
                )
                with self.model.hooks(fwd_hooks=hooks):
                    scores = _as_score_dict(self.metric(self.model, self.data), "ablated run")
                for name, v in scores.items():
                    if name in out:
                        out[name][i] = v
                bar.update(1)

    def _score_naive(self, masks, out, bar) -> None:
        model, batch = self.model, self.data
        heads = [[(int(l), int(h)) for l, h in m.nonzero().tolist()] for m in masks.cpu()]
        with torch.no_grad():
            for i, head_list in enumerate(heads):
                hooks = ablation_hooks(model, head_list, self.kind, self.means, self.per_position)
                for rows in self._chunks():
                    logits = model.run_with_hooks(
                        batch.tokens[rows], fwd_hooks=hooks, **_forward_kwargs(model)
                    )
                    pos = batch.answer_pos[rows]
                    at_answer = logits[torch.arange(logits.shape[0], device=logits.device), pos]
                    for name, v in score_logits(at_answer, _Targets.of(batch, rows=rows)).items():
                        out[name][i, rows] = v
                bar.update(1)

    def _score_prefix(self, masks, out, bar) -> None:
        model, batch, L = self.model, self.data, self.n_layers
        any_layer = masks.flatten(2).amax(-1) > 0  # (M, L)
        # The first ablated layer of each mask; L (no layer) for the empty mask.
        first = torch.where(
            any_layer.any(-1),
            any_layer.float().argmax(-1),
            torch.full_like(any_layer[:, 0], L, dtype=torch.long),
        ).cpu()
        clean = self.clean()
        for layer in sorted(set(first.tolist())):
            idx = (first == layer).nonzero().flatten()
            if layer == L:
                for name, v in clean.items():
                    out[name][idx.to(v.device)] = v
                bar.update(len(idx))
                continue
            for c, rows in enumerate(self._chunks()):
                resid = self._resid[c][layer]  # (b, T, d)
                b = resid.shape[0]
                per_pass = self._masks_per_pass or _default_masks_per_pass(
                    model, b, resid.shape[1], self.max_rows
                )
                for s in range(0, len(idx), per_pass):
                    chunk = idx[s : s + per_pass].to(masks.device)
                    k = len(chunk)
                    hooks = mask_hooks(
                        model,
                        masks[chunk],
                        self.kind,
                        self.means,
                        self.per_position,
                        layers=range(layer, L),
                    )
                    answer_hooks, pos = answer_only_hooks(model, batch.answer_pos[rows].repeat(k))
                    with torch.no_grad(), model.hooks(fwd_hooks=hooks + answer_hooks):
                        final = model(
                            resid.repeat(k, 1, 1), start_at_layer=layer, stop_at_layer=L
                        )  # (k * b, T or 1, d)
                        logits = unembed_at(model, final, pos)
                    for name, v in score_logits(logits, _Targets.of(batch, k, rows)).items():
                        out[name][
                            chunk[:, None], torch.arange(rows.start, rows.stop, device=v.device)
                        ] = v.view(k, b)
                    if c == len(self._chunks()) - 1:
                        bar.update(k)


# ---------------------------------------------------------------------------------------------
# Attribution


def _margin(logits: Float[Tensor, "batch d_vocab"], batch) -> Float[Tensor, " batch"]:
    """Best answer logit minus best competitor logit (over candidates if the task has them);
    accuracy is `margin > 0` up to ties."""
    answer = _masked_gather(logits, batch.answer_ids).amax(-1)
    is_answer = (
        torch.zeros_like(logits).scatter_add_(
            1, batch.answer_ids.clamp(min=0), (batch.answer_ids >= 0).to(logits.dtype)
        )
        > 0
    )
    others = logits.masked_fill(is_answer, float("-inf"))
    if batch.candidate_ids is not None:
        competitor = _masked_gather(others, batch.candidate_ids).amax(-1)
    else:
        competitor = others.amax(-1)
    return answer - competitor


def _z_fill(kind: AblationKind, means: HeadMeans | None, layer: int, z: Tensor) -> Tensor:
    if kind is AblationKind.ZERO:
        return torch.zeros_like(z)
    if means is None:
        raise WorkbenchError("mean ablation needs means: pass means=compute_head_means(...)")
    return means.averaged[layer].to(z.dtype).expand_as(z)


def _keep_z(z: Tensor, hook, store: dict) -> Tensor:
    if not z.requires_grad:
        z = z.detach().requires_grad_(True)
    store[hook.name] = z
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


def attribution_effects(
    model,
    data,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    metric: CustomMetric | None = None,
    max_rows: int = 1024,
) -> tuple[dict[str, Tensor], dict[str, Float[Tensor, "n_heads batch"]]]:
    """First-order estimates of every head's per-example effect.

    Returns:
        `(clean, diffs)`: clean per-example scores `{metric: [batch]}`, and the estimated
        ablated-minus-clean differences `{metric: [n_layers * n_heads, batch]}` (row
        `layer * n_heads + head`).
    """
    kind = AblationKind.parse(kind)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    names = [f"blocks.{l}.attn.hook_z" for l in range(L)]
    if metric is None and not isinstance(data, TaskBatch):
        raise WorkbenchError(
            f"without a custom metric the data must be an encoded TaskBatch; got "
            f"{type(data).__name__}"
        )
    chunks = (
        [slice(None)]
        if metric is not None
        else [slice(s, min(len(data), s + max_rows)) for s in range(0, len(data), max_rows)]
    )
    clean_parts: dict[str, list[Tensor]] = {}
    diff_parts: dict[str, list[Tensor]] = {}
    for rows in chunks:
        store: dict[str, Tensor] = {}
        hooks = [(n, partial(_keep_z, store=store)) for n in names]
        with torch.enable_grad(), _frozen(model), model.hooks(fwd_hooks=hooks):
            if metric is not None:
                scores = _as_score_dict(metric(model, data), "attribution run")
                differentiable = dict(scores)
            else:
                sub = data.rows(rows) if rows != slice(None) else data
                answer_hooks, pos = answer_only_hooks(model, sub.answer_pos)
                with model.hooks(fwd_hooks=answer_hooks):
                    final = model(sub.tokens, stop_at_layer=L, **_forward_kwargs(model))
                logits = unembed_at(model, final, pos).float()
                scores = score_logits(logits, sub)
                # Accuracy is `margin > 0`; its estimate linearises the margin.
                differentiable = {
                    "accuracy": _margin(logits, sub),
                    "logprob": scores["logprob"],
                    "logit_diff": scores["logit_diff"],
                }
        zs = [store[n] for n in names]
        names_out = list(differentiable)
        for j, name in enumerate(names_out):
            value = differentiable[name]
            finite = torch.isfinite(value)
            if not value.requires_grad or not bool(finite.any()):
                est = torch.full((L * H, value.shape[0]), float("nan"), device=value.device)
            else:
                grads = torch.autograd.grad(
                    value[finite].sum(), zs, retain_graph=j < len(names_out) - 1, allow_unused=True
                )
                per_head = []
                for layer, (z, g) in enumerate(zip(zs, grads, strict=True)):
                    if g is None:
                        per_head.append(torch.zeros(z.shape[0], H, device=z.device))
                        continue
                    delta = _z_fill(kind, means, layer, z.detach()) - z.detach()
                    per_head.append(torch.einsum("bthd,bthd->bh", g, delta))
                est = torch.stack(per_head, 1).flatten(1).T.float()  # (L * H, batch)
                est = est.masked_fill(~finite[None], float("nan"))
            if metric is None and name == "accuracy":
                m = value.detach()
                est = (m[None] + est > 0).float() - (m > 0).float()[None]
            diff_parts.setdefault(name, []).append(est.detach())
            clean_parts.setdefault(name, []).append(scores[name].detach())
        del store, zs
    clean = {k: torch.cat(v) for k, v in clean_parts.items()}
    diffs = {k: torch.cat(v, dim=-1) for k, v in diff_parts.items()}
    return clean, diffs


# ---------------------------------------------------------------------------------------------
# The per-head table


def resolve_task(task) -> Task:
    """A `Task` from a `Task`, a task name in `tasks/`, or a path."""
    if isinstance(task, Task):
        return task
    if isinstance(task, (str, os.PathLike)):
        return load_task(task)
    raise WorkbenchError(
        f"a task must be a Task, a task name or a task file path; got {type(task).__name__}"
    )


def prepare_data(model, task, split: str | None, metric: CustomMetric | None):
    """Encode a task (or pass through custom data) and name it.

    Returns:
        `(data, name)`: a `TaskBatch` of `split` for tasks; the object itself for custom data
        with a custom metric (then `split` is ignored).
    """
    if isinstance(task, TaskBatch):
        if split is not None:
            idx = [i for i, e in enumerate(task.task.examples) if e.split == split]
            if not idx:
                raise WorkbenchError(f"task {task.task.name!r} has no examples in split {split!r}")
            task = task.rows(idx)
        return task, task.task.name
    if isinstance(task, (Task, str, os.PathLike)):
        t = resolve_task(task)
        return encode_task(model, t, split), t.name
    if metric is not None:
        return task, getattr(task, "name", "data")
    raise WorkbenchError(
        f"task must be a Task, TaskBatch, task name or path (or any data with a custom metric); "
        f"got {type(task).__name__}"
    )


def _other_items(others) -> list[tuple[str | None, object]]:
    if isinstance(others, Mapping):
        return list(others.items())
    if isinstance(others, (str, os.PathLike, Task, TaskBatch)):
        others = [others]
    return [(None, o) for o in others]


def single_head_diffs(
    model,
    data,
    method: ScreenMethod | str = ScreenMethod.EXACT,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    metric: CustomMetric | None = None,
    heads=None,
    max_rows: int = 1024,
    masks_per_pass: int | None = None,
    progress: bool = False,
    desc: str = "screening",
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clean scores `{metric: [batch]}` and per-example single-head effects
    `{metric: [n_layers * n_heads, batch]}` (NaN rows for heads not in `heads`)."""
    method = ScreenMethod.parse(method)
    if method is ScreenMethod.ATTRIBUTION:
        return attribution_effects(model, data, kind, means, metric, max_rows)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    chosen = all_heads(model) if heads is None else HeadSet.of(model, heads)
    scorer = MaskScorer(
        model,
        data,
        kind,
        means,
        metric,
        reuse_prefix=method is ScreenMethod.EXACT,
        masks_per_pass=masks_per_pass,
        max_rows=max_rows,
    )
    clean = scorer.clean()
    ablated = scorer.score(masks_of(model, [[h] for h in chosen]), progress, desc)
    rows = torch.tensor([l * H + h for l, h in chosen], device=model.cfg.device, dtype=torch.long)
    diffs = {}
    for name, v in ablated.items():
        full = torch.full((L * H, v.shape[1]), float("nan"), device=v.device, dtype=v.dtype)
        full[rows] = v - clean[name][None]
        diffs[name] = full
    return clean, diffs


def screen_heads(
    model,
    task,
    kind: AblationKind | str = AblationKind.ZERO,
    method: ScreenMethod | str = ScreenMethod.EXACT,
    split: str | None = "select",
    others: Sequence | Mapping = (),
    metric: CustomMetric | None = None,
    means: HeadMeans | None = None,
    heads=None,
    n_boot: int = 1000,
    ci: float = 0.95,
    seed: int = 0,
    max_rows: int = 1024,
    masks_per_pass: int | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """The effect of removing each head alone, on a task and on extra tasks.

    Args:
        model: a hooked model exposing `blocks.{l}.attn.hook_z`.
        task: a `Task`, `TaskBatch`, task name or path; or any data for a custom `metric`.
        kind: `"zero"` or `"mean"`; mean ablation uses `means`, by default the mean `z` over
            the screened split of `task`.
        method: `"exact"`, `"attribution"` or `"naive"` (see the module docstring).
        split: the examples of `task` to use (`"select"`, `"heldout"`, None for all).
        others: extra tasks (scored on all their examples), or a `{name: data}` mapping.
        metric: a custom `metric(model, data) -> [batch]` scores (or a dict of them).
        heads: restrict screening to these heads (the others get NaN rows); attribution
            always estimates every head.
        n_boot, ci, seed: the paired bootstrap.
        max_rows: the most rows (masks x examples) per forward.
        masks_per_pass: masks per tiled forward in exact screening; None picks per device.
        progress: show a progress bar.

    Returns:
        A per-head table (see the module docstring). `df.attrs` holds `clean` (the clean mean
        of each metric per task), `n_examples` per task, `method` and `kind`.

    Example:
        >>> df = screen_heads(model, "ioi", kind="mean")
        >>> df.sort_values("d_logit_diff", ascending=False).head()
    """
    method = ScreenMethod.parse(method)
    kind = AblationKind.parse(kind)
    data, name = prepare_data(model, task, split, metric)
    if kind is AblationKind.MEAN and means is None:
        if not isinstance(data, TaskBatch):
            raise WorkbenchError(
                "mean ablation with custom data needs means=compute_head_means(...)"
            )
        means = compute_head_means(model, data.tokens, data.lengths)
    columns: dict[str, Tensor] = {}
    attrs = {
        "clean": {},
        "n_examples": {},
        "method": method.value,
        "kind": kind.value,
        "task": name,
    }
    items = [(None, data, name)]
    for other_name, other in _other_items(others):
        other_data, default_name = prepare_data(model, other, None, metric)
        items.append((other_name or default_name, other_data, other_name or default_name))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    for suffix, d, label in items:
        clean, diffs = single_head_diffs(
            model,
            d,
            method,
            kind,
            means,
            metric,
            heads,
            max_rows,
            masks_per_pass,
            progress,
            desc=f"screening {label}",
        )
        attrs["clean"][label] = {m: float(torch.nanmean(v.float())) for m, v in clean.items()}
        attrs["n_examples"][label] = int(next(iter(clean.values())).shape[0])
        for m, diff in diffs.items():
            for stat, values in effect_summary(diff, n_boot, seed, ci).items():
                columns[effect_column(m, stat, suffix)] = values.view(L, H)
    df = head_table(columns, L, H)
    df.attrs.update(attrs)
    return df


def naive_effects(
    model,
    data,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    heads=None,
) -> dict[str, np.ndarray]:
    """The reference: mean effect of each head from one full `run_with_hooks` per head,
    `{metric: [n_layers, n_heads]}` (NaN for heads not in `heads`)."""
    _, diffs = single_head_diffs(model, data, ScreenMethod.NAIVE, kind, means, heads=heads)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return {m: torch.nanmean(d, dim=-1).view(L, H).cpu().numpy() for m, d in diffs.items()}
