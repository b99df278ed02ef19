"""Write the shipped generation task file from the project's word lists.

lm-eval scores a `generate_until` task (gsm8k, triviaqa, nq_open) by decoding greedily from
a few-shot prompt, cutting the text at stop strings, extracting the answer and comparing it
with the target by `exact_match`. `gen_facts` has that form, built offline from the word pairs
in `tasks/data/*.tsv` (the function-vector lists of `tasks/generate_hub_tasks.py`: country ->
capital, English -> French, verb -> past tense, ...), one subject per list, and a seed:

    python tasks/generate_gen_tasks.py --seed 0

rewrites `tasks/benchmarks/gen_facts.jsonl` byte for byte. A prompt is three solved questions
of one subject in lm-eval's `Question: ...\\nAnswer:` form (gsm8k's and ARC's `doc_to_text`),
then the question; the model writes the answer after `Answer:`, decoding stops at the first
newline, and the first line (stripped) must equal the list's output exactly. The split rules
are `tasks/generate_mc_tasks.py`'s: each list is cut in two halves by seed, a question and its
few-shot examples come from one half, so a fact (`group`, `subject:input`) is in one split only;
no few-shot example shows the question's answer or pairs with its input either way. The format
is the generation kind's (`tasks/README.md`: `target`, the header's `generation`).
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


TASKS: dict[str, Callable[[int], list[dict]]] = {"gen_facts": make_facts}


def write_all(out_dir: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every task file into `out_dir`; returns the paths written."""
    return write_tasks(TASKS, out_dir, seed)


def main(argv: list[str] | None = None) -> None:
    run_cli(write_all, HERE / "benchmarks", __doc__, argv)


if __name__ == "__main__":
    main()
