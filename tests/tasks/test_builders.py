"""Task builders (records, DataFrame, CSV, a Hugging Face dataset on disk) agree with the JSONL
loader, map columns, and split by group."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench import WorkbenchError, load_task
from workbench.tasks.task import Task

RECORDS = [
    {
        "q": f"w{i} w{i + 1}",
        "a": f"w{(i + 2) % 20}",
        "bad": [f"w{(i + 3) % 20}"],
        "fact": f"f{i % 7}",
        "extra": i * 1.5,  # not a task field: ignored
    }
    for i in range(30)
]
COLUMNS = {"prompt": "q", "answer": "a", "wrong": "bad", "group": "fact"}


def _as_jsonl(path, records, header):
    lines = [{"task": header}] + [
        {"id": str(i), "prompt": r["q"], "answer": r["a"], "wrong": r["bad"], "group": r["fact"]}
        for i, r in enumerate(records)
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


def _key(task: Task):
    return [(e.prompt, e.answers, e.wrong, e.group, e.split) for e in task.examples]


def test_records_match_the_file_loader_and_split_by_group(tmp_path):
    header = {"name": "t", "metric": "logit_diff", "split_by": "group"}
    built = Task.from_records(
        [{**r, "id": str(i)} for i, r in enumerate(RECORDS)], columns=COLUMNS, seed=4, **header
    )
    loaded = load_task(_as_jsonl(tmp_path / "t.jsonl", RECORDS, header), seed=4)
    assert _key(built) == _key(loaded)
    assert built.metric == "logit_diff" and built.split_by == "group"
    split_of: dict[str, set] = {}
    for e in built.examples:
        split_of.setdefault(e.group, set()).add(e.split)
    assert all(len(s) == 1 for s in split_of.values())
    assert {next(iter(s)) for s in split_of.values()} == {"select", "heldout"}


def test_dataframe_and_csv_map_columns(tmp_path):
    df = pd.DataFrame(RECORDS)
    from_df = Task.from_dataframe(df, name="t", columns=COLUMNS, seed=1)
    from_rec = Task.from_records(RECORDS, name="t", columns=COLUMNS, seed=1)
    assert _key(from_df) == _key(from_rec)
    csv = df.assign(bad=[" ".join(b) + "|zz" for b in df["bad"]], split=["select", ""] * 15)
    csv.to_csv(tmp_path / "facts.csv", index=False)
    from_csv = Task.from_csv(tmp_path / "facts.csv", columns=COLUMNS, list_sep="|", seed=1)
    assert from_csv.name == "facts"
    assert from_csv.examples[0].wrong == (RECORDS[0]["bad"][0], "zz")
    # Empty split cells are assigned by the seed; filled ones are kept.
    assert all(e.split == "select" for e in from_csv.examples[::2])
    assert {e.split for e in from_csv.examples[1::2]} == {"select", "heldout"}


def test_hf_dataset_on_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(RECORDS)
    ds.save_to_disk(str(tmp_path / "facts"))
    built = Task.from_hf_dataset(tmp_path / "facts", columns=COLUMNS, seed=2, split_by="group")
    assert built.name == "facts"
    expected = Task.from_records(RECORDS, name="facts", columns=COLUMNS, seed=2, split_by="group")
    assert _key(built) == _key(expected)
    dd = datasets.DatasetDict({"train": ds, "test": ds.select(range(5))})
    dd.save_to_disk(str(tmp_path / "dd"))
    test = Task.from_hf_dataset(tmp_path / "dd", hf_split="test", columns=COLUMNS)
    assert [e.prompt for e in test.examples] == [r["q"] for r in RECORDS[:5]]
    with pytest.raises(WorkbenchError, match=r"hf_split None is not in the dataset; its splits"):
        Task.from_hf_dataset(tmp_path / "dd", columns=COLUMNS)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"columns": {"prompt": "question"}}, r"row 0: column 'question' \(mapped to 'prompt'\)"),
        ({"columns": {"promt": "q"}}, r"unknown task fields \['promt'\]"),
        ({"columns": COLUMNS, "metirc": "accuracy"}, r"unknown task header keys \['metirc'\]"),
        ({"columns": COLUMNS, "prepend_bos": "no"}, "'prepend_bos' must be bool"),
        (
            {"columns": {"prompt": "q", "answer": "extra"}},
            r"row 0, example '0': 'answer' must be a string",
        ),
    ],
)
def test_builder_errors_name_the_problem(kwargs, message):
    with pytest.raises(WorkbenchError, match=message):
        Task.from_records(RECORDS, name="t", **kwargs)
