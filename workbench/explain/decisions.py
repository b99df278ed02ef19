"""The decisions of a generation task: which generated tokens write the extracted answer.

A generation task's answer is not one next token after the prompt: the model writes a
continuation greedily, and the task's extractor reads the answer from a part of it. The tokens
that decide the answer are the generated tokens whose characters make up the extracted answer;
each is decided at the position before it, where the model reads the prompt and the text
generated so far. `answer_span` finds the extractor's match in the generated text (the regex's
selected group, the first line, or the whole text, stripped as `exact_match` strips it),
`token_offsets` the characters each generated token wrote (its end in the decoding of the ids
up to it, the decoding `Generation.texts` uses), and `decision_steps` the tokens that wrote
the answer: all of them, or only the first (`POSITIONS`); an example whose extractor finds no
answer keeps its first generated token, marked `in_answer = False`.

`decision_batch` turns each decision into one row of a next-token `TaskBatch`: the prompt plus
the generated prefix before the token, its answer the generated token, so every angle of
`workbench.explain` (`capture`, `attribute`, the attention, DLA, OV/QK and removal tables)
reads it at its last position, as it reads a prompt's answer position. Its key roles
(`decision_roles`): `bos`, the task's labels where it has them, else `few-shot` (the prompt up
to its last blank line, lm-eval's default few-shot delimiter `"\\n\\n"`) and `question` (the
tokens that start after it; `prompt` where there is no blank line), and `generated` (the
tokens the model wrote before the decision).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from os.path import commonprefix
from typing import Literal

import torch

from workbench.errors import WorkbenchError
from workbench.generation.decode import text_decoder
from workbench.generation.extract import EXTRACTORS, RegexExtractor, get_extractor
from workbench.hooked import HookedModel
from workbench.tasks.encoding import TaskBatch
from workbench.tasks.task import Example, Task
from workbench.tasks.tokenizer import get_tokenizer

DECISION_INDEX = ("step", "query_pos", "decided")
FEWSHOT_DELIMITER = "\n\n"  # lm-eval's default `fewshot_delimiter`
# which answer tokens are decisions: every token of the extracted answer, or the first
POSITIONS = ("answer", "first")
Positions = Literal["answer", "first"]


def _strip(text: str, start: int, end: int) -> tuple[int, int] | None:
    """`(start, end)` without surrounding whitespace (`exact_match` strips it), None if empty."""
    piece = text[start:end]
    start += len(piece) - len(piece.lstrip())
    end -= len(piece) - len(piece.rstrip())
    return (start, end) if end > start else None


def _whole_span(text: str) -> tuple[int, int] | None:
    return _strip(text, 0, len(text))


def _first_line_span(text: str) -> tuple[int, int] | None:
    start = len(text) - len(text.lstrip())
    end = text.find("\n", start)
    return _strip(text, start, len(text) if end < 0 else end)


def _regex_span(extractor: RegexExtractor, text: str) -> tuple[int, int] | None:
    """The selected match's span as `RegexExtractor` selects it (its first non-empty group
    where the pattern has several)."""
    matches = list(re.finditer(extractor.regex, text))
    if not -len(matches) <= extractor.group_select < len(matches):
        return None
    m = matches[extractor.group_select]
    if m.re.groups == 0:
        return _strip(text, *m.span())
    if m.re.groups == 1:
        return _strip(text, *m.span(1))
    group = next((g for g in range(1, m.re.groups + 1) if m.group(g)), None)
    return None if group is None else _strip(text, *m.span(group))


_SPANS = {EXTRACTORS["none"]: _whole_span, EXTRACTORS["first_line"]: _first_line_span}


def answer_span(extractor, text: str) -> tuple[int, int] | None:
    """Where in `text` the answer that `extractor` (a task's `generation.extractor`: a name in
    `EXTRACTORS` or a regex spec) extracts is, as character offsets, stripped of whitespace;
    None when it extracts nothing (its fallback) or only whitespace. `text[start:end]` is the
    extracted answer, stripped (tested on every extractor)."""
    extractor = get_extractor(extractor)
    if isinstance(extractor, RegexExtractor):
        return _regex_span(extractor, text)
    return _SPANS[extractor](text)


def token_offsets(decode, ids: list[int]) -> list[tuple[int, int]]:
    """Each token's `(start, end)` characters in `decode(ids)`: token `k` ends where the
    decoding of `ids[:k + 1]` stops agreeing with the whole (a token that completes no
    character, such as the first byte of a multi-byte one, is empty)."""
    full = decode(ids)
    ends = [len(commonprefix([decode(ids[: k + 1]), full])) for k in range(len(ids))]
    starts = [0, *ends[:-1]]
    return list(zip(starts, ends, strict=True))


def decision_steps(offsets: list[tuple[int, int]], span: tuple[int, int] | None,
                   positions: Positions) -> tuple[list[int], bool]:
    """The generated tokens (their steps) that write the characters `span`, and whether there
    was an answer; no answer: the first generated token, False."""
    if span is None or not offsets:
        return [0], False
    s, e = span
    steps = [k for k, (a, b) in enumerate(offsets) if a < e and (b > s or (a == b and a >= s))]
    if not steps:
        return [0], False
    return (steps[:1] if positions == "first" else steps), True


def decision_roles(batch: TaskBatch, i: int, decode, prompt_len: int, n: int) -> list[str]:
    """The role of each of the `n` positions of example `i`'s decision row (module docstring):
    a prompt token is `question` when it starts after the prompt's last blank line."""
    if batch.roles is not None:
        return list(batch.roles[i][:prompt_len]) + ["generated"] * (n - prompt_len)
    ids = batch.tokens[i, :prompt_len].tolist()
    first = 1 if batch.prepend_bos else 0
    text = decode(ids[first:])
    cut = text.rfind(FEWSHOT_DELIMITER)
    roles = ["bos"] * first
    start = 0  # where the token's characters start in `text`
    for k in range(first, prompt_len):
        if cut < 0:
            roles.append("prompt")
        else:
            roles.append("few-shot" if start < cut + len(FEWSHOT_DELIMITER) else "question")
            start = len(commonprefix([decode(ids[first : k + 1]), text]))
    return roles + ["generated"] * (n - prompt_len)


@dataclass
class Decisions:
    """The decision rows of a batch (one row per decided token) and what they came from."""

    batch: TaskBatch  # next-token rows: prompt + generated prefix; answer = the generated token
    example: list[int]  # per row, its example's index in the source batch
    steps: list[int]
    in_answer: list[bool]
    roles: list[list[str]]
    ids: list[str]  # per row, its example's id
    decided: list[str]  # per row, the generated token's text
    source: list[str] = field(default_factory=list)  # per row, where its comparison came from


def decision_batch(model: HookedModel, batch: TaskBatch, tokens: list[list[int]], texts: list[str],
                   positions: Positions = "answer") -> Decisions:
    """One next-token row per decision of each example (module docstring), from the clean
    generations `tokens` (ids per example) and their `texts`."""
    if positions not in POSITIONS:
        raise WorkbenchError(f"positions must be one of {list(POSITIONS)}; got {positions!r}")
    decode, tok = text_decoder(model), get_tokenizer(model)
    extractor = batch.task.generation.extractor
    prompts = batch.prompts()
    rows: list[tuple[int, int, bool]] = []
    for i, (ids, text) in enumerate(zip(tokens, texts, strict=True)):
        steps, found = decision_steps(token_offsets(decode, ids), answer_span(extractor, text),
                                      positions)
        rows += [(i, k, found) for k in steps]
    seqs = [prompts[i].tolist() + tokens[i][:k] for i, k, _ in rows]
    width = max(len(s) for s in seqs)
    x = torch.full((len(seqs), width), tok.pad_id, dtype=torch.long)  # right-padded, as
    # `encode_task` pads: causal attention keeps the pads from every position read
    for r, s in enumerate(seqs):
        x[r, : len(s)] = torch.tensor(s, dtype=torch.long)
    examples = batch.task.examples
    task = Task(name=f"{batch.task.name}:decisions", examples=[
        Example(id=f"{examples[i].id}@{k}", prompt=examples[i].prompt,
                answers=(str(tokens[i][k]),), split=examples[i].split, group=examples[i].group)
        for i, k, _ in rows])
    device = batch.tokens.device
    out = TaskBatch(
        task=task, tokens=x.to(device),
        lengths=torch.tensor([len(s) for s in seqs], device=device),
        answer_ids=torch.tensor([[tokens[i][k]] for i, k, _ in rows], device=device),
        wrong_ids=torch.zeros((len(rows), 0), dtype=torch.long, device=device),
        candidate_ids=None,
        str_tokens=[batch.str_tokens[i] + tok.str_tokens(tokens[i][:k]) for i, k, _ in rows],
        roles=None, prepend_bos=batch.prepend_bos)
    roles = [decision_roles(batch, i, decode, len(prompts[i]), len(s))
             for (i, _, _), s in zip(rows, seqs, strict=True)]
    return Decisions(out, [i for i, _, _ in rows], [k for _, k, _ in rows],
                     [f for _, _, f in rows], roles, [examples[i].id for i, _, _ in rows],
                     tok.str_tokens([tokens[i][k] for i, k, _ in rows]))
