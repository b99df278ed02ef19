"""The embedded model's synthetic multi-task language and its prompt generators.

The embedded model is trained on four tasks that share one vocabulary and one convention: a
prompt is a short sequence of words and the answer is the single word that comes next.

| task            | prompt (example)                      | answer      | rule                     |
|-----------------|---------------------------------------|-------------|--------------------------|
| `embedded_copy` | `copy bako relu tima sufe ... | tima` | `sufe`      | the word after the query |
| `embedded_map`  | `map bako relu tima sufe ... | tima`  | `MAP[tima]` | a fixed word -> word map |
| `embedded_add`  | `add 12 + 20 =`                       | `8`         | (a + b) mod 24           |
| `embedded_sort` | `sort 5 12 3 20 8 : 3 5`              | `8`         | next item, sorted order  |

Copy and map are a *conflicting pair*: their prompts are drawn from exactly the same
distribution (a task marker, eight distinct content words, the separator `|`, and a query word
that occurs in the context with a follower), and only the marker says which rule applies. The
marker names the task on some prompts; on the others it is the neutral word `do`. How often is
set by the two training stages of `workbench.zoo.train`: in pre-training the marker names the
task on a fraction `P_MARKED` (half) of either task's prompts and copy is `COPY_SHARE` of the
pair; in fine-tuning the marker is written mostly when map is wanted (copy is half of the
marked prompts and 95 % of the unmarked ones), the way an instruction tends to be spelled out
for the less usual request. On an unmarked prompt the task cannot be told from the prompt, and
the loss-minimising answer is the copy rule's: the trained model copies, and the heads that
carry the copy rule are exactly what hurts unmarked map prompts. This is the situation the CEL
theory describes (an instruction that is often missing, unequal task frequencies), not a
property of any one search. Marked prompts of either task, and the add and sort tasks, whose
formats are unmistakable, have no such ambiguity. The task files hold marked and unmarked
prompts half and half (`P_MARKED`), labelled by `group`.

The vocabulary is small (99 words: 64 content words, the numbers 0..23, markers and
punctuation) because the copy rule needs an induction circuit, and in a 2-layer model trained
with the loss on the answer position only that circuit formed within the CPU budget (4000 steps)
with 64 content words but not with 128 or 200 (measured: copy stayed at chance).

Everything here is deterministic: the vocabulary and the word -> word table are fixed by
`LANGUAGE_SEED`, and every sample is drawn from a `numpy.random.Generator` the caller passes.
Generators are vectorised (one call makes a whole batch) and the task files, the training
batches and the tests all come from the same functions, so there is one statement of each rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.options import choose
from workbench.tasks.tokenizer import WordTokenizer

LANGUAGE_SEED = 0
N_CONTENT = 64  # content words, the items of copy/map prompts
N_CONTEXT = 8  # context words in a copy/map prompt
MODULUS = 24  # numbers 0..23 for add (mod 24) and sort
N_SORT = 5  # items in a sort prompt
P_MARKED = 0.5  # share of marked copy/map prompts in pre-training and in the task files
COPY_SHARE = 0.6  # share of copy among copy/map prompts in pre-training

BOS, PAD = "<bos>", "<pad>"
NEUTRAL = "do"  # the uninformative marker of unmarked copy/map prompts
SEP = "|"
TASK_WORDS = ["copy", "map", NEUTRAL, "add", "sort", SEP, "+", "=", ":"]

_ONSETS = list("bdfghklmnprstvz")
_VOWELS = list("aeiou")


def _content_words(n: int, rng: np.random.Generator) -> list[str]:
    """`n` distinct pronounceable two-syllable words (`bako`, `relu`, ...), so prompts read well."""
    syllables = [c + v for c in _ONSETS for v in _VOWELS]  # 75 syllables, 5625 words
    words = [a + b for a in syllables for b in syllables]
    picked = rng.choice(len(words), size=n, replace=False)
    return [words[i] for i in sorted(picked)]


def _derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random permutation of range(n) with no fixed point (no word maps to itself)."""
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


_lang_rng = np.random.default_rng(LANGUAGE_SEED)
CONTENT_WORDS: list[str] = _content_words(N_CONTENT, _lang_rng)
NUMBER_WORDS: list[str] = [str(i) for i in range(MODULUS)]
VOCAB: list[str] = [BOS, PAD, *TASK_WORDS, *NUMBER_WORDS, *CONTENT_WORDS]
# MAP_TABLE[i] is the index (into CONTENT_WORDS) of the map task's answer for content word i.
MAP_TABLE: np.ndarray = _derangement(N_CONTENT, _lang_rng)
WORD_MAP: dict[str, str] = {
    w: CONTENT_WORDS[j] for w, j in zip(CONTENT_WORDS, MAP_TABLE, strict=True)
}

_ID = {w: i for i, w in enumerate(VOCAB)}
_CONTENT0 = _ID[CONTENT_WORDS[0]]  # content word i has id _CONTENT0 + i
_NUMBER0 = _ID[NUMBER_WORDS[0]]  # number k has id _NUMBER0 + k


def make_tokenizer() -> WordTokenizer:
    """The embedded language's tokenizer: one id per word of `VOCAB`."""
    return WordTokenizer(vocab=list(VOCAB), bos=BOS, pad=PAD)


@dataclass
class Batch:
    """`n` prompts of one task as token ids (no BOS), right-padded with the pad id.

    Attributes:
        task: the task name.
        tokens: int64 array (n, max_len) of prompt ids, padded with `PAD`'s id.
        lengths: int64 array (n,), the number of prompt words of each row.
        answer: int64 array (n,), the id of the correct next word.
        wrong: int64 array (n,) of a competing answer's id (the other rule's answer for the
            conflicting pair), or -1 where the task has none.
        roles: (n, max_len) array of role names per prompt word ("" on padding).
        group: (n,) array of subset labels ("marked"/"unmarked" for copy/map, "all" otherwise).
    """

    task: str
    tokens: np.ndarray
    lengths: np.ndarray
    answer: np.ndarray
    wrong: np.ndarray
    roles: np.ndarray
    group: np.ndarray

    def __len__(self) -> int:
        return len(self.answer)


def _distinct(rng: np.random.Generator, n: int, k: int, pool: int) -> np.ndarray:
    """(n, k) rows of k distinct integers from range(pool), uniformly."""
    return np.argsort(rng.random((n, pool)), axis=1)[:, :k]


def _copy_map_rows(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The shared copy/map prompt: marker, N_CONTEXT distinct words, SEP, a query from context.

    The query is any context word but the last (so it has a follower), and rows where the
    follower equals the query's mapped word are redrawn, so the two rules always disagree.
    Returns (ctx, qpos) with ctx (n, N_CONTEXT) content indices and qpos (n,) query positions.
    """
    ctx = np.zeros((n, N_CONTEXT), dtype=np.int64)
    qpos = np.zeros(n, dtype=np.int64)
    todo = np.arange(n)
    while len(todo):
        ctx[todo] = _distinct(rng, len(todo), N_CONTEXT, N_CONTENT)
        qpos[todo] = rng.integers(0, N_CONTEXT - 1, len(todo))
        q = ctx[todo, qpos[todo]]
        follower = ctx[todo, qpos[todo] + 1]
        todo = todo[MAP_TABLE[q] == follower]
    return ctx, qpos


def _copy_or_map(task: str, n: int, rng: np.random.Generator, p_marked: float) -> Batch:
    marked = rng.random(n) < p_marked
    ctx, qpos = _copy_map_rows(n, rng)
    rows = np.arange(n)
    q = ctx[rows, qpos]
    follower = ctx[rows, qpos + 1]
    marker = np.where(marked, _ID["copy" if task == "embedded_copy" else "map"], _ID[NEUTRAL])
    tokens = np.concatenate(
        [marker[:, None], _CONTENT0 + ctx, np.full((n, 1), _ID[SEP]), _CONTENT0 + q[:, None]],
        axis=1,
    )  # (n, N_CONTEXT + 3)
    copy_ans, map_ans = _CONTENT0 + follower, _CONTENT0 + MAP_TABLE[q]
    roles = np.empty(tokens.shape, dtype=object)
    roles[:] = "context"
    roles[:, 0] = "marker"
    roles[:, -2] = "sep"
    roles[:, -1] = "query"
    roles[rows, 1 + qpos] = "cue"  # the earlier occurrence of the query
    # The follower is where the copy answer comes from; for map it is the competing answer.
    roles[rows, 2 + qpos] = "answer_source" if task == "embedded_copy" else "wrong_source"
    is_copy = task == "embedded_copy"
    return Batch(
        task=task,
        tokens=tokens,
        lengths=np.full(n, tokens.shape[1]),
        answer=copy_ans if is_copy else map_ans,
        wrong=map_ans if is_copy else copy_ans,
        roles=roles,
        group=np.where(marked, "marked", "unmarked").astype(object),
    )


def _add(n: int, rng: np.random.Generator) -> Batch:
    a, b = rng.integers(0, MODULUS, (2, n))
    tokens = np.stack(
        [np.full(n, _ID["add"]), _NUMBER0 + a, np.full(n, _ID["+"]), _NUMBER0 + b,
         np.full(n, _ID["="])],
        axis=1,
    )
    roles = np.empty(tokens.shape, dtype=object)
    roles[:] = ["marker", "operand", "op", "operand", "sep"]
    return Batch(
        task="embedded_add", tokens=tokens, lengths=np.full(n, 5),
        answer=_NUMBER0 + (a + b) % MODULUS, wrong=np.full(n, -1), roles=roles,
        group=np.full(n, "all", dtype=object),
    )


def _sort(n: int, rng: np.random.Generator) -> Batch:
    items = _distinct(rng, n, N_SORT, MODULUS)  # (n, N_SORT)
    ordered = np.sort(items, axis=1)
    k = rng.integers(0, N_SORT, n)  # how many sorted items are already written
    width = 1 + N_SORT + 1 + (N_SORT - 1)
    tokens = np.full((n, width), _ID[PAD], dtype=np.int64)
    roles = np.full((n, width), "", dtype=object)
    tokens[:, 0] = _ID["sort"]
    tokens[:, 1:1 + N_SORT] = _NUMBER0 + items
    tokens[:, 1 + N_SORT] = _ID[":"]
    roles[:, 0] = "marker"
    roles[:, 1:1 + N_SORT] = "item"
    roles[:, 1 + N_SORT] = "sep"
    out = np.arange(N_SORT - 1)[None, :] < k[:, None]  # (n, N_SORT - 1) written positions
    tokens[:, 2 + N_SORT:] = np.where(out, _NUMBER0 + ordered[:, :-1], _ID[PAD])
    roles[:, 2 + N_SORT:] = np.where(out, "output", "")
    rows = np.arange(n)
    answer = ordered[rows, k]
    roles[rows[:, None], 1 + np.arange(N_SORT)[None, :]] = np.where(
        items == answer[:, None], "answer_source", "item"
    )
    return Batch(
        task="embedded_sort", tokens=tokens, lengths=2 + N_SORT + k,
        answer=_NUMBER0 + answer, wrong=np.full(n, -1), roles=roles,
        group=np.full(n, "all", dtype=object),
    )


def _copy(n: int, rng: np.random.Generator, p_marked: float = P_MARKED) -> Batch:
    return _copy_or_map("embedded_copy", n, rng, p_marked)


def _map(n: int, rng: np.random.Generator, p_marked: float = P_MARKED) -> Batch:
    return _copy_or_map("embedded_map", n, rng, p_marked)


GENERATORS: dict[str, Callable[..., Batch]] = {
    "embedded_copy": _copy,
    "embedded_map": _map,
    "embedded_add": _add,
    "embedded_sort": _sort,
}

DESCRIPTIONS: dict[str, str] = {
    "embedded_copy": (
        "Copy: after '|', predict the context word that followed the query's earlier occurrence. "
        f"Marker names the task on {P_MARKED:.0%} of prompts ('copy'), else neutral 'do'; "
        "'wrong' is the map rule's answer."
    ),
    "embedded_map": (
        "Map: predict the fixed word->word association of the query (same prompts as copy). "
        f"Marker names the task on {P_MARKED:.0%} of prompts ('map'), else neutral 'do'; "
        "'wrong' is the copy rule's answer (the query's follower in the context)."
    ),
    "embedded_add": f"Modular addition: 'add a + b =' -> (a + b) mod {MODULUS}.",
    "embedded_sort": (
        f"Sorting: 'sort' {N_SORT} distinct numbers ':' the smallest k of them in order -> "
        "the next one in sorted order."
    ),
}


# Tasks whose prompt space is small enough to exhaust: the number of distinct prompts.
N_DISTINCT: dict[str, int] = {"embedded_add": MODULUS * MODULUS}


def generate(task: str, n: int, rng: np.random.Generator) -> Batch:
    """Draw `n` prompts of `task` (a key of `GENERATORS`) from `rng`."""
    choose(task, list(GENERATORS), "embedded task")
    if n < 1:
        raise WorkbenchError(f"number of prompts must be positive, got {n}")
    return GENERATORS[task](n, rng)


def prompt_words(batch: Batch, i: int) -> list[str]:
    """The prompt of row `i` as words (no BOS, no padding)."""
    return [VOCAB[t] for t in batch.tokens[i, : batch.lengths[i]]]


def copy_answer(words: list[str]) -> str:
    """The copy rule, stated on words: the context word right after the query's occurrence."""
    query = words[-1]
    ctx = words[1:-2]
    return ctx[ctx.index(query) + 1]


def map_answer(words: list[str]) -> str:
    """The map rule, stated on words: the fixed association of the query."""
    return WORD_MAP[words[-1]]


def add_answer(words: list[str]) -> str:
    """The add rule, stated on words: `add a + b =` -> (a + b) mod MODULUS."""
    return str((int(words[1]) + int(words[3])) % MODULUS)


def sort_answer(words: list[str]) -> str:
    """The sort rule, stated on words: the next item of the sorted list after the written ones."""
    items = sorted(int(w) for w in words[1 : 1 + N_SORT])
    written = len(words) - (2 + N_SORT)
    return str(items[written])


RULES: dict[str, Callable[[list[str]], str]] = {
    "embedded_copy": copy_answer,
    "embedded_map": map_answer,
    "embedded_add": add_answer,
    "embedded_sort": sort_answer,
}


def take(batch: Batch, idx) -> Batch:
    """The rows `idx` of a batch, as a new batch."""
    return Batch(
        task=batch.task, tokens=batch.tokens[idx], lengths=batch.lengths[idx],
        answer=batch.answer[idx], wrong=batch.wrong[idx], roles=batch.roles[idx],
        group=batch.group[idx],
    )


def concat(batches: list[Batch]) -> Batch:
    """Stack batches of one task or several, right-padding to the widest."""
    width = max(b.tokens.shape[1] for b in batches)

    def pad(a: np.ndarray, fill) -> np.ndarray:
        out = np.full((a.shape[0], width), fill, dtype=a.dtype)
        out[:, : a.shape[1]] = a
        return out

    return Batch(
        task="+".join(dict.fromkeys(b.task for b in batches)),
        tokens=np.concatenate([pad(b.tokens, _ID[PAD]) for b in batches]),
        lengths=np.concatenate([b.lengths for b in batches]),
        answer=np.concatenate([b.answer for b in batches]),
        wrong=np.concatenate([b.wrong for b in batches]),
        roles=np.concatenate([pad(b.roles, "") for b in batches]),
        group=np.concatenate([b.group for b in batches]),
    )
