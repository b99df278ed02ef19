"""Selection and held-out splits: the examples a task file leaves without a `split` get one.

An example without a split goes to the selection or the held-out split by a seeded
permutation of the examples, or of their groups when the task splits by group (a group that
already has a split keeps it), so the split never depends on file order and a group never
crosses splits (`check_groups` refuses a task whose given splits cross).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.tasks.task import Example


def check_groups(name: str, examples: list[Example]) -> None:
    """With `split_by="group"`: every example has a group, and no group is in both splits."""
    missing = [e.id for e in examples if e.group is None]
    if missing:
        raise WorkbenchError(
            f"task {name!r} splits by group but examples {missing[:5]} have no 'group'; give "
            "each example a group, or set split_by to 'example'"
        )
    seen: dict[str, str] = {}
    for e in examples:
        if e.split is None:
            continue
        first = seen.setdefault(e.group, e.split)
        if first != e.split:
            raise WorkbenchError(
                f"task {name!r} splits by group but group {e.group!r} is in both splits "
                f"(example {e.id!r} is {e.split!r}); give every example of a group the same "
                "split, or leave 'split' out and let the loader split by group"
            )


def assign_splits(
    examples: list[Example], seed: int, heldout_fraction: float, by_group: bool = False
) -> list[Example]:
    """Give every example without a split one, by a seeded permutation of the examples (or
    of their groups, keeping a group together; a group that already has a split keeps it)."""
    missing = [i for i, e in enumerate(examples) if e.split is None]
    if not missing:
        return examples
    rng = np.random.default_rng(seed)
    out = list(examples)
    if by_group:
        fixed = {e.group: e.split for e in examples if e.split is not None}
        units = list(
            dict.fromkeys(examples[i].group for i in missing if examples[i].group not in fixed)
        )
        order = rng.permutation(len(units))
        n_heldout = int(round(heldout_fraction * len(units)))
        label = dict(fixed)
        for rank, j in enumerate(order):
            label[units[j]] = "heldout" if rank < n_heldout else "select"
        for i in missing:
            out[i] = replace(out[i], split=label[out[i].group])
        return out
    order = rng.permutation(len(missing))
    n_heldout = int(round(heldout_fraction * len(missing)))
    for rank, j in enumerate(order):
        i = missing[j]
        out[i] = replace(out[i], split="heldout" if rank < n_heldout else "select")
    return out
