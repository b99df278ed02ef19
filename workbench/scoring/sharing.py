"""Shared prefixes among head masks: run the blocks that several masks have in common once.

Exact scoring restarts each masked run at its first ablated layer from the clean residual
cached there (`workbench.scoring.scorer`). Masks that also agree on what they ablate at that layer,
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

Joined passes (`ChunkRun.joined`): a pass need not start with all its masks. Masks whose
first ablated layers differ (random baseline sets, the single heads screening still races, the
lone masks of the trie's nodes) are taken in order of that layer and cut into passes of the
tiling size; a pass starts with its lowest layer's copies of the rows and appends each later
group's copies at that group's layer, from the residual it restarts from. Every mask runs
exactly its own blocks, as it would restarted alone, but in a few full passes instead of one
small pass per layer or node (`tests/test_sharing.py` counts both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

from workbench.ablation import Ablation
from workbench.logits import shortformer_kwargs, unembed_at
from workbench.metrics.scores import score_logits
from workbench.scoring.batching import Chunk, Targets, answer_only_hooks

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
# `1 - SHARE_BELOW` of the blocks to be used. Measured on SmolLM2 x ioi (2 threads,
# `docs/speed.md`), before lone masks were joined: the 575 finalist sets on 20 prompts took
# 68.9 s shared against 134.5 s restarted; 63 knockout masks (17 % of the heads each) on 16
# prompts 33.0 s shared against 27.3 s restarted. With joined passes: 300 finalist sets 26.5 s
# where sharing pays, 26.3 s sharing every layer, 52.5 s restarted; 63 knockouts 24.1 s
# either way (their shared walk saves 1 % of the blocks).
ONE_COPY_COST = 1.5
SHARE_BELOW = 0.75
# `ChunkRun.defer` joins queued masks into common passes once this many passes' worth are
# queued: enough that a pass's masks start at nearby layers, few enough residuals held
JOIN_QUEUE = 8


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
    `ablation` holds the counterfactual `z` of the chunk's rows for resample ablation;
    `bar`, when given, counts the masks scored."""

    model: object
    data: object  # the scorer's TaskBatch
    masks: Tensor
    chunk: Chunk
    cols: Tensor
    out: dict
    per_pass: int
    ablation: Ablation
    bar: object = None
    _queue: list = field(default_factory=list)  # `defer`'s (layer, ids, resid), unscored

    def _hooks(self, masks: Tensor, layers) -> list:
        return self.ablation.mask_hooks(self.model, masks, layers)

    def advance(self, resid: Tensor, start: int, stop: int, mask: Tensor | None) -> Tensor:
        model, tokens = self.model, self.chunk.tokens(self.data)
        hooks = [] if mask is None else self._hooks(mask[None], range(start, stop))
        with torch.no_grad(), model.hooks(fwd_hooks=hooks):
            return model(resid, start_at_layer=start, stop_at_layer=stop,
                         **shortformer_kwargs(model, tokens))

    def tail(self, ids: Tensor, start: int, resid: Tensor) -> None:
        """Score `masks[ids]` from `resid` entering block `start`, `per_pass` at a time."""
        ids = ids.sort().values  # in mask order, as the unshared runs were tiled
        for i in range(0, len(ids), self.per_pass):
            self._pass([(start, ids[i : i + self.per_pass], resid)])

    def defer(self, ids: Tensor, start: int, resid: Tensor) -> None:
        """A `Tail` that queues the masks for `flush`, which joins them with the other
        queued masks into common passes (`joined`); flushes once `JOIN_QUEUE` passes'
        worth are queued, so the queued residuals stay few."""
        self._queue.append((start, ids.cpu(), resid))
        if sum(len(ids) for _, ids, _ in self._queue) >= JOIN_QUEUE * self.per_pass:
            self.flush()

    def flush(self) -> None:
        """Score every queued mask (`defer`)."""
        queue, self._queue = self._queue, []
        self.joined(queue)

    def joined(self, groups: list[tuple[int, Tensor, Tensor]]) -> None:
        """Score each group `(layer, ids, resid)` of masks from `resid` entering block
        `layer` (each mask's ablations below it already applied) in passes of up to
        `per_pass` masks that the groups join at their layer: the masks in order of layer
        are cut into passes, and a pass starts with its lowest layer's masks and appends
        each later group's copies of the rows where that group starts. Every mask still runs
        only its own blocks, as in one `tail` per group, but masks spread over many layers
        (random baseline sets, the heads screening still races, the lone masks of a shared
        walk's nodes) fill a few passes instead of a small one per layer."""
        order = sorted(((layer, g, int(i)) for g, (layer, ids, _) in enumerate(groups)
                        for i in ids.tolist()), key=lambda t: (t[0], t[1]))
        for i in range(0, len(order), self.per_pass):
            part = order[i : i + self.per_pass]
            runs = {}
            for layer, g, j in part:
                runs.setdefault(g, (layer, []))[1].append(j)
            self._pass([(layer, torch.tensor(ids), groups[g][2])
                        for g, (layer, ids) in runs.items()])

    def _pass(self, groups: list[tuple[int, Tensor, Tensor]]) -> None:
        """One forward that scores the groups `(layer, ids, resid)` (by increasing layer),
        each group's copies of the rows joining at its layer from its `resid`."""
        model, batch, chunk, masks = self.model, self.data, self.chunk, self.masks
        b, n_layers = len(chunk.rows), model.cfg.n_layers
        tokens = chunk.tokens(batch)
        groups = sorted(groups, key=lambda group: group[0])  # rows are joined in this order
        ids = torch.cat([g for _, g, _ in groups]).to(masks.device)
        starts = sorted({layer for layer, _, _ in groups})
        resid, k = None, 0
        with torch.no_grad():
            for start, stop in zip(starts, starts[1:] + [n_layers], strict=True):
                joining = [r.repeat(len(g), 1, 1) for layer, g, r in groups if layer == start]
                resid = torch.cat(joining if resid is None else [resid, *joining])
                k = resid.shape[0] // b
                hooks = self._hooks(masks[ids[:k]], range(start, stop))
                extra = shortformer_kwargs(model, tokens.repeat(k, 1))
                if stop < n_layers:
                    with model.hooks(fwd_hooks=hooks):
                        resid = model(resid, start_at_layer=start, stop_at_layer=stop, **extra)
                    continue
                answer_hooks, pos = answer_only_hooks(model,
                                                      batch.answer_pos[chunk.rows].repeat(k))
                with model.hooks(fwd_hooks=hooks + answer_hooks):
                    final = model(resid, start_at_layer=start, stop_at_layer=n_layers,
                                  **extra)  # (k * b, T or 1, d)
                    logits = unembed_at(model, final, pos)
        for name, v in score_logits(logits, Targets.of(batch, k, chunk.rows)).items():
            self.out[name][ids[:, None], self.cols.to(v.device)[None]] = v.view(k, b)
        if self.bar is not None:
            self.bar.update(k)
