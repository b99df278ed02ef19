"""Stage 3 of CEL: the best sets confirmed on held-out examples, against random baselines.

`confirm` (`confirm_sets`, side effects, the trade-off table), `baseline` (random baseline sets
drawn in looks and raced).
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "BaselineRace": "workbench.confirmation.baseline",
    "Drawn": "workbench.confirmation.baseline",
    "MIN_CLUSTERS": "workbench.confirmation.confirm",
    "MIN_LOOK": "workbench.confirmation.baseline",
    "ScoreFn": "workbench.confirmation.baseline",
    "TRADEOFF_COLUMNS": "workbench.confirmation.confirm",
    "TRADEOFF_EXAMPLES": "workbench.confirmation.confirm",
    "cluster_labels": "workbench.confirmation.confirm",
    "confirm_sets": "workbench.confirmation.confirm",
    "draw_in_looks": "workbench.confirmation.baseline",
    "example_groups": "workbench.confirmation.confirm",
    "pool_random_head_sets": "workbench.confirmation.baseline",
    "random_baselines": "workbench.confirmation.baseline",
    "random_head_sets": "workbench.confirmation.baseline",
    "set_looks": "workbench.confirmation.baseline",
    "share_decided": "workbench.confirmation.baseline",
    "share_interval": "workbench.confirmation.baseline",
    "tradeoff_table": "workbench.confirmation.confirm",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
