"""Scoring a task under many head masks: `MaskScorer`, the engine every CEL stage runs on.

A mask is a `[layer, head_index]` 0/1 tensor (1 = ablated). `MaskScorer.score(masks)` returns
each example's metrics with each mask's heads removed; screening scores one head per mask,
the search and the confirmation whole sets, the random baselines random sets.

Exact scoring reuses the clean prefix: heads in layer `l` cannot change anything before layer
`l`, so the clean run caches `blocks.{l}.hook_resid_pre` once and each masked run restarts
there with `start_at_layer=l`. Only the answer position matters at the end, so from the last
block's `hook_resid_mid` on each row keeps only that position (`answer_only_hooks`): the last
MLP, the final norm and the unembedding run on one position per row. The result equals one
full `run_with_hooks` per mask up to float error (`reuse_prefix=False` is that reference).
Several masks can share one forward (`mask_hooks` tiles the batch), within the budgets of
`workbench.compute.Compute`.

Custom metrics: `metric(model, data) -> per-example scores` (a `[batch]` tensor, named
`metric`, or a dict of them) with any `data` it understands scores any hooked model that
exposes `blocks.{l}.attn.hook_z`. The metric runs the model itself, so each mask is then one
call of it under the ablation hooks (no prefix reuse); a metric with a `masks_metric` scores
several masks per call (`workbench.scoring.custom`: a generation task decodes their rows
together).

A scorer remembers the whole-split scores of calls with at most `MEMO_MASKS` masks: the
confirmation scores each found set on every held-out and side-task example, and the trade-off
table asks for the same set again (on Gemma-3 x ioi with induction beside it, three sets on
180 + 300 examples). A call whose masks are all remembered returns their scores, the same
values the same call computes (one mask, every example, the same passes); any other call
computes.
"""

from __future__ import annotations

from functools import partial

import torch
from jaxtyping import Float
from torch import Tensor

from workbench import distributed
from workbench.ablation import Ablation, AblationKind, compute_resample_z
from workbench.compute import QUIET, Compute, default_masks_per_pass
from workbench.deprecation import renamed_keywords
from workbench.errors import WorkbenchError
from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs, is_bridge, unembed_at
from workbench.metrics.scores import score_logits
from workbench.progress import progress_bar
from workbench.scoring.batching import Chunk, Targets, answer_only_hooks, length_buckets
from workbench.scoring.cache import ResidCache, save_hook
from workbench.scoring.custom import score_metric
from workbench.scoring.interface import CustomMetric as CustomMetric
from workbench.scoring.interface import Scorer as Scorer
from workbench.scoring.interface import as_score_dict
from workbench.scoring.interface import masks_of as masks_of
from workbench.scoring.sharing import ChunkRun, score_shared, sharing_pays
from workbench.tasks.encoding import TaskBatch

MEMO_MASKS = 4  # whole-split calls of at most this many masks are remembered (the found sets)


def _memo_keys(masks: Tensor) -> list[bytes]:
    """One key per mask: its shape and values, as bytes."""
    flat = masks.detach().to("cpu", torch.float32).reshape(len(masks), -1)
    return [bytes(str(tuple(masks.shape[1:])), "ascii") + row.numpy().tobytes() for row in flat]


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
        ablation: how a removed head's `z` is replaced (`Ablation`, or its kind alone); mean
            ablation needs its `means`.
        metric: a custom `metric(model, data)`; None scores every metric in `METRICS` from
            the answer-position logits.
        reuse_prefix: restart each masked run at its first ablated layer (default; never on a
            TransformerBridge, which cannot restart at a layer); False runs the whole model
            with full logits per mask (the naive reference).
        compute: the budgets (`workbench.compute.Compute`: `token_budget`, `max_rows`,
            `masks_per_pass`, `cache_bytes`, `offload`); None: the device's defaults.

    Example:
        >>> scorer = MaskScorer(model, encode_task(model, task, "select"))
        >>> scores = scorer.score(masks_of(model, [["L0H1"], ["L0H1", "L1H2"]]))
        >>> scores["accuracy"].shape  # (n_masks, n_examples)
        >>> scorer.release()  # the stage is over: free the cached residuals
    """

    @renamed_keywords(holders={"ablation": Ablation.of}, kind="ablation.kind",
                      means="ablation.means", per_position="ablation.per_position")
    def __init__(
        self,
        model: HookedModel,
        data,
        ablation: Ablation | AblationKind | str = AblationKind.ZERO,
        metric: CustomMetric | None = None,
        *,
        reuse_prefix: bool = True,
        compute: Compute | None = None,
    ) -> None:
        if isinstance(data, torch.Tensor):  # raw tokens for a custom metric: the model's device
            data = data.to(model.cfg.device)
        self.model, self.data, self.metric = model, data, metric
        self.ablation = Ablation.of(ablation)
        self.kind = self.ablation.kind
        if self.kind is AblationKind.MEAN and self.ablation.means is None:
            raise WorkbenchError("mean ablation needs means: pass means=compute_head_means(...)")
        if metric is None and not isinstance(data, TaskBatch):
            raise WorkbenchError(
                f"without a custom metric the data must be an encoded TaskBatch; got "
                f"{type(data).__name__}"
            )
        compute = compute or QUIET
        self.compute = compute
        self.token_budget, self.max_rows = compute.budgets(model.cfg)
        self.cache_bytes = compute.cache_bytes
        # A TransformerBridge cannot restart a forward at a layer (Hugging Face's forward runs
        # the layers): every mask is then one full run, the naive path.
        self.reuse_prefix = reuse_prefix and not is_bridge(model)
        self._masks_per_pass = compute.masks_per_pass
        self._clean: dict[str, Tensor] | None = None
        self._memo: dict[bytes, dict[str, Tensor]] = {}  # `MEMO_MASKS`: a few masks' scores
        self._cache = ResidCache(model, data, compute.cache_bytes, compute.offload)
        self._chunk_list: list[Chunk] | None = None
        self._resample_z: Tensor | None = None  # (batch, pos, layer, head, d), resample only
        if self.kind is AblationKind.RESAMPLE:
            if not isinstance(data, TaskBatch):
                raise WorkbenchError("resample ablation needs an encoded TaskBatch with "
                                     "counterfactual prompts")
            self._resample_z = compute_resample_z(model, data)

    def _ablation(self, chunk: "Chunk | None" = None) -> Ablation:
        """The ablation with the counterfactual `z` of `chunk`'s rows, trimmed to its width
        (of every row without a chunk; none unless resample ablation)."""
        z = self._resample_z
        if z is not None and chunk is not None:
            z = z[chunk.rows.to(z.device), : chunk.width]
        return Ablation(self.kind, self.ablation.means, self.ablation.per_position, z)

    @property
    def n_layers(self) -> int:
        return self.model.cfg.n_layers

    @property
    def cached_bytes(self) -> int:
        """Bytes of residuals this scorer holds now."""
        return self._cache.nbytes

    def masks_per_pass(self, chunk: "Chunk") -> int:
        """Masks tiled into one forward over `chunk` (capped by the token and row budgets);
        sharding across processes cuts only between such groups."""
        b, width = len(chunk.rows), chunk.width
        per_pass = self._masks_per_pass or default_masks_per_pass(
            self.model, b, width, self.token_budget
        )
        return max(1, min(per_pass, self.token_budget // (b * width), self.max_rows // b))

    def release(self) -> None:
        """Free the cached residuals (clean scores are kept); the next `score` rebuilds them."""
        self._cache.clear()

    def chunks(self) -> list[Chunk]:
        """The data's rows grouped by length within the budgets, one forward each."""
        if self._chunk_list is None:
            device = self.data.tokens.device
            self._chunk_list = [
                Chunk(torch.tensor(rows, device=device, dtype=torch.long), width)
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
                    self._clean = as_score_dict(self.metric(self.model, self.data), "clean run")
                else:
                    self._clean = self._clean_pass()
        return self._clean

    def _clean_pass(self) -> dict[str, Tensor]:
        """The clean scores; with prefix reuse also fills the residual cache up to its budget."""
        model, batch, L = self.model, self.data, self.n_layers
        n = len(batch)
        out: dict[str, Tensor] = {}
        used = 0
        for c, chunk in enumerate(self.chunks()):
            tokens = chunk.tokens(batch)
            pos = batch.answer_pos[chunk.rows]
            if self.reuse_prefix:
                keep = used + self._cache.chunk_bytes(chunk) <= self.cache_bytes
                store: dict[str, Tensor] = {}
                hooks = (
                    [
                        (f"blocks.{l}.hook_resid_pre", partial(save_hook, store=store))
                        for l in range(L)
                    ]
                    if keep
                    else []
                )
                answer_hooks, pos_after = answer_only_hooks(model, pos)
                with model.hooks(fwd_hooks=hooks + answer_hooks):
                    final = model(tokens, stop_at_layer=L, **forward_kwargs(model))
                if keep:
                    self._cache.store(c, [store[f"blocks.{l}.hook_resid_pre"] for l in range(L)])
                    used += self._cache.chunk_bytes(chunk)
                logits = unembed_at(model, final, pos_after)
            else:  # the naive reference: full logits
                logits = model(tokens, **forward_kwargs(model))
                logits = logits[torch.arange(logits.shape[0], device=logits.device), pos]
            for name, v in score_logits(logits, Targets.of(batch, rows=chunk.rows)).items():
                if name not in out:
                    out[name] = torch.empty(n, device=v.device, dtype=v.dtype)
                out[name][chunk.rows.to(v.device)] = v
        self._cache.built = self.reuse_prefix
        return out

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
        keys = _memo_keys(masks) if rows is None and 0 < len(masks) <= MEMO_MASKS else None
        if keys is not None and all(k in self._memo for k in keys):
            return {m: torch.stack([self._memo[k][m] for k in keys]) for m in self.clean()}
        out = self._score(masks, progress, desc, rows)
        if keys is not None:
            for i, k in enumerate(keys):
                self._memo[k] = {m: v[i].clone() for m, v in out.items()}
        return out

    def _score(self, masks, progress: bool, desc: str, rows: Tensor | None
               ) -> dict[str, Tensor]:
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
        bar = progress_bar(n, desc, disable=not progress)  # plain lines in a log
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

    def _selected(self, column: Tensor) -> list[tuple[int, Chunk, Tensor, Tensor]]:
        """`(chunk index, sub-chunk, positions within the chunk, output columns)` for every
        chunk with a scored row; the sub-chunk keeps the chunk's padded width."""
        found = []
        for c, chunk in enumerate(self.chunks()):
            cols = column[chunk.rows]
            keep = (cols >= 0).nonzero().flatten()
            if len(keep) == 0:
                continue
            sub = chunk if len(keep) == len(chunk.rows) else Chunk(chunk.rows[keep], chunk.width)
            found.append((c, sub, keep, cols[keep]))
        return found

    def _sliceable(self) -> bool:
        """Whether a custom metric can score a slice of the rows alone: its data is a
        `TaskBatch` (whose rows the metric scores one by one) and no ablation needs the
        counterfactual z of the whole batch."""
        return isinstance(self.data, TaskBatch) and self._resample_z is None

    def _score_metric(self, masks, out, bar, data) -> None:
        score_metric(self.model, self.metric, data, masks, out, bar, self._ablation())

    def _score_naive(self, masks, out, bar, column) -> None:
        model, batch = self.model, self.data
        heads = [[(int(l), int(h)) for l, h in m.nonzero().tolist()] for m in masks.cpu()]
        with torch.no_grad():
            for i, head_list in enumerate(heads):
                for _, chunk, _, cols in self._selected(column):
                    hooks = self._ablation(chunk).hooks(model, head_list)
                    logits = model.run_with_hooks(
                        chunk.tokens(batch), fwd_hooks=hooks, **forward_kwargs(model)
                    )
                    pos = batch.answer_pos[chunk.rows]
                    at_answer = logits[torch.arange(logits.shape[0], device=logits.device), pos]
                    targets = Targets.of(batch, rows=chunk.rows)
                    for name, v in score_logits(at_answer, targets).items():
                        out[name][i, cols.to(v.device)] = v
                bar.update(1)

    def _score_prefix(self, masks, out, bar, column) -> None:
        L = self.n_layers
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
        if not self._cache.built:
            self._cache.fill(self.chunks())
        chunks = self._selected(column)
        ids = {layer: (first == layer).nonzero().flatten() for layer in layers}
        # auto (`Compute.share_prefix` None): in one process, share where it pays and join
        # the other layers' masks in common passes; False restarts each layer's masks apart
        auto = self.compute.share_prefix is None and not distributed.is_distributed()
        share = {layer: sharing_pays(masks, ids[layer], layer) if auto
                 else bool(self.compute.share_prefix) for layer in layers}
        for j, (c, chunk, keep, cols) in enumerate(chunks):
            if c in self._cache.held:
                prefix = self._cache.prefix(c, chunk, layers)
                if len(keep) < len(self.chunks()[c].rows):
                    prefix = {l: r[keep.to(r.device)] for l, r in prefix.items()}
            else:  # not cached: the clean prefix of the scored rows only
                prefix = self._cache.compute(chunk, layers)
            run = ChunkRun(self.model, self.data, masks, chunk, cols, out,
                           self.masks_per_pass(chunk), self._ablation(chunk),
                           bar if j == len(chunks) - 1 else None)
            tail = run.defer if auto else run.tail
            for layer in layers:
                if share[layer]:
                    score_shared(masks, ids[layer], layer, prefix[layer], run.advance, tail)
                else:
                    tail(ids[layer], layer, prefix[layer])
            run.flush()
            del prefix
