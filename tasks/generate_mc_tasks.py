"""Write the shipped multiple-choice (benchmark-format) task files from the project's word lists.

The paper's question is asked of benchmarks that lm-eval scores by log-likelihood: MMLU by
`acc` over four letters, ARC and HellaSwag by `acc_norm` over full-text answers. These two
tasks have those formats, built offline from the word pairs in `tasks/data/*.tsv` (the
function-vector lists of `tasks/generate_hub_tasks.py`: country -> capital, English -> French,
verb -> past tense, ...), one subject per list, and a seed:

    python tasks/generate_mc_tasks.py --seed 0

rewrites both files (`TASKS`) in `tasks/benchmarks/` byte for byte. Each question asks for the
output of one pair; its three distractors are other outputs of the same list (the same type of
answer), never an output that pairs with the question's input either way. The gold position
is balanced across the four positions within each split; each fact (`group`, the subject and
the input) is in one split only, and the few-shot examples of a prompt are facts of its own
split and subject. The format is `docs/benchmarks.md`'s (and the shared multiple-choice
contract: `choices`, `gold`, `target_delimiter`).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from generate_hub_tasks import read_pairs, run_cli, write_tasks  # noqa: E402  (one reader, one writer)

DEFAULT_SEED = 0
SPLITS = ("select", "heldout")
LETTERS = ("A", "B", "C", "D")
N_CHOICES = len(LETTERS)
PER_SUBJECT = 24  # facts per subject and task: 7 x 24 = 168 examples, 12 per subject and split
LETTER_SHOTS = 5  # MMLU's usual num_fewshot
TEXT_SHOTS = 3
DELIMITER = " "

# One subject per word list: (MMLU-style subject phrase, question about input x).
SUBJECTS = {
    "country_capital": ("world capitals", "What is the capital of {x}?"),
    "country_currency": ("world currencies", "What is the currency of {x}?"),
    "english_french": ("French vocabulary", 'What is the French word for "{x}"?'),
    "antonyms": ("English antonyms", 'What is the opposite of "{x}"?'),
    "present_past": ("English verbs", 'What is the past tense of "{x}"?'),
    "singular_plural": ("English nouns", 'What is the plural of "{x}"?'),
    "person_occupation": ("famous people", "What is the occupation of {x}?"),
}
# lm-eval's MMLU prompt (`_default_template_yaml`, its description and few-shot delimiter).
MMLU_HEADER = "The following are multiple choice questions (with answers) about {subject}."
# lm-eval's ARC prompt (`arc_easy.yaml`: doc_to_text).
ARC_TEMPLATE = "Question: {question}\nAnswer:"
DATA_NOTE = (
    "Data: the word pairs of tasks/data/<subject>.tsv (the project's hand-made lists for the "
    "function-vector tasks after Todd et al. 2024; 148-162 pairs each), read offline; "
    "subjects: " + ", ".join(SUBJECTS) + "."
)


def _header(name: str, description: str, metric: str, seed: int) -> dict:
    return {
        "task": {
            "name": name,
            "description": description,
            "metric": metric,
            "target_delimiter": DELIMITER,
            "source": f"python tasks/generate_mc_tasks.py --seed {seed}",
            "split_by": "group",
        }
    }


def distractor_pool(pairs: list[tuple[str, str]], x: str, y: str) -> list[str]:
    """The outputs of a list that may stand as wrong answers to the question about `x`
    (answer `y`): distinct, not `y`, and no output that pairs with `x` either way
    (an antonym list may hold both "hot -> cold" and "cold -> hot")."""
    related = {b for a, b in pairs if a == x} | {a for a, b in pairs if b == x} | {y}
    return sorted({b for _, b in pairs} - related)


def pair_splits(seed: int, task: str, subject: str) -> dict[str, str]:
    """The split of every pair of a subject's list, by input: a seeded half "select", the rest
    "heldout". A question and its few-shot examples come from one half."""
    pairs = read_pairs(subject)
    order = random.Random(f"{seed}-{task}-{subject}").sample(range(len(pairs)), len(pairs))
    return {pairs[i][0]: SPLITS[rank % 2] for rank, i in enumerate(order)}


def _facts(seed: int, task: str) -> list[dict]:
    """PER_SUBJECT questions per subject, half from each split's pairs, with their distractors
    (three other outputs, in a seeded order) and a gold position balanced within each split."""
    rng = random.Random(f"{seed}-{task}")
    facts = []
    for subject in SUBJECTS:
        pairs, split_of = read_pairs(subject), pair_splits(seed, task, subject)
        for split in SPLITS:
            mine = [(x, y) for x, y in pairs if split_of[x] == split]
            for x, y in rng.sample(mine, PER_SUBJECT // 2):
                wrong = rng.sample(distractor_pool(pairs, x, y), N_CHOICES - 1)
                facts.append({"subject": subject, "x": x, "y": y, "wrong": wrong, "split": split})
    for split in SPLITS:
        mine = [f for f in facts if f["split"] == split]
        golds = [i % N_CHOICES for i in range(len(mine))]
        rng.shuffle(golds)
        for fact, gold in zip(mine, golds, strict=True):
            fact["gold"] = gold
    return facts


def _choices(fact: dict) -> list[str]:
    """The answer texts in order: the distractors with the gold inserted at its position."""
    texts = list(fact["wrong"])
    texts.insert(fact["gold"], fact["y"])
    return texts


def _shots(fact: dict, seed: int, task: str, k: int, rng: random.Random) -> list[dict]:
    """k solved examples for the few-shot prompt: other pairs of the question's subject and
    split (never a pair of the other split), each with three distractors and a random gold
    position. None prints one of the question's options, so that no option is favoured or
    disfavoured by having been seen."""
    pairs = read_pairs(fact["subject"])
    split_of = pair_splits(seed, task, fact["subject"])
    options = {fact["y"], *fact["wrong"]}
    pool = [(x, y) for x, y in pairs if split_of[x] == fact["split"] and x != fact["x"]]
    shots = []
    for x, y in rng.sample([(x, y) for x, y in pool if y not in options], k):
        wrong = rng.sample(sorted(set(distractor_pool(pairs, x, y)) - options), N_CHOICES - 1)
        shots.append({**fact, "x": x, "y": y, "wrong": wrong, "gold": rng.randrange(N_CHOICES)})
    return shots


def _letter_block(fact: dict) -> str:
    question = SUBJECTS[fact["subject"]][1].format(x=fact["x"])
    options = [f"{letter}. {text}" for letter, text in zip(LETTERS, _choices(fact), strict=True)]
    return "\n".join([question, *options, "Answer:"])


def _examples(name: str, facts: list[dict], prompts: list[str], choices) -> list[dict]:
    return [
        {
            "id": f"{name}-{i:04d}",
            "prompt": prompt,
            "choices": choices(fact),
            "gold": fact["gold"],
            "split": fact["split"],
            "group": f"{fact['subject']}:{fact['x']}",
            "meta": {"subject": fact["subject"]},
        }
        for i, (fact, prompt) in enumerate(zip(facts, prompts, strict=True))
    ]


def make_letters(seed: int, name: str = "mc_facts_letters") -> list[dict]:
    """MMLU-style: a subject line, five solved questions of the subject, then the question
    with four lettered options and 'Answer:'; choices are the letters, metric acc."""
    rng = random.Random(f"{seed}-{name}-shots")
    facts = _facts(seed, name)
    prompts = []
    for fact in facts:
        shots = [
            f"{_letter_block(s)} {LETTERS[s['gold']]}"
            for s in _shots(fact, seed, name, LETTER_SHOTS, rng)
        ]
        head = MMLU_HEADER.format(subject=SUBJECTS[fact["subject"]][0])
        prompts.append("\n\n".join([head, *shots, _letter_block(fact)]))
    header = _header(
        name,
        "MMLU-style multiple choice over seven subjects of word facts (capitals, currencies, "
        "French words, antonyms, past tenses, plurals, occupations), in lm-eval's MMLU "
        "prompt: the subject line, 5 solved questions of the same subject and split "
        "(num_fewshot 5), then the question, options A-D and 'Answer:'. choices: the "
        "letters A-D (continuation ' A' ... ' D'); gold: the letter of the list's output; "
        "metric acc (argmax of the letters' log-likelihoods; chance 0.25). Distractors: three "
        "other outputs of the same list. group = subject:input (one fact, one split). " + DATA_NOTE,
        "acc",
        seed,
    )
    return [header, *_examples(name, facts, prompts, lambda f: list(LETTERS))]


def make_text(seed: int, name: str = "mc_facts_text") -> list[dict]:
    """ARC-style: three solved questions of the subject, then 'Question: ...\\nAnswer:'; the
    choices are the four answer texts themselves, metric acc_norm."""
    rng = random.Random(f"{seed}-{name}-shots")
    facts = _facts(seed, name)
    prompts = []
    for fact in facts:
        blocks = [
            ARC_TEMPLATE.format(question=SUBJECTS[s["subject"]][1].format(x=s["x"]))
            + f"{DELIMITER}{s['y']}"
            for s in _shots(fact, seed, name, TEXT_SHOTS, rng)
        ]
        question = SUBJECTS[fact["subject"]][1].format(x=fact["x"])
        prompts.append("\n\n".join([*blocks, ARC_TEMPLATE.format(question=question)]))
    header = _header(
        name,
        "ARC-style multiple choice over seven subjects of word facts (capitals, currencies, "
        "French words, antonyms, past tenses, plurals, occupations), in lm-eval's ARC prompt "
        "'Question: ...\\nAnswer:' after 3 solved questions of the same subject and split "
        "(num_fewshot 3). choices: the four answer texts themselves (1-4 words, of varying "
        "length); gold: the list's output; metric acc_norm (log-likelihood per character; "
        "chance 0.25). Distractors: three other outputs of the same list. group = "
        "subject:input (one fact, one split). " + DATA_NOTE,
        "acc_norm",
        seed,
    )
    return [header, *_examples(name, facts, prompts, _choices)]


TASKS: dict[str, Callable[[int], list[dict]]] = {
    "mc_facts_letters": make_letters,
    "mc_facts_text": make_text,
}


def write_all(out_dir: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every task file into `out_dir`; returns the paths written."""
    return write_tasks(TASKS, out_dir, seed)


def main(argv: list[str] | None = None) -> None:
    run_cli(write_all, HERE / "benchmarks", __doc__, argv)


if __name__ == "__main__":
    main()
