"""Shared prefixes among head masks: run the blocks that several masks have in common once.

Exact scoring restarts each masked run at its first ablated layer from the clean residual
cached there (`workbench.scoring`). Masks that also agree on what they ablate at that layer,
and ablate nothing more until a later layer, share every block in between: the sets of the
interaction search's finalists (every set of up to 3 among some 15 heads) share their lowest
head with dozens of others, and their next head often lies layers higher. `score_shared`
walks the masks as a trie over layers, depth first: at each node (a residual that some
masks share) it advances the residual without ablation to the next layer where one of them
ablates, groups the masks by what they ablate there, runs that block once per group of two
or more (one copy of the rows) and recurses into the group; a mask alone in its group runs
from the node's residual to the end, tiled with the node's other lone masks. Only blocks that
every mask of a group would have run identically are shared, so the scores are those of one
restarted run per mask, up to the float error of batching (`tests/test_sharing.py`).

Memory is one residual per level of the trie (at most the largest set size plus one), since
the walk is depth first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import AblationKind, HeadMeans, mask_hooks
from workbench.batching import Chunk, Targets, answer_only_hooks
from workbench.metrics import score_logits, shortformer_kwargs, unembed_at

# `advance(resid, start, stop, mask)`: the residual entering block `stop` from `resid`
# entering block `start`, one copy of the rows, with `mask`'s heads (`[layer, head_index]`,
# None for none) ablated in blocks `start..stop-1`.
Advance = Callable[[Tensor, int, int, "Tensor | None"], Tensor]
# `tail(ids, start, resid)`: score `masks[ids]` from `resid` entering block `start` (their
# ablations below `start` already applied) to the end, tiled, and write their scores.
Tail = Callable[[Tensor, int, Tensor], None]


def next_layers(masks: Float[Tensor, "n_masks layer head_index"], start: int) -> Tensor:
    """`[n_masks]` the first layer `>= start` where each mask ablates a head (`n_layers` for
    none)."""
    n_layers = masks.shape[1]
    any_layer = masks[:, start:].flatten(2).amax(-1) > 0  # (M, L - start)
    first = any_layer.float().argmax(-1) + start
    return torch.where(any_layer.any(-1), first, torch.full_like(first, n_layers)).cpu()


def score_shared(masks: Float[Tensor, "n_masks layer head_index"], ids: Tensor, start: int,
                 resid: Tensor, advance: Advance, tail: Tail) -> None:
    """Score `masks[ids]` from `resid` (the rows' residual entering block `start`, with every
    ablation of those masks below `start` applied, one copy), sharing the blocks that groups
    of them run identically.

    Args:
        masks: 0/1 masks, 1 = ablated.
        ids: the masks to score (their indices into `masks`).
        start: the layer `resid` enters.
        resid: `(rows, pos, d_model)`.
        advance, tail: run blocks and score masks (`Advance`, `Tail`).
    """
    n_layers = masks.shape[1]
    ids = ids.cpu()
    if len(ids) < 2 or start >= n_layers - 1:
        if len(ids):
            tail(ids, start, resid)
        return
    nxt = next_layers(masks[ids.to(masks.device)], start)
    alone: dict[int, list[int]] = {}  # layer -> the lone masks that run from there
    at, current = start, resid
    for layer in sorted(set(nxt.tolist())):
        if layer >= n_layers - 1:  # nothing left to share: the last block or no ablation
            alone.setdefault(at, []).extend(ids[nxt >= layer].tolist())
            break
        mine = ids[nxt == layer]
        if layer > at:  # the blocks every remaining mask runs unablated
            current, at = advance(current, at, layer, None), layer
        patterns = masks[mine.to(masks.device), layer]  # (k, H)
        _, group = torch.unique(patterns, dim=0, return_inverse=True)
        group = group.cpu()
        for g in group.unique().tolist():
            members = mine[group == g]
            if len(members) == 1:
                alone.setdefault(at, []).extend(members.tolist())
                continue
            one = torch.zeros_like(masks[0])
            one[layer] = masks[members[0].to(masks.device), layer]
            score_shared(masks, members, layer + 1, advance(current, layer, layer + 1, one),
                         advance, tail)
        alone_here = alone.pop(at, None)
        if alone_here:
            tail(torch.tensor(alone_here), at, current)
    for layer, lone in alone.items():
        tail(torch.tensor(lone), layer, current if layer == at else resid)


# `sharing_pays`: a block run on one copy of a chunk's rows costs about this many masked blocks
# tiled up to the CPU's token target (SmolLM2, 20 prompts: 1.12 s a mask one per pass, 0.73
# eight per pass, `workbench.compute.default_masks_per_pass`), and sharing must save at least
# `1 - SHARE_BELOW` of the blocks to be used: lone masks are tiled per trie node, in smaller
# passes than unshared. Measured on SmolLM2 x ioi (2 threads, `docs/speed.md`): the 575
# finalist sets on 20 prompts took 68.9 s shared against 134.5 s restarted; 63 knockout masks
# (17 % of the heads each) on 16 prompts 33.0 s shared against 27.3 s restarted.
ONE_COPY_COST = 1.5
SHARE_BELOW = 0.75


def shared_cost(masks: Float[Tensor, "n_masks layer head_index"], ids: Tensor,
                start: int) -> tuple[float, float]:
    """`(shared, restarted)`: the blocks `score_shared` would run for `masks[ids]` from layer
    `start` (a block on one copy of the rows counted `ONE_COPY_COST`), and the blocks of one
    restarted run per mask. Walks `score_shared` itself with counting callbacks."""
    n_layers = masks.shape[1]
    count = {"advance": 0, "tail": 0}

    def advance(resid, a, b, mask):
        count["advance"] += b - a
        return resid

    def tail(ids, a, resid):
        count["tail"] += len(ids) * (n_layers - a)

    score_shared(masks, ids, start, None, advance, tail)
    return (ONE_COPY_COST * count["advance"] + count["tail"],
            float(len(ids) * (n_layers - start)))


def sharing_pays(masks: Float[Tensor, "n_masks layer head_index"], ids: Tensor,
                 start: int) -> bool:
    """Whether sharing prefixes saves enough blocks for `masks[ids]` from layer `start`
    (`shared_cost`, `SHARE_BELOW`): it does for the finalist sets of the interaction search,
    which share their lowest heads, not for random knockouts of 30 % of the pool."""
    shared, restarted = shared_cost(masks, ids, start)
    return shared < SHARE_BELOW * restarted


@dataclass
class ChunkRun:
    """The forwards of one chunk's masked runs, `score_shared`'s callbacks: `advance` runs
    blocks on one copy of the chunk's rows, `tail` scores masks tiled `per_pass` at a time
    from a residual to the end and writes their scores into `out` at columns `cols`.
    The ablation is `kind` with `means` / `resample` as in `workbench.ablation.mask_hooks`;
    `bar`, when given, counts the masks scored."""

    model: object
    data: object  # the scorer's TaskBatch
    masks: Tensor
    chunk: Chunk
    cols: Tensor
    out: dict
    per_pass: int
    kind: AblationKind
    means: HeadMeans | None = None
    per_position: bool = False
    resample: Tensor | None = None
    bar: object = None

    def _hooks(self, masks: Tensor, layers) -> list:
        return mask_hooks(self.model, masks, self.kind, self.means, self.per_position,
                          layers=layers, resample=self.resample)

    def advance(self, resid: Tensor, start: int, stop: int, mask: Tensor | None) -> Tensor:
        model, tokens = self.model, self.chunk.tokens(self.data)
        hooks = [] if mask is None else self._hooks(mask[None], range(start, stop))
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            return model(resid, start_at_layer=start, stop_at_layer=stop,
                         **shortformer_kwargs(model, tokens))

    def tail(self, ids: Tensor, start: int, resid: Tensor) -> None:
        model, batch, chunk, masks = self.model, self.data, self.chunk, self.masks
        b, n_layers = len(chunk.rows), model.cfg.n_layers
        tokens = chunk.tokens(batch)
        ids = ids.sort().values  # in mask order, as the unshared runs were tiled
        for i in range(0, len(ids), self.per_pass):
            part = ids[i : i + self.per_pass].to(masks.device)
            k = len(part)
            hooks = self._hooks(masks[part], range(start, n_layers))
            answer_hooks, pos = answer_only_hooks(model, batch.answer_pos[chunk.rows].repeat(k))
            extra = shortformer_kwargs(model, tokens.repeat(k, 1))
            with torch.no_grad(), model.hooks(fwd_hooks=hooks + answer_hooks):
                final = model(resid.repeat(k, 1, 1), start_at_layer=start,
                              stop_at_layer=n_layers, **extra)  # (k * b, T or 1, d)
                logits = unembed_at(model, final, pos)
            for name, v in score_logits(logits, Targets.of(batch, k, chunk.rows)).items():
                self.out[name][part[:, None], self.cols.to(v.device)[None]] = v.view(k, b)
            if self.bar is not None:
                self.bar.update(k)
