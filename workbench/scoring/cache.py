"""The clean residuals exact scoring restarts from: `ResidCache`, within a byte budget.

Heads in layer `l` cannot change anything before layer `l`, so a masked run may start at its
first ablated layer from the clean run's `blocks.{l}.hook_resid_pre` (`MaskScorer`'s prefix
reuse). `ResidCache` keeps those residuals of every layer for the chunks of a task that fit in
`cache_bytes` (on the model's device, or in CPU memory with `offload`); a chunk beyond the
budget is recomputed, up to the highest layer a call needs, by `clean_resid_pre`.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from workbench.hooked import HookedModel
from workbench.logits import forward_kwargs
from workbench.scoring.batching import Chunk


def save_hook(x: Tensor, hook, store: dict) -> None:
    """A hook that keeps its activation in `store` under the hook's name."""
    store[hook.name] = x


def clean_resid_pre(model: HookedModel, tokens: Tensor, layers: list[int]) -> dict[int, Tensor]:
    """`{l: blocks.{l}.hook_resid_pre}` of the clean run over right-padded `tokens` for each
    of `layers`, from one forward that stops at the highest (a masked pass restarts there)."""
    top = max(layers)
    store: dict[str, Tensor] = {}
    hooks = [(f"blocks.{l}.hook_resid_pre", partial(save_hook, store=store))
             for l in layers if l < top]
    with torch.no_grad(), model.hooks(fwd_hooks=hooks):
        resid_top = model(tokens, stop_at_layer=top, **forward_kwargs(model))  # (b, T, d)
    found = {l: store[f"blocks.{l}.hook_resid_pre"] for l in layers if l < top}
    found[top] = resid_top
    return found


class ResidCache:
    """Every layer's clean `hook_resid_pre` for the chunks of a task that fit in
    `cache_bytes` (module docstring); `built` once filled (by the clean pass or `fill`)."""

    def __init__(self, model: HookedModel, data, cache_bytes: int, offload: bool) -> None:
        self.model, self.data = model, data
        self.cache_bytes, self.offload = cache_bytes, offload
        self.held: dict[int, Tensor] = {}  # chunk index -> (L, b, T, d) residuals
        self.built = False

    @property
    def nbytes(self) -> int:
        """Bytes of residuals held now."""
        return sum(t.numel() * t.element_size() for t in self.held.values())

    def chunk_bytes(self, chunk: Chunk) -> int:
        """Bytes of one chunk's residuals at every layer."""
        cfg = self.model.cfg
        elem = torch.empty((), dtype=cfg.dtype).element_size()
        return cfg.n_layers * len(chunk.rows) * chunk.width * cfg.d_model * elem

    def store(self, c: int, resid: list[Tensor]) -> None:
        """Keep chunk `c`'s residuals (one `[b, T, d]` tensor per layer)."""
        stacked = torch.stack([r.to(resid[0].device) for r in resid])  # (L, b, T, d)
        self.held[c] = stacked.to("cpu") if self.offload else stacked

    def clear(self) -> None:
        """Free every residual; the next `prefix` of a chunk recomputes it until `fill`."""
        self.held, self.built = {}, False

    def fill(self, chunks: list[Chunk]) -> None:
        """Compute and keep the residuals of the first chunks that fit in the budget."""
        used, L = 0, self.model.cfg.n_layers
        for c, chunk in enumerate(chunks):
            if used + self.chunk_bytes(chunk) > self.cache_bytes:
                break
            found = self.compute(chunk, list(range(L)))
            self.store(c, [found[l] for l in range(L)])
            used += self.chunk_bytes(chunk)
        self.built = True

    def compute(self, chunk: Chunk, layers: list[int]) -> dict[int, Tensor]:
        """A clean forward over `chunk` up to the highest of `layers` (`clean_resid_pre`)."""
        return clean_resid_pre(self.model, chunk.tokens(self.data), layers)

    def prefix(self, c: int, chunk: Chunk, layers: list[int]) -> dict[int, Tensor]:
        """`blocks.{l}.hook_resid_pre` of chunk `c` for each of `layers`, on the device: held,
        or recomputed up to the highest layer needed."""
        if c in self.held:
            device = self.data.tokens.device
            return {l: self.held[c][l].to(device, non_blocking=True) for l in layers}
        return self.compute(chunk, layers)
