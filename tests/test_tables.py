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
