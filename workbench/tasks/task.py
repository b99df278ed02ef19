"""Tasks: `Example`, `Task`, and the ways to make one, from a task file (`load_task`) or a
table (`Task.from_records`, `from_dataframe`, `from_csv`, `from_hf_dataset`).

A task is a named list of prompts with known next-token answers, and how to score them. The
file format, and the rules each header and example record follows, are
`workbench.tasks.format` (the reference for users: `tasks/README.md`); a table is read into
the same records by `workbench.tasks.builders`, so a built task passes the same checks and behaves
exactly like a loaded one. This module adds the rules that span a task, each failure one error
line: unique ids (a duplicate names the id and where it was first used), option values
(`metric`, `AnswerScope`, `AnswerTokens`, `SplitBy`, `per_tokenizer`, through
`workbench.options.choose`, stored as plain strings), the `wrong` answers a metric needs,
groups that never cross splits, answers among the candidates. Examples without a `split` are
assigned to the selection or held-out split by a seeded permutation (of examples, or of
groups), so the split never depends on file order.

A task file is found and read by `workbench.tasks.files`, its examples without a split are
split by `workbench.tasks.splits`; the structural checks (`CHECKS`, `workbench.tasks.checks`)
are rules on an example's tokens, run once a model's tokenizer is known
(`workbench.tasks.ids`). Encoding a task for a model is
`workbench.tasks.encoding`; fitting it to a model's tokenizer, `workbench.tasks.fit`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from workbench.deprecation import deprecated
from workbench.errors import WorkbenchError
from workbench.generation.settings import GenerationSettings
from workbench.lm_eval.source import is_lm_eval_spec, lm_eval_records
from workbench.metric_records import GENERATION, MULTIPLE_CHOICE, metric_names, names_where
from workbench.options import AnswerScope, AnswerTokens, Option, SplitBy, choose
from workbench.tasks.builders import csv_rows, dataframe_rows, hf_dataset_rows, table_records
from workbench.tasks.checks import CHECKS, Check  # noqa: F401 (Check: re-exported)
from workbench.tasks.files import read_task_file, resolve_task_path
from workbench.tasks.format import SPLITS, check_example, check_header, check_kind, example_kind
from workbench.tasks.splits import assign_splits, check_groups

# The metrics a task can name, and those that compare the answers with the `wrong` answers (so
# need them on every example): from the metrics' records (`workbench.metric_records`).
METRIC_NAMES = metric_names()
NEEDS_WRONG = names_where("needs_wrong")
# The per-tokenizer constructions a task header can name; `workbench.tasks.fit.FITS` implements
# each (a test checks they match).
PER_TOKENIZER = ("drop_unfit", "greater_than", "digits")
# A task's metric when its header names none, by kind (next-token: accuracy).
_DEFAULT_METRIC = {MULTIPLE_CHOICE: "acc", GENERATION: "exact_match"}


@dataclass(frozen=True)
class Example:
    """One prompt and its answer(s)."""

    id: str
    prompt: str
    answers: tuple[str, ...]
    wrong: tuple[str, ...] = ()
    roles: tuple[str, ...] | None = None
    split: str | None = None
    group: str | None = None
    counterfactual: str | None = None
    meta: dict | None = field(default=None, compare=False)
    choices: tuple[str, ...] | None = None
    gold: int | None = None
    target: str | None = None


@dataclass
class Task:
    """A named list of examples and how to score them.

    The option fields are validated (a misspelt value is an error naming the option and its
    values) and stored as plain strings, so a task's fingerprint does not depend on whether
    an option was given as a string or as its `Option` member.

    Attributes:
        name: the task's name (its file stem for files in `tasks/`).
        examples: the examples, every one with a split.
        metric: the metric CEL improves by default; one of `METRIC_NAMES`.
        answer_scope: an `AnswerScope` value, `"vocab"` or `"candidates"` (see
            `workbench.tasks.format`).
        candidates: the shared candidate answers, when `answer_scope == "candidates"`.
        answer_tokens: an `AnswerTokens` value, `"single"` or `"multi"`.
        checks: structural checks (names in `CHECKS`) run when the task is encoded.
        split_by: a `SplitBy` value, `"example"` or `"group"`: the unit a random split keeps
            together.
        answers_in_context: encode answers after their prompt (True) or alone (False).
        prepend_bos: None: a prompt's ids are its model's own tokenizer's; True / False: a
            BOS is forced on or off.
        per_tokenizer: a name in `PER_TOKENIZER`: how the task is fitted to a model's
            tokenizer when encoded (see `workbench.tasks.fit`), or None.
        target_delimiter: for a multiple-choice or generation task (every example has
            `choices`, or `target`), the text between the prompt and each choice or target
            (lm-eval's, default `" "`); else None.
        generation: a generation task's `GenerationSettings` (decoding, extractor, exact
            match options; a header's `generation` object is read into one); else None.
        file: the absolute path of the JSONL file `load_task` read it from (None for a task
            built in memory). Where a task was read from is not what it is: `file` is left
            out of equality and of `workbench.results.fingerprint.task_fingerprint`.
    """

    name: str
    examples: list[Example]
    metric: str = "accuracy"
    answer_scope: str = "vocab"
    candidates: tuple[str, ...] | None = None
    description: str = ""
    source: str = ""
    prepend_bos: bool | None = None
    meta: dict = field(default_factory=dict)
    answer_tokens: str = "single"
    checks: tuple[str, ...] = ()
    split_by: str = "example"
    answers_in_context: bool = True
    per_tokenizer: str | None = None
    file: str | None = field(default=None, compare=False)
    target_delimiter: str | None = None
    generation: GenerationSettings | dict | None = None

    def __post_init__(self) -> None:
        if not self.examples:
            raise WorkbenchError(f"task {self.name!r} has no examples")
        task = f"task {self.name!r}:"
        self.metric = choose(self.metric, METRIC_NAMES, f"{task} metric")
        check_kind(self)
        self.answer_scope = choose(self.answer_scope, AnswerScope, f"{task} answer_scope").value
        self.answer_tokens = choose(self.answer_tokens, AnswerTokens, f"{task} answer_tokens").value
        self.split_by = choose(self.split_by, SplitBy, f"{task} split_by").value
        if self.per_tokenizer is not None:
            self.per_tokenizer = choose(self.per_tokenizer, PER_TOKENIZER, f"{task} per_tokenizer")
        self.checks = tuple(self.checks)
        unknown = [c for c in self.checks if c not in CHECKS]
        if unknown:
            raise WorkbenchError(
                f"{task} checks {unknown} are unknown; expected names in {sorted(CHECKS)}"
            )
        ids = [e.id for e in self.examples]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            repeated = list(dict.fromkeys(i for i in ids if i in seen or seen.add(i)))
            raise WorkbenchError(
                f"{task} duplicate example ids {repeated[:5]}; give each example its own id"
            )
        if self.metric in NEEDS_WRONG:
            lacking = [e.id for e in self.examples if not e.wrong]
            if lacking:
                raise WorkbenchError(
                    f"{task} metric {self.metric} needs 'wrong' answers on every example; "
                    f"examples {lacking[:5]} have none (add them, or use metric 'accuracy' "
                    "or 'logprob')"
                )
        if self.split_by == SplitBy.GROUP:
            check_groups(self.name, self.examples)
        if self.answer_scope == AnswerScope.CANDIDATES and self.candidates:
            for e in self.examples:
                missing = [a for a in e.answers if a not in self.candidates]
                if missing:
                    raise WorkbenchError(
                        f"task {self.name!r}, example {e.id!r}: answer {missing[0]!r} is not "
                        f"in the task's candidates {list(self.candidates)[:8]}; with "
                        "answer_scope 'candidates' every answer must be one of them"
                    )

    def __len__(self) -> int:
        return len(self.examples)

    def subset(self, split: str | None) -> "Task":
        """The examples of one split (`"select"`, `"heldout"`), or all when `split` is None."""
        if split is None:
            return self
        if split not in SPLITS:
            raise WorkbenchError(f"split {split!r} is unknown; expected one of {SPLITS} or None")
        examples = [e for e in self.examples if e.split == split]
        if not examples:
            raise WorkbenchError(f"task {self.name!r} has no examples in split {split!r}")
        return replace(self, examples=examples)

    def head(self, n: int) -> "Task":
        """The first `n` examples (handy for quick runs)."""
        return replace(self, examples=self.examples[:n])

    def sample_per_split(self, n: int | None, seed: int = 0) -> "Task":
        """`n` examples of each split drawn at random (seeded), kept in file order; all when
        `n` is None or a split has no more. A sample, not the first `n`: task files are often
        sorted (greater-than by start year), so the first examples are not typical."""
        if n is None:
            return self
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise WorkbenchError(f"examples per split must be a positive integer; got {n!r}")
        rng = np.random.default_rng(seed)
        keep: set[int] = set()
        for split in sorted({str(e.split) for e in self.examples}):
            idx = [i for i, e in enumerate(self.examples) if str(e.split) == split]
            keep.update(idx if len(idx) <= n else
                        (idx[int(j)] for j in rng.choice(len(idx), n, replace=False)))
        return replace(self, examples=[e for i, e in enumerate(self.examples) if i in keep])

    def first_per_split(self, n: int | None) -> "Task":
        """Deprecated since 0.2.0 (`sample_per_split` draws a seeded sample instead: the
        first examples of a sorted file are not typical): the first `n` of each split."""
        deprecated("Task.first_per_split(n)", "Task.sample_per_split(n, seed)")
        if n is None:
            return self
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise WorkbenchError(f"examples per split must be a positive integer; got {n!r}")
        seen: dict[str, int] = {}
        keep = []
        for e in self.examples:
            seen[e.split] = seen.get(e.split, 0) + 1
            if seen[e.split] <= n:
                keep.append(e)
        return replace(self, examples=keep)

    @property
    def is_multiple_choice(self) -> bool:
        """Whether the task's examples are multiple choice (`choices` and `gold`)."""
        return self.examples[0].choices is not None

    @property
    def is_generation(self) -> bool:
        """Whether the task's examples are generation examples (`target`)."""
        return self.examples[0].target is not None

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.examples]

    @property
    def has_counterfactuals(self) -> bool:
        return all(e.counterfactual is not None for e in self.examples)

    @classmethod
    def from_records(
        cls,
        records,
        name: str = "task",
        columns: dict[str, str] | None = None,
        list_sep: str | None = None,
        seed: int = 0,
        heldout_fraction: float = 0.5,
        **header,
    ) -> "Task":
        """A task from an iterable of dicts (one per example), checked like a task file.

        Args:
            records: the examples, as mappings from column name to value.
            name: the task's name.
            columns: task field -> source column, for columns named otherwise; columns not
                mapped and not named like a task field are ignored.
            list_sep: split string cells of `answer`, `wrong` and `roles` on this separator
                (e.g. `"|"` for a CSV cell `" Paris| paris"`); None keeps them whole.
            seed, heldout_fraction: as in `load_task`, for rows without a `split`.
            **header: task header options (`metric`, `answer_scope`, `candidates`, `split_by`,
                `answer_tokens`, `checks`, `prepend_bos`, ...), strings or `Option` members,
                checked like a file's header.

        Raises:
            WorkbenchError: naming the row, for a missing column or a value that breaks a
                rule of the task format.

        Example:
            >>> Task.from_records(rows, columns={"prompt": "q", "answer": "a", "group": "fact"},
            ...                   name="facts", split_by=SplitBy.GROUP)
        """
        header = {k: _header_value(v) for k, v in header.items()}
        header = check_header({"name": name, **header}, f"task {name!r}")
        rows = table_records(records, columns, list_sep, name)
        if not rows:
            raise WorkbenchError(f"task {name!r} has no rows")
        located = [(f"task {name!r} row {i}", row) for i, row in enumerate(rows)]
        return _task_from_lines(header, located, name, seed, heldout_fraction)

    @classmethod
    def from_dataframe(cls, df, name: str = "task", **kwargs) -> "Task":
        """A task from a pandas DataFrame, one row per example (see `from_records`)."""
        return cls.from_records(dataframe_rows(df), name=name, **kwargs)

    @classmethod
    def from_csv(cls, path: str | os.PathLike, name: str | None = None, **kwargs) -> "Task":
        """A task from a CSV file with a header row (see `from_records`; `name` defaults to
        the file's stem). Cells are read as strings, so ids and groups keep leading zeros."""
        return cls.from_records(csv_rows(path), name=name or Path(path).stem, **kwargs)

    @classmethod
    def from_hf_dataset(
        cls, path_or_dataset, name: str | None = None, hf_split: str | None = None, **kwargs
    ) -> "Task":
        """A task from a Hugging Face dataset saved on disk (`Dataset.save_to_disk`), or a
        `datasets.Dataset` / `DatasetDict` in memory; nothing is downloaded. `hf_split` picks
        the split of a `DatasetDict` (required when there are several); `name` defaults to
        the folder's name; other arguments as in `from_records`."""
        rows, default_name = hf_dataset_rows(path_or_dataset, hf_split)
        return cls.from_records(rows, name=name or default_name, **kwargs)


def _header_value(value):
    """A header option given in Python as its JSON value: an `Option` member as its string,
    a tuple as a list."""
    if isinstance(value, Option | GenerationSettings):
        return value.to_dict() if isinstance(value, GenerationSettings) else value.value
    return list(value) if isinstance(value, tuple) else value


def _task_from_lines(header: dict, lines: list[tuple[str, object]], default_name: str,
                     seed: int, heldout_fraction: float) -> Task:
    """A `Task` from a checked header and its example lines (each with where it comes from,
    for errors); examples without a split get one."""
    if not 0.0 < heldout_fraction < 1.0:
        raise WorkbenchError(f"heldout_fraction must be in (0, 1); got {heldout_fraction}")
    examples: list[Example] = []
    first_seen: dict[str, str] = {}
    delimiter = header.get("target_delimiter", " ")
    kind = GENERATION if "generation" in header else None
    for where, obj in lines:
        ex = Example(**check_example(obj, where, len(examples), delimiter, kind))
        kind = kind or example_kind(ex)
        if ex.id in first_seen:
            raise WorkbenchError(
                f"{where}: duplicate example ids: {ex.id!r} is already the id at "
                f"{first_seen[ex.id]}; give each example its own 'id'"
            )
        first_seen[ex.id] = where
        examples.append(ex)
    name = header.get("name", default_name)
    candidates = header.get("candidates")
    split_by = header.get("split_by", SplitBy.EXAMPLE.value)
    by_group = split_by == SplitBy.GROUP
    if by_group:
        check_groups(name, examples)
    return Task(
        name=name,
        examples=assign_splits(examples, seed, heldout_fraction, by_group=by_group),
        metric=header.get("metric", _DEFAULT_METRIC.get(kind, "accuracy")),
        answer_scope=header.get("answer_scope", AnswerScope.VOCAB.value),
        candidates=tuple(candidates) if candidates else None,
        description=header.get("description", ""),
        source=header.get("source", ""),
        prepend_bos=header.get("prepend_bos"),
        meta=dict(header.get("meta", {})),
        answer_tokens=header.get("answer_tokens", AnswerTokens.SINGLE.value),
        checks=tuple(header.get("checks", ())),
        split_by=split_by,
        answers_in_context=header.get("answers_in_context", True),
        per_tokenizer=header.get("per_tokenizer"),
        target_delimiter=header.get("target_delimiter"),
        generation=header.get("generation"),
    )


def load_task(
    name_or_path: str | os.PathLike, seed: int = 0, heldout_fraction: float = 0.5
) -> Task:
    """Load a task from `tasks/<name>.jsonl` (or `tasks/benchmarks/<name>.jsonl`) or a JSONL
    path, or an lm-eval multiple-choice task (`lm_eval:<name>` or a task YAML, built by
    lm-eval: `workbench.lm_eval.source`).

    Args:
        name_or_path: a task name in `tasks/` or `tasks/benchmarks/`, the path of a task
            file, `lm_eval:<name>` or the path of an lm-eval task YAML.
        seed: seeds the split of examples that carry no `split` field.
        heldout_fraction: the fraction of such examples (or groups) put in the held-out split.

    Raises:
        WorkbenchError: naming the line and the example, for a file that breaks a rule of the
            format (`workbench.tasks.format`, and the rules that span a task above).
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise WorkbenchError(f"heldout_fraction must be in (0, 1); got {heldout_fraction}")
    if is_lm_eval_spec(name_or_path):  # lm_eval:<name> or a task YAML: lm-eval builds it
        header, records = lm_eval_records(str(name_or_path))
        return Task.from_records(records, name=header.pop("name"), seed=seed,
                                 heldout_fraction=heldout_fraction, **header)
    path = resolve_task_path(name_or_path)
    header, examples = read_task_file(path)
    task = _task_from_lines(header, examples, path.stem, seed, heldout_fraction)
    task.file = str(path.resolve())
    return task
