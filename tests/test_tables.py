"""The per-head table (`workbench.tables`): its schema, `table_to_matrix`, and a round trip
through CSV and Parquet."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from tests.helpers import assert_close
from workbench import WorkbenchError
from workbench.tables import check_head_table, head_table, load_table, save_table, table_to_matrix


def test_head_table_schema_and_round_trip(tmp_path):
    values = torch.arange(6.0).reshape(2, 3)
    df = head_table({"effect": values, "other": values * 2})
    assert list(df.columns) == ["layer", "head", "head_name", "effect", "other"]
    assert df["head_name"].tolist() == ["L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"]
    assert df.loc[df.head_name == "L1H0", "effect"].item() == 3.0
    check_head_table(df)
    assert_close(table_to_matrix(df, "other"), values * 2)
    for suffix in (".csv", ".parquet"):
        path = save_table(df, tmp_path / f"t{suffix}")
        pd.testing.assert_frame_equal(load_table(path), df)
    with pytest.raises(WorkbenchError, match="expected \\(n_layers, n_heads\\)"):
        head_table({"a": torch.zeros(2, 3), "b": torch.zeros(3, 2)})
    with pytest.raises(WorkbenchError, match="starts with columns"):
        check_head_table(df[["head", "layer", "head_name"]])


def test_a_saved_table_keeps_its_attrs_and_writes_counts_as_integers(tmp_path):
    """`df.attrs` survive CSV (a sidecar) and Parquet; `d_*_n` counts are written as integers
    (a missing count stays missing); a CSV written before, with float counts, still loads."""
    import numpy as np

    from workbench.tables import attrs_path

    values = torch.arange(6.0).reshape(2, 3)
    df = head_table({"d_accuracy": values / 10, "d_accuracy_n": torch.full((2, 3), 24.0),
                     "d_accuracy_n_side": torch.tensor([[16.0, 16, 0], [16, float("nan"), 16]])})
    df.attrs.update({"method": "attribution", "clean": {"t": {"accuracy": 0.5}}})
    path = save_table(df, tmp_path / "heads.csv")
    lines = path.read_text().splitlines()
    assert lines[1] == "0,0,L0H0,0.0,24,16" and lines[5] == "1,1,L1H1,0.4000000059604645,24,"
    back = load_table(path)
    assert back.attrs == df.attrs and back.attrs["method"] == "attribution"
    assert back["d_accuracy_n"].dtype == np.int64
    pd.testing.assert_frame_equal(back, df, check_dtype=False)
    parquet = load_table(save_table(df, tmp_path / "heads.parquet"))
    assert parquet.attrs == df.attrs
    pd.testing.assert_frame_equal(parquet, df, check_dtype=False)
    # no attrs: no sidecar, and none left over from an earlier table of that name
    bare = df.copy()
    bare.attrs = {}
    save_table(bare, tmp_path / "heads.csv")
    assert not attrs_path(tmp_path / "heads.csv").exists() and load_table(path).attrs == {}
    # a table written before counts were integers reads as it was written
    df.to_csv(tmp_path / "old.csv", index=False)
    assert "24.0" in (tmp_path / "old.csv").read_text()
    old = load_table(tmp_path / "old.csv")
    assert old.attrs == {}
    pd.testing.assert_frame_equal(old, bare)
