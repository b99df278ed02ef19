"""The task file format: its header and example fields, and the rules every record follows.

This module checks plain JSON records, one header and one example at a time, and knows
nothing of `Task` or of tokenizers: `workbench.tasks.task` builds its `Example`s and `Task` from
what `check_header` and `check_example` return, for task files and tables alike (tables are
turned into records by `workbench.tasks.builders`). `tasks/README.md` is the reference for users.

A task file is UTF-8 JSONL (a byte-order mark at the start is accepted). The first line may be
a header `{"task": {...}}`; its keys are `HEADER_KEYS` (a misspelt key is an error listing the
known ones), each of its JSON type (`"prepend_bos": "false"` is an error, not true):

- `name`, `description`, `source` (the script that generated the file): strings;
- `metric`: the one CEL improves by default, one of `workbench.tasks.task.METRIC_NAMES`;
- `answer_scope`: an `AnswerScope`, `vocab` (accuracy is the argmax over the whole vocabulary)
  or `candidates` (over `candidates`, or each example's answers and wrong answers when no list
  is given); `candidates`: a list of strings or null, only with `answer_scope: candidates`
  (with `vocab` it would be ignored, so it is an error);
- `prepend_bos`: a JSON boolean or null. Null (default): a prompt's ids are exactly its
  model's own tokenizer's (`tokenizer(prompt)`); true / false force a BOS on or off;
- `per_tokenizer`: how the task is fitted to a model's tokenizer (`workbench.tasks.fit`);
- `answer_tokens`: an `AnswerTokens`, `single` (default: every answer is one token in
  context) or `multi` (first-token metrics plus teacher-forced sequence metrics);
- `checks`: structural checks run once tokenized (`workbench.tasks.checks.CHECKS`, e.g.
  `year_split`);
- `answers_in_context`: a JSON boolean, default true; false encodes answers alone, for a task
  whose answer tokens are fixed by the task (greater-than's 100 two-digit tokens). No boundary
  rule is then checked, so pair it with a structural check of the prompt (`year_split`);
- `split_by`: a `SplitBy`, `example` (default) or `group`: examples without a `split` are
  split at random by example, or by `group` so that no group is in both splits;
- `target_delimiter`: a string, default `" "` (lm-eval's): what a multiple-choice task puts
  between the prompt and each choice;
- `meta`: a free-form object.

Every other line is one example (`EXAMPLE_KEYS`; only `prompt` and `answer` are required, or
`prompt`, `choices` and `gold` for a multiple-choice example):

    {"id": "ex-17", "prompt": "...", "answer": " Mary" | [" Mary", ...],
     "wrong": [" John"], "roles": ["subject", ...], "split": "select" | "heldout",
     "group": "unmarked", "counterfactual": "...", "meta": {...}}

A multiple-choice example has `"choices": ["A", "B", ...]` (at least two distinct non-empty
strings, without the delimiter) and `"gold": 0` (the right choice's index) instead of `answer`
and `wrong`; its answer is `target_delimiter + choices[gold]`, its wrong answers the other
choices after the delimiter, so the boundary rule and the in-context tokenization apply to
each choice as to any answer.

`roles` label each prompt token (BOS excluded); `counterfactual` is a prompt of the same
token length whose run supplies resample ablation's activations.

The rules checked here, each failure one error line naming the line (or table row), the
example id and the fix:

- `prompt` is a non-empty string that never ends with whitespace, and so is `counterfactual`
  (it stands in for the prompt). The answer is predicted after the prompt's last token and
  carries its own leading space: a byte-level BPE tokenizer (GPT-2, SmolLM2) makes a trailing
  space a token of its own, so "Counting: eight, nine, ten, " + " eleven" would be scored
  after a lone " " token, a context the model hardly ever saw. The boundary rule checked once
  a tokenizer is known (`workbench.tasks.ids`) cannot see this: the prompt's tokens are a
  prefix of the text's, and " eleven" is one token after them;
- `answer` and `wrong` are non-empty strings or non-empty lists of them; no text is listed
  twice (it would count twice in a `logsumexp`) and none is both an answer and a wrong answer;
- `split` is `select` or `heldout`; `roles` is a list of strings; `meta` is an object;
- the header's keys and types as above, and `candidates` only with `answer_scope: candidates`.

`check_kind` (run by `Task`) keeps a task of one kind, next-token or multiple choice, with
that kind's metric. `workbench.tasks.task` adds the rules that span examples (unique ids,
named on a duplicate; the wrong answers a metric needs; groups and splits; answers among the
candidates) and the option values (through `workbench.options.choose`).
"""

from __future__ import annotations

from workbench.errors import WorkbenchError
from workbench.generation.settings import GenerationSettings
from workbench.metric_records import GENERATION, MULTIPLE_CHOICE, NEXT_TOKEN, metric_names
from workbench.options import AnswerScope

SPLITS = ("select", "heldout")
# Examples a split (or a side task) should hold at the least: below it an interval rests on
# too few to mean anything, and a p-value cannot be small (a one-sided sign-flip p-value of
# n examples is at least 2^-n). A hub task fitted to a tokenizer that keeps fewer is refused
# (`workbench.tasks.fit`); a run on a smaller task the user gave warns (`small_splits`).
MIN_SPLIT_EXAMPLES = 10
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
    "target_delimiter": (str,),
    "generation": (dict,),
    "meta": (dict,),
}
EXAMPLE_KEYS = (
    "id", "prompt", "answer", "wrong", "choices", "gold", "target", "roles", "split", "group",
    "counterfactual", "meta",
)  # fmt: skip
# The example fields that hold a list (a table cell may be split into one).
LIST_FIELDS = ("answer", "wrong", "choices", "roles")
# lm-eval's default `target_delimiter`: what goes between a prompt and each of its choices.
DEFAULT_DELIMITER = " "


def check_header(header, where: str) -> dict:
    """A task header, checked: known keys only, each of its documented JSON type, and
    `candidates` only with `answer_scope: candidates`."""
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
    if "generation" in header:  # checked here, so that an error names the file's line
        GenerationSettings.from_header(header["generation"], where)
    return header


def check_example(obj, where: str, index: int, delimiter: str = DEFAULT_DELIMITER,
                  kind: str | None = None) -> dict:
    """One example record (a line of a task file, or a table row), checked against the rules
    above; an error names `where`, the example's id and the fix.

    Args:
        delimiter: the task's `target_delimiter`, which a multiple-choice example's answer
            and wrong answers start with, and a generation example's answer.
        kind: the task's kind when known (its header has `generation`, or an earlier
            example set it): an example of another kind is refused naming both.

    Returns:
        The fields of a `workbench.tasks.task.Example`: `id` (the record's, as a string, or
        `index`), `prompt`, `answers` and `wrong` (tuples), `choices` and `gold` (None unless
        the record has choices; then `answers` is the gold choice and `wrong` the others,
        each after `delimiter`), `roles` (a tuple or None), `split`, `group` (a string or
        None), `counterfactual`, `meta`, `target` (a generation example's, else None; then
        `answers` is `delimiter + target`).
    """
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
    if kind is not None and record_kind(obj) != kind:
        if kind == GENERATION and not {"answer", "choices", "gold"} & set(obj):
            raise WorkbenchError(f"{where}: missing field 'target' (a generation task's "
                                 "examples each have 'prompt' and 'target')")
        raise WorkbenchError(
            f"{where}: this example has {_KIND_FIELDS[record_kind(obj)]} but the task is "
            f"{kind} ({_KIND_FIELDS[kind]}); a task's examples are all of one kind")
    choices, gold, target = None, None, None
    if "choices" in obj or "gold" in obj:
        choices, gold = check_choices(obj, where)
    elif "target" in obj:
        target = check_target(obj, where)
    for key in ("prompt",) if choices or target else ("prompt", "answer"):
        if key not in obj:
            raise WorkbenchError(f"{where}: missing field {key!r} (required: 'prompt', and "
                                 "'answer', 'choices' with 'gold', or 'target')")
    prompt = obj["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise WorkbenchError(f"{where}: 'prompt' must be a non-empty string; got {prompt!r}")
    if target is not None:  # scored teacher-forced as one answer after the delimiter
        answers, wrong = (delimiter + target,), ()
    elif choices:
        answers = (delimiter + choices[gold],)
        wrong = tuple(delimiter + c for i, c in enumerate(choices) if i != gold)
    else:
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
    return {
        "id": ex_id,
        "prompt": prompt,
        "answers": answers,
        "wrong": wrong,
        "choices": choices,
        "gold": gold,
        "target": target,
        "roles": tuple(roles) if roles is not None else None,
        "split": split,
        "group": None if obj.get("group") is None else str(obj["group"]),
        "counterfactual": counterfactual,
        "meta": meta,
    }


_KIND_FIELDS = {NEXT_TOKEN: "'answer' (+ 'wrong')", MULTIPLE_CHOICE: "'choices' + 'gold'",
                GENERATION: "'target'"}


def record_kind(obj: dict) -> str:
    """The kind of task an example record belongs to, from its fields: `MULTIPLE_CHOICE`
    with `choices` or `gold`, `GENERATION` with `target`, else `NEXT_TOKEN`."""
    if "choices" in obj or "gold" in obj:
        return MULTIPLE_CHOICE
    return GENERATION if "target" in obj else NEXT_TOKEN


def check_target(obj: dict, where: str) -> str:
    """A generation record's `target`: a non-empty string, the answer as the extractor
    returns it, with neither `answer`, `wrong` nor `choices`."""
    mixed = [k for k in ("answer", "wrong") if k in obj]
    if mixed:
        raise WorkbenchError(f"{where}: a generation example has 'prompt' and 'target', not "
                             f"{mixed}; give either target or answer (+ wrong)")
    target = obj["target"]
    if not isinstance(target, str) or not target.strip():
        raise WorkbenchError(f"{where}: 'target' must be a non-empty string (the answer as the "
                             f"extractor returns it, e.g. \"72\"); got {target!r}")
    return target


def check_choices(obj: dict, where: str) -> tuple[tuple[str, ...], int]:
    """A multiple-choice record's `choices` (at least two distinct non-empty strings, without
    the delimiter) and `gold` (an int indexing them), with neither `answer` nor `wrong`."""
    mixed = [k for k in ("answer", "wrong", "target") if k in obj]
    if mixed:
        raise WorkbenchError(
            f"{where}: a multiple-choice example has 'choices' and 'gold', not {mixed}; give "
            "either choices + gold or answer (+ wrong)")
    for key in ("choices", "gold"):
        if key not in obj:
            raise WorkbenchError(f"{where}: a multiple-choice example needs both 'choices' and "
                                 f"'gold'; {key!r} is missing")
    choices, gold = obj["choices"], obj["gold"]
    if not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
        raise WorkbenchError(f"{where}: 'choices' must be a list of strings; got {choices!r}")
    if len(choices) < 2:
        raise WorkbenchError(f"{where}: 'choices' lists {len(choices)} choice(s) {choices!r}; a "
                             "multiple-choice example needs at least 2")
    if not all(choices):
        raise WorkbenchError(f"{where}: choice {choices.index('')} is empty; every choice is a "
                             "non-empty string (the delimiter goes in target_delimiter)")
    repeated = [c for i, c in enumerate(choices) if c in choices[:i]]
    if repeated:
        raise WorkbenchError(f"{where}: 'choices' lists {repeated[0]!r} twice; list it once")
    if type(gold) is not int or not 0 <= gold < len(choices):
        raise WorkbenchError(f"{where}: 'gold' must be an int index into the {len(choices)} "
                             f"choices (0 to {len(choices) - 1}); got {gold!r}")
    return tuple(choices), gold


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


def example_kind(example) -> str:
    """The kind of task a `workbench.tasks.task.Example` belongs to (`record_kind`)."""
    if example.choices is not None:
        return MULTIPLE_CHOICE
    return GENERATION if getattr(example, "target", None) is not None else NEXT_TOKEN


def check_kind(task) -> None:
    """A `workbench.tasks.task.Task` (checked on its fields) is of one kind in every example
    (next-token, multiple choice or generation), and its metric is one of its kind's
    (`Metric.kinds`). A multiple-choice or generation task scores every token of each choice
    or target (`answer_tokens` "multi") and has a `target_delimiter`; a generation task has
    its `GenerationSettings` (defaults when none are given), and no other task has any."""
    kinds = [example_kind(e) for e in task.examples]
    kind = kinds[0]
    other = [e.id for e, k in zip(task.examples, kinds, strict=True) if k != kind]
    if other:
        raise WorkbenchError(
            f"task {task.name!r}: examples {other[:5]} are not {kind} examples "
            f"({_KIND_FIELDS[kind]}) as the first is; a task's examples are all of one kind")
    if task.metric not in metric_names(kind):
        raise WorkbenchError(
            f"task {task.name!r}: metric {task.metric!r} is not a {kind} metric; expected one "
            f"of {list(metric_names(kind))}")
    if kind != GENERATION and task.generation is not None:
        raise WorkbenchError(f"task {task.name!r}: generation settings are for generation "
                             "examples (prompt + target); drop them, or give targets")
    if kind == NEXT_TOKEN:
        if task.target_delimiter is not None:
            raise WorkbenchError(f"task {task.name!r}: target_delimiter is for multiple-choice "
                                 "and generation examples; drop it, or give choices or targets")
        return
    unused = [f"{k} {v!r}" for k, v, default in (
        ("answer_scope", task.answer_scope, "vocab"), ("per_tokenizer", task.per_tokenizer, None),
        ("answers_in_context", task.answers_in_context, True)) if v != default]
    if unused:
        scored = ("each choice is scored over all its tokens" if kind == MULTIPLE_CHOICE else
                  "the target is generated, and scored teacher-forced over all its tokens")
        raise WorkbenchError(
            f"task {task.name!r}: {', '.join(unused)} do not apply to {kind} examples "
            f"({scored}, after the prompt); drop them")
    task.answer_tokens = "multi"
    if task.target_delimiter is None:
        task.target_delimiter = DEFAULT_DELIMITER
    if kind == GENERATION:
        task.generation = GenerationSettings.from_header(task.generation, f"task {task.name!r}")


def small_splits(counts: dict[str, int]) -> dict[str, int]:
    """The splits and side tasks of `counts` (name -> examples) holding fewer than
    `MIN_SPLIT_EXAMPLES`, in their order."""
    return {k: int(n) for k, n in counts.items() if n < MIN_SPLIT_EXAMPLES}


def small_splits_note(small: dict[str, int]) -> str:
    """What a run on the `small_splits` `small` rests on, in one sentence ("" for none)."""
    if not small:
        return ""
    held = small.get("heldout")
    listed = ", ".join(f"{k} {n}" for k, n in small.items())
    floor = (f"; with {held} held-out examples the smallest one-sided sign-flip p-value is "
             f"{2.0 ** -held:.2g}, so a set may not be significant whatever it does"
             if held is not None else "")
    return (f"fewer than {MIN_SPLIT_EXAMPLES} examples ({listed}): no interval or p-value "
            f"rests on enough examples to be trusted{floor}; give at least "
            f"{MIN_SPLIT_EXAMPLES} per split")
