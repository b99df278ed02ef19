"""Scoring head masks: a task scored under many head masks, fast and exactly.

`scorer` (`MaskScorer`: masked passes that restart at their first ablated layer), `sharing`
(masks that share blocks run them once; passes joined across layers), `batching` (forwards cut
by length under a token budget; the unembedding at answer positions only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.scoring.batching import (
        MAX_PAD_SHARE,
        Chunk,
        Targets,
        answer_only_hooks,
        gather_positions,
        length_buckets,
        unembed,
    )
    from workbench.scoring.scorer import CustomMetric, MaskScorer, Scorer, as_score_dict, masks_of
    from workbench.scoring.sharing import (
        JOIN_QUEUE,
        ONE_COPY_COST,
        SHARE_BELOW,
        Advance,
        ChunkRun,
        Tail,
        next_layers,
        score_shared,
        shared_cost,
        sharing_pays,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
