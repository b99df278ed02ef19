"""Per-head tables: one schema for every table that has a row per attention head.

Every per-head result in the workbench (screening effects, attention summaries, direct logit
attribution, the theory model's feature use) is a pandas DataFrame with one row per
`(layer, head)`, sorted by layer then head, whose first three columns are:

| column      | type | meaning                                    |
|-------------|------|--------------------------------------------|
| `layer`     | int  | layer index, 0-based                       |
| `head`      | int  | head index within the layer, 0-based       |
| `head_name` | str  | `"L{layer}H{head}"`, the spec `HeadSet` parses |

The remaining columns are the values, named `<quantity>` or `<quantity>_<task>`; units are
given where the table is made (log-probs in nats, accuracy as a fraction in [0, 1]).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from workbench.errors import WorkbenchError

INDEX_COLUMNS = ("layer", "head", "head_name")


def head_name(layer: int, head: int) -> str:
    """The canonical name of a head, e.g. `head_name(9, 6) == "L9H6"`."""
    return f"L{layer}H{head}"


def _as_numpy(values) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", torch.float64).numpy()
    return np.asarray(values)


def head_table(
    columns: Mapping[str, object], n_layers: int | None = None, n_heads: int | None = None
) -> pd.DataFrame:
    """Build a per-head table from `[layer, head_index]`-shaped arrays.

    Args:
        columns: name -> array or tensor of shape `(n_layers, n_heads)`; all the same shape.
        n_layers, n_heads: the shape to expect; inferred from the first column when omitted.

    Returns:
        A DataFrame with `layer, head, head_name` then one column per entry of `columns`.

    Example:
        >>> head_table({"effect": torch.zeros(2, 3)}).shape
        (6, 4)
    """
    arrays = {name: _as_numpy(v) for name, v in columns.items()}
    if n_layers is None or n_heads is None:
        if not arrays:
            raise WorkbenchError("head_table needs n_layers and n_heads when no column is given")
        n_layers, n_heads = next(iter(arrays.values())).shape
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")
    data: dict[str, object] = {
        "layer": layers.ravel().astype(int),
        "head": heads.ravel().astype(int),
        "head_name": [
            head_name(int(l), int(h)) for l, h in zip(layers.ravel(), heads.ravel(), strict=True)
        ],
    }
    for name, arr in arrays.items():
        if arr.shape != (n_layers, n_heads):
            raise WorkbenchError(
                f"column {name!r} has shape {tuple(arr.shape)}; expected (n_layers, n_heads) = "
                f"({n_layers}, {n_heads})"
            )
        data[name] = arr.ravel()
    return pd.DataFrame(data)


def check_head_table(df: pd.DataFrame) -> pd.DataFrame:
    """Raise `WorkbenchError` unless `df` follows the per-head schema; return it unchanged."""
    if tuple(df.columns[:3]) != INDEX_COLUMNS:
        raise WorkbenchError(
            f"a per-head table starts with columns {INDEX_COLUMNS}; got {tuple(df.columns[:3])}"
        )
    expected = [head_name(int(l), int(h)) for l, h in zip(df["layer"], df["head"], strict=True)]
    if list(df["head_name"]) != expected:
        raise WorkbenchError("head_name must equal 'L{layer}H{head}' on every row")
    if df.duplicated(["layer", "head"]).any():
        raise WorkbenchError("a per-head table has at most one row per (layer, head)")
    return df


def table_to_matrix(df: pd.DataFrame, column: str) -> np.ndarray:
    """The `(n_layers, n_heads)` matrix of one column of a per-head table (NaN where absent)."""
    check_head_table(df)
    n_layers, n_heads = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    out = np.full((n_layers, n_heads), np.nan)
    out[df["layer"].to_numpy(), df["head"].to_numpy()] = df[column].to_numpy(dtype=float)
    return out


def attrs_path(path: str | Path) -> Path:
    """The sidecar that keeps a CSV table's `df.attrs` (`heads.csv` -> `heads.attrs.json`)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.attrs.json")


def is_count_column(name: str) -> bool:
    """Whether a column holds example counts: `n`, `d_<m>_n`, `d_<m>_n_<task>`, `n_random`,
    `gain_n`, ... (an `n` word in its name)."""
    return "n" in str(name).split("_")


def _counts_as_integers(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its float count columns as integers (missing counts stay missing, in a
    nullable integer column), so a CSV says `24`, not `24.0`."""
    counts = [c for c in df.columns if is_count_column(c) and pd.api.types.is_float_dtype(df[c])
              and np.array_equal(df[c].dropna(), np.round(df[c].dropna()))]
    if not counts:
        return df
    return df.astype({c: "Int64" for c in counts})


def save_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a table atomically as CSV or Parquet, chosen by the file suffix; count columns
    (`is_count_column`) as integers. A CSV table's `df.attrs` (e.g. screening's `method`, which
    says whether its numbers are measured or estimated) go to the JSON sidecar `attrs_path`,
    which `load_table` reads back; Parquet keeps them in the file itself."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix not in (".csv", ".parquet"):
        raise WorkbenchError(f"table path {str(path)!r} must end in .csv or .parquet")
    out = _counts_as_integers(df)
    try:
        if path.suffix == ".csv":
            out.to_csv(tmp, index=False)
        else:
            out.to_parquet(tmp, index=False)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # an interrupted write leaves no partial file behind
    if path.suffix == ".csv":
        side = attrs_path(path)
        if df.attrs:
            side_tmp = side.with_name(side.name + ".tmp")
            side_tmp.write_text(json.dumps(df.attrs, indent=1, default=str) + "\n")
            side_tmp.replace(side)
        else:  # no attributes: none left over from an earlier table of that name
            side.unlink(missing_ok=True)
    return path


def load_table(path: str | Path) -> pd.DataFrame:
    """Read a table written by `save_table`, with its `df.attrs` (a CSV's from its sidecar).
    An older CSV with counts written as floats (`24.0`) reads as it was written."""
    path = Path(path)
    if path.suffix == ".csv":
        df = pd.read_csv(path)
        side = attrs_path(path)
        if side.is_file():
            df.attrs.update(json.loads(side.read_text()))
        return df
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    raise WorkbenchError(f"table path {str(path)!r} must end in .csv or .parquet")


def markdown_table(df: pd.DataFrame) -> list[str]:
    """`df` as the lines of a Markdown table (floats to 4 significant digits, missing values
    empty); `["(none)"]` for an empty table."""
    if df.empty:
        return ["(none)"]

    def cell(v) -> str:
        if v is pd.NA:  # a missing count of a nullable integer column
            return ""
        if isinstance(v, float):
            return "" if np.isnan(v) else f"{v:.4g}"
        return str(v)

    header = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return [header, rule, *rows]
