"""Tasks: the JSONL task format, building tasks, fitting them to a tokenizer, and encoding them.

One module per step, from a file to what the model is fed: `format` (the rules of a task file's
header and records), `task` (`Task`, `Example`, `load_task`), `builders` (tasks from records,
DataFrames, CSV and local Hugging Face datasets), `fit` (a task fitted to a tokenizer), `ids`
(one example's token ids), `tokenizer` (word-level and Hugging Face tokenizers, BOS as the
tokenizer adds it), `encoding` (`TaskBatch`, `encode_task`), `names` (the task files in `tasks/`,
checked without torch). The names are imported on first use, so the light modules stay light.
"""

from __future__ import annotations

from workbench.lazy import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "CHECKS": "workbench.tasks.task",
    "Check": "workbench.tasks.task",
    "EXAMPLE_KEYS": "workbench.tasks.format",
    "EncodedExample": "workbench.tasks.ids",
    "Example": "workbench.tasks.task",
    "FITS": "workbench.tasks.fit",
    "Fit": "workbench.tasks.fit",
    "HEADER_KEYS": "workbench.tasks.format",
    "HFTokenizer": "workbench.tasks.tokenizer",
    "LIST_FIELDS": "workbench.tasks.format",
    "METRIC_NAMES": "workbench.tasks.task",
    "MIN_FIT_EXAMPLES": "workbench.tasks.fit",
    "NEEDS_WRONG": "workbench.tasks.task",
    "PER_TOKENIZER": "workbench.tasks.task",
    "SPLITS": "workbench.tasks.format",
    "TASKS_DIR": "workbench.tasks.names",
    "Task": "workbench.tasks.task",
    "TaskBatch": "workbench.tasks.encoding",
    "WordTokenizer": "workbench.tasks.tokenizer",
    "check_example": "workbench.tasks.format",
    "check_header": "workbench.tasks.format",
    "check_task_name": "workbench.tasks.names",
    "csv_rows": "workbench.tasks.builders",
    "dataframe_rows": "workbench.tasks.builders",
    "encode_example": "workbench.tasks.ids",
    "encode_task": "workbench.tasks.encoding",
    "fit_digits": "workbench.tasks.fit",
    "fit_drop_unfit": "workbench.tasks.fit",
    "fit_greater_than": "workbench.tasks.fit",
    "fit_task": "workbench.tasks.fit",
    "get_tokenizer": "workbench.tasks.tokenizer",
    "hf_dataset_rows": "workbench.tasks.builders",
    "hub_task_names": "workbench.tasks.names",
    "load_task": "workbench.tasks.task",
    "own_tasks": "workbench.tasks.names",
    "resolve_task_path": "workbench.tasks.task",
    "table_records": "workbench.tasks.builders",
    "task_names": "workbench.tasks.names",
    "word_level_hf_tokenizer": "workbench.tasks.tokenizer",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
