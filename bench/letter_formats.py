"""Letter-answer (MMLU-style) multiple-choice formats: which one, if any, do the real models bind?

Builds variants of `tasks/benchmarks/mc_facts_letters.jsonl` in memory from the same word
lists and split rules as `tasks/generate_mc_tasks.py` (its `read_pairs`, `pair_splits` and
`distractor_pool`: a fact in one split only, few-shot examples from the question's own split
and subject, distractors other outputs of the same list, gold positions balanced per split)
and scores each with the workbench's own multiple-choice scoring (`encode_task` +
`choice_logliks`, lm-eval's `acc`: argmax of the letters' summed log-likelihoods). The
choices are always the letters alone. Varied: the number of options (2-4), the label style
(`A. x`, `(A) x`, `A) x`), the answer cue (`Answer:` then ` A`, or `Answer: (` then `A`), the
number of solved examples, and whether their gold letters are balanced (cycled) or drawn at
random. Printed per model, variant and split: n, acc with its Wilson 95% interval, chance,
whether the interval's lower bound is above chance, and (a diagnosis only, not a metric) the
share of the most-picked letter and the accuracy after subtracting each letter's mean
log-likelihood over the split (is there any binding under a letter bias?).

    python bench/letter_formats.py --models smollm2-135m --variants base two --limit 24
    python bench/letter_formats.py                      # every variant, both models, all

Choose a format on the select split; report the held-out split as it comes.
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tasks"))
sys.path.insert(0, str(ROOT / "bench"))
from generate_mc_tasks import (  # noqa: E402
    MMLU_HEADER,
    SPLITS,
    SUBJECTS,
    distractor_pool,
    pair_splits,
    read_pairs,
)
from reference import wilson  # noqa: E402

LETTERS = "ABCDEFGH"
LABELS = {"dot": "{L}. {x}", "paren": "({L}) {x}", "rparen": "{L}) {x}", "after": "{x} ({L})"}


@dataclass(frozen=True)
class Variant:
    n_options: int = 4
    label: str = "dot"  # key of LABELS
    cue: str = "plain"  # "plain": 'Answer:' + ' A'; "paren": 'Answer: (' + 'A'
    shots: int = 5
    balanced: bool = False  # few-shot golds cycle through the letters (else random)
    per_subject: int = 24  # questions per subject, half per split
    subjects: tuple[str, ...] = tuple(SUBJECTS)
    header: bool = True
    mixed: bool = False  # distractors: outputs of the other subjects' lists (another type)


VARIANTS = {
    "base": Variant(),  # the shipped mc_facts_letters format
    "balanced": Variant(balanced=True),
    "paren_cue": Variant(label="paren", cue="paren", balanced=True),
    "rparen": Variant(label="rparen", balanced=True),
    "shots10": Variant(shots=10, balanced=True),
    "three": Variant(n_options=3, balanced=True),
    "two": Variant(n_options=2, balanced=True),
    "two_paren": Variant(n_options=2, label="paren", cue="paren", balanced=True),
    "two_shots10": Variant(n_options=2, shots=10, balanced=True),
    "after": Variant(label="after", balanced=True),
    "two_after": Variant(n_options=2, label="after", balanced=True),
    "mixed": Variant(mixed=True, balanced=True),
    "two_mixed": Variant(n_options=2, mixed=True, balanced=True),
}


def _pool(v: Variant, subject: str, x: str, y: str) -> list[str]:
    """Wrong answers for the question about x: the generator's (other outputs of the same list)
    or, when `v.mixed`, outputs of the other subjects' lists (a different type of answer)."""
    pairs = read_pairs(subject)
    if not v.mixed:
        return distractor_pool(pairs, x, y)
    own = {b for _, b in pairs} | {a for a, _ in pairs}
    other = {b for s in v.subjects if s != subject for _, b in read_pairs(s)}
    return sorted(other - own)


def _facts(v: Variant, seed: int, name: str) -> list[dict]:
    """The generator's `_facts` with `v.n_options` options and `v.per_subject` questions."""
    rng = random.Random(f"{seed}-{name}")
    facts = []
    for subject in v.subjects:
        pairs, split_of = read_pairs(subject), pair_splits(seed, name, subject)
        for split in SPLITS:
            mine = [(x, y) for x, y in pairs if split_of[x] == split]
            for x, y in rng.sample(mine, v.per_subject // 2):
                wrong = rng.sample(_pool(v, subject, x, y), v.n_options - 1)
                facts.append({"subject": subject, "x": x, "y": y, "wrong": wrong, "split": split})
    for split in SPLITS:
        mine = [f for f in facts if f["split"] == split]
        golds = [i % v.n_options for i in range(len(mine))]
        rng.shuffle(golds)
        for fact, gold in zip(mine, golds, strict=True):
            fact["gold"] = gold
    return facts


def _shots(v: Variant, fact: dict, seed: int, name: str, rng: random.Random) -> list[dict]:
    pairs = read_pairs(fact["subject"])
    split_of = pair_splits(seed, name, fact["subject"])
    options = {fact["y"], *fact["wrong"]}
    pool = [(x, y) for x, y in pairs if split_of[x] == fact["split"] and x != fact["x"]]
    golds = [i % v.n_options for i in range(v.shots)]  # balanced: each letter equally often
    if v.balanced:
        rng.shuffle(golds)
    shots = []
    picked = rng.sample([(x, y) for x, y in pool if y not in options], v.shots)
    for (x, y), gold in zip(picked, golds, strict=True):
        wrong = rng.sample(sorted(set(_pool(v, fact["subject"], x, y)) - options),
                           v.n_options - 1)
        # Unbalanced: a random letter per shot, drawn as the generator draws it.
        shots.append({**fact, "x": x, "y": y, "wrong": wrong,
                      "gold": gold if v.balanced else rng.randrange(v.n_options)})
    return shots


def _block(v: Variant, fact: dict) -> str:
    texts = list(fact["wrong"])
    texts.insert(fact["gold"], fact["y"])
    question = SUBJECTS[fact["subject"]][1].format(x=fact["x"])
    options = [LABELS[v.label].format(L=LETTERS[i], x=t) for i, t in enumerate(texts)]
    return "\n".join([question, *options, "Answer: (" if v.cue == "paren" else "Answer:"])


def _solved(v: Variant, shot: dict) -> str:
    letter = LETTERS[shot["gold"]]
    return _block(v, shot) + (f"{letter})" if v.cue == "paren" else f" {letter}")


def build(v: Variant, seed: int = 0, name: str = "mc_facts_letters") -> list[dict]:
    """The variant's examples as task records (choices: the letters only)."""
    rng = random.Random(f"{seed}-{name}-shots")
    records = []
    for i, fact in enumerate(_facts(v, seed, name)):
        shots = [_solved(v, s) for s in _shots(v, fact, seed, name, rng)]
        head = [MMLU_HEADER.format(subject=SUBJECTS[fact["subject"]][0])] if v.header else []
        records.append({
            "id": f"{name}-{i:04d}",
            "prompt": "\n\n".join([*head, *shots, _block(v, fact)]),
            "choices": list(LETTERS[: v.n_options]),
            "gold": fact["gold"],
            "split": fact["split"],
            "group": f"{fact['subject']}:{fact['x']}",
        })
    return records


def score(model, v: Variant, limit: int | None, splits=SPLITS) -> dict[str, dict]:
    """Per split: n, acc count, chance, most-picked letter share, bias-corrected acc count."""
    from workbench import Task
    from workbench.metrics.choices import choice_logliks
    from workbench.tasks.encoding import encode_task

    records = build(v)
    if limit:
        records = [r for s in SPLITS for r in [r for r in records if r["split"] == s][:limit]]
    delim = "" if v.cue == "paren" else " "
    task = Task.from_records(records, name="letters", metric="acc", target_delimiter=delim,
                             split_by="group")
    out = {}
    for split in splits:
        batch = encode_task(model, task, split)
        with torch.no_grad():
            ll = choice_logliks(model, batch).cpu()
        gold = torch.tensor([e.gold for e in batch.task.examples])
        pred = ll.argmax(-1)
        centred = (ll - ll.mean(0, keepdim=True)).argmax(-1)
        out[split] = {
            "n": len(gold),
            "k": int((pred == gold).sum()),
            "chance": 1 / v.n_options,
            "top_share": float(pred.bincount(minlength=v.n_options).max()) / len(gold),
            "k_centred": int((centred == gold).sum()),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--limit", type=int, default=None, help="first N questions per split")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--splits", nargs="+", default=list(SPLITS), choices=SPLITS)
    args = parser.parse_args(argv)
    from workbench import load_model

    torch.set_num_threads(args.threads)
    print(f"# machine: {platform.processor() or platform.machine()}, {args.threads} threads, "
          f"torch {torch.__version__}")
    rows = ["| model | variant | split | n | acc [95% CI] | chance | above | top letter | "
            "centred acc |", "|---|---|---|---|---|---|---|---|---|"]
    for name in args.models:
        model = load_model(name, device="cpu", dtype="float32")
        for key in args.variants:
            start = time.perf_counter()
            result = score(model, VARIANTS[key], args.limit, args.splits)
            for split, r in result.items():
                lo, hi = wilson(r["k"], r["n"])
                line = (f"| {name} | {key} | {split} | {r['n']} | {r['k'] / r['n']:.3f} "
                        f"[{lo:.3f}, {hi:.3f}] | {r['chance']:.2f} | "
                        f"{'yes' if lo > r['chance'] else 'no'} | {r['top_share']:.2f} | "
                        f"{r['k_centred'] / r['n']:.3f} |")
                print(line, f"({time.perf_counter() - start:.0f} s)", flush=True)
                rows.append(line)
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
