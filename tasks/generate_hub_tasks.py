"""Write the task files for hub models (GPT-2, Pythia, ...) from templates and fixed tables.

Each task is a family of prompts whose correct next token we know by construction: the
indirect object of an IOI sentence, a year later than a given one, a country's capital, a sum,
an antonym, the next word of a repeated sequence. Building them from small tables and a seed
(rather than downloading a data set) keeps every file reproducible and reviewable: running

    python tasks/generate_hub_tasks.py --seed 0

rewrites every hub task file (`TASKS`) byte for byte. The function-vector tasks read their
word pairs from `tasks/data/*.tsv`. Answers of the single-token tasks are words, names or
numbers that are single GPT-2 BPE tokens with their leading space (greater-than answers
continue a year and have none); `tests/test_gpt2_vocab.py` checks this with GPT-2's own
vocabulary, and the task loader checks again, in context, against whichever model is loaded.
The file format is described in `tasks/README.md`.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path

DEFAULT_SEED = 0
SPLITS = ("select", "heldout")

# The name list of the IOI paper's data set code (Wang et al. 2022, `ioi_dataset.py`), in its
# order. Every one is a single GPT-2 token with a leading space (checked by
# tests/test_gpt2_vocab.py); names never open a sentence, so every mention is that token.
NAMES = (
    "Aaron", "Adam", "Alan", "Alex", "Alice", "Amy", "Anderson", "Andre", "Andrew", "Andy",
    "Anna", "Anthony", "Arthur", "Austin", "Blake", "Brandon", "Brian", "Carter", "Charles",
    "Charlie", "Christian", "Christopher", "Clark", "Cole", "Collins", "Connor", "Crew",
    "Crystal", "Daniel", "David", "Dean", "Edward", "Elizabeth", "Emily", "Eric", "Eva", "Ford",
    "Frank", "George", "Georgia", "Graham", "Grant", "Henry", "Ian", "Jack", "Jacob", "Jake",
    "James", "Jamie", "Jane", "Jason", "Jay", "Jennifer", "Jeremy", "Jessica", "John",
    "Jonathan", "Jordan", "Joseph", "Joshua", "Justin", "Kate", "Kelly", "Kevin", "Kyle",
    "Laura", "Leon", "Lewis", "Lisa", "Louis", "Luke", "Madison", "Marco", "Marcus", "Maria",
    "Mark", "Martin", "Mary", "Matthew", "Max", "Michael", "Michelle", "Morgan", "Patrick",
    "Paul", "Peter", "Prince", "Rachel", "Richard", "River", "Robert", "Roman", "Rose", "Ruby",
    "Russell", "Ryan", "Sarah", "Scott", "Sean", "Simon", "Stephen", "Steven", "Sullivan",
    "Taylor", "Thomas", "Tyler", "Victoria", "Warren", "William",
)  # fmt: skip

# The 15 BABA templates of Wang et al. 2022, cut before the final indirect object. [B] is
# the subject (named first and repeated), [A] the indirect object. The ABBA form swaps the
# first two mentions, as the paper's code does.
IOI_TEMPLATES = (
    "Then, [B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to",
    "Then, [B] and [A] had a lot of fun at the [PLACE]. [B] gave a [OBJECT] to",
    "Then, [B] and [A] were working at the [PLACE]. [B] decided to give a [OBJECT] to",
    "Then, [B] and [A] were thinking about going to the [PLACE]. [B] wanted to give a [OBJECT] to",
    "Then, [B] and [A] had a long argument, and afterwards [B] said to",
    "After [B] and [A] went to the [PLACE], [B] gave a [OBJECT] to",
    "When [B] and [A] got a [OBJECT] at the [PLACE], [B] decided to give it to",
    "When [B] and [A] got a [OBJECT] at the [PLACE], [B] decided to give the [OBJECT] to",
    "While [B] and [A] were working at the [PLACE], [B] gave a [OBJECT] to",
    "While [B] and [A] were commuting to the [PLACE], [B] gave a [OBJECT] to",
    "After the lunch, [B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to",
    "Afterwards, [B] and [A] went to the [PLACE]. [B] gave a [OBJECT] to",
    "Then, [B] and [A] had a long argument. Afterwards [B] said to",
    "The [PLACE] [B] and [A] went to had a [OBJECT]. [B] gave it to",
    "Friends [B] and [A] found a [OBJECT] at the [PLACE]. [B] gave it to",
)
IOI_PLACES = ("store", "garden", "restaurant", "school", "hospital", "office", "house", "station")
IOI_OBJECTS = ("ring", "kiss", "bone", "basketball", "computer", "necklace", "drink", "snack")
IOI_PER_TEMPLATE_ORDER = 12  # 15 templates x 2 orders x 12 = 360 examples

# Greater-than after Hanna et al. 2023. GPT-2 writes " 1732" as " 17" + "32" for every year
# of centuries 12-17 except those listed below, where it merges digits differently (then the
# prompt's last token would not be the century); the start year XX01 of every counterfactual
# splits as " XX" + "01". The `year_split` check verifies this for whichever model is loaded.
GT_NOUNS = (
    "war", "dynasty", "expedition", "epidemic", "siege", "reign", "voyage", "pilgrimage",
    "campaign", "conflict", "famine", "plague", "rebellion", "occupation", "marriage",
    "journey", "construction", "trial", "treaty", "alliance", "rivalry", "feud", "drought",
    "crusade", "revolt", "blockade", "exile", "truce", "kingdom", "project",
)  # fmt: skip
GT_CENTURIES = range(12, 18)
GT_YY = range(2, 99)
GT_SPLIT_BADLY = {12: (80,), 13: tuple(range(2, 10)), 14: (40,), 15: tuple(range(2, 10))}
GT_PER_YY = 3  # 97 values of YY x 3 = 291 examples, each YY equally often
GT_CANDIDATES = tuple(f"{yy:02d}" for yy in range(100))

# Only capitals that are well known, unambiguous, and one GPT-2 token (" Paris").
CAPITALS = (
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"),
    ("the United Kingdom", "London"), ("Egypt", "Cairo"), ("Greece", "Athens"),
    ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Portugal", "Lisbon"), ("Poland", "Warsaw"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Denmark", "Copenhagen"),
    ("Finland", "Helsinki"), ("Hungary", "Budapest"), ("the Czech Republic", "Prague"),
    ("the Netherlands", "Amsterdam"), ("Belgium", "Brussels"), ("Turkey", "Ankara"),
    ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Syria", "Damascus"), ("Lebanon", "Beirut"),
    ("Saudi Arabia", "Riyadh"), ("Afghanistan", "Kabul"), ("Pakistan", "Islamabad"),
    ("Thailand", "Bangkok"), ("South Korea", "Seoul"), ("North Korea", "Pyongyang"),
    ("the Philippines", "Manila"), ("Indonesia", "Jakarta"), ("Australia", "Canberra"),
    ("Canada", "Ottawa"), ("the United States", "Washington"), ("Cuba", "Havana"),
    ("Peru", "Lima"), ("Chile", "Santiago"), ("Scotland", "Edinburgh"), ("Wales", "Cardiff"),
    ("New Zealand", "Wellington"), ("Tunisia", "Tunis"),
)  # fmt: skip
CAPITAL_TEMPLATES = (
    "The capital of {country} is",
    "The capital city of {country} is",
    "Q: What is the capital of {country}?\nA:",
    "The name of the capital of {country} is",
    "Fact: the capital of {country} is",
)

# Function-vector in-context tasks after Todd et al. 2024: word pairs from tasks/data/<name>.tsv
# (one "input<TAB>output" per line), shown as "Q: input\nA: output" demonstrations.
DATA_DIR = Path(__file__).resolve().parent / "data"
ICL_TASKS = {
    "antonyms": "a word -> its antonym",
    "country_capital": "a country -> its capital city",
    "country_currency": "a country -> its currency",
    "english_french": "an English word -> its French translation",
    "present_past": "a verb -> its simple past",
    "singular_plural": "a noun -> its plural",
    "person_occupation": "a well-known person -> their occupation",
}
ICL_SHOTS = range(5, 11)
ICL_TEMPLATE = "Q: {x}\nA: {y}"

# Common nouns, one GPT-2 token each with a leading space, for random repeated sequences.
INDUCTION_WORDS = (
    "apple", "river", "chair", "window", "garden", "doctor", "pencil", "mountain", "candle",
    "bridge", "forest", "rabbit", "engine", "bottle", "castle", "letter", "island", "blanket",
    "ocean", "camera", "guitar", "ladder", "wallet", "kitchen", "planet", "jacket", "hammer",
    "pillow", "basket", "mirror", "tiger", "violin", "desert", "carpet", "helmet", "lemon",
    "tunnel", "rocket", "spider", "button", "silver", "cloud", "bread", "stone", "horse",
    "train", "paper", "glass", "music", "table", "water", "shirt", "flower", "money", "tree",
    "door", "house", "road", "phone", "coffee", "bird", "dog", "cat", "fish", "sugar", "salt",
    "king", "army", "field", "ship", "city", "paint", "iron", "gold", "steel", "clock", "lamp",
    "knife", "plate", "wheel", "box", "coat", "shoe", "ring", "bell", "rope", "nail", "brick",
    "leaf", "wall", "wind", "rain", "snow", "sun", "moon", "star", "fire", "egg", "milk",
    "cheese", "church", "farm", "school", "bank", "hotel",
)  # fmt: skip
INDUCTION_LENGTHS = range(8, 17)

N_ADDITION = 300
N_INDUCTION = 300


def _header(
    name: str,
    description: str,
    metric: str,
    seed: int,
    candidates=None,
    split_by: str = "example",
    **extra,
) -> dict:
    return {
        "task": {
            "name": name,
            "description": description,
            "metric": metric,
            "answer_scope": "vocab" if candidates is None else "candidates",
            "candidates": None if candidates is None else list(candidates),
            "source": f"python tasks/generate_hub_tasks.py --seed {seed}",
            "split_by": split_by,
            **extra,
        }
    }


def _splits(n_units: int, rng: random.Random) -> list[str]:
    """A split label per unit: a seeded half (rounded up) "select", the rest "heldout"."""
    order = list(range(n_units))
    rng.shuffle(order)
    labels = ["heldout"] * n_units
    for i in order[: (n_units + 1) // 2]:
        labels[i] = "select"
    return labels


def _group_splits(rows: list[dict], rng: random.Random) -> list[str]:
    """A split per row such that every row of one `group` is in the same split."""
    groups = list(dict.fromkeys(row["group"] for row in rows))
    label = dict(zip(groups, _splits(len(groups), rng), strict=True))
    return [label[row["group"]] for row in rows]


KEYS = ("prompt", "answer", "wrong", "split", "group", "counterfactual", "meta")


def _examples(name: str, rows: list[dict], splits: list[str]) -> list[dict]:
    """Give rows ids and splits, with keys in the documented order."""
    out = []
    for i, (row, split) in enumerate(zip(rows, splits, strict=True)):
        row = {**row, "split": split}
        out.append({"id": f"{name}-{i:04d}", **{k: row[k] for k in KEYS if k in row}})
    return out


def _ioi_fill(template: str, first: str, second: str, subject: str, place: str, obj: str) -> str:
    """Fill a template's first two mentions, its repeated subject, place and object."""
    text = template.replace("[B]", "{0}", 1).replace("[A]", "{1}", 1).replace("[B]", "{2}")
    return text.replace("[PLACE]", place).replace("[OBJECT]", obj).format(first, second, subject)


def make_ioi(seed: int) -> list[dict]:
    """IOI: 'When Mary and John went to the store, John gave a drink to' -> ' Mary'."""
    rng = random.Random(f"{seed}-ioi")
    rows, seen = [], set()
    for t, template in enumerate(IOI_TEMPLATES):
        for order in ("ABBA", "BABA"):
            made = 0
            while made < IOI_PER_TEMPLATE_ORDER:
                io, s = rng.sample(NAMES, 2)
                place, obj = rng.choice(IOI_PLACES), rng.choice(IOI_OBJECTS)
                # ABBA: the answer (indirect object) is named first; BABA: second.
                first, second = (io, s) if order == "ABBA" else (s, io)
                prompt = _ioi_fill(template, first, second, s, place, obj)
                pair = "+".join(sorted((io, s)))
                if prompt in seen or any(r["group"] == pair for r in rows):
                    continue
                seen.add(prompt)
                # ABC counterfactual: the same sentence with three other distinct names, so the
                # repeated subject (the cue for the answer) is gone.
                x, y, z = rng.sample([n for n in NAMES if n not in (io, s)], 3)
                counterfactual = _ioi_fill(template, x, y, z, place, obj)
                rows.append(
                    {
                        "prompt": prompt,
                        "answer": f" {io}",
                        "wrong": [f" {s}"],
                        "group": pair,
                        "counterfactual": counterfactual,
                        "meta": {"template": t, "order": order},
                    }
                )
                made += 1
    header = _header(
        "ioi",
        "Indirect-object identification (Wang et al. 2022): two names are introduced, one "
        "is repeated as the subject, and the sentence ends where the other (the indirect "
        "object) should follow. All 15 templates of the paper, both name orders (meta.order: "
        "ABBA = the answer is named first), the paper's names, places and objects. "
        "logit_diff = logit(indirect object) - logit(subject). counterfactual: the ABC "
        "sentence (three other names). group = the name pair; splits by group.",
        "logit_diff",
        seed,
        split_by="group",
        per_tokenizer="drop_unfit",
    )
    return [header, *_examples("ioi", rows, _group_splits(rows, rng))]


def make_greater_than(seed: int) -> list[dict]:
    """Greater-than: 'The war lasted from the year 1732 to the year 17' -> '33'..'99'."""
    rng = random.Random(f"{seed}-greater_than")
    rows = []
    for yy in GT_YY:
        centuries = [c for c in GT_CENTURIES if yy not in GT_SPLIT_BADLY.get(c, ())]
        for century in rng.sample(centuries, GT_PER_YY):
            noun = rng.choice(GT_NOUNS)
            stem = f"The {noun} lasted from the year {{}} to the year {century}"
            rows.append(
                {
                    "prompt": stem.format(f"{century}{yy:02d}"),
                    "answer": [f"{y:02d}" for y in range(yy + 1, 100)],
                    "wrong": [f"{y:02d}" for y in range(yy + 1)],
                    "group": f"{century}{yy:02d}",
                    "counterfactual": stem.format(f"{century}01"),
                }
            )
    header = _header(
        "greater_than",
        "Greater-than (Hanna et al. 2023): the prompt ends with the century of an end year "
        "that must be later than the start year. The answer is the two-digit continuation "
        "with NO leading space (GPT-2 writes 1732 as ' 17' + '32'). Acceptable answers: "
        "every YY greater than the start year's last two digits; wrong: every YY up to and "
        "including them. Metric prob_diff = p(YY > start) - p(YY <= start), Hanna et al.'s "
        "probability difference; accuracy is taken over the 100 candidates '00'..'99'. "
        "Balanced: every start YY from 02 to 98 occurs equally often. counterfactual: the "
        "start year XX01. group = the start year; splits by group. Answers are the YY tokens "
        "encoded alone (answers_in_context false: GPT-2 writes ' 1600' as one token, yet "
        "Hanna et al. sum over all 100 YY tokens); the year_split check guards the tokenizer.",
        "prob_diff",
        seed,
        candidates=GT_CANDIDATES,
        split_by="group",
        checks=["year_split"],
        answers_in_context=False,
        per_tokenizer="greater_than",
    )
    return [header, *_examples("greater_than", rows, _group_splits(rows, rng))]


def make_capitals(seed: int) -> list[dict]:
    """Capitals: 'The capital of France is' -> ' Paris', several phrasings per country."""
    rng = random.Random(f"{seed}-capitals")
    rows = []
    for country, capital in CAPITALS:
        for t, template in enumerate(CAPITAL_TEMPLATES):
            rows.append(
                {
                    "prompt": template.format(country=country),
                    "answer": f" {capital}",
                    "group": country,
                    "meta": {"template": t},
                }
            )
    header = _header(
        "capitals",
        "Country -> capital city facts, well-known pairs only, in several phrasings "
        "(meta.template). Accuracy: the capital is the top next token over the whole "
        "vocabulary. group = the country: its phrasings are one fact, kept in one split.",
        "accuracy",
        seed,
        split_by="group",
        per_tokenizer="drop_unfit",
    )
    return [header, *_examples("capitals", rows, _group_splits(rows, rng))]


def make_addition(seed: int) -> list[dict]:
    """Two-digit addition: '23 + 45 =' -> ' 68', with both terms and the sum in 10..99."""
    rng = random.Random(f"{seed}-addition")
    pairs = [(a, b) for a in range(10, 90) for b in range(10, 100 - a)]
    rows = [
        {"prompt": f"{a} + {b} =", "answer": f" {a + b}"} for a, b in rng.sample(pairs, N_ADDITION)
    ]
    header = _header(
        "addition",
        "Two-digit addition without a carry past 99: 'a + b =' -> ' a+b', both terms and "
        "the sum between 10 and 99 so that the answer is one GPT-2 token. Accuracy over "
        "the vocabulary.",
        "accuracy",
        seed,
        per_tokenizer="digits",
    )
    return [header, *_examples("addition", rows, _splits(len(rows), rng))]


def read_pairs(name: str) -> list[tuple[str, str]]:
    """The (input, output) pairs of tasks/data/<name>.tsv, in file order."""
    lines = (DATA_DIR / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
    return [tuple(line.split("\t")) for line in lines if line.strip()]


def make_icl(name: str, seed: int) -> list[dict]:
    """A function-vector task (Todd et al. 2024): 5-10 demonstrations 'Q: x\nA: y', then
    'Q: x\nA:' -> ' y'. Each pair is the query of one example; pairs are split in half, and
    an example's demonstrations come from other pairs of its own split only."""
    rng = random.Random(f"{seed}-{name}")
    pairs = read_pairs(name)
    pair_split = _splits(len(pairs), rng)
    pool = {s: [p for p, ps in zip(pairs, pair_split, strict=True) if ps == s] for s in SPLITS}
    rows, splits = [], []
    for (x, y), split in zip(pairs, pair_split, strict=True):
        shots = rng.sample([p for p in pool[split] if p != (x, y)], rng.choice(ICL_SHOTS))
        demos = [ICL_TEMPLATE.format(x=a, y=b) for a, b in shots]
        prompt = "\n\n".join([*demos, ICL_TEMPLATE.format(x=x, y="").rstrip()])
        rows.append({"prompt": prompt, "answer": f" {y}", "group": x})
        splits.append(split)
    header = _header(
        name,
        f"Function-vector in-context task after Todd et al. 2024: {ICL_TASKS[name]}. "
        "5-10 demonstrations 'Q: x\nA: y' from the example's own split, then the query. "
        "Answers may be several tokens (answer_tokens multi): accuracy is greedy decoding "
        "reproducing the answer; first-token metrics are also reported. group = the query's "
        "input; splits by pair, and no demonstration comes from the other split.",
        "accuracy",
        seed,
        split_by="group",
        answer_tokens="multi",
    )
    return [header, *_examples(name, rows, splits)]


def make_induction(seed: int) -> list[dict]:
    """Induction: a random word sequence, then its repeat cut short; answer the next word."""
    rng = random.Random(f"{seed}-induction")
    rows = []
    for _ in range(N_INDUCTION):
        n = rng.choice(INDUCTION_LENGTHS)
        seq = rng.sample(INDUCTION_WORDS, n)
        # Cut after at least two repeated words, so the last prompt word's first occurrence
        # is a " word" token too (the very first word has no leading space).
        k = rng.randrange(2, n)
        prompt = " ".join(seq + seq[:k])
        # Counterfactual: the same first half, then k fresh words: nothing repeats.
        fresh = rng.sample([w for w in INDUCTION_WORDS if w not in seq], k)
        rows.append(
            {
                "prompt": prompt,
                "answer": f" {seq[k]}",
                "group": f"len{n:02d}",
                "counterfactual": " ".join(seq + fresh),
            }
        )
    header = _header(
        "induction",
        "Repeated-sequence copying: n distinct random words, then the same words again, cut "
        "after k >= 2 of them; the answer is word k+1, i.e. the word that followed the last "
        "prompt word the first time. Accuracy over the vocabulary. counterfactual: the same "
        "first half followed by k other words (no repeat). group = sequence length.",
        "accuracy",
        seed,
        per_tokenizer="drop_unfit",
    )
    return [header, *_examples("induction", rows, _splits(len(rows), rng))]


TASKS: dict[str, Callable[[int], list[dict]]] = {
    "ioi": make_ioi,
    "greater_than": make_greater_than,
    "capitals": make_capitals,
    "addition": make_addition,
    "induction": make_induction,
    **{name: partial(make_icl, name) for name in ICL_TASKS},
}


def write_all(out_dir: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every task file into `out_dir`; returns the paths written."""
    return write_tasks(TASKS, out_dir, seed)


def write_tasks(tasks: dict[str, Callable[[int], list[dict]]], out_dir: Path,
                seed: int) -> list[Path]:
    """Write `name.jsonl` of each of `tasks` (`name -> make(seed)`, its records) into
    `out_dir`, one JSON record a line; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in tasks.items():
        path = out_dir / f"{name}.jsonl"
        lines = [json.dumps(record, ensure_ascii=False) for record in make(seed)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")
        paths.append(path)
    return paths


def run_cli(write: Callable[[Path, int], list[Path]], default_out: Path, doc: str,
            argv: list[str] | None = None) -> None:
    """The command line every task generator shares: `--seed` and `--out` (default
    `default_out`), then `write(out, seed)` and one line per file written with its example
    count (the header line not counted). `doc` is the script's docstring; its first line is the
    help's description."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=default_out,
                        help=f"folder to write into (default: {default_out.name})")
    args = parser.parse_args(argv)
    for path in write(args.out, args.seed):
        n = sum(1 for _ in path.open(encoding="utf-8")) - 1
        print(f"{path}: {n} examples")


def main(argv: list[str] | None = None) -> None:
    run_cli(write_all, Path(__file__).resolve().parent, __doc__, argv)


if __name__ == "__main__":
    main()
