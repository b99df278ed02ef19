"""Stage 1 of CEL: the effect on a task of removing each attention head alone.

`screen` (`screen_heads`, the per-head table), `registry` (the screening methods' records) and
`methods/` (one record per method: `exact`, `attribution`, `naive`), `attribution` (attribution's
gradient estimate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.screening.attribution import attribution_diffs, attribution_effects
    from workbench.screening.registry import (
        ScreenCostInputs,
        ScreenMethod,
        cel_methods,
        get_method,
        register,
        unregister,
    )
    from workbench.screening.screen import (
        STAT_SUFFIXES,
        ScreenRace,
        ScreenScope,
        effect_column,
        effect_columns,
        exact_diffs,
        naive_diffs,
        naive_effects,
        prepare_data,
        resolve_task,
        score_single_heads,
        screen_heads,
        screen_scorer,
        single_head_diffs,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
