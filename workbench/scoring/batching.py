"""How a split is cut into forwards: rows grouped by prompt length under a token budget
(`length_buckets`, `Chunk`), and the answer targets of a chunk tiled for mask-major batches
(`Targets`).

Prompts are right-padded, so a chunk of rows is trimmed to its longest prompt: with causal
attention the trailing pads change no earlier position. Sorting rows by length before cutting
keeps little of each forward padding. The forward itself, read at the answer positions only,
is `workbench.logits` (re-exported here: `answer_only_hooks`, `unembed`, `unembed_at`).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from workbench.logits import (  # noqa: F401 (re-exported: workbench.scoring.batching.unembed)
    answer_only_hooks,
    forward_kwargs,
    gather_positions,
    is_bridge,
    unembed,
    unembed_at,
)
from workbench.tasks.encoding import TaskBatch


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
