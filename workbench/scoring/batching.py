"""How a split is cut into forwards: rows grouped by prompt length under a token budget
(`length_buckets`, `Chunk`), and the hooks that keep only each row's answer position after
the last attention layer (`answer_only_hooks`).

Prompts are right-padded, so a chunk of rows is trimmed to its longest prompt: with causal
attention the trailing pads change no earlier position. Sorting rows by length before cutting
keeps little of each forward padding. Only the answer position's logits are scored, so from
the last block's `hook_resid_mid` on each row keeps that position alone: the last MLP, the
final norm and the unembedding then run on one position per row. `unembed` is the model's
unembedding without TransformerLens's per-call copy of `W_U`; `unembed_at` the final norm,
unembedding and soft-cap at one position per row.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor
from transformer_lens.components import Unembed
from transformer_lens.utilities import apply_softcap

from workbench.errors import WorkbenchError
from workbench.tasks.encoding import TaskBatch


def gather_positions(resid: Float[Tensor, "batch pos d_model"], hook, pos: Tensor) -> Tensor:
    """A hook keeping one position per row, `pos[b]`, as a length-1 sequence."""
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
    return [(name, partial(gather_positions, pos=pos))], torch.zeros_like(pos)


@dataclass
class Targets:
    """What `score_logits` reads from a `TaskBatch`, tiled for mask-major batches."""

    answer_ids: Tensor
    wrong_ids: Tensor
    candidate_ids: Tensor | None

    @classmethod
    def of(cls, batch: TaskBatch, repeats: int = 1, rows: slice = slice(None)) -> "Targets":
        def tile(t):
            return None if t is None else t[rows].repeat(repeats, 1)

        return cls(tile(batch.answer_ids), tile(batch.wrong_ids), tile(batch.candidate_ids))


@dataclass(frozen=True)
class Chunk:
    """Rows of a `TaskBatch` scored in one forward, trimmed to their longest prompt."""

    rows: Tensor  # (b,) row indices, on the model's device
    width: int  # padded length of this chunk

    def tokens(self, batch: TaskBatch) -> Tensor:
        # Right padding and causal attention: the trailing pads change no earlier position.
        return batch.tokens[self.rows, : self.width]


# The most of a chunk's padded tokens that may be padding (`length_buckets`). A CPU forward
# costs what its padded tokens cost; on SmolLM2 one chunk of ioi's 154 selection prompts (14 to
# 20 tokens, mean 16.3) was 19 % padding, induction's 300 (10 to 29, mean 18.7) 36 %. Masks
# are tiled up to a token target per forward (`workbench.compute.default_masks_per_pass`), so
# smaller chunks cost more passes, not more tokens.
MAX_PAD_SHARE = 0.125


def length_buckets(
    lengths: Tensor, token_budget: int, max_rows: int, max_pad: float = MAX_PAD_SHARE
) -> list[tuple[list[int], int]]:
    """Rows grouped by length so that rows x padded length <= `token_budget` per group and
    at most a `max_pad` share of a group's padded tokens is padding.

    Rows are sorted by length (stable), then cut greedily: a row starts a new group when it
    would break the token budget, `max_rows` or the padding share. A prompt longer than the
    budget gets a group of its own. Returns `[(row indices, padded length), ...]`.
    """
    lens = [max(1, int(x)) for x in lengths.tolist()]
    order = sorted(range(len(lens)), key=lambda i: lens[i])
    groups: list[tuple[list[int], int]] = []
    rows: list[int] = []
    real = 0  # tokens of the rows in `rows`, without padding
    for i in order:
        width = lens[i]  # the longest so far: rows are sorted by length
        padded = (len(rows) + 1) * width
        if rows and (padded > token_budget or len(rows) >= max_rows
                     or padded - real - width > max_pad * padded):
            groups.append((rows, lens[rows[-1]]))
            rows, real = [], 0
        rows.append(i)
        real += width
    if rows:
        groups.append((rows, lens[rows[-1]]))
    return groups


# `Unembed` module -> (W_U's identity and version, W_U.T made contiguous): TransformerLens 3.9's
# `Unembed.forward` makes that copy on every call (Gemma-3: 671 MB per call, page faults included).
_TRANSPOSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def unembed(model, x: Tensor) -> Tensor:
    """`model.unembed(x)`, its hook points included, with the same numbers (the same
    `F.linear` on the same contiguous transposed weight), keeping that transposed copy between
    calls until `W_U` changes (its storage or in-place version). Not for training `W_U`: the
    copy is detached. A subclassed or bridged unembedding is called as it is."""
    u = model.unembed
    if type(u) is not Unembed or u._forward_hooks or u._forward_pre_hooks:
        return u(x)
    w = u.W_U
    key = (w.data_ptr(), w._version, w.dtype, w.device)
    hit = _TRANSPOSED.get(u)
    if hit is None or hit[0] != key:
        hit = (key, w.detach().T.contiguous())
        _TRANSPOSED[u] = hit
    return u.hook_out(F.linear(u.hook_in(x), hit[1], u.b_U))


def forward_kwargs(model) -> dict:
    """Keyword arguments of a forward over right-padded tokens: TransformerLens builds a
    padding mask only for left-padded tokenizers, and right padding needs none."""
    return {"padding_side": "right"} if getattr(model, "tokenizer", None) is not None else {}


def is_bridge(model) -> bool:
    """Whether `model` is a TransformerBridge. Hugging Face's forward runs a bridge's layers, so
    a forward cannot start at a later layer (`start_at_layer` raises), and `stop_at_layer=
    n_layers` stops nowhere: it returns the logits, not the final residual stream."""
    from transformer_lens.model_bridge import TransformerBridge

    return isinstance(model, TransformerBridge)


def unembed_at(
    model, resid: Float[Tensor, "batch pos d_model"], pos: Tensor
) -> Float[Tensor, "batch d_vocab"]:
    """Final layer norm, unembedding and output soft-cap (Gemma-2's `cap * tanh(x / cap)`,
    when `cfg.output_logits_soft_cap > 0`) of the residual stream at one position per row:
    the logits a HookedTransformer's own forward returns there. (A bridge has no separate
    final residual: see `logits_at`.)"""
    if resid.shape[-1] != model.cfg.d_model:
        hint = "; on a TransformerBridge use logits_at" if is_bridge(model) else ""
        raise WorkbenchError(
            f"unembed_at takes the final residual stream, last dim d_model="
            f"{model.cfg.d_model}; got shape {tuple(resid.shape)}{hint}"
        )
    x = resid[torch.arange(resid.shape[0], device=resid.device), pos.to(resid.device)][:, None]
    if model.cfg.normalization_type is not None:
        x = model.ln_final(x)
    logits = unembed(model, x)[:, 0]  # (B, d_vocab), W_U.T copied once, not per call
    # the model's own forward applies the cap with this function
    return apply_softcap(logits, getattr(model.cfg, "output_logits_soft_cap", None))
