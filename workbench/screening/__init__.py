"""Stage 1 of CEL: the effect on a task of removing each attention head alone.

`screen` (`screen_heads`, the per-head table), `registry` (the screening methods' records) and
`methods/` (one record per method: `exact`, `attribution`, `naive`), `attribution` (attribution's
gradient estimate).
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "STAT_SUFFIXES": "workbench.screening.screen",
    "ScreenCostInputs": "workbench.screening.registry",
    "ScreenMethod": "workbench.screening.registry",
    "ScreenRace": "workbench.screening.screen",
    "attribution_diffs": "workbench.screening.attribution",
    "attribution_effects": "workbench.screening.attribution",
    "cel_methods": "workbench.screening.registry",
    "effect_column": "workbench.screening.screen",
    "effect_columns": "workbench.screening.screen",
    "exact_diffs": "workbench.screening.screen",
    "get_method": "workbench.screening.registry",
    "methods": "workbench.screening.registry",
    "naive_diffs": "workbench.screening.screen",
    "naive_effects": "workbench.screening.screen",
    "prepare_data": "workbench.screening.screen",
    "register": "workbench.screening.registry",
    "resolve_task": "workbench.screening.screen",
    "score_single_heads": "workbench.screening.screen",
    "screen_heads": "workbench.screening.screen",
    "screen_scorer": "workbench.screening.screen",
    "single_head_diffs": "workbench.screening.screen",
    "unregister": "workbench.screening.registry",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
