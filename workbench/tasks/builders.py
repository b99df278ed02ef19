"""Tables to task-file records: Python records, pandas DataFrames, CSV files, Hugging Face datasets.

Data for a task usually arrives as a table whose columns have other names than a task file's
example fields. This module only reads tables and renames their columns: `table_records`
turns rows into the plain dicts a task file holds one per line (`{"prompt": ..., "answer":
...}`), taking each field from the column `columns` maps it to, or from the column of its own
name (the fields are `workbench.tasks.format.EXAMPLE_KEYS`); other columns are ignored and
empty cells (None, NaN) are left out. It imports nothing of `workbench.tasks.task`:
`Task.from_records`, `Task.from_dataframe`, `Task.from_csv` and `Task.from_hf_dataset` read a
table here, then check the records exactly as lines of a task file, so a built task passes the
same rules and behaves exactly like a loaded one.

Example:
    >>> task = Task.from_dataframe(df, columns={"prompt": "q", "answer": "a", "group": "fact"},
    ...                            name="facts", split_by="group")
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.tasks.format import EXAMPLE_KEYS, LIST_FIELDS


def _missing(value) -> bool:
    """None, or a float NaN (how pandas and CSV readers write an empty cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _cell(value, split: bool, list_sep: str | None):
    """A table cell as JSON-like data: arrays and tuples as lists, a string split on
    `list_sep` where the field holds a list."""
    if hasattr(value, "tolist"):  # numpy arrays from pandas / pyarrow list columns
        value = value.tolist()
    if isinstance(value, tuple):
        value = list(value)
    if split and isinstance(value, str) and list_sep is not None:
        value = value.split(list_sep)
    return value


def table_records(
    rows: Iterable[Mapping],
    columns: Mapping[str, str] | None = None,
    list_sep: str | None = None,
    name: str = "task",
) -> list[dict]:
    """Each row as a task-file example record (`EXAMPLE_KEYS`; empty cells left out).

    Args:
        rows: the examples, as mappings from column name to value.
        columns: task field -> source column, for columns named otherwise; a field not mapped
            is read from the column of its own name, when there is one.
        list_sep: split string cells of `answer`, `wrong` and `roles` on this separator (e.g.
            `"|"` for a CSV cell `" Paris| paris"`); None keeps them whole.
        name: the task's name, for error messages.

    Raises:
        WorkbenchError: for a mapped field that is not a task field, a row that is not a
            mapping, or a mapped column missing from a row (naming the row).
    """
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(EXAMPLE_KEYS))
    if unknown:
        raise WorkbenchError(
            f"columns maps unknown task fields {unknown}; task fields: {list(EXAMPLE_KEYS)}"
        )
    records = []
    for i, row in enumerate(rows):
        where = f"task {name!r} row {i}"
        if not isinstance(row, Mapping):
            raise WorkbenchError(f"{where}: expected a mapping; got {type(row).__name__}")
        record = {}
        for key in EXAMPLE_KEYS:
            source = columns.get(key, key)
            if source not in row:
                if key in columns:
                    raise WorkbenchError(
                        f"{where}: column {source!r} (mapped to {key!r}) is missing; columns: "
                        f"{sorted(row)}"
                    )
                continue
            value = _cell(row[source], key in LIST_FIELDS, list_sep)
            if key == "gold" and isinstance(value, str) and value.strip().isdigit():
                value = int(value)  # a CSV cell is a string
            if not _missing(value):
                record[key] = value
        records.append(record)
    return records


def dataframe_rows(df) -> list[dict]:
    """A pandas DataFrame's rows as dicts, one per row."""
    return df.to_dict(orient="records")


def csv_rows(path: str | os.PathLike) -> list[dict]:
    """A CSV file's rows (it has a header row) as dicts. Cells are read as strings, so ids and
    groups keep leading zeros; an empty cell is NaN (left out by `table_records`)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise WorkbenchError(f"CSV file {str(path)!r} does not exist")
    df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    return dataframe_rows(df)


def hf_dataset_rows(path_or_dataset, hf_split: str | None = None) -> tuple[list[dict], str]:
    """The rows of a Hugging Face dataset saved on disk (`Dataset.save_to_disk`), or of a
    `datasets.Dataset` / `DatasetDict` already in memory, and a default task name (the
    folder's name, or `"task"`). Nothing is downloaded.

    Args:
        path_or_dataset: a folder written by `save_to_disk`, or a dataset object.
        hf_split: which split of a `DatasetDict` to read (required when there are several).
    """
    import datasets

    if isinstance(path_or_dataset, (str, os.PathLike)):
        path = Path(path_or_dataset)
        if not path.is_dir():
            raise WorkbenchError(f"dataset folder {str(path)!r} does not exist")
        ds = datasets.load_from_disk(str(path))
        default_name = path.name
    else:
        ds, default_name = path_or_dataset, "task"
    if isinstance(ds, datasets.DatasetDict):
        if hf_split is None and len(ds) == 1:
            hf_split = next(iter(ds))
        if hf_split not in ds:
            raise WorkbenchError(
                f"hf_split {hf_split!r} is not in the dataset; its splits: {list(ds)}"
            )
        ds = ds[hf_split]
    if not isinstance(ds, datasets.Dataset):
        raise WorkbenchError(f"expected a datasets.Dataset or DatasetDict; got {type(ds).__name__}")
    return ds.to_list(), default_name
