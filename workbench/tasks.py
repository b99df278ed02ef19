"""Tasks: prompts with a known next-token answer, and their encoding into tensors.

A task file is JSONL. The first line may be a header `{"task": {...}}` with `name`,
`description`, `metric` (`accuracy`, `logprob` or `logit_diff`: the one CEL improves by
default), `answer_scope` (`vocab`: accuracy is the argmax over the whole vocabulary;
`candidates`: the argmax over `candidates`, or over each example's answers and wrong answers
when no list is given), `candidates`, `source` (the script that generated the file) and
`prepend_bos`. Every other line is one example:

    {"id": "ex-17", "prompt": "...", "answer": " Mary" | [" Mary", ...],
     "wrong": [" John"], "roles": ["subject", ...], "split": "select" | "heldout",
     "group": "unmarked"}

Only `prompt` and `answer` are required. The answer is the token predicted after the last
prompt token and must be a single token of the model's tokenizer. `roles` label each prompt
token (BOS excluded) for the attention analysis. Examples without `split` are assigned to the
selection or held-out split by a seeded permutation, so the split never depends on file
order.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from workbench.errors import WorkbenchError
from workbench.tokenizer import get_tokenizer

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"
METRIC_NAMES = ("accuracy", "logprob", "logit_diff")
SPLITS = ("select", "heldout")
ANSWER_SCOPES = ("vocab", "candidates")


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


@dataclass
class Task:
    """A named list of examples and how to score them.

    Attributes:
        name: the task's name (its file stem for files in `tasks/`).
        examples: the examples, every one with a split.
        metric: the metric CEL improves by default; one of `METRIC_NAMES`.
        answer_scope: `"vocab"` or `"candidates"` (see the module docstring).
        candidates: the shared candidate answers, when `answer_scope == "candidates"`.
    """

    name: str
    examples: list[Example]
    metric: str = "accuracy"
    answer_scope: str = "vocab"
    candidates: tuple[str, ...] | None = None
    description: str = ""
    source: str = ""
    prepend_bos: bool = True
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.examples:
            raise WorkbenchError(f"task {self.name!r} has no examples")
        if self.metric not in METRIC_NAMES:
            raise WorkbenchError(
                f"task {self.name!r}: metric {self.metric!r} is unknown; expected one of "
                f"{METRIC_NAMES}"
            )
        if self.answer_scope not in ANSWER_SCOPES:
            raise WorkbenchError(
                f"task {self.name!r}: answer_scope {self.answer_scope!r} is unknown; expected "
                f"one of {ANSWER_SCOPES}"
            )
        ids = [e.id for e in self.examples]
        if len(set(ids)) != len(ids):
            raise WorkbenchError(f"task {self.name!r} has duplicate example ids")
        if self.metric == "logit_diff" and any(not e.wrong for e in self.examples):
            raise WorkbenchError(
                f"task {self.name!r} uses metric logit_diff, which needs 'wrong' answers on "
                "every example"
            )

        if self.answer_scope == "candidates" and self.candidates:
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

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.examples]


def _as_str_tuple(value, what: str, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise WorkbenchError(
        f"{where}: {what!r} must be a string or a non-empty list of strings; got {value!r}"
    )


def _parse_example(obj: dict, where: str, index: int) -> Example:
    if not isinstance(obj, dict):
        raise WorkbenchError(f"{where}: each line must be a JSON object; got {type(obj).__name__}")
    for key in ("prompt", "answer"):
        if key not in obj:
            raise WorkbenchError(f"{where}: missing field {key!r} (required: 'prompt', 'answer')")
    if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
        raise WorkbenchError(f"{where}: 'prompt' must be a non-empty string")
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        raise WorkbenchError(f"{where}: split {split!r} is unknown; expected one of {SPLITS}")
    roles = obj.get("roles")
    if roles is not None and not (
        isinstance(roles, list) and all(isinstance(r, str) for r in roles)
    ):
        raise WorkbenchError(f"{where}: 'roles' must be a list of strings")
    return Example(
        id=str(obj.get("id", index)),
        prompt=obj["prompt"],
        answers=_as_str_tuple(obj["answer"], "answer", where),
        wrong=_as_str_tuple(obj["wrong"], "wrong", where) if obj.get("wrong") else (),
        roles=tuple(roles) if roles is not None else None,
        split=split,
        group=None if obj.get("group") is None else str(obj["group"]),
    )


def _assign_splits(examples: list[Example], seed: int, heldout_fraction: float) -> list[Example]:
    missing = [i for i, e in enumerate(examples) if e.split is None]
    if not missing:
        return examples
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(missing))
    n_heldout = int(round(heldout_fraction * len(missing)))
    out = list(examples)
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


def load_task(
    name_or_path: str | os.PathLike, seed: int = 0, heldout_fraction: float = 0.5
) -> Task:
    """Load a task from `tasks/<name>.jsonl` or a JSONL path.

    Args:
        name_or_path: a task name in `tasks/` or the path of a task file.
        seed: seeds the split of examples that carry no `split` field.
        heldout_fraction: the fraction of such examples put in the held-out split.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise WorkbenchError(f"heldout_fraction must be in (0, 1); got {heldout_fraction}")
    path = resolve_task_path(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise WorkbenchError(
            f"task file {str(path)!r} is not UTF-8 text (byte {e.start}: {e.reason}); save it "
            "as UTF-8 JSON lines"
        ) from None
    lines = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise WorkbenchError(f"task file {str(path)!r} is empty; expected JSONL examples")
    header: dict = {}
    examples = []
    for lineno, line in lines:
        where = f"{path.name} line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise WorkbenchError(f"{where} is not valid JSON: {e.msg}") from None
        if isinstance(obj, dict) and "task" in obj and "prompt" not in obj:
            if examples or header:
                raise WorkbenchError(f"{where}: the task header must be the first line")
            header = obj["task"]
            if not isinstance(header, dict):
                raise WorkbenchError(f"{where}: 'task' header must be an object")
            continue
        examples.append(_parse_example(obj, where, len(examples)))
    if not examples:
        raise WorkbenchError(f"task file {str(path)!r} has a header but no examples")
    known_keys = {
        "name",
        "description",
        "metric",
        "answer_scope",
        "candidates",
        "source",
        "prepend_bos",
    }
    candidates = header.get("candidates")
    return Task(
        name=header.get("name", path.stem),
        examples=_assign_splits(examples, seed, heldout_fraction),
        metric=header.get("metric", "accuracy"),
        answer_scope=header.get("answer_scope", "vocab"),
        candidates=tuple(candidates) if candidates else None,
        description=header.get("description", ""),
        source=header.get("source", ""),
        prepend_bos=bool(header.get("prepend_bos", True)),
        meta={k: v for k, v in header.items() if k not in known_keys},
    )


@dataclass
class TaskBatch:
    """A task encoded for one model: right-padded tokens and answer ids, on the model's device.

    Attributes:
        tokens: `[batch, pos]` prompt tokens, right-padded with the pad id.
        lengths: the real length of each prompt; the answer is predicted at `lengths - 1`.
        answer_ids: `[batch, max_answers]` acceptable answer ids, padded with -1.
        wrong_ids: `[batch, max_wrong]` wrong answer ids, padded with -1 (width 0 if none).
        candidate_ids: `[batch, max_candidates]` ids the argmax is taken over (padded with
            -1), or None for the whole vocabulary.
        str_tokens: the prompt tokens as strings (BOS included), for tables and plots.
        roles: per example, the role of every position (BOS is `"bos"`), or None.
    """

    task: Task
    tokens: Int[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    answer_ids: Int[Tensor, "batch n_answers"]
    wrong_ids: Int[Tensor, "batch n_wrong"]
    candidate_ids: Int[Tensor, "batch n_candidates"] | None
    str_tokens: list[list[str]]
    roles: list[list[str]] | None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def answer_pos(self) -> Int[Tensor, " batch"]:
        return self.lengths - 1

    def rows(self, index: Tensor | slice) -> "TaskBatch":
        """The sub-batch of some rows (same padding width)."""
        if isinstance(index, slice):
            idx = list(range(len(self)))[index]
        else:
            idx = [int(i) for i in index]
        sel = torch.tensor(idx, device=self.tokens.device, dtype=torch.long)
        return TaskBatch(
            task=replace(self.task, examples=[self.task.examples[i] for i in idx]),
            tokens=self.tokens[sel],
            lengths=self.lengths[sel],
            answer_ids=self.answer_ids[sel],
            wrong_ids=self.wrong_ids[sel],
            candidate_ids=None if self.candidate_ids is None else self.candidate_ids[sel],
            str_tokens=[self.str_tokens[i] for i in idx],
            roles=None if self.roles is None else [self.roles[i] for i in idx],
        )


def _single_token(tok, text: str, example: Example, what: str) -> int:
    ids = tok.encode(text)
    if len(ids) != 1:
        pieces = tok.str_tokens(ids)
        raise WorkbenchError(
            f"example {example.id!r}: {what} {text!r} is {len(ids)} tokens {pieces} for this "
            "model's tokenizer; a single-token answer is needed (pick another answer or model)"
        )
    return ids[0]


def _pad(rows: list[list[int]], value: int, device) -> Tensor:
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out.to(device)


def encode_task(model, task: Task, split: str | None = None) -> TaskBatch:
    """Tokenize a task for `model`, checking answers are single tokens and prompts fit.

    Raises:
        WorkbenchError: naming the example, for a multi-token answer or an over-long prompt.
    """
    task = task.subset(split)
    tok = get_tokenizer(model)
    device = model.cfg.device
    n_ctx = model.cfg.n_ctx
    prompts, answers, wrongs, cands, roles = [], [], [], [], []
    shared_cands = None
    if task.answer_scope == "candidates" and task.candidates:
        shared_cands = [
            _single_token(tok, c, task.examples[0], "candidate") for c in task.candidates
        ]
    for ex in task.examples:
        ids = tok.encode(ex.prompt, prepend_bos=task.prepend_bos)
        if len(ids) > n_ctx:
            raise WorkbenchError(
                f"example {ex.id!r}: the prompt is {len(ids)} tokens but the model's context "
                f"(n_ctx) is {n_ctx}"
            )
        prompts.append(ids)
        answers.append([_single_token(tok, a, ex, "answer") for a in ex.answers])
        wrongs.append([_single_token(tok, w, ex, "wrong answer") for w in ex.wrong])
        if task.answer_scope == "candidates":
            cands.append(
                shared_cands
                if shared_cands is not None
                else sorted(set(answers[-1]) | set(wrongs[-1]))
            )
        if ex.roles is not None:
            n_prompt = len(ids) - (1 if task.prepend_bos else 0)
            if len(ex.roles) != n_prompt:
                raise WorkbenchError(
                    f"example {ex.id!r}: {len(ex.roles)} roles for {n_prompt} prompt tokens"
                )
            roles.append((["bos"] if task.prepend_bos else []) + list(ex.roles))
    pad_id = tok.pad_id
    return TaskBatch(
        task=task,
        tokens=_pad(prompts, pad_id, device),
        lengths=torch.tensor([len(p) for p in prompts], dtype=torch.long, device=device),
        answer_ids=_pad(answers, -1, device),
        wrong_ids=_pad(wrongs, -1, device)
        if any(wrongs)
        else torch.empty(len(prompts), 0, dtype=torch.long, device=device),
        candidate_ids=_pad(cands, -1, device) if task.answer_scope == "candidates" else None,
        str_tokens=[tok.str_tokens(p) for p in prompts],
        roles=roles if len(roles) == len(prompts) else None,
    )
