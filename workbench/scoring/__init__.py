"""Scoring head masks: a task scored under many head masks, fast and exactly.

`scorer` (`MaskScorer`: masked passes that restart at their first ablated layer), `sharing`
(masks that share blocks run them once; passes joined across layers), `batching` (forwards cut
by length under a token budget; the unembedding at answer positions only).
"""

from __future__ import annotations

from workbench.lazy import lazy_package

# each module -> the public names it defines
__getattr__, __dir__, __all__ = lazy_package(globals(), {
    "batching": (
        "Chunk MAX_PAD_SHARE Targets answer_only_hooks gather_positions length_buckets "
        "unembed"
    ),
    "scorer": "CustomMetric MaskScorer Scorer as_score_dict masks_of",
    "sharing": (
        "Advance ChunkRun JOIN_QUEUE ONE_COPY_COST SHARE_BELOW Tail next_layers "
        "score_shared shared_cost sharing_pays"
    ),
})
