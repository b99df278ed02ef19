"""One example's token ids for one tokenizer: the prompt, its answers in context, checks.

`encode_example` is what `workbench.tasks.encoding.encode_task` runs on every example, and what
`workbench.tasks.fit` runs to find the examples a tokenizer cannot write as the task needs.

The boundary rule. Answers are tokenized in context, so that the ids scored are those the
model sees when the answer follows the prompt: the text prompt + answer must be tokenized as
the prompt's tokens followed by the answer's, `tokens(prompt + answer) == tokens(prompt) +
answer_ids`, and `answer_ids` are that tail (the tokenizer's `continuation`). The rule fails
exactly when the prompt's tokens are not a prefix of the text's, where the answer's first
characters merge with the prompt's last token (Llama-3 writes "...year 17" + "32" as "173" +
"2"; GPT-2 writes "Hello wor" + "ld" as "Hello" + " world"); then no position predicts the
answer, and the example is refused by name. It holds for every answer, wrong answer and
candidate, and a single-token task needs each answer to be one such token. The word tokenizer
of the project's models separates words by whitespace, so there a continuation is its own
words whatever the prompt. The rule cannot see a prompt that ends with whitespace when the
answer brings its own space ("ten, " + " eleven" is "," + " " + " eleven" on GPT-2: a prefix,
and a one-token answer, scored after a lone space): the loader refuses such prompts
(`workbench.tasks.format`). With `answers_in_context` false the answers are encoded alone and the
rule is not checked; the task's structural `checks` guard its prompts instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import WorkbenchError
from workbench.tasks.checks import CHECKS
from workbench.tasks.task import Example, Task


def _in_context(tok, ex: Example, prompt_ids: list[int], texts: list[str]) -> dict[str, list[int]]:
    """Each text's tokens when written after the prompt, or a clear error naming the example."""
    unique = list(dict.fromkeys(texts))
    out = {}
    for text, ids in zip(unique, tok.continuation(ex.prompt, prompt_ids, unique), strict=True):
        if ids is None:
            full = tok.encode(ex.prompt + text)
            raise WorkbenchError(
                f"example {ex.id!r}: the prompt's tokens are not a prefix of the tokens of "
                f"prompt + {text!r}: prompt ends {tok.str_tokens(prompt_ids[-3:])}, prompt + "
                f"answer ends {tok.str_tokens(full[-4:])}; this tokenizer merges the answer "
                "into the prompt, so no position predicts it (rephrase the prompt or answer)"
            )
        if not ids:
            raise WorkbenchError(f"example {ex.id!r}: {text!r} adds no token after the prompt")
        out[text] = ids
    return out


def _single(ids: list[int], tok, ex: Example, text: str, what: str) -> int:
    if len(ids) != 1:
        raise WorkbenchError(
            f"example {ex.id!r}: {what} {text!r} is {len(ids)} tokens {tok.str_tokens(ids)} in "
            "context for this model's tokenizer; a single-token answer is needed (pick another "
            'answer or model, or set "answer_tokens": "multi" in the task header)'
        )
    return ids[0]


@dataclass
class EncodedExample:
    """One example tokenized for one model (see `encode_example`)."""

    ids: list[int]
    n_lead: int  # special tokens before the prompt's own (a BOS)
    answers: list[int]
    wrong: list[int]
    candidates: list[int] | None
    seqs: list[list[int]] | None
    roles: list[str] | None
    counterfactual: list[int] | None
    choices: list[list[int]] | None = None  # a multiple-choice example's, in choice order


def encode_example(
    tok, task: Task, ex: Example, n_ctx: int, alone: dict[str, list[int]] | None = None
) -> EncodedExample:
    """Tokenize one example of `task` as `encode_task` does, or raise a WorkbenchError naming
    it (`alone` caches the ids of texts encoded alone, when `answers_in_context` is false)."""
    alone = {} if alone is None else alone
    shared = list(task.candidates) if task.answer_scope == "candidates" and task.candidates else []
    body = tok.encode(ex.prompt)
    ids, n_lead = tok.encode_prompt(ex.prompt, task.prepend_bos)
    if len(ids) > n_ctx:
        raise WorkbenchError(
            f"example {ex.id!r}: the prompt is {len(ids)} tokens but the model's context "
            f"(n_ctx) is {n_ctx}"
        )
    if ex.target is not None and len(ids) + task.generation.max_new_tokens > n_ctx:
        raise WorkbenchError(
            f"example {ex.id!r}: the prompt is {len(ids)} tokens, and with max_new_tokens "
            f"{task.generation.max_new_tokens} the generation runs past the model's context "
            f"(n_ctx) of {n_ctx}; shorten the prompt or lower max_new_tokens")
    texts = [*ex.answers, *ex.wrong, *shared]
    if task.answers_in_context:
        cont = _in_context(tok, ex, body, texts)
    else:
        for t in texts:  # alone, a text's ids do not depend on the prompt: cache them
            if t not in alone:
                alone[t] = tok.encode(t)
        cont = alone
    seqs, choices = None, None
    if ex.choices is not None:  # lm-eval's continuations: whole[len(tokens(prompt)):]
        choices = [cont[task.target_delimiter + c] for c in ex.choices]
        seqs = [choices[ex.gold]]
        first, wrong = [seqs[0][0]], [c[0] for i, c in enumerate(choices) if i != ex.gold]
    elif task.answer_tokens == "multi":
        first = [cont[a][0] for a in ex.answers]
        wrong = [cont[w][0] for w in ex.wrong]
        clash = set(first) & set(wrong)
        if clash:
            raise WorkbenchError(
                f"example {ex.id!r}: an answer and a wrong answer both start with "
                f"{tok.str_tokens(sorted(clash))}; first-token metrics cannot tell them apart"
            )
        seqs = [cont[a] for a in ex.answers]
    else:
        first = [_single(cont[a], tok, ex, a, "answer") for a in ex.answers]
        wrong = [_single(cont[w], tok, ex, w, "wrong answer") for w in ex.wrong]
    cands = None
    if task.answer_scope == "candidates":
        if shared:
            cands = [_single(cont[c], tok, ex, c, "candidate") for c in shared]
        else:
            cands = sorted(set(first) | set(wrong))
    for name in task.checks:
        CHECKS[name](tok, ex, body, [cont[a] for a in ex.answers])
    roles = None
    if ex.roles is not None:
        if len(ex.roles) != len(body):
            raise WorkbenchError(
                f"example {ex.id!r}: {len(ex.roles)} roles for {len(body)} prompt tokens"
            )
        roles = ["bos"] * n_lead + list(ex.roles)
    cf = None
    if ex.counterfactual is not None:
        cf, _ = tok.encode_prompt(ex.counterfactual, task.prepend_bos)
        if len(cf) != len(ids):
            raise WorkbenchError(
                f"example {ex.id!r}: the counterfactual prompt is {len(cf)} tokens but the "
                f"prompt is {len(ids)}; resample ablation needs equal lengths"
            )
    return EncodedExample(ids, n_lead, first, wrong, cands, seqs, roles, cf, choices)


