"""Scoring head masks: a task scored under many head masks, fast and exactly.

`scorer` (`MaskScorer`: masked passes that restart at their first ablated layer), `sharing`
(masks that share blocks run them once; passes joined across layers), `batching` (forwards cut
by length under a token budget; the unembedding at answer positions only).
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "Advance": "workbench.scoring.sharing",
    "Chunk": "workbench.scoring.batching",
    "ChunkRun": "workbench.scoring.sharing",
    "CustomMetric": "workbench.scoring.scorer",
    "JOIN_QUEUE": "workbench.scoring.sharing",
    "MAX_PAD_SHARE": "workbench.scoring.batching",
    "MaskScorer": "workbench.scoring.scorer",
    "ONE_COPY_COST": "workbench.scoring.sharing",
    "SHARE_BELOW": "workbench.scoring.sharing",
    "Scorer": "workbench.scoring.scorer",
    "Tail": "workbench.scoring.sharing",
    "Targets": "workbench.scoring.batching",
    "answer_only_hooks": "workbench.scoring.batching",
    "as_score_dict": "workbench.scoring.scorer",
    "gather_positions": "workbench.scoring.batching",
    "length_buckets": "workbench.scoring.batching",
    "masks_of": "workbench.scoring.scorer",
    "next_layers": "workbench.scoring.sharing",
    "score_shared": "workbench.scoring.sharing",
    "shared_cost": "workbench.scoring.sharing",
    "sharing_pays": "workbench.scoring.sharing",
    "unembed": "workbench.scoring.batching",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
