"""Building tasks from tables: Python records, pandas DataFrames, CSV files, Hugging Face datasets.

A task is a list of examples (`prompt`, `answer`, optional `wrong`, `split`, `group`,
`counterfactual`, ...; see `workbench.tasks`). Data usually arrives as a table whose columns
have other names, so every builder takes `columns`, a map from task field to source column
(`{"prompt": "question", "answer": "label", "group": "country"}`); columns not mapped and not
named like a task field are ignored. Each row then goes through the same checks as a line of a
task file, and the header options (`metric`, `answer_scope`, `split_by`, ...) through the same
header check, so a built task behaves exactly like a loaded one. With `split_by="group"`, rows
without a `split` are split by group: every row of one group (a fact, a word pair, a person)
lands in the same split, so held-out scores measure new facts, not new wordings of known ones.

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
from workbench.tasks import (
    EXAMPLE_KEYS,
    Task,
    _parse_example,
    parse_header,
    task_from_header,
)

LIST_FIELDS = ("answer", "wrong", "roles")


def _missing(value) -> bool:
    """None, or a float NaN (how pandas and CSV readers write an empty cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _row(record: Mapping, columns: Mapping[str, str], list_sep: str | None, where: str) -> dict:
    """One record as a task-file example: mapped columns renamed, empty cells dropped."""
    out = {}
    for key in EXAMPLE_KEYS:
        source = columns.get(key, key)
        if source not in record:
            if key in columns:
                raise WorkbenchError(
                    f"{where}: column {source!r} (mapped to {key!r}) is missing; columns: "
                    f"{sorted(record)}"
                )
            continue
        value = record[source]
        if hasattr(value, "tolist"):  # numpy arrays from pandas / pyarrow list columns
            value = value.tolist()
        if isinstance(value, tuple):
            value = list(value)
        if _missing(value):
            continue
        if key in LIST_FIELDS and isinstance(value, str) and list_sep is not None:
            value = value.split(list_sep)
        if key in ("id", "group") and not isinstance(value, str):
            value = str(value)
        out[key] = value
    return out


def task_from_records(
    records: Iterable[Mapping],
    name: str = "task",
    columns: Mapping[str, str] | None = None,
    list_sep: str | None = None,
    seed: int = 0,
    heldout_fraction: float = 0.5,
    **header,
) -> Task:
    """A task from an iterable of dicts (one per example).

    Args:
        records: the examples, as mappings from column name to value.
        name: the task's name.
        columns: task field -> source column, for columns named otherwise.
        list_sep: split string cells of `answer`, `wrong` and `roles` on this separator
            (e.g. `"|"` for a CSV cell `" Paris| paris"`); None keeps them whole.
        seed, heldout_fraction: as in `load_task`, for rows without a `split`.
        **header: task header options (`metric`, `answer_scope`, `candidates`,
            `split_by`, `answer_tokens`, `checks`, `prepend_bos`, ...), checked like a file's.

    Raises:
        WorkbenchError: naming the row, for a missing column or an invalid value.
    """
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(EXAMPLE_KEYS))
    if unknown:
        raise WorkbenchError(
            f"columns maps unknown task fields {unknown}; task fields: {list(EXAMPLE_KEYS)}"
        )
    header = {k: list(v) if isinstance(v, tuple) else v for k, v in header.items()}
    header = parse_header({"name": name, **header}, f"task {name!r}")
    examples = []
    for i, record in enumerate(records):
        where = f"task {name!r} row {i}"
        if not isinstance(record, Mapping):
            raise WorkbenchError(f"{where}: expected a mapping; got {type(record).__name__}")
        examples.append(_parse_example(_row(record, columns, list_sep, where), where, i))
    if not examples:
        raise WorkbenchError(f"task {name!r} has no rows")
    return task_from_header(header, examples, name, seed, heldout_fraction)


def task_from_dataframe(df, name: str = "task", **kwargs) -> Task:
    """A task from a pandas DataFrame, one row per example (see `task_from_records`)."""
    return task_from_records(df.to_dict(orient="records"), name=name, **kwargs)


def task_from_csv(path: str | os.PathLike, name: str | None = None, **kwargs) -> Task:
    """A task from a CSV file with a header row (see `task_from_records`; `name` defaults to
    the file's stem). Cells are read as strings, so ids and groups keep leading zeros."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise WorkbenchError(f"CSV file {str(path)!r} does not exist")
    df = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    return task_from_dataframe(df, name=name or path.stem, **kwargs)


def task_from_hf_dataset(
    path_or_dataset, name: str | None = None, hf_split: str | None = None, **kwargs
) -> Task:
    """A task from a Hugging Face dataset saved on disk (`Dataset.save_to_disk`), or a
    `datasets.Dataset` / `DatasetDict` already in memory. Nothing is downloaded.

    Args:
        path_or_dataset: a folder written by `save_to_disk`, or a dataset object.
        hf_split: which split of a `DatasetDict` to read (required when there are several).
        **kwargs: as in `task_from_records`.
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
    return task_from_records(ds.to_list(), name=name or default_name, **kwargs)
