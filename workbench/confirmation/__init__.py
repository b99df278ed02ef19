"""Stage 3 of CEL: the best sets confirmed on held-out examples, against random baselines.

`confirm` (`confirm_sets`, side effects), `tradeoff` (the trade-off table), `baseline` (random
baseline sets drawn in looks and raced).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.confirmation.baseline import (
        MIN_LOOK,
        BaselineRace,
        Drawn,
        ScoreFn,
        draw_in_looks,
        pool_random_head_sets,
        random_baselines,
        random_head_sets,
        set_looks,
        share_decided,
        share_interval,
    )
    from workbench.confirmation.confirm import (
        MIN_CLUSTERS,
        ConfirmPlan,
        cluster_labels,
        confirm_sets,
        example_groups,
    )
    from workbench.confirmation.tradeoff import (
        TRADEOFF_COLUMNS,
        TRADEOFF_EXAMPLES,
        tradeoff_rows,
        tradeoff_table,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
