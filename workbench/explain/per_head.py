"""The per-head tables of an explanation, built the same way on every kind of task.

`explain_heads` reads a head set from one clean capture, at the answer position of a
multiple-choice or probe task or at the decisions of a generation task
(`workbench.explain.generated`). Either way the per-example attention and DLA tables come
first; the per-head tables are then their summaries (`summarize_attention`, `summarize_dla`)
and the OV and QK circuits read from the same capture (`ov_table`, `qk_table`), sized by one
`TableSizes`. `per_head_tables` builds them once for both, so a size given to `explain_heads`
reaches the circuit tables whatever the task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from workbench.explain.attention import summarize_attention
from workbench.explain.capture import Capture
from workbench.explain.circuits import ov_table, qk_table
from workbench.explain.dla import summarize_dla
from workbench.heads import HeadSet
from workbench.hooked import HookedModel
from workbench.stats import Stats


@dataclass(frozen=True)
class TableSizes:
    """How much the circuit tables list (`ov_circuit`, `qk_circuit`).

    Attributes:
        n_sources: the source positions each head attends to most, per head (OV table).
        top_k: the tokens each entry promotes or suppresses (OV) or matches best (QK).
    """

    n_sources: int = 3
    top_k: int = 5


def per_head_tables(model: HookedModel, cap: Capture, heads: HeadSet, roles: list[list[str]],
                    sizes: TableSizes, attention: pd.DataFrame,
                    comparison_attention: pd.DataFrame | None, dla: pd.DataFrame,
                    stats: Stats, by_id: Mapping[str, object] | None) -> dict[str, pd.DataFrame]:
    """The per-head tables of a `HeadExplanation` from its capture and per-example tables.

    Args:
        cap: the clean capture the tables read; its `batch` holds the rows read (the split's
            examples, or a generation task's decisions) and makes the QK table.
        heads: the explained heads.
        roles: per row of `cap.batch`, the role of each of its tokens (`roles_for`).
        sizes: how much the OV and QK tables list.
        attention, comparison_attention, dla: the per-example tables of the heads and of the
            comparison heads (None: no comparison heads) and the DLA table.
        stats, by_id: the interval of `dla_summary` and its resampling: `id` -> cluster label
            (None: examples; `summarize_dla`'s `groups`).

    Returns:
        `{field: table}` for the `HeadExplanation` fields `roles`, `roles_by_outcome`,
        `comparison_roles`, `dla_summary`, `ov` and `qk`.
    """
    return dict(
        roles=summarize_attention(attention),
        roles_by_outcome=summarize_attention(attention, by="outcome"),
        comparison_roles=(pd.DataFrame() if comparison_attention is None
                          else summarize_attention(comparison_attention)),
        dla_summary=summarize_dla(dla, stats, by_id),
        ov=ov_table(model, cap, heads, sizes.n_sources, sizes.top_k),
        qk=qk_table(model, cap.batch, heads, roles, sizes.top_k),
    )
