"""Stage 3 of CEL: the best sets confirmed on held-out examples, against random baselines.

`confirm` (`confirm_sets`, side effects, the trade-off table), `baseline` (random baseline sets
drawn in looks and raced).
"""

from __future__ import annotations

from workbench.lazy import lazy_package

# each module -> the public names it defines
__getattr__, __dir__, __all__ = lazy_package(globals(), {
    "baseline": (
        "BaselineRace Drawn MIN_LOOK ScoreFn draw_in_looks pool_random_head_sets "
        "random_baselines random_head_sets set_looks share_decided share_interval"
    ),
    "confirm": (
        "MIN_CLUSTERS TRADEOFF_COLUMNS TRADEOFF_EXAMPLES cluster_labels confirm_sets "
        "example_groups tradeoff_table"
    ),
})
