"""The rules that strategies which end in exact verification share: the budget, how many
finalists it pays for, and which heads they are.

The interaction search (knockout main effects) and the gates strategy (learned gate pushes)
both rank the pool's heads, then score every set of size 1..`max_size` among as many
finalists as the rest of the budget pays for, a quarter of them (`SCREEN_SHARE`) single-head
screening's top candidates. One rule each, here, so that no strategy copies another's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations

Head = tuple[int, int]  # (layer, head), as `workbench.heads.Head`

# Share of the finalists taken from single-head screening's top candidates
# (`pick_finalists`); the rest come from the strategy's own ranking.
SCREEN_SHARE = 0.25


# Examples each knockout mask of the interaction search is scored on in a raced run
# (`CELConfig.knockout_examples`): the racing minimum (`workbench.racing.MIN_SLICE`). The
# knockouts only rank heads for the finalists, whose sets are then scored exactly and raced.
# (None: the first racing slice, an eighth of the split: 20 of SmolLM2 ioi's 154, 75 of the
# embedded model's 600.) On the planted models 16, 8 and 4 examples all kept 10/10 singles,
# pairs and triples at 144, 384 and 1024 heads (`docs/recall.md`), but on SmolLM2 x ioi 8
# lost a finalist and the held-out gains of sizes 2 and 3 (`docs/speed.md`).
KNOCKOUT_EXAMPLES = 16

def default_budget(n_heads: int, max_size: int = 3) -> int:
    """Masks the interaction search may score on the selection split: `2.5 n + 500` (half
    knockouts, half finalist sets) for sets of 3 or more heads, half that for sets of up to 2.

    What the masks must resolve sets the budget: a member of an OR pair shows a knockout main
    effect of `G p`, a member of an OR triple only `G p^2`. For triples, `2.5 n + 500` is the
    smallest of the budgets tried (`5 n + 1000`, `3 n + 500`, `2.5 n + 500`, `2 n + 500`) that
    keeps 10/10 planted singles, pairs and triples at 144, 384 and 1024 heads
    (`bench/recall.py`; `2 n + 500` missed one triple at 144 heads); the earlier `5 n + 1000`
    cost a 270-head model 2x more masks (`docs/speed.md`). For pairs, half of it keeps 10/10
    singles and pairs at 144, 384 and 1024 heads on 16 and on 64 selection examples; 0.35 of
    it lost one or two pairs in 10 (`bench/quick.py --budgets`, `docs/recall.md`). The
    examples do not set it: knockouts are scored on the first slice (an eighth of the split,
    at least 16 examples) whatever the split's size, and on planted models 16 selection
    examples found within one plant of what 64 found at every budget tried (triples at the
    full budget: 9/10 and 10/10)."""
    full = 5 * n_heads // 2 + 500
    return full if max_size >= 3 else full // 2


def n_sets(k: int, max_size: int) -> int:
    """The number of sets of size 1..`max_size` among `k` heads."""
    return sum(math.comb(k, s) for s in range(1, max_size + 1))


def max_finalists(left: int, max_size: int, available: int | None = None) -> int:
    """The most finalists `k` (at most `available`) whose sets of size 1..`max_size` fit in
    `left` masks."""
    k = 0
    while (available is None or k < available) and n_sets(k + 1, max_size) <= left:
        k += 1
    return k


def pick_finalists(
    screened: Sequence[Head], knocked: Sequence[Head], k: int, screen_share: float
) -> list[Head]:
    """`k` finalists: the first `ceil(screen_share k)` heads of `screened` (single-head
    screening's order), then the heads of `knocked` (knockout main effects' order) not yet
    chosen, then the rest of `screened` if `knocked` runs out."""
    n_screen = min(k, math.ceil(screen_share * k))
    chosen = list(dict.fromkeys(screened[:n_screen]))
    for h in [*knocked, *screened]:
        if len(chosen) >= k:
            break
        if h not in chosen:
            chosen.append(h)
    return chosen


def finalist_sets(finalists: Sequence[Head], max_size: int) -> list[tuple[Head, ...]]:
    """Every set of size 1..`max_size` among `finalists`."""
    return [c for s in range(1, max_size + 1) for c in combinations(finalists, s)]
