"""Generation: greedy decoding with a key-value cache under the caller's hooks
(`decode`: `greedy_generate`, its reference `naive_generate`, the `Generation` record,
`decode_forwards`: the forwards a decode runs; `masked`: `greedy_generate_masks`, many head
sets' rows decoded together).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.generation.decode import (
        ROWS_PER_PASS,
        Generation,
        can_cache,
        decode_forwards,
        greedy_generate,
        naive_generate,
    )
    from workbench.generation.masked import greedy_generate_masks

__getattr__, __dir__, __all__ = lazy_package(globals())
