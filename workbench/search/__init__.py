"""Stage 2 of CEL: search head sets whose joint removal improves the task.

Removing two heads is not the sum of removing each (backup heads, saturation), so CEL scores
*sets* of heads, on the selection split only. Which sets is the job of a strategy: one module
each in `workbench.search.strategies` (`interaction`, the default; `exhaustive`, `greedy`,
`beam`, `compressed_sensing`, `gates`), each a record in `workbench.search.registry`. They all
work through one `SearchSpace` (`workbench.search.space`), which scores every set once and
records it; `workbench.search.candidates` holds the rules for candidates, the search pool and
the best set of each size, and `workbench.search.finalists` the budget and finalist rules the
strategies that end in exact verification share.

Choices (measured or argued, see the README):

- The objective is the task's `metric` (default accuracy). With `rank_by="objective"` (the
  default) sets and candidates are ranked by the objective's gain on the selection split,
  ties broken by the `secondary` metric's gain (log-prob, or accuracy when the objective is
  log-prob); `rank_by="secondary"` ranks by the secondary first. Accuracy is coarse on a
  small selection split, so ties are common; the tie-break orders them by a continuous
  measure without letting a set that costs accuracy win on confidence alone. Measured on a
  retrained embedded-style model (2 x 4 heads, map task, 6 random selection subsets of 24 and
  of 96 examples, exhaustive up to size 3, gains on 600 held-out examples): both orders chose
  the same best sets (+0.080 accuracy held out); the best single head was as good or better
  with the objective first (+0.072 vs +0.070 at 96 examples). So the objective goes first.
- The overall best set is the smallest size whose best set has the largest objective gain:
  the tie-break orders sets of one size but does not justify removing more heads.
- Candidates (the pool for exhaustive, greedy and beam) are the heads whose single removal
  helps beyond noise on the selection split (`workbench.search.candidates`).
- Regressions on knockout masks (interaction, compressed sensing, gates) fit the secondary
  metric's gain when the objective's record is `coarse` (accuracy: a mean of 0/1 values over
  few examples is too coarse to regress on), else the objective's.

The package's names are imported on first use, so the registry can be read without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.search.finalists import (
        SCREEN_SHARE,
        default_budget,
        max_finalists,
        pick_finalists,
    )
    from workbench.search.registry import (
        CostInputs,
        Setting,
        Strategy,
        get_strategy,
        register,
        strategy_names,
    )
    from workbench.search.space import SearchSpace
    from workbench.search.strategies.compressed_sensing import lasso, lasso_alpha_max, lasso_cv

__getattr__, __dir__, __all__ = lazy_package(globals())
