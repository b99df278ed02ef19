"""The task format: prompts with a known next-token answer, read from JSONL files or tables.

This module holds the format (the header and example fields below, and the rules a task must
follow), `Example` and `Task`, `load_task`, the `Task.from_*` constructors for tables (read by
`workbench.builders`, then parsed record by record exactly like the lines of a file), and the
structural checks (`CHECKS`) run once a model's tokenizer is known. Encoding a task for a
model is `workbench.encoding` (one example: `workbench.example_ids`); fitting it to a model's
tokenizer is `workbench.task_fit`.

A task file is JSONL (UTF-8; a byte-order mark at the start is accepted). The first line may
be a header `{"task": {...}}`; its keys are checked against `HEADER_KEYS` (a misspelt key is an
error listing the known ones):

- `name`, `description`, `source` (the script that generated the file): strings;
- `metric`: the one CEL improves by default, one of `METRIC_NAMES` (see `workbench.metrics`);
- `answer_scope`: an `AnswerScope`, `vocab` (accuracy is the argmax over the whole vocabulary)
  or `candidates` (the argmax over `candidates`, or over each example's answers and wrong
  answers when no list is given); `candidates`: a list of strings or null, given only with
  `answer_scope: candidates` (with `vocab` it would be ignored, so it is an error);
- `prepend_bos`: a JSON boolean or null (the string "false" is an error, not true). Absent or
  null (the default): the prompt's ids are exactly those the model's own tokenizer gives
  (`tokenizer(prompt)`, special tokens only where it adds them; the word tokenizer of the
  project's models adds its BOS); true / false force a BOS on or off. The choice in effect is
  `TaskBatch.prepend_bos`;
- `per_tokenizer`: how the task is fitted to the tokenizer of the model it runs on, one of
  `PER_TOKENIZER` (see `workbench.task_fit`): `drop_unfit` keeps only the examples this
  tokenizer can write as the task needs (e.g. IOI names and capitals that are one token),
  whole groups at a time; `greater_than` asks for the end year's decade where a tokenizer
  does not write years as century + two digits; `digits` moves a lone space token into the
  prompt and scores numbers that are several tokens as multi-token answers. A task the
  tokenizer already fits is left exactly as it is;
- `answer_tokens`: an `AnswerTokens`, `single` (default: every answer must be one token in
  context) or `multi` (answers may be several tokens: first-token metrics plus teacher-forced
  sequence metrics);
- `checks`: names of structural checks from `CHECKS` run on every example once tokenized
  (e.g. `year_split`: a start year splits as century + two digits, as greater-than needs);
- `answers_in_context`: a JSON boolean, default true (see below); false encodes answers,
  wrong answers and candidates alone, for a task whose answer tokens are fixed by the task
  rather than by how the tokenizer writes prompt + answer (greater-than sums probability over
  the 100 two-digit tokens after the century, though GPT-2 writes " 1600" as one token). No
  boundary rule can then be checked, so pair it with a structural check that the prompt is
  tokenized as the task assumes (greater-than: `year_split`);
- `split_by`: a `SplitBy`, `example` (default) or `group`: examples without a `split` are split
  at random by example, or by `group` so that no group (a fact, a word pair) is in both splits;
- `meta`: a free-form object.

Every other line is one example:

    {"id": "ex-17", "prompt": "...", "answer": " Mary" | [" Mary", ...],
     "wrong": [" John"], "roles": ["subject", ...], "split": "select" | "heldout",
     "group": "unmarked", "counterfactual": "...", "meta": {...}}

Only `prompt` and `answer` are required. `roles` label each prompt token (BOS excluded) for the
attention analysis. `counterfactual` is a prompt of the same token length whose run supplies
the activations of resample ablation (`AblationKind.RESAMPLE`). Examples without `split` are
assigned to the selection or held-out split by a seeded permutation, so the split never
depends on file order.

Rules checked at load, for files and tables alike; each failure is one error line naming the
line (or row), the example id and the fix:

- `id`s are unique (the error names the id and where it was first used);
- `prompt` is a non-empty string that never ends with whitespace, and so is `counterfactual`
  (it stands in for the prompt). The answer is predicted after the prompt's last token and
  carries its own leading space: a byte-level BPE tokenizer (GPT-2, SmolLM2) makes a trailing
  space a token of its own, so "Counting: eight, nine, ten, " + " eleven" would be scored
  after a lone " " token, a context the model hardly ever saw (and with the answer "eleven",
  the prompt's tokens would not be a prefix of the text's);
- `answer` and `wrong` are non-empty strings or non-empty lists of them; no text is listed
  twice, and none is both an answer and a wrong answer (metrics that compare them would not
  tell them apart);
- `split` is `select` or `heldout`; `roles` is a list of strings; `meta` is an object;
- the header rules above; metrics in `NEEDS_WRONG` need `wrong` on every example; with
  `split_by: group` every example has a `group` and no group is in both splits; with a
  `candidates` list every answer is one of them.

Rules checked once a model's tokenizer is known (`workbench.example_ids`), naming the example:
answers are tokenized in context, and the text prompt + answer must be tokenized as the
prompt's tokens followed by the answer's (`tokens(prompt + answer) == tokens(prompt) +
answer_ids`; an answer whose first token would merge with the prompt's last cannot be scored);
a single-token task needs each answer to be one token; `checks`; one role per prompt token;
a counterfactual of the prompt's token length; a prompt that fits the model's context.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from workbench.builders import csv_rows, dataframe_rows, hf_dataset_rows, table_records
from workbench.errors import WorkbenchError
from workbench.options import AnswerScope, AnswerTokens, Option, SplitBy, choose

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"
# The metrics a task can name; `workbench.metrics` implements each (a test checks they match).
METRIC_NAMES = ("accuracy", "logprob", "logit_diff", "prob_diff", "normalized_logit_diff")
# Metrics that compare the answers with the `wrong` answers, so need them on every example.
NEEDS_WRONG = ("logit_diff", "prob_diff", "normalized_logit_diff")
SPLITS = ("select", "heldout")
# The per-tokenizer constructions a task header can name; `workbench.task_fit.FITS` implements
# each (a test checks they match).
PER_TOKENIZER = ("drop_unfit", "greater_than", "digits")
# Header key -> the JSON types it may hold (None: null).
HEADER_KEYS: dict[str, tuple] = {
    "name": (str,),
    "description": (str,),
    "metric": (str,),
    "answer_scope": (str,),
    "candidates": (list, type(None)),
    "source": (str,),
    "prepend_bos": (bool, type(None)),
    "per_tokenizer": (str,),
    "answer_tokens": (str,),
    "checks": (list,),
    "split_by": (str,),
    "answers_in_context": (bool,),
    "meta": (dict,),
}
EXAMPLE_KEYS = (
    "id", "prompt", "answer", "wrong", "roles", "split", "group", "counterfactual", "meta"
)  # fmt: skip
# The example fields that hold a list (a table cell may be split into one, see `from_records`).
LIST_FIELDS = ("answer", "wrong", "roles")


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
        answer_scope: an `AnswerScope` value, `"vocab"` or `"candidates"` (see the module
            docstring).
        candidates: the shared candidate answers, when `answer_scope == "candidates"`.
        answer_tokens: an `AnswerTokens` value, `"single"` or `"multi"`.
        checks: structural checks (names in `CHECKS`) run when the task is encoded.
        split_by: a `SplitBy` value, `"example"` or `"group"`: the unit a random split keeps
            together.
        answers_in_context: encode answers after their prompt (True) or alone (False).
        prepend_bos: None: a prompt's ids are its model's own tokenizer's; True / False: a
            BOS is forced on or off.
        per_tokenizer: a name in `PER_TOKENIZER`: how the task is fitted to a model's
            tokenizer when encoded (see `workbench.task_fit`), or None.
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

    def __post_init__(self) -> None:
        if not self.examples:
            raise WorkbenchError(f"task {self.name!r} has no examples")
        task = f"task {self.name!r}:"
        self.metric = choose(self.metric, METRIC_NAMES, f"{task} metric")
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
            _check_groups(self.name, self.examples)
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
        header = _parse_header({"name": name, **header}, f"task {name!r}")
        rows = table_records(records, EXAMPLE_KEYS, columns, LIST_FIELDS, list_sep, name)
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
    if isinstance(value, Option):
        return value.value
    return list(value) if isinstance(value, tuple) else value


def _check_groups(name: str, examples: list[Example]) -> None:
    """With `split_by="group"`: every example has a group, and no group is in both splits."""
    missing = [e.id for e in examples if e.group is None]
    if missing:
        raise WorkbenchError(
            f"task {name!r} splits by group but examples {missing[:5]} have no 'group'; give "
            "each example a group, or set split_by to 'example'"
        )
    seen: dict[str, str] = {}
    for e in examples:
        if e.split is None:
            continue
        first = seen.setdefault(e.group, e.split)
        if first != e.split:
            raise WorkbenchError(
                f"task {name!r} splits by group but group {e.group!r} is in both splits "
                f"(example {e.id!r} is {e.split!r}); give every example of a group the same "
                "split, or leave 'split' out and let the loader split by group"
            )


def _texts(value, what: str, where: str) -> tuple[str, ...]:
    """An `answer` or `wrong` field as a tuple of distinct non-empty strings."""
    texts = [value] if isinstance(value, str) else value
    if not (isinstance(texts, list) and texts and all(isinstance(v, str) and v for v in texts)):
        raise WorkbenchError(
            f"{where}: {what!r} must be a string or a non-empty list of strings, none of them "
            f"empty; got {value!r}"
        )
    repeated = [t for i, t in enumerate(texts) if t in texts[:i]]
    if repeated:
        raise WorkbenchError(f"{where}: {what!r} lists {repeated[0]!r} twice; list it once")
    return tuple(texts)


def _check_no_trailing_space(text: str, what: str, answers: tuple[str, ...], where: str) -> None:
    """The rule that a prompt (or counterfactual) never ends with whitespace: the answer
    carries its own leading space (see the module docstring for why)."""
    stripped = text.rstrip()
    if stripped == text:
        return
    space = text[len(stripped) :]
    if what == "prompt":
        answer = answers[0] if answers[0][:1].isspace() else space + answers[0]
        fix = (
            f"move the whitespace into the answer: prompt ending {stripped[-30:]!r}, answer "
            f"{answer!r} (every answer and wrong answer starts with it)"
        )
    else:
        fix = f"end the {what} at {stripped[-30:]!r}, as the prompt ends"
    raise WorkbenchError(
        f"{where}: the {what} ends with whitespace {space!r}, which byte-level BPE tokenizers "
        "(GPT-2, SmolLM2) make a token of its own, so the answer would be predicted after a "
        f"lone {space!r} token; {fix}"
    )


def _parse_example(obj, where: str, index: int) -> Example:
    """One line of a task file (or one table row) as an `Example`, or an error naming the
    line, the example id and the rule it breaks."""
    if not isinstance(obj, dict):
        raise WorkbenchError(f"{where}: each line must be a JSON object; got {type(obj).__name__}")
    ex_id = str(obj.get("id", index))
    where = f"{where}, example {ex_id!r}"
    unknown = sorted(set(obj) - set(EXAMPLE_KEYS))
    if unknown:
        raise WorkbenchError(
            f"{where}: unknown example fields {unknown}; known fields: {list(EXAMPLE_KEYS)} "
            "(put free-form data under 'meta')"
        )
    for key in ("prompt", "answer"):
        if key not in obj:
            raise WorkbenchError(f"{where}: missing field {key!r} (required: 'prompt', 'answer')")
    prompt = obj["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise WorkbenchError(f"{where}: 'prompt' must be a non-empty string; got {prompt!r}")
    answers = _texts(obj["answer"], "answer", where)
    wrong = _texts(obj["wrong"], "wrong", where) if obj.get("wrong") else ()
    both = [w for w in wrong if w in answers]
    if both:
        raise WorkbenchError(
            f"{where}: {both[0]!r} is both an answer and a wrong answer; keep it in one list"
        )
    _check_no_trailing_space(prompt, "prompt", answers, where)
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        raise WorkbenchError(f"{where}: split {split!r} is unknown; expected one of {SPLITS}")
    roles = obj.get("roles")
    if roles is not None and not (
        isinstance(roles, list) and all(isinstance(r, str) for r in roles)
    ):
        raise WorkbenchError(f"{where}: 'roles' must be a list of strings")
    counterfactual = obj.get("counterfactual")
    if counterfactual is not None:
        if not isinstance(counterfactual, str) or not counterfactual.strip():
            raise WorkbenchError(f"{where}: 'counterfactual' must be a non-empty string")
        _check_no_trailing_space(counterfactual, "counterfactual", answers, where)
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        raise WorkbenchError(f"{where}: 'meta' must be an object; got {meta!r}")
    return Example(
        id=ex_id,
        prompt=prompt,
        answers=answers,
        wrong=wrong,
        roles=tuple(roles) if roles is not None else None,
        split=split,
        group=None if obj.get("group") is None else str(obj["group"]),
        counterfactual=counterfactual,
        meta=meta,
    )


def _assign_splits(
    examples: list[Example], seed: int, heldout_fraction: float, by_group: bool = False
) -> list[Example]:
    """Give every example without a split one, by a seeded permutation of the examples (or
    of their groups, keeping a group together; a group that already has a split keeps it)."""
    missing = [i for i, e in enumerate(examples) if e.split is None]
    if not missing:
        return examples
    rng = np.random.default_rng(seed)
    out = list(examples)
    if by_group:
        fixed = {e.group: e.split for e in examples if e.split is not None}
        units = list(
            dict.fromkeys(examples[i].group for i in missing if examples[i].group not in fixed)
        )
        order = rng.permutation(len(units))
        n_heldout = int(round(heldout_fraction * len(units)))
        label = dict(fixed)
        for rank, j in enumerate(order):
            label[units[j]] = "heldout" if rank < n_heldout else "select"
        for i in missing:
            out[i] = replace(out[i], split=label[out[i].group])
        return out
    order = rng.permutation(len(missing))
    n_heldout = int(round(heldout_fraction * len(missing)))
    for rank, j in enumerate(order):
        i = missing[j]
        out[i] = replace(out[i], split="heldout" if rank < n_heldout else "select")
    return out


def resolve_task_path(name_or_path: str | os.PathLike) -> Path:
    """A task file path from a path or a name in `tasks/`."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    candidate = TASKS_DIR / f"{name_or_path}.jsonl"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in TASKS_DIR.glob("*.jsonl")) if TASKS_DIR.is_dir() else []
    raise WorkbenchError(
        f"task {str(name_or_path)!r} is neither a file nor a task in {TASKS_DIR}; known tasks: "
        f"{known}"
    )


def _parse_header(header, where: str) -> dict:
    """Check a task header: known keys only, each of its documented JSON type."""
    if not isinstance(header, dict):
        raise WorkbenchError(f"{where}: 'task' header must be an object")
    unknown = sorted(set(header) - set(HEADER_KEYS))
    if unknown:
        raise WorkbenchError(
            f"{where}: unknown task header keys {unknown}; known keys: {list(HEADER_KEYS)}"
        )
    for key, value in header.items():
        types = HEADER_KEYS[key]
        # bool is a subclass of int in Python, so check the exact JSON type.
        if not any(type(value) is t for t in types):
            names = [("null" if t is type(None) else t.__name__) for t in types]
            raise WorkbenchError(
                f"{where}: task header {key!r} must be {' or '.join(names)}; got {value!r} "
                f"({type(value).__name__})"
            )
    for key in ("candidates", "checks"):
        value = header.get(key)
        if value is not None and not all(isinstance(v, str) for v in value):
            raise WorkbenchError(f"{where}: task header {key!r} must be a list of strings")
    if header.get("candidates") and header.get("answer_scope", "vocab") == AnswerScope.VOCAB:
        raise WorkbenchError(
            f"{where}: the header lists candidates but answer_scope is 'vocab', which ignores "
            "them; set answer_scope to 'candidates', or candidates to null"
        )
    return header


def _task_from_lines(
    header: dict,
    lines: list[tuple[str, object]],
    default_name: str,
    seed: int,
    heldout_fraction: float,
) -> Task:
    """A `Task` from a checked header and its example lines (each with where it comes from,
    for errors); examples without a split get one."""
    if not 0.0 < heldout_fraction < 1.0:
        raise WorkbenchError(f"heldout_fraction must be in (0, 1); got {heldout_fraction}")
    examples: list[Example] = []
    first_seen: dict[str, str] = {}
    for where, obj in lines:
        ex = _parse_example(obj, where, len(examples))
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
        _check_groups(name, examples)
    return Task(
        name=name,
        examples=_assign_splits(examples, seed, heldout_fraction, by_group=by_group),
        metric=header.get("metric", "accuracy"),
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
    )


def load_task(
    name_or_path: str | os.PathLike, seed: int = 0, heldout_fraction: float = 0.5
) -> Task:
    """Load a task from `tasks/<name>.jsonl` or a JSONL path.

    Args:
        name_or_path: a task name in `tasks/` or the path of a task file.
        seed: seeds the split of examples that carry no `split` field.
        heldout_fraction: the fraction of such examples (or groups) put in the held-out split.

    Raises:
        WorkbenchError: naming the line and the example, for a file that breaks a rule of the
            format (see the module docstring).
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise WorkbenchError(f"heldout_fraction must be in (0, 1); got {heldout_fraction}")
    path = resolve_task_path(name_or_path)
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is not part of line 1.
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise WorkbenchError(
            f"task file {str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}); save it "
            "as UTF-8 JSON lines"
        ) from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise WorkbenchError(f"task file {str(path)!r} is empty; expected JSONL examples")
    header: dict = {}
    examples: list[tuple[str, object]] = []
    for lineno, line in lines:
        where = f"{path.name} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"{where} is not valid JSON: {e.msg}") from None
        if isinstance(obj, dict) and "task" in obj and "prompt" not in obj:
            if examples or header:
                raise WorkbenchError(f"{where}: the task header must be the first line")
            if set(obj) != {"task"}:
                raise WorkbenchError(
                    f"{where}: the header line holds only 'task'; got keys {sorted(obj)}"
                )
            header = _parse_header(obj["task"], where)
            continue
        examples.append((where, obj))
    if not examples:
        raise WorkbenchError(f"task file {str(path)!r} has a header but no examples")
    return _task_from_lines(header, examples, path.stem, seed, heldout_fraction)


# ---------------------------------------------------------------------------------------------
# Structural checks: rules a task's tokenization must follow for the task to mean anything.
# Each takes (tokenizer, example, prompt ids without BOS, answer token lists) and raises a
# WorkbenchError naming the example when the rule fails.

Check = Callable[[object, Example, list[int], list[list[int]]], None]


def _check_year_split(tok, ex: Example, prompt_ids: list[int], answers: list[list[int]]) -> None:
    """Greater-than (Hanna et al.): the last four-digit year of the prompt must split as its
    century + its two last digits, and the prompt must end with that century alone, so that the
    answer (the end year's two digits) is the next token."""
    years = re.findall(r"(?<!\d)(\d\d)(\d\d)(?!\d)", ex.prompt)
    if not years:
        raise WorkbenchError(f"example {ex.id!r}: check year_split finds no four-digit year")
    century, yy = years[-1]
    pieces = [p.strip() for p in tok.str_tokens(prompt_ids)]
    if not any(pieces[i : i + 2] == [century, yy] for i in range(len(pieces) - 1)):
        raise WorkbenchError(
            f"example {ex.id!r}: the start year {century}{yy} is not split as century "
            f"{century!r} + {yy!r} by this tokenizer (prompt tokens {tok.str_tokens(prompt_ids)})"
            "; greater-than needs century + two-digit tokens"
        )
    if not pieces or pieces[-1] != century:
        raise WorkbenchError(
            f"example {ex.id!r}: the prompt's last token is {pieces[-1:]}, not the century "
            f"{century!r}; greater-than needs the end year's century as its own token"
        )


CHECKS: dict[str, Check] = {"year_split": _check_year_split}
