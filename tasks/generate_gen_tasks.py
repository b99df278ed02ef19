"""Write the shipped generation task files: word facts, and one-step arithmetic word problems.

lm-eval scores a `generate_until` task (gsm8k, triviaqa, nq_open) by decoding greedily from
a few-shot prompt, cutting the text at stop strings, extracting the answer and comparing it
with the target by `exact_match`. Both tasks here have that form, built offline from a seed:

    python tasks/generate_gen_tasks.py --seed 0

rewrites `tasks/benchmarks/gen_facts.jsonl` and `gen_arith.jsonl` byte for byte. A prompt is
three solved questions in lm-eval's `Question: ...\\nAnswer:` form (gsm8k's and ARC's
`doc_to_text`), then the question; the model writes the answer after `Answer:` and decoding
stops at the first newline. The format is the generation kind's (`tasks/README.md`: `target`,
the header's `generation`).

`gen_facts` asks the word pairs in `tasks/data/*.tsv` (the function-vector lists of
`tasks/generate_hub_tasks.py`: country -> capital, English -> French, verb -> past tense, ...),
one subject per list; the first line (stripped) must equal the list's output exactly. The split
rules are `tasks/generate_mc_tasks.py`'s: each list is cut in two halves by seed, a question and
its few-shot examples come from one half, so a fact (`group`, `subject:input`) is in one split
only; no few-shot example shows the question's answer or pairs with its input either way.

`gen_arith` is GSM8K in one step: a word problem from one of `ARITH_TEMPLATES` (add or
subtract; seeded names and objects) on single-digit facts, scored as lm-eval scores gsm8k
(`flexible-extract`: the last number of the line; gsm8k's `exact_match` options). A solved
example's answer is its calculation, `7 + 5 = 12`, as GSM8K's solutions write theirs before the
final number: both real models are near zero when the solved answers are bare numbers
(docs/benchmarks.md). Each arithmetic fact (a sum's operands unordered, a difference's in
order) is in one split, with every problem asking it and every solved example showing it; the
solved examples are of other templates, other facts and other answers. `group` is the template,
so the confirmation clusters the held-out examples by phrasing (12 clusters).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate_hub_tasks import read_pairs, run_cli, write_tasks  # noqa: E402  (one reader, one writer)
from generate_mc_tasks import SPLITS, SUBJECTS, pair_splits  # noqa: E402  (one split rule)

DEFAULT_SEED = 0
PER_SUBJECT = 24  # facts per subject: 7 x 24 = 168 examples, 12 per subject and split
SHOTS = 3
DELIMITER = " "
# lm-eval's gsm8k / ARC `doc_to_text`; a solved example adds DELIMITER + the answer.
TEMPLATE = "Question: {question}\nAnswer:"
GENERATION = {"max_new_tokens": 16, "until": ["\n"], "extractor": "first_line"}
DATA_NOTE = (
    "Data: the word pairs of tasks/data/<subject>.tsv (the project's hand-made lists for the "
    "function-vector tasks after Todd et al. 2024; 148-162 pairs each), read offline; "
    "subjects: " + ", ".join(SUBJECTS) + "."
)


def question(subject: str, x: str) -> str:
    """The question about input `x` of a subject's list."""
    return SUBJECTS[subject][1].format(x=x)


def _facts(seed: int, task: str) -> list[dict]:
    """PER_SUBJECT questions per subject, half from each split's pairs (seeded)."""
    rng = random.Random(f"{seed}-{task}")
    facts = []
    for subject in SUBJECTS:
        pairs, split_of = read_pairs(subject), pair_splits(seed, task, subject)
        for split in SPLITS:
            mine = [(x, y) for x, y in pairs if split_of[x] == split]
            for x, y in rng.sample(mine, PER_SUBJECT // 2):
                facts.append({"subject": subject, "x": x, "y": y, "split": split})
    return facts


def shot_pool(pairs: list[tuple[str, str]], split_of: dict[str, str], fact: dict) -> list:
    """The pairs a question's few-shot examples are drawn from: its subject's pairs of its own
    split, never its own input, never its answer as an output (lists of currencies and
    occupations repeat outputs), never a pair that names its input or answer the other way
    round (an antonym list holds both "hot -> cold" and "cold -> hot")."""
    x, y = fact["x"], fact["y"]
    return [
        (a, b) for a, b in pairs
        if split_of[a] == fact["split"] and a != x and b != y and a != y and b != x
    ]


def make_facts(seed: int, name: str = "gen_facts") -> list[dict]:
    """Three solved questions of the subject and split, then the question; target the answer."""
    rng = random.Random(f"{seed}-{name}-shots")
    examples = []
    for i, fact in enumerate(_facts(seed, name)):
        subject = fact["subject"]
        pool = shot_pool(read_pairs(subject), pair_splits(seed, name, subject), fact)
        blocks = [
            TEMPLATE.format(question=question(subject, x)) + DELIMITER + y
            for x, y in rng.sample(pool, SHOTS)
        ]
        blocks.append(TEMPLATE.format(question=question(subject, fact["x"])))
        examples.append({
            "id": f"{name}-{i:04d}",
            "prompt": "\n\n".join(blocks),
            "target": fact["y"],
            "split": fact["split"],
            "group": f"{subject}:{fact['x']}",
            "meta": {"subject": subject},
        })
    header = {
        "task": {
            "name": name,
            "description": (
                "Open-answer questions over seven subjects of word facts (capitals, currencies, "
                "French words, antonyms, past tenses, plurals, occupations) in lm-eval's "
                "'Question: ...\\nAnswer:' prompt after 3 solved questions of the same subject "
                "and split (num_fewshot 3). The model decodes greedily up to 16 tokens, stopping "
                "at a newline; the first line, stripped, must equal the list's output exactly "
                "(exact_match, case and punctuation kept). group = subject:input (one fact, one "
                "split). " + DATA_NOTE
            ),
            "metric": "exact_match",
            "target_delimiter": DELIMITER,
            "generation": dict(GENERATION),
            "source": f"python tasks/generate_gen_tasks.py --seed {seed}",
            "split_by": "group",
        }
    }
    return [header, *examples]


# gen_arith: one-step word problems, GSM8K's form with one step and small numbers. A template
# is (name, operation, text); `{name}` is a person, `{obj}` a plural noun, `{a}` and `{b}`
# the operands, and the answer is a + b or a - b.
ARITH_TEMPLATES = (
    ("buys", "+", "{name} has {a} {obj} and buys {b} more. How many {obj} does {name} have now?"),
    ("picks", "+", "{name} picked {a} {obj} in the morning and {b} {obj} in the afternoon. "
                   "How many {obj} did {name} pick in all?"),
    ("box_in", "+", "There are {a} {obj} in a box. {name} puts {b} more {obj} in the box. "
                    "How many {obj} are in the box now?"),
    ("gift", "+", "{name} had {a} {obj}. A friend gave {name} {b} more {obj}. "
                  "How many {obj} does {name} have now?"),
    ("days", "+", "{name} found {a} {obj} on Monday and {b} {obj} on Tuesday. "
                  "How many {obj} did {name} find altogether?"),
    ("sizes", "+", "A shelf holds {a} big {obj} and {b} small {obj}. "
                   "How many {obj} are on the shelf?"),
    ("gives", "-", "{name} has {a} {obj} and gives {b} of them to a friend. "
                   "How many {obj} does {name} have left?"),
    ("loses", "-", "{name} had {a} {obj} and lost {b} of them. "
                   "How many {obj} does {name} have now?"),
    ("box_out", "-", "There are {a} {obj} in a box. {name} takes {b} {obj} out of the box. "
                     "How many {obj} are left in the box?"),
    ("sells", "-", "{name} bought {a} {obj} and sold {b} of them. "
                   "How many {obj} does {name} have left?"),
    ("shares", "-", "{name} made {a} {obj} and shared {b} of them with the class. "
                    "How many {obj} does {name} still have?"),
    ("needs", "-", "{name} needs {a} {obj} and already has {b}. "
                   "How many more {obj} does {name} need?"),
)  # fmt: skip
ARITH_NAMES = (
    "Tom", "Anna", "Ben", "Lisa", "Sam", "Emma", "Jack", "Mia", "Leo", "Sara", "Max", "Lucy",
    "Paul", "Kate", "Dan", "Nora",
)  # fmt: skip
ARITH_OBJECTS = (
    "apples", "pencils", "stickers", "marbles", "cookies", "books", "cards", "balloons",
    "shells", "stamps", "oranges", "crayons",
)  # fmt: skip
# Single-digit facts, as both real models can add: a + b with a, b in 2..9 (sums 4..18), and
# their inverses a - b with b and the difference in 2..9 (a in 4..18).
DIGITS = range(2, 10)
ADD_OPERANDS = tuple((a, b) for a in DIGITS for b in DIGITS)
SUB_OPERANDS = tuple((b + c, b) for c in DIGITS for b in DIGITS)
PER_TEMPLATE = 14  # 12 templates x 14 = 168 examples, 7 per template and split
ARITH_GENERATION = {
    "max_new_tokens": 16, "until": ["\n"], "extractor": "flexible-extract",
    # lm-eval gsm8k's exact_match options (`gsm8k.yaml`, `metric_list`)
    "ignore_case": True, "ignore_punctuation": False,
    "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"],
}  # fmt: skip


def solve(op: str, a: int, b: int) -> int:
    """The answer of a problem with operation `op` ("+" or "-") on `a` and `b`."""
    return a + b if op == "+" else a - b


def solution(op: str, a: int, b: int) -> str:
    """A solved problem's answer: the one-line calculation, ending with the answer as a bare
    number (what lm-eval gsm8k's flexible-extract takes: the last number)."""
    return f"{a} {op} {b} = {solve(op, a, b)}"


def operand_splits(seed: int, name: str) -> dict[tuple[str, int, int], str]:
    """The split of every (operation, a, b): a seeded half of each operation's facts
    "select", the rest "heldout", so one sum or difference is asked in one split only (a + b
    and b + a are one fact)."""
    rng = random.Random(f"{seed}-{name}-operands")
    split_of = {}
    for op, pairs in (("+", ADD_OPERANDS), ("-", SUB_OPERANDS)):
        facts = sorted({fact_of(op, a, b) for a, b in pairs})
        rng.shuffle(facts)
        half = {fact: SPLITS[i >= (len(facts) + 1) // 2] for i, fact in enumerate(facts)}
        for a, b in pairs:
            split_of[op, a, b] = half[fact_of(op, a, b)]
    return split_of


def fact_of(op: str, a: int, b: int) -> tuple[str, int, int]:
    """The arithmetic fact a problem asks: its operands in order, a sum's sorted."""
    return (op, *sorted((a, b))) if op == "+" else (op, a, b)


def arith_question(template: str, a: int, b: int, rng: random.Random) -> str:
    """A template's question on `a` and `b`, with a seeded name and object."""
    text = dict((t, x) for t, _, x in ARITH_TEMPLATES)[template]
    return text.format(name=rng.choice(ARITH_NAMES), obj=rng.choice(ARITH_OBJECTS), a=a, b=b)


def make_arith(seed: int, name: str = "gen_arith") -> list[dict]:
    """Three solved problems of the split (other templates, other operands, other answers),
    then the problem; target the answer as a bare number."""
    rng = random.Random(f"{seed}-{name}")
    split_of = operand_splits(seed, name)
    pool = {(s, op): [(a, b) for o, a, b in split_of if o == op and split_of[o, a, b] == s]
            for s in SPLITS for op in "+-"}
    problems = []
    for template, op, _ in ARITH_TEMPLATES:
        for split in SPLITS:
            for a, b in rng.sample(pool[split, op], PER_TEMPLATE // 2):
                problems.append((template, op, a, b, split))
    examples = []
    for i, (template, op, a, b, split) in enumerate(problems):
        answer = solve(op, a, b)
        shots = []
        for t, o, _ in rng.sample([x for x in ARITH_TEMPLATES if x[0] != template], SHOTS):
            sa, sb = rng.choice([(x, y) for x, y in pool[split, o]
                                 if fact_of(o, x, y) != fact_of(op, a, b)
                                 and solve(o, x, y) != answer])
            shots.append(TEMPLATE.format(question=arith_question(t, sa, sb, rng))
                         + DELIMITER + solution(o, sa, sb))
        shots.append(TEMPLATE.format(question=arith_question(template, a, b, rng)))
        examples.append({
            "id": f"{name}-{i:04d}",
            "prompt": "\n\n".join(shots),
            "target": str(answer),
            "split": split,
            "group": template,
            "meta": {"template": template, "operation": op, "operands": [a, b]},
        })
    header = {
        "task": {
            "name": name,
            "description": (
                "One-step arithmetic word problems in GSM8K's form: a + b with a, b in 2-9, "
                "or a - b with b and the difference in 2-9, written from 12 templates (6 add, "
                "6 subtract) in tasks/generate_gen_tasks.py with seeded names and objects, in "
                "lm-eval gsm8k's 'Question: ...\\nAnswer:' prompt after 3 solved problems of "
                "the same split, other templates and other answers, each answer its one-line "
                "calculation ('7 + 5 = 12'; num_fewshot 3). The model decodes greedily up to "
                "16 tokens, stopping at a newline; lm-eval gsm8k's flexible-extract takes the "
                "last number and exact_match compares it with the target under gsm8k's "
                "options (ignore_case; ',', '$', '.*#### ' and a final '.' removed). Each "
                "arithmetic fact is in one split only; group = the template (the "
                "confirmation clusters by it)."
            ),
            "metric": "exact_match",
            "target_delimiter": DELIMITER,
            "generation": dict(ARITH_GENERATION),
            "source": f"python tasks/generate_gen_tasks.py --seed {seed}",
            "split_by": "example",
        }
    }
    return [header, *examples]


TASKS: dict[str, Callable[[int], list[dict]]] = {"gen_facts": make_facts, "gen_arith": make_arith}


def write_all(out_dir: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every task file into `out_dir`; returns the paths written."""
    return write_tasks(TASKS, out_dir, seed)


def main(argv: list[str] | None = None) -> None:
    run_cli(write_all, HERE / "benchmarks", __doc__, argv)


if __name__ == "__main__":
    main()
