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
  tiles the batch). On a GPU as many as the token budget holds; on a CPU up to
  `CPU_TOKEN_TARGET` tokens per forward: a full split is already that large (one mask per
  pass), but a racing slice of 20 prompts is not, and tiling 7-8 masks of it cut the cost per
  mask 1.5x on SmolLM2 (`_default_masks_per_pass`).
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
    compute_resample_z,
    mask_hooks,
)
from workbench.encoding import TaskBatch, encode_task
from workbench.errors import WorkbenchError
from workbench.heads import HeadSet, all_heads
from workbench.metrics import (
    forward_kwargs,
    masked_gather,
    score_logits,
    shortformer_kwargs,
    task_metric,
    unembed_at,
)
from workbench.options import ScreenMethod
from workbench.racing import ATOL, SCREEN_RULES, OpenFn, example_order, first_slice, race
from workbench.stats import effect_summary
from workbench.tables import head_table
from workbench.tasks import Task, load_task

CustomMetric = Callable[[object, object], "Tensor | Mapping[str, Tensor]"]
STAT_SUFFIXES = ("", "_se", "_lo", "_hi")


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


DEFAULT_TOKEN_BUDGET = 16384
CPU_TOKEN_TARGET = 3072  # tokens per forward where a CPU's matmuls reach their full speed
DEFAULT_CACHE_BYTES = 1 << 30


GPU_TOKEN_CAP = 1 << 20  # a bound on one forward even on the largest accelerator
GPU_MEMORY_SHARE = 0.3  # of the free accelerator memory one forward's activations may take


def device_token_budget(cfg, free_bytes: int | None = None) -> int:
    """The default token budget of one forward on `cfg.device`: `DEFAULT_TOKEN_BUDGET` on a
    CPU (where masks are tiled only up to `CPU_TOKEN_TARGET` tokens, see
    `_default_masks_per_pass`); on an accelerator as many tokens as `GPU_MEMORY_SHARE` of its
    free memory holds, so that many masks share one forward.

    Per token a forward keeps about `8 d_model + 2 d_mlp` activations plus `2 n_heads x 256`
    attention scores (prompts up to 256 tokens) alive at once, in the model's dtype.
    `free_bytes` overrides the measured free memory (for tests).
    """
    device = torch.device(cfg.device)
    if device.type == "cpu":
        return DEFAULT_TOKEN_BUDGET
    if free_bytes is None:
        if device.type != "cuda":
            return DEFAULT_TOKEN_BUDGET * 4
        free_bytes, _ = torch.cuda.mem_get_info(device)
    elem = torch.empty((), dtype=cfg.dtype).element_size()
    d_mlp = cfg.d_mlp or 0
    per_token = elem * (8 * cfg.d_model + 2 * d_mlp + 2 * cfg.n_heads * 256)
    return int(max(DEFAULT_TOKEN_BUDGET, min(GPU_TOKEN_CAP, free_bytes * GPU_MEMORY_SHARE
                                              // per_token)))


def _default_masks_per_pass(model, n_examples: int, n_tokens: int, token_budget: int) -> int:
    # Measured on a 2-core CPU, SmolLM2-135M, 20 prompts x 20 tokens (a racing slice), seconds
    # per mask: 1.12 one mask per pass, 0.80 four (1600 tokens), 0.73 eight (3200), 0.90
    # sixteen (6400); on the GPT-2-small shape, 64 x 20 tokens: 3.06 one, 3.22 four (5120).
    # So a CPU tiles masks up to about CPU_TOKEN_TARGET tokens, and a full split of that
    # size or more gets one mask per pass. A GPU is underused by one small batch; the token
    # budget bounds activation and attention-pattern memory for long prompts.
    if torch.device(model.cfg.device).type == "cpu":
        return max(1, min(token_budget, CPU_TOKEN_TARGET) // max(1, n_examples * n_tokens))
    return max(1, token_budget // max(1, n_examples * n_tokens))


def _save_hook(x: Tensor, hook, store: dict) -> None:
    store[hook.name] = x


def _gather_hook(resid: Float[Tensor, "batch pos d_model"], hook, pos: Tensor) -> Tensor:
    return resid[torch.arange(resid.shape[0], device=resid.device), pos.to(resid.device)][:, None]


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


@dataclass(frozen=True)
class _Chunk:
    """Rows of a `TaskBatch` scored in one forward, trimmed to their longest prompt."""

    rows: Tensor  # (b,) row indices, on the model's device
    width: int  # padded length of this chunk

    def tokens(self, batch: TaskBatch) -> Tensor:
        # Right padding and causal attention: the trailing pads change no earlier position.
        return batch.tokens[self.rows, : self.width]


def length_buckets(
    lengths: Tensor, token_budget: int, max_rows: int
) -> list[tuple[list[int], int]]:
    """Rows grouped by length so that rows x padded length <= `token_budget` per group.

    Rows are sorted by length (stable), then cut greedily; a prompt longer than the budget
    gets a group of its own. Returns `[(row indices, padded length), ...]`.
    """
    lens = [int(x) for x in lengths.tolist()]
    order = sorted(range(len(lens)), key=lambda i: lens[i])
    groups: list[tuple[list[int], int]] = []
    rows: list[int] = []
    for i in order:
        width = max(1, lens[i])  # the longest so far: rows are sorted by length
        if rows and ((len(rows) + 1) * width > token_budget or len(rows) >= max_rows):
            groups.append((rows, max(1, lens[rows[-1]])))
            rows = []
        rows.append(i)
    if rows:
        groups.append((rows, max(1, lens[rows[-1]])))
    return groups


class MaskScorer:
    """Scores one task under many head masks; the clean run is done once.

    Memory is bounded by budgets, not by the split: each forward holds at most `token_budget`
    tokens (rows x padded length; prompts are bucketed by length so little of it is padding),
    and the per-layer residuals that exact scoring restarts from are kept between calls only
    up to `cache_bytes` (on the model's device, or in CPU memory with `offload=True`); chunks
    beyond that are recomputed, up to the last layer a call needs, on each `score` call.
    `release()` frees the cache when a stage ends (it is rebuilt on the next `score`).

    Args:
        model: a hooked model with `blocks.{l}.attn.hook_z`.
        data: a `TaskBatch`, or anything `metric` accepts.
        kind: how a removed head's `z` is replaced (`AblationKind`).
        means: the head means, for mean ablation.
        metric: a custom `metric(model, data)`; None scores every metric in `METRICS` from
            the answer-position logits.
        reuse_prefix: restart each masked run at its first ablated layer (default); False runs
            the whole model with full logits per mask (the naive reference).
        masks_per_pass: masks evaluated in one tiled forward; None picks per device. Always
            capped by `token_budget` and `max_rows`.
        max_rows: the most rows (masks x examples) in one forward (None: 1024 on a CPU, the
            token budget elsewhere).
        per_position: mean ablation with the means at each position (`HeadMeans.per_position`).
        token_budget: the most tokens (rows x padded length) in one forward (None: per device,
            `device_token_budget`: 16384 on a CPU, a share of the free memory on a GPU).
        cache_bytes: the most bytes of cached residuals kept between `score` calls.
        offload: keep the cached residuals in CPU memory and move each to the device when used.

    Example:
        >>> scorer = MaskScorer(model, encode_task(model, task, "select"))
        >>> scores = scorer.score(masks_of(model, [["L0H1"], ["L0H1", "L1H2"]]))
        >>> scores["accuracy"].shape  # (n_masks, n_examples)
        >>> scorer.release()  # the stage is over: free the cached residuals
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
        max_rows: int | None = None,
        per_position: bool = False,
        token_budget: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        offload: bool = False,
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
        # None: per device (`device_token_budget`; rows are then bounded by tokens alone off
        # the CPU, where 1024 rows per forward was the measured sweet spot)
        if token_budget is None:
            token_budget = device_token_budget(model.cfg)
        if max_rows is None:
            on_cpu = torch.device(model.cfg.device).type == "cpu"
            max_rows = 1024 if on_cpu else token_budget
        for label, value in (("max_rows", max_rows), ("token_budget", token_budget)):
            if not isinstance(value, int) or value < 1:
                raise WorkbenchError(f"{label} must be an integer >= 1; got {value!r}")
        if not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise WorkbenchError(f"cache_bytes must be an integer >= 0; got {cache_bytes!r}")
        self.means, self.per_position = means, per_position
        self.reuse_prefix, self.max_rows = reuse_prefix, max_rows
        self.token_budget, self.cache_bytes, self.offload = token_budget, cache_bytes, offload
        self._masks_per_pass = masks_per_pass
        self._clean: dict[str, Tensor] | None = None
        self._cache: dict[int, Tensor] = {}  # chunk index -> (L, b, T, d) residuals
        self._cache_built = False
        self._chunk_list: list[_Chunk] | None = None
        self._resample_z: Tensor | None = None  # (batch, pos, layer, head, d), resample only
        if self.kind is AblationKind.RESAMPLE:
            if not isinstance(data, TaskBatch):
                raise WorkbenchError("resample ablation needs an encoded TaskBatch with "
                                     "counterfactual prompts")
            self._resample_z = compute_resample_z(model, data)

    def _resample(self, chunk: "_Chunk | None" = None) -> Tensor | None:
        """The counterfactual `z` of `chunk`'s rows, trimmed to its width (None unless
        resample ablation)."""
        if self._resample_z is None or chunk is None:
            return self._resample_z
        return self._resample_z[chunk.rows.to(self._resample_z.device), : chunk.width]

    @property
    def n_layers(self) -> int:
        return self.model.cfg.n_layers

    @property
    def cached_bytes(self) -> int:
        """Bytes of residuals this scorer holds now."""
        return sum(t.numel() * t.element_size() for t in self._cache.values())

    def masks_per_pass(self, chunk: "_Chunk") -> int:
        """Masks tiled into one forward over `chunk` (capped by the token and row budgets);
        sharding across processes cuts only between such groups."""
        b, width = len(chunk.rows), chunk.width
        per_pass = self._masks_per_pass or _default_masks_per_pass(
            self.model, b, width, self.token_budget
        )
        return max(1, min(per_pass, self.token_budget // (b * width), self.max_rows // b))

    def release(self) -> None:
        """Free the cached residuals (clean scores are kept); the next `score` rebuilds them."""
        self._cache = {}
        self._cache_built = False

    def _chunks(self) -> list[_Chunk]:
        if self._chunk_list is None:
            device = self.data.tokens.device
            self._chunk_list = [
                _Chunk(torch.tensor(rows, device=device, dtype=torch.long), width)
                for rows, width in length_buckets(
                    self.data.lengths, self.token_budget, self.max_rows
                )
            ]
        return self._chunk_list

    def clean(self) -> dict[str, Tensor]:
        """Per-example scores of the unablated model, `{metric: [batch]}`."""
        if self._clean is None:
            with torch.no_grad():
                if self.metric is not None:
                    self._clean = _as_score_dict(self.metric(self.model, self.data), "clean run")
                else:
                    self._clean = self._clean_pass()
        return self._clean

    def _resid_bytes(self, chunk: _Chunk) -> int:
        cfg = self.model.cfg
        elem = torch.empty((), dtype=cfg.dtype).element_size()
        return self.n_layers * len(chunk.rows) * chunk.width * cfg.d_model * elem

    def _clean_pass(self) -> dict[str, Tensor]:
        """The clean scores; with prefix reuse also fills the residual cache up to its budget."""
        model, batch, L = self.model, self.data, self.n_layers
        n = len(batch)
        out: dict[str, Tensor] = {}
        used = 0
        for c, chunk in enumerate(self._chunks()):
            tokens = chunk.tokens(batch)
            pos = batch.answer_pos[chunk.rows]
            if self.reuse_prefix:
                keep = used + self._resid_bytes(chunk) <= self.cache_bytes
                store: dict[str, Tensor] = {}
                hooks = (
                    [
                        (f"blocks.{l}.hook_resid_pre", partial(_save_hook, store=store))
                        for l in range(L)
                    ]
                    if keep
                    else []
                )
                answer_hooks, pos_after = answer_only_hooks(model, pos)
                with model.hooks(fwd_hooks=hooks + answer_hooks):
                    final = model(tokens, stop_at_layer=L, **forward_kwargs(model))
                if keep:
                    self._store(c, [store[f"blocks.{l}.hook_resid_pre"] for l in range(L)])
                    used += self._resid_bytes(chunk)
                logits = unembed_at(model, final, pos_after)
            else:  # the naive reference: full logits
                logits = model(tokens, **forward_kwargs(model))
                logits = logits[torch.arange(logits.shape[0], device=logits.device), pos]
            for name, v in score_logits(logits, _Targets.of(batch, rows=chunk.rows)).items():
                if name not in out:
                    out[name] = torch.empty(n, device=v.device, dtype=v.dtype)
                out[name][chunk.rows.to(v.device)] = v
        self._cache_built = self.reuse_prefix
        return out

    def _store(self, c: int, resid: list[Tensor]) -> None:
        stacked = torch.stack([r.to(resid[0].device) for r in resid])  # (L, b, T, d)
        self._cache[c] = stacked.to("cpu") if self.offload else stacked

    def _fill_cache(self) -> None:
        """Rebuild the cache after `release()` (clean scores are already known)."""
        used = 0
        for c, chunk in enumerate(self._chunks()):
            if used + self._resid_bytes(chunk) > self.cache_bytes:
                break
            found = self._compute_prefix(chunk, list(range(self.n_layers)))
            self._store(c, [found[l] for l in range(self.n_layers)])
            used += self._resid_bytes(chunk)
        self._cache_built = True

    def _compute_prefix(self, chunk: _Chunk, layers: list[int]) -> dict[int, Tensor]:
        """A clean forward up to the highest of `layers`, keeping `hook_resid_pre` there."""
        model, top = self.model, max(layers)
        store: dict[str, Tensor] = {}
        hooks = [
            (f"blocks.{l}.hook_resid_pre", partial(_save_hook, store=store))
            for l in layers
            if l < top
        ]
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            resid_top = model(
                chunk.tokens(self.data), stop_at_layer=top, **forward_kwargs(model)
            )  # (b, T, d): the residual entering block `top`
        found = {l: store[f"blocks.{l}.hook_resid_pre"] for l in layers if l < top}
        found[top] = resid_top
        return found

    def _prefix(self, c: int, layers: list[int]) -> dict[int, Tensor]:
        """`blocks.{l}.hook_resid_pre` of chunk `c` for each of `layers`, on the device; from
        the cache when it holds the chunk, else recomputed up to the highest layer needed."""
        if c in self._cache:
            device = self.data.tokens.device
            return {l: self._cache[c][l].to(device, non_blocking=True) for l in layers}
        return self._compute_prefix(self._chunks()[c], layers)

    def score(
        self,
        masks: Float[Tensor, "n_masks layer head_index"],
        progress: bool = False,
        desc: str = "masks",
        rows: Tensor | None = None,
    ) -> dict[str, Float[Tensor, "n_masks batch"]]:
        """Per-example scores with each mask's heads ablated (1 = ablated).

        Args:
            masks: 0/1 masks, 1 = ablated.
            rows: score only these examples (indices into the data, in this order); the
                forwards then run on those rows alone, so a slice of the split costs its share
                of a full pass. None scores every example.

        Returns:
            `{metric: [n_masks, n_rows]}` (`n_rows` = all examples, or `len(rows)`).

        Under torch.distributed the masks are split across ranks and the scores gathered
        (`workbench.distributed.score_sharded`); the numbers are the same.
        """
        if distributed.shards_masks():
            return distributed.score_sharded(self, masks, progress, desc, rows=rows)
        clean = self.clean()
        masks = masks.to(self.model.cfg.device)
        n = masks.shape[0]
        n_ex = next(iter(clean.values())).shape[0]
        column = self._columns(rows, n_ex)
        n_out = n_ex if rows is None else len(rows)
        out = {
            name: torch.empty(n, n_out, device=v.device, dtype=v.dtype)
            for name, v in clean.items()
        }
        if n == 0 or n_out == 0:
            return out
        bar = tqdm(total=n, desc=desc, disable=not progress, leave=False)
        try:
            if self.metric is not None and rows is not None and self._sliceable():
                # a metric on a TaskBatch scores each row on its own: run the slice alone
                self._score_metric(masks, out, bar, self.data.rows(rows.cpu()))
            elif self.metric is not None:  # custom data cannot be sliced: score all, keep rows
                full = {name: torch.empty(n, n_ex, device=v.device, dtype=v.dtype)
                        for name, v in clean.items()}
                self._score_metric(masks, full, bar, self.data)
                for name, v in full.items():
                    out[name] = v if rows is None else v[:, rows.to(v.device)]
            elif self.reuse_prefix:
                self._score_prefix(masks, out, bar, column)
            else:
                self._score_naive(masks, out, bar, column)
        finally:
            bar.close()
        return out

    def _columns(self, rows: Tensor | None, n_ex: int) -> Tensor:
        """Output column of every example (-1: not scored)."""
        device = self.data.tokens.device if isinstance(self.data, TaskBatch) else "cpu"
        if rows is None:
            return torch.arange(n_ex, device=device)
        rows = torch.as_tensor(rows, dtype=torch.long).to(device)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= n_ex):
            raise WorkbenchError(f"rows must index the {n_ex} examples; got {rows.tolist()[:8]}...")
        if len(set(rows.tolist())) != len(rows):
            raise WorkbenchError("rows must not repeat an example")
        column = torch.full((n_ex,), -1, dtype=torch.long, device=device)
        column[rows] = torch.arange(len(rows), device=device)
        return column

    def _selected(self, column: Tensor) -> list[tuple[int, _Chunk, Tensor, Tensor]]:
        """`(chunk index, sub-chunk, positions within the chunk, output columns)` for every
        chunk with a scored row; the sub-chunk keeps the chunk's padded width."""
        found = []
        for c, chunk in enumerate(self._chunks()):
            cols = column[chunk.rows]
            keep = (cols >= 0).nonzero().flatten()
            if len(keep) == 0:
                continue
            sub = chunk if len(keep) == len(chunk.rows) else _Chunk(chunk.rows[keep], chunk.width)
            found.append((c, sub, keep, cols[keep]))
        return found

    def _sliceable(self) -> bool:
        """Whether a custom metric can score a slice of the rows alone: its data is a
        `TaskBatch` (whose rows the metric scores one by one) and no ablation needs the
        counterfactual z of the whole batch."""
        return isinstance(self.data, TaskBatch) and self._resample_z is None

    def _score_metric(self, masks, out, bar, data) -> None:
        with torch.no_grad():
            for i in range(masks.shape[0]):
                hooks = mask_hooks(
                    self.model, masks[i : i + 1], self.kind, self.means, self.per_position,
                    resample=self._resample(),
                )
                with self.model.hooks(fwd_hooks=hooks):
                    scores = _as_score_dict(self.metric(self.model, data), "ablated run")
                for name, v in scores.items():
                    if name in out:
                        out[name][i] = v
                bar.update(1)

    def _score_naive(self, masks, out, bar, column) -> None:
        model, batch = self.model, self.data
        heads = [[(int(l), int(h)) for l, h in m.nonzero().tolist()] for m in masks.cpu()]
        with torch.no_grad():
            for i, head_list in enumerate(heads):
                for _, chunk, _, cols in self._selected(column):
                    hooks = ablation_hooks(model, head_list, self.kind, self.means,
                                           self.per_position, resample=self._resample(chunk))
                    logits = model.run_with_hooks(
                        chunk.tokens(batch), fwd_hooks=hooks, **forward_kwargs(model)
                    )
                    pos = batch.answer_pos[chunk.rows]
                    at_answer = logits[torch.arange(logits.shape[0], device=logits.device), pos]
                    targets = _Targets.of(batch, rows=chunk.rows)
                    for name, v in score_logits(at_answer, targets).items():
                        out[name][i, cols.to(v.device)] = v
                bar.update(1)

    def _score_prefix(self, masks, out, bar, column) -> None:
        model, batch, L = self.model, self.data, self.n_layers
        any_layer = masks.flatten(2).amax(-1) > 0  # (M, L)
        # The first ablated layer of each mask; L (no layer) for the empty mask.
        first = torch.where(
            any_layer.any(-1),
            any_layer.float().argmax(-1),
            torch.full_like(any_layer[:, 0], L, dtype=torch.long),
        ).cpu()
        clean = self.clean()
        scored = (column >= 0).nonzero().flatten()
        order = column[scored].argsort()
        scored = scored[order]  # the scored examples in output order
        if L in set(first.tolist()):
            idx = (first == L).nonzero().flatten()
            for name, v in clean.items():
                out[name][idx.to(v.device)] = v[scored.to(v.device)]
            bar.update(len(idx))
        layers = sorted(set(first.tolist()) - {L})
        if not layers:
            return
        if not self._cache_built:
            self._fill_cache()
        chunks = self._selected(column)
        for j, (c, chunk, keep, cols) in enumerate(chunks):
            if c in self._cache:
                prefix = self._prefix(c, layers)
                if len(keep) < len(self._chunks()[c].rows):
                    prefix = {l: r[keep.to(r.device)] for l, r in prefix.items()}
            else:  # not cached: the clean prefix of the scored rows only
                prefix = self._compute_prefix(chunk, layers)
            b = len(chunk.rows)
            sub_tokens = chunk.tokens(batch)
            resample = self._resample(chunk)
            per_pass = self.masks_per_pass(chunk)
            for layer in layers:
                idx = (first == layer).nonzero().flatten()
                for s in range(0, len(idx), per_pass):
                    chunk_masks = idx[s : s + per_pass].to(masks.device)
                    k = len(chunk_masks)
                    hooks = mask_hooks(
                        model,
                        masks[chunk_masks],
                        self.kind,
                        self.means,
                        self.per_position,
                        layers=range(layer, L),
                        resample=resample,
                    )
                    answer_hooks, pos = answer_only_hooks(
                        model, batch.answer_pos[chunk.rows].repeat(k)
                    )
                    extra = shortformer_kwargs(model, sub_tokens.repeat(k, 1))
                    with torch.no_grad(), model.hooks(fwd_hooks=hooks + answer_hooks):
                        final = model(
                            prefix[layer].repeat(k, 1, 1),
                            start_at_layer=layer,
                            stop_at_layer=L,
                            **extra,
                        )  # (k * b, T or 1, d)
                        logits = unembed_at(model, final, pos)
                    targets = _Targets.of(batch, k, chunk.rows)
                    for name, v in score_logits(logits, targets).items():
                        out[name][chunk_masks[:, None], cols.to(v.device)[None]] = v.view(k, b)
                    if j == len(chunks) - 1:
                        bar.update(k)
            del prefix


# ---------------------------------------------------------------------------------------------
# Attribution


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


def _z_fill(
    kind: AblationKind, means: HeadMeans | None, layer: int, z: Tensor, per_position: bool = False
) -> Tensor:
    if kind is AblationKind.ZERO:
        return torch.zeros_like(z)
    if means is None:
        raise WorkbenchError("mean ablation needs means: pass means=compute_head_means(...)")
    if per_position:
        if means.per_position is None:
            raise WorkbenchError(
                "per-position means need equal-length reference prompts; these differed"
            )
        if means.per_position.shape[0] < z.shape[1]:
            raise WorkbenchError(
                f"per-position means cover {means.per_position.shape[0]} positions but the "
                f"input has {z.shape[1]}; compute the means on prompts of this length"
            )
        fill = means.per_position[: z.shape[1], layer]  # (T, H, D)
        return fill.to(device=z.device, dtype=z.dtype)[None].expand_as(z)
    return means.averaged[layer].to(device=z.device, dtype=z.dtype).expand_as(z)


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


def attribution_effects(
    model,
    data,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    metric: CustomMetric | None = None,
    max_rows: int | None = 1024,
    per_position: bool = False,
    token_budget: int | None = DEFAULT_TOKEN_BUDGET,
) -> tuple[dict[str, Tensor], dict[str, Float[Tensor, "n_heads batch"]]]:
    """First-order estimates of every head's per-example effect.

    Returns:
        `(clean, diffs)`: clean per-example scores `{metric: [batch]}`, and the estimated
        ablated-minus-clean differences `{metric: [n_layers * n_heads, batch]}` (row
        `layer * n_heads + head`).
    """
    kind = AblationKind.parse(kind)
    if kind is AblationKind.RESAMPLE:
        raise WorkbenchError(
            "attribution screening supports zero and mean ablation; use method 'exact' for "
            "resample ablation"
        )
    # the backward keeps every layer's activations: the CPU budgets, whatever the device
    token_budget, max_rows = token_budget or DEFAULT_TOKEN_BUDGET, max_rows or 1024
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
                scores = _as_score_dict(metric(model, sub), "attribution run")
                differentiable = dict(scores)
            else:
                sub = data.rows(rows)
                answer_hooks, pos = answer_only_hooks(model, sub.answer_pos)
                with model.hooks(fwd_hooks=answer_hooks):
                    final = model(sub.tokens[:, :width], stop_at_layer=L, **forward_kwargs(model))
                logits = unembed_at(model, final, pos).float()
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
                    delta = _z_fill(kind, means, layer, z.detach(), per_position) - z.detach()
                    effect = torch.einsum("bthd,bthd->hb", g, delta).to(per_head.device)
                    if effect.shape[1] != n_rows:  # one example's rows all count towards it
                        effect = effect.sum(1, keepdim=True)
                    per_head[layer] += effect
                est = per_head.flatten(0, 1).float()  # (L * H, batch)
                est = est.masked_fill(~finite[None], float("nan"))
            if metric is None and name == "accuracy":
                m = value.detach()
                est = (m[None] + est > 0).float() - (m > 0).float()[None]
            diff_parts.setdefault(name, []).append(est.detach())
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
    max_rows: int | None = None,
    masks_per_pass: int | None = None,
    progress: bool = False,
    desc: str = "screening",
    per_position: bool = False,
    token_budget: int | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    offload: bool = False,
    open_fn: OpenFn | None = None,
    seed: int = 0,
    ci: float = 0.95,
    counter: dict | None = None,
    max_examples: int | None = None,
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Clean scores `{metric: [batch]}` and per-example single-head effects
    `{metric: [n_layers * n_heads, batch]}` (NaN rows for heads not in `heads`). The
    scorer's residual cache is freed before returning.

    With `open_fn` (exact and naive methods) the heads are raced (`workbench.racing.race`,
    example order seeded by `seed`, looks at level `ci`): a head `open_fn` closes keeps NaN
    for the examples it was not scored on; `max_examples` scores every head on that many
    examples of the racing order only. `counter["forward_eq"]` adds up the passes spent."""
    method = ScreenMethod.parse(method)
    if method is ScreenMethod.ATTRIBUTION:
        n_ex = len(data) if isinstance(data, TaskBatch) else None
        if max_examples is None or n_ex is None or max_examples >= n_ex:
            return attribution_effects(
                model, data, kind, means, metric, max_rows, per_position, token_budget
            )
        # the first `max_examples` of the racing order, as exact screening scores them
        rows = example_order(n_ex, seed)[:max_examples]
        clean, est = attribution_effects(
            model, data.rows(rows), kind, means, metric, max_rows, per_position, token_budget
        )
        full_clean, full_est = {}, {}
        for name, v in clean.items():
            full_clean[name] = torch.full((n_ex,), float("nan"), device=v.device, dtype=v.dtype)
            full_clean[name][rows.to(v.device)] = v
        for name, v in est.items():
            full_est[name] = torch.full((v.shape[0], n_ex), float("nan"), device=v.device,
                                        dtype=v.dtype)
            full_est[name][:, rows.to(v.device)] = v
        return full_clean, full_est
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
        per_position=per_position,
        token_budget=token_budget,
        cache_bytes=cache_bytes,
        offload=offload,
    )
    clean = scorer.clean()
    raced = race(scorer, masks_of(model, [[h] for h in chosen]), open_fn, seed, ci,
                 progress=progress, desc=desc, max_examples=max_examples)
    scorer.release()
    if counter is not None:
        counter["forward_eq"] = counter.get("forward_eq", 0.0) + raced.forward_eq
    rows = torch.tensor([l * H + h for l, h in chosen], device=model.cfg.device, dtype=torch.long)
    diffs = {}
    for name, v in raced.diffs.items():
        full = torch.full((L * H, v.shape[1]), float("nan"), device=v.device, dtype=v.dtype)
        full[rows.to(v.device)] = v
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
    max_rows: int | None = None,
    masks_per_pass: int | None = None,
    progress: bool = False,
    per_position: bool = False,
    token_budget: int | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    offload: bool = False,
    race_on: str | None = None,
    race_rule: str = "hurts",
) -> pd.DataFrame:
    """The effect of removing each head alone, on a task and on extra tasks.

    Args:
        model: a hooked model exposing `blocks.{l}.attn.hook_z`.
        task: a `Task`, `TaskBatch`, task name or path; or any data for a custom `metric`.
        kind: `"zero"` or `"mean"`; mean ablation uses `means`, by default the mean `z` over
            the screened split of `task`; each of `others` uses the mean over its own prompts.
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
        per_position: mean ablation with the mean `z` at each position (needs equal-length
            prompts: `HeadMeans.per_position`) instead of the mean over all positions.
        token_budget, cache_bytes, offload: memory bounds of exact screening (`MaskScorer`).
        race_on: a metric to race exact screening on (`workbench.racing`): on the task a head
            stops being scored once `race_rule` is decided for that metric; each of `others`
            is scored only on as many examples as the task's first racing look, and only for
            the heads whose removal does not clearly hurt the task (its per-head columns
            decide nothing; the others are NaN). None scores every head on every example.
            The `d_<m>_n` columns say how many examples each number rests on.
        race_rule: what the race decides on the task (`workbench.racing.SCREEN_RULES`):
            `"hurts"` scores a head until its removal clearly hurts (the candidates' ranks then
            rest on every example of every other head); `"pool"` only until its membership of
            the search pool is decided, for searches that use the pool and not the ranks.

    Returns:
        A per-head table (see the module docstring). `df.attrs` holds `clean` (the clean mean
        of each metric per task), `n_examples` per task, `method`, `kind` and `forward_eq`
        (passes over each task's examples spent).

    Example:
        >>> df = screen_heads(model, "ioi", kind="mean")
        >>> df.sort_values("d_logit_diff", ascending=False).head()
    """
    method = ScreenMethod.parse(method)
    kind = AblationKind.parse(kind)
    if race_rule not in SCREEN_RULES:
        raise WorkbenchError(
            f"race_rule {race_rule!r} is unknown; expected one of {sorted(SCREEN_RULES)}"
        )
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
        "per_position": per_position,
        "forward_eq": {},
    }
    items = [(None, data, name)]
    for other_name, other in _other_items(others):
        other_data, default_name = prepare_data(model, other, None, metric)
        items.append((other_name or default_name, other_data, other_name or default_name))
    L, H = model.cfg.n_layers, model.cfg.n_heads
    pool: dict[tuple[int, int], bool] = {}  # filled by the main task (it comes first)
    for suffix, d, label in items:
        item_means = means
        if suffix is not None and kind is AblationKind.MEAN and isinstance(d, TaskBatch):
            item_means = compute_head_means(model, d.tokens, d.lengths)  # its own prompts
        # the main task races on its decision; a side task's per-head columns decide nothing
        # (the found sets' side effects are measured on every example in confirmation), so
        # they rest on as many examples as the task's first look (the first of the racing
        # order): on SmolLM2 the 38 of induction's first slice cost ioi's whole screening
        # each task its own metric (a multi-token side task of a single-token task, ...);
        # a metric on a TaskBatch scores rows one by one, so its slices can be raced
        item_metric = task_metric(metric, d)
        rule, limit, item_heads = None, None, heads
        if race_on is not None and (item_metric is None or isinstance(d, TaskBatch)):
            if suffix is None:
                rule = SCREEN_RULES[race_rule](race_on)
            else:
                limit = first_slice(len(data))
                # and only for the heads a search can pick: those whose removal does not
                # clearly hurt the task (`search_pool`'s rule); the others' side columns
                # are NaN with n = 0
                item_heads = [h for h in (all_heads(model) if heads is None
                                          else HeadSet.of(model, heads)) if pool.get(h)]
        counter: dict = {}
        clean, diffs = single_head_diffs(
            model,
            d,
            method,
            kind,
            item_means,
            item_metric,
            item_heads,
            max_rows,
            masks_per_pass,
            progress,
            desc=f"screening {label}",
            per_position=per_position,
            token_budget=token_budget,
            cache_bytes=cache_bytes,
            offload=offload,
            open_fn=rule,
            seed=seed,
            ci=ci,
            counter=counter,
            max_examples=limit,
        )
        attrs["forward_eq"][label] = counter.get("forward_eq", float("nan"))
        attrs["clean"][label] = {m: float(torch.nanmean(v.float())) for m, v in clean.items()}
        attrs["n_examples"][label] = int(next(iter(clean.values())).shape[0])
        for m, diff in diffs.items():
            for stat, values in effect_summary(diff, n_boot, seed, ci).items():
                columns[effect_column(m, stat, suffix)] = values.view(L, H)
        if suffix is None and rule is not None:  # the main task raced: its pool is known
            hi = columns[effect_column(race_on, "_hi")].cpu()  # (L, H)
            pool = {(l, h): bool(hi[l, h] >= -ATOL) for l in range(L) for h in range(H)}
    df = head_table(columns, L, H)
    df.attrs.update(attrs)
    return df


def naive_effects(
    model,
    data,
    kind: AblationKind | str = AblationKind.ZERO,
    means: HeadMeans | None = None,
    heads=None,
    per_position: bool = False,
) -> dict[str, np.ndarray]:
    """The reference: mean effect of each head from one full `run_with_hooks` per head,
    `{metric: [n_layers, n_heads]}` (NaN for heads not in `heads`)."""
    _, diffs = single_head_diffs(
        model, data, ScreenMethod.NAIVE, kind, means, heads=heads, per_position=per_position
    )
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return {m: torch.nanmean(d, dim=-1).view(L, H).cpu().numpy() for m, d in diffs.items()}
