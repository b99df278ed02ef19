"""Fitting a task to the tokenizer of the model it runs on, so that it measures the same thing.

A hub task is written once, in text, but each model family cuts text into tokens its own way.
An IOI name or a capital that is one GPT-2 token can be two SmolLM2 tokens (" Kyle",
" Riyadh"); GPT-2 writes " 1732" as " 17" + "32", SmolLM2 and Llama-2 digit by digit, Llama-3
as "173" + "2". A task header names one construction from `FITS` (`per_tokenizer`); when the
task is encoded for a model, the construction rewrites it for that model's tokenizer, and
leaves a task the tokenizer already fits exactly as it is (so GPT-2 and the project's own
models see the committed examples unchanged). Every construction is deterministic: it depends
only on the task and the tokenizer.

- `drop_unfit`: keep the examples this tokenizer can write as the task needs (single-token
  answers, clean continuations, counterfactuals of the same length, checks passed). A task
  split by group loses whole groups, so a kept group is never half of a fact; the splits stay
  the file's. Too few kept examples in a split is an error naming the first refusal.
- `greater_than` (Hanna et al.): where years are not century + two-digit tokens, the end year
  is scored by its decade, the first token that depends on it: "...to the year 17" -> "3"
  under a digit-by-digit tokenizer, "...to the year " -> "173" under Llama-3. Later decades are
  the answers, earlier ones the wrong answers; the start year's own decade (it holds years on
  both sides) is left out of both, and of the candidates. Start years in decade 0 or 9 have
  no earlier or no later decade and are dropped.
- `digits`: a number answer that a tokenizer writes as a lone space token then digits
  (SmolLM2, Llama-2: " 68" = " " + "6" + "8") gets the space moved into the prompt, and is
  scored as a multi-token answer when its digits are several tokens.

A fitted prompt may end with a space (`digits`: "23 + 45 = " -> "68"; `greater_than` on
Llama-3: "...to the year " -> "173"), which a task file may not (`workbench.tasks.format`): a
construction does so only where this tokenizer writes that space as a token of its own before
the answer in the text prompt + answer too, so the boundary rule (`workbench.tasks.ids`)
still holds, and it is checked again when the fitted task is encoded.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from workbench.errors import WorkbenchError
from workbench.tasks.format import MIN_SPLIT_EXAMPLES, SPLITS
from workbench.tasks.ids import encode_example
from workbench.tasks.task import Example, Task

# A fitted task keeps at least this many examples in each split it has.
MIN_FIT_EXAMPLES = MIN_SPLIT_EXAMPLES

Fit = Callable[[Task, object, int], tuple[Task, dict[str, str]]]


def _refusals(task: Task, tok, n_ctx: int) -> dict[str, str]:
    """Example id -> the error encoding it for this tokenizer raises (none when it fits)."""
    out, alone = {}, {}
    for ex in task.examples:
        try:
            encode_example(tok, task, ex, n_ctx, alone)
        except WorkbenchError as e:
            out[ex.id] = str(e)
    return out


def _keep(task: Task, examples: list[Example], dropped: dict[str, str], **changes) -> Task:
    """The task with `examples`, or an error when a split keeps fewer than MIN_FIT_EXAMPLES."""
    for split in SPLITS:
        n_before = sum(e.split == split for e in task.examples)
        n_after = sum(e.split == split for e in examples)
        if n_before and n_after < min(MIN_FIT_EXAMPLES, n_before):
            first = next(iter(dropped.values()), "")
            raise WorkbenchError(
                f"task {task.name!r}: only {n_after} of {n_before} {split} examples fit this "
                f"model's tokenizer (at least {MIN_FIT_EXAMPLES} needed); first refusal: {first}"
            )
    return replace(task, examples=examples, per_tokenizer=None, **changes)


def fit_drop_unfit(task: Task, tok, n_ctx: int) -> tuple[Task, dict[str, str]]:
    """Keep the examples (whole groups, for a task split by group) that this tokenizer fits."""
    refused = _refusals(task, tok, n_ctx)
    if not refused:
        return replace(task, per_tokenizer=None), {}
    dropped = dict(refused)
    if task.split_by == "group":
        bad = {e.group for e in task.examples if e.id in refused}
        for e in task.examples:
            if e.group in bad and e.id not in dropped:
                dropped[e.id] = f"example {e.id!r}: its group {e.group!r} has an unfit example"
    kept = [e for e in task.examples if e.id not in dropped]
    return _keep(task, kept, dropped), dropped


# "...from the year 1732 to the year 17": base (up to "to the year"), century, start decade.
_GT_PROMPT = re.compile(
    r"(?P<base>.*from the year (?P<cc>\d\d)(?P<t>\d)\d to the year) (?P=cc)\Z", re.DOTALL
)


# The end years' last digits tried when checking that a token depends on the decade alone.
_UNITS = (0, 1, 5, 9)


def _decade_tokens(tok, base: str, cc: str, cut: int) -> list[str] | None:
    """The decade answer texts for the prompt `base + " " + cc` cut after `cut` characters
    of " CC", when the next token then depends on the decade alone: the same token for the
    end years CCD0, CCD1, CCD5, CCD9 of each decade, ten distinct tokens for the ten decades,
    and each decade's text one token in context. Else None."""
    year = f" {cc}"
    prompt = base + year[:cut]
    prompt_ids = tok.encode(prompt)
    texts = [f"{year}{d}{u}"[cut:] for d in range(10) for u in _UNITS]
    conts = tok.continuation(prompt, prompt_ids, texts)
    if any(c is None or not c for c in conts):
        return None
    k = len(_UNITS)
    first = [[conts[k * d + j][0] for j in range(k)] for d in range(10)]
    if any(len(set(row)) != 1 for row in first) or len({row[0] for row in first}) != 10:
        return None
    decades = [f"{year}{d}"[cut:] for d in range(10)]
    alone = tok.continuation(prompt, prompt_ids, decades)
    if any(c != [row[0]] for c, row in zip(alone, first, strict=True)):
        return None
    return decades


def fit_greater_than(task: Task, tok, n_ctx: int) -> tuple[Task, dict[str, str]]:
    """Greater-than as written where the tokenizer fits it, else by the end year's decade."""
    if not _refusals(task, tok, n_ctx):
        return replace(task, per_tokenizer=None), {}
    examples, dropped = [], {}
    for ex in task.examples:
        m = _GT_PROMPT.match(ex.prompt)
        c = _GT_PROMPT.match(ex.counterfactual) if ex.counterfactual is not None else None
        if m is None or (ex.counterfactual is not None and c is None):
            raise WorkbenchError(
                f"example {ex.id!r}: per_tokenizer 'greater_than' needs prompts (and "
                "counterfactuals) ending '... from the year CCYY to the year CC'; got "
                f"{ex.prompt[-50:]!r}"
            )
        t = int(m["t"])
        if t in (0, 9):
            dropped[ex.id] = f"example {ex.id!r}: start decade {t} has no earlier or later decade"
            continue
        for cut in (3, 2, 1):  # the longest prompt first: "...year 17", "...year 1", "...year "
            decades = _decade_tokens(tok, m["base"], m["cc"], cut)
            if decades is not None:
                break
        else:
            raise WorkbenchError(
                f"example {ex.id!r}: this tokenizer writes the year {m['cc']}YY neither as "
                "century + two digits nor with a token that depends on the decade alone; "
                "greater-than cannot be asked of it"
            )
        year = f" {m['cc']}"[:cut]
        examples.append(
            replace(
                ex,
                prompt=m["base"] + year,
                answers=tuple(decades[t + 1 :]),
                wrong=tuple(decades[:t]),
                counterfactual=None if c is None else c["base"] + year,
                meta={**(ex.meta or {}), "formulation": "decade", "tie": decades[t]},
            )
        )
    fitted = _keep(
        task, examples, dropped, answer_scope="candidates", candidates=None, checks=(),
        answers_in_context=True,
    )
    return fitted, dropped


def fit_digits(task: Task, tok, n_ctx: int) -> tuple[Task, dict[str, str]]:
    """Move a lone leading space token of the answers into the prompt; multi-token digits
    make the task multi-token."""
    if not _refusals(task, tok, n_ctx):
        return replace(task, per_tokenizer=None), {}
    examples, multi = [], task.answer_tokens == "multi"
    for ex in task.examples:
        texts = [*ex.answers, *ex.wrong]
        prompt_ids = tok.encode(ex.prompt)
        conts = tok.continuation(ex.prompt, prompt_ids, texts)
        lone = [
            c is not None and len(c) > 1 and not tok.str_tokens(c[:1])[0].strip()
            for c in conts
        ]
        if all(lone) and all(t[:1].isspace() for t in texts) and len({t[0] for t in texts}) == 1:
            space = texts[0][0]
            ex = replace(
                ex,
                prompt=ex.prompt + space,
                answers=tuple(a[1:] for a in ex.answers),
                wrong=tuple(w[1:] for w in ex.wrong),
                counterfactual=None if ex.counterfactual is None else ex.counterfactual + space,
            )
            prompt_ids = tok.encode(ex.prompt)
            conts = tok.continuation(ex.prompt, prompt_ids, [*ex.answers, *ex.wrong])
        multi = multi or any(c is not None and len(c) > 1 for c in conts)
        examples.append(ex)
    fitted = _keep(task, examples, {}, answer_tokens="multi" if multi else task.answer_tokens)
    return fitted, {}


FITS: dict[str, Fit] = {
    "drop_unfit": fit_drop_unfit,
    "greater_than": fit_greater_than,
    "digits": fit_digits,
}


def fit_task(task: Task, tok, n_ctx: int) -> tuple[Task, dict[str, str]]:
    """The task rewritten for this tokenizer as its `per_tokenizer` says, and the examples
    dropped (id -> reason); a task without `per_tokenizer` is returned as it is."""
    if task.per_tokenizer is None:
        return task, {}
    return FITS[task.per_tokenizer](task, tok, n_ctx)
