"""`explain_heads`' keywords that moved keep working for one version: `kind`, `means` and
`per_position` into `ablation=Ablation(...)`, `n_sources` and `top_k` into
`sizes=TableSizes(...)`; the old call explains as the new one and warns, naming the move."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench import Ablation, compute_head_means, explain_heads
from workbench.explain.explanation import TableSizes
from workbench.tasks.encoding import encode_task

HEADS = ["L1H0", "L0H2"]


def test_old_keywords_explain_as_the_new_call_and_warn(attn_model, tiny_task):
    batch = encode_task(attn_model, tiny_task, "select")
    means = compute_head_means(attn_model, batch.tokens, batch.lengths)
    with pytest.warns(DeprecationWarning) as caught:
        old = explain_heads(attn_model, tiny_task, HEADS, kind="mean", means=means,
                            per_position=False, n_sources=2, top_k=3)
    new = explain_heads(attn_model, tiny_task, HEADS, ablation=Ablation("mean", means),
                        sizes=TableSizes(n_sources=2, top_k=3))
    for name in old.TABLES:
        pd.testing.assert_frame_equal(getattr(old, name), getattr(new, name), obj=name)
    assert old.config == new.config and new.config["kind"] == "mean"
    messages = [str(w.message) for w in caught]
    for keyword, shown in [("kind", "Ablation(kind='mean')"), ("means", "Ablation(means="),
                           ("per_position", "Ablation(per_position=False)"),
                           ("n_sources", "TableSizes(n_sources=2)"),
                           ("top_k", "TableSizes(top_k=3)")]:
        assert any(f"explain_heads(..., {keyword}=...)" in m and shown in m
                   for m in messages), keyword
    # the sizes reach the tables: at most 2 source tokens per head (the default is 3)
    assert 0 < len(new.ov) <= 2 * len(HEADS)
