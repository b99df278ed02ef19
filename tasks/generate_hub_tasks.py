"""Write the task files for hub models (GPT-2, Pythia, ...) from templates and fixed tables.

Each task is a family of prompts whose correct next token we know by construction: the
indirect object of an IOI sentence, a year later than a given one, a country's capital, a sum,
an antonym, the next word of a repeated sequence. Building them from small tables and a seed
(rather than downloading a data set) keeps every file reproducible and reviewable: running

    python tasks/generate_hub_tasks.py --seed 0

rewrites `tasks/{ioi,greater_than,capitals,addition,antonyms,induction}.jsonl` byte for byte.
Answers are words, names or numbers that are single GPT-2 BPE tokens with their leading
space (greater-than answers continue a year and have none); all were checked against GPT-2's
vocabulary when the tables were written, and the task loader checks again against whichever
model is loaded. The file format is described in `tasks/README.md`.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

DEFAULT_SEED = 0

# Names from the IOI paper's list (Wang et al. 2022), each one GPT-2 token with a leading space.
NAMES = (
    "Aaron", "Adam", "Alice", "Alicia", "Allison", "Amanda", "Amber", "Amy", "Andrea",
    "Andrew", "Angela", "Anna", "Anthony", "Ashley", "Benjamin", "Bob", "Bradley", "Brandon",
    "Brian", "Bryan", "Charles", "Christina", "Christine", "Christopher", "Cody", "Courtney",
    "Crystal", "Dan", "Daniel", "Danielle", "David", "Dustin", "Elizabeth", "Emily", "Emma",
    "Eric", "Erica", "Erin", "Frank", "George", "Gregory", "Heather", "Helen", "Jacob", "James",
    "Jamie", "Jason", "Jeffrey", "Jennifer", "Jeremy", "Jesse", "Jessica", "John", "Jonathan",
    "Jose", "Joseph", "Joshua", "Justin", "Karen", "Katherine", "Katie", "Kelly", "Kenneth",
    "Kevin", "Kimberly", "Kristen", "Kyle", "Laura", "Lauren", "Linda", "Lindsay", "Lindsey",
    "Lisa", "Mary", "Matthew", "Megan", "Melissa", "Michael", "Michelle", "Nathan", "Nicholas",
    "Nicole", "Patrick", "Paul", "Peter", "Rachel", "Rebecca", "Richard", "Robert", "Ryan",
    "Samantha", "Samuel", "Sara", "Sarah", "Scott", "Sean", "Shannon", "Stephanie", "Stephen",
    "Steven", "Susan", "Thomas", "Tiffany", "Timothy", "Tom", "Travis", "Tyler", "Vanessa",
    "William",
)  # fmt: skip

# IOI templates after Wang et al. 2022. {A} and {B} are the first two mentions, {S} the
# repeated subject; names never open a sentence, so every mention is the same " Name" token.
IOI_TEMPLATES = (
    "Then, {A} and {B} went to the {place}. {S} gave a {obj} to",
    "Then, {A} and {B} had a lot of fun at the {place}. {S} gave a {obj} to",
    "When {A} and {B} got a {obj} at the {place}, {S} decided to give it to",
    "When {A} and {B} went to the {place}, {S} gave a {obj} to",
    "After {A} and {B} went to the {place}, {S} gave a {obj} to",
    "While {A} and {B} were working at the {place}, {S} gave a {obj} to",
    "Friends {A} and {B} found a {obj} at the {place}. {S} gave it to",
    "The {place} that {A} and {B} went to had a {obj}. {S} gave it to",
)
IOI_PLACES = ("store", "garden", "restaurant", "school", "hospital", "office", "station", "park")
IOI_OBJECTS = ("drink", "book", "ring", "necklace", "basketball", "computer", "snack", "bone")

# Greater-than after Hanna et al. 2023. GPT-2 splits " 1732" into " 17" + "32" for every
# year of centuries 12-17 with last two digits 10-98, except the two listed below, which it
# merges into three-digit pieces; there the prompt's last token would not be the century.
GT_NOUNS = (
    "war", "dynasty", "expedition", "epidemic", "siege", "reign", "voyage", "pilgrimage",
    "campaign", "conflict", "famine", "plague", "rebellion", "occupation", "marriage",
    "journey", "construction", "trial", "treaty", "alliance", "rivalry", "feud", "drought",
    "crusade", "revolt", "blockade", "exile", "truce", "kingdom", "project",
)  # fmt: skip
GT_CENTURIES = range(12, 18)
GT_YY = range(10, 99)
GT_SPLIT_BADLY = (1280, 1440)
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

# Antonym pairs with one clear opposite each way; both words are one GPT-2 token.
ANTONYM_PAIRS = (
    ("hot", "cold"), ("fast", "slow"), ("happy", "sad"), ("good", "bad"), ("rich", "poor"),
    ("strong", "weak"), ("true", "false"), ("win", "lose"), ("love", "hate"),
    ("early", "late"), ("inside", "outside"), ("before", "after"), ("above", "below"),
    ("north", "south"), ("east", "west"), ("push", "pull"), ("buy", "sell"), ("yes", "no"),
    ("day", "night"), ("black", "white"), ("male", "female"), ("alive", "dead"),
    ("always", "never"), ("first", "last"), ("top", "bottom"), ("wet", "dry"),
    ("full", "empty"), ("thick", "thin"), ("cheap", "expensive"), ("clean", "dirty"),
    ("loud", "quiet"), ("rough", "smooth"), ("deep", "shallow"), ("wide", "narrow"),
    ("friend", "enemy"), ("winner", "loser"), ("success", "failure"), ("accept", "reject"),
    ("increase", "decrease"), ("maximum", "minimum"), ("positive", "negative"),
    ("public", "private"), ("input", "output"), ("import", "export"),
    ("question", "answer"), ("entrance", "exit"), ("major", "minor"),
    ("internal", "external"), ("ancient", "modern"), ("guilty", "innocent"),
    ("legal", "illegal"), ("possible", "impossible"), ("visible", "invisible"),
    ("correct", "incorrect"), ("known", "unknown"), ("boy", "girl"), ("king", "queen"),
    ("husband", "wife"), ("man", "woman"), ("brother", "sister"), ("mother", "father"),
    ("son", "daughter"), ("asleep", "awake"), ("odd", "even"), ("horizontal", "vertical"),
    ("singular", "plural"), ("victory", "defeat"), ("war", "peace"), ("sunrise", "sunset"),
    ("floor", "ceiling"), ("dawn", "dusk"), ("summer", "winter"), ("heaven", "hell"),
    ("hero", "villain"), ("offense", "defense"), ("arrival", "departure"),
    ("include", "exclude"), ("remember", "forget"), ("give", "take"), ("come", "go"),
)  # fmt: skip
ANTONYM_TEMPLATES = (
    "The opposite of {word} is",
    "The opposite of {shot} is {shot_answer}, and the opposite of {word} is",
)

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

N_IOI = 320
N_GREATER_THAN = 300
N_ADDITION = 300
N_INDUCTION = 300


def _header(name: str, description: str, metric: str, seed: int, candidates=None) -> dict:
    return {
        "task": {
            "name": name,
            "description": description,
            "metric": metric,
            "answer_scope": "vocab" if candidates is None else "candidates",
            "candidates": None if candidates is None else list(candidates),
            "source": f"python tasks/generate_hub_tasks.py --seed {seed}",
            "prepend_bos": True,
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


def _examples(name: str, rows: list[dict], splits: list[str]) -> list[dict]:
    """Give rows ids and splits, with keys in the documented order."""
    keys = ("prompt", "answer", "wrong", "split", "group")
    out = []
    for i, (row, split) in enumerate(zip(rows, splits, strict=True)):
        row = {**row, "split": split}
        out.append({"id": f"{name}-{i:04d}", **{k: row[k] for k in keys if k in row}})
    return out


def make_ioi(seed: int) -> list[dict]:
    """IOI: 'When Mary and John went to the store, John gave a drink to' -> ' Mary'."""
    rng = random.Random(f"{seed}-ioi")
    rows, seen = [], set()
    while len(rows) < N_IOI:
        t = rng.randrange(len(IOI_TEMPLATES))
        io, s = rng.sample(NAMES, 2)
        order = rng.choice(("ABBA", "BABA"))  # ABBA: the answer is mentioned first
        place, obj = rng.choice(IOI_PLACES), rng.choice(IOI_OBJECTS)
        a, b = (io, s) if order == "ABBA" else (s, io)
        prompt = IOI_TEMPLATES[t].format(A=a, B=b, S=s, place=place, obj=obj)
        if prompt in seen:
            continue
        seen.add(prompt)
        rows.append(
            {"prompt": prompt, "answer": f" {io}", "wrong": [f" {s}"], "group": f"t{t}-{order}"}
        )
    header = _header(
        "ioi",
        "Indirect-object identification (Wang et al. 2022): two names are introduced, one "
        "is repeated as the subject, and the sentence ends where the other (the indirect "
        "object) should follow. logit_diff = logit(indirect object) - logit(subject). "
        "group = template id and name order (ABBA: the answer is named first).",
        "logit_diff",
        seed,
    )
    return [header, *_examples("ioi", rows, _splits(len(rows), rng))]


def make_greater_than(seed: int) -> list[dict]:
    """Greater-than: 'The war lasted from the year 1732 to the year 17' -> '33'..'99'."""
    rng = random.Random(f"{seed}-greater_than")
    years = [
        100 * c + yy for c in GT_CENTURIES for yy in GT_YY if 100 * c + yy not in GT_SPLIT_BADLY
    ]
    rows, seen = [], set()
    while len(rows) < N_GREATER_THAN:
        noun, year = rng.choice(GT_NOUNS), rng.choice(years)
        if (noun, year) in seen:
            continue
        seen.add((noun, year))
        century, yy = divmod(year, 100)
        rows.append(
            {
                "prompt": f"The {noun} lasted from the year {year} to the year {century}",
                "answer": [f"{y:02d}" for y in range(yy + 1, 100)],
                "wrong": [f"{y:02d}" for y in range(yy + 1)],
                "group": str(century),
            }
        )
    header = _header(
        "greater_than",
        "Greater-than (Hanna et al. 2023): the prompt ends with the century of an end year "
        "that must be later than the start year. The answer is the two-digit continuation "
        "with NO leading space (GPT-2 writes 1732 as ' 17' + '32'). Acceptable answers: "
        "every YY greater than the start year's last two digits; wrong: every YY up to and "
        "including them. Accuracy is taken over the 100 candidates '00'..'99'. "
        "group = century.",
        "accuracy",
        seed,
        candidates=GT_CANDIDATES,
    )
    return [header, *_examples("greater_than", rows, _splits(len(rows), rng))]


def make_capitals(seed: int) -> list[dict]:
    """Capitals: 'The capital of France is' -> ' Paris', several phrasings per country."""
    rng = random.Random(f"{seed}-capitals")
    # Split by country so that no fact is both selected on and held out under another wording.
    country_split = _splits(len(CAPITALS), rng)
    rows, splits = [], []
    for (country, capital), split in zip(CAPITALS, country_split, strict=True):
        for t, template in enumerate(CAPITAL_TEMPLATES):
            prompt = template.format(country=country)
            rows.append({"prompt": prompt, "answer": f" {capital}", "group": f"t{t}"})
            splits.append(split)
    header = _header(
        "capitals",
        "Country -> capital city facts, well-known pairs only, in several phrasings. Accuracy: "
        "the capital is the top next token over the whole vocabulary. Split by country. "
        "group = phrasing id.",
        "accuracy",
        seed,
    )
    return [header, *_examples("capitals", rows, splits)]


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
    )
    return [header, *_examples("addition", rows, _splits(len(rows), rng))]


def make_antonyms(seed: int) -> list[dict]:
    """Antonyms: 'The opposite of hot is' -> ' cold', both directions of every pair."""
    rng = random.Random(f"{seed}-antonyms")
    pair_split = _splits(len(ANTONYM_PAIRS), rng)
    directed = [(w, o, p) for p, (a, b) in enumerate(ANTONYM_PAIRS) for w, o in ((a, b), (b, a))]
    rows, splits = [], []
    for word, opposite, p in directed:
        for t, template in enumerate(ANTONYM_TEMPLATES):
            # The one-shot demonstration comes from another pair, so it never gives the answer.
            shot, shot_answer, _ = rng.choice([d for d in directed if d[2] != p])
            prompt = template.format(word=word, shot=shot, shot_answer=shot_answer)
            rows.append({"prompt": prompt, "answer": f" {opposite}", "group": f"t{t}"})
            splits.append(pair_split[p])
    header = _header(
        "antonyms",
        "Antonyms: 'The opposite of hot is' -> ' cold', both directions of each pair, "
        "zero-shot (group t0) and with one demonstration from another pair (group t1). "
        "Accuracy over the vocabulary. Split by pair.",
        "accuracy",
        seed,
    )
    return [header, *_examples("antonyms", rows, splits)]


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
        rows.append({"prompt": prompt, "answer": f" {seq[k]}", "group": f"len{n:02d}"})
    header = _header(
        "induction",
        "Repeated-sequence copying: n distinct random words, then the same words again, cut "
        "after k >= 2 of them; the answer is word k+1, i.e. the word that followed the last "
        "prompt word the first time. Accuracy over the vocabulary. group = sequence length.",
        "accuracy",
        seed,
    )
    return [header, *_examples("induction", rows, _splits(len(rows), rng))]


TASKS: dict[str, Callable[[int], list[dict]]] = {
    "ioi": make_ioi,
    "greater_than": make_greater_than,
    "capitals": make_capitals,
    "addition": make_addition,
    "antonyms": make_antonyms,
    "induction": make_induction,
}


def write_all(out_dir: Path, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write every task file into `out_dir`; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in TASKS.items():
        path = out_dir / f"{name}.jsonl"
        lines = [json.dumps(record, ensure_ascii=False) for record in make(seed)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write into (default: this script's folder)",
    )
    args = parser.parse_args(argv)
    for path in write_all(args.out, args.seed):
        n = sum(1 for _ in path.open(encoding="utf-8")) - 1
        print(f"{path}: {n} examples")


if __name__ == "__main__":
    main()
