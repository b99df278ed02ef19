"""Tasks: the JSONL task format, building tasks, fitting them to a tokenizer, and encoding them.

One module per step, from a file to what the model is fed: `format` (the rules of a task file's
header and records), `task` (`Task`, `Example`, `load_task`), `files` (a task file found by
name or path and read), `splits` (examples without a split assigned one, seeded), `checks` (the
structural checks on an example's tokens), `builders` (tasks from records, DataFrames, CSV and
local Hugging Face datasets), `fit` (a task fitted to a tokenizer), `ids`
(one example's token ids), `tokenizer` (word-level and Hugging Face tokenizers, BOS as the
tokenizer adds it), `encoding` (`TaskBatch`, `encode_task`), `names` (the task files in `tasks/`,
checked without torch). The names are imported on first use, so the light modules stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.lazy import lazy_package

if TYPE_CHECKING:  # the package's public names; imported on first use (workbench.lazy)
    from workbench.tasks.builders import csv_rows, dataframe_rows, hf_dataset_rows, table_records
    from workbench.tasks.checks import CHECKS, Check
    from workbench.tasks.encoding import TaskBatch, encode_task
    from workbench.tasks.files import resolve_task_path
    from workbench.tasks.fit import (
        FITS,
        MIN_FIT_EXAMPLES,
        Fit,
        fit_digits,
        fit_drop_unfit,
        fit_greater_than,
        fit_task,
    )
    from workbench.tasks.format import (
        EXAMPLE_KEYS,
        HEADER_KEYS,
        LIST_FIELDS,
        SPLITS,
        check_example,
        check_header,
    )
    from workbench.tasks.ids import EncodedExample, encode_example
    from workbench.tasks.names import (
        TASKS_DIR,
        check_task_name,
        hub_task_names,
        own_tasks,
        task_names,
    )
    from workbench.tasks.task import (
        METRIC_NAMES,
        NEEDS_WRONG,
        PER_TOKENIZER,
        Example,
        Task,
        load_task,
    )
    from workbench.tasks.tokenizer import (
        HFTokenizer,
        WordTokenizer,
        get_tokenizer,
        word_level_hf_tokenizer,
    )

__getattr__, __dir__, __all__ = lazy_package(globals())
