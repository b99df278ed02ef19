"""Write the embedded model's task files, `tasks/embedded_*.jsonl`, from the language generators.

`python -m workbench.zoo.make_tasks --seed 0` draws, for each task, distinct prompts from
`workbench.zoo.language` and writes the first `N_PER_SPLIT` as the `select` split (where a head
search chooses heads) and the next `N_PER_SPLIT` as the `heldout` split (where its gain is
measured), so the two splits never share a prompt. Each line carries the prompt (words, no
BOS), the answer, the competing answer where there is one (`wrong`), a role per prompt word and
a `group` label (`marked`/`unmarked` for copy and map).

The copy and map files hold marked and unmarked prompts half and half (`P_MARKED`), labelled
by `group`: a head search run on the whole file is scored on both kinds, including the marked
prompts where removal has nothing to fix, and the per-group numbers show where a gain comes
from. (In the model's fine-tuning stage 91 % of map prompts and 34 % of copy prompts are
marked; the per-group numbers do not depend on that mix, the whole-file means do.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from workbench.zoo import language as lang

TASK_SEED = 0
N_PER_SPLIT = 600
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


def _task_rng(seed: int, task: str) -> np.random.Generator:
    return np.random.default_rng([seed, list(lang.GENERATORS).index(task)])


def split_batches(task: str, seed: int = TASK_SEED,
                  n: int = N_PER_SPLIT) -> dict[str, lang.Batch]:
    """The `select` and `heldout` prompts of `task`: 2n distinct prompts drawn with `seed`.

    A task with fewer than 2n distinct prompts (add: MODULUS**2) is split in halves instead.
    """
    n = min(n, lang.N_DISTINCT.get(task, 2 * n) // 2)
    rng = _task_rng(seed, task)
    seen: set[tuple[int, ...]] = set()
    chunks, kept = [], 0
    while kept < 2 * n:
        batch = lang.generate(task, 1000, rng)
        keep = []
        for i in range(len(batch)):
            key = tuple(batch.tokens[i, : batch.lengths[i]])
            if key not in seen:
                seen.add(key)
                keep.append(i)
        chunks.append(lang.take(batch, keep))
        kept += len(keep)
    rows = lang.concat(chunks)
    return {"select": lang.take(rows, np.arange(n)),
            "heldout": lang.take(rows, np.arange(n, 2 * n))}


def task_records(task: str, seed: int = TASK_SEED, n: int = N_PER_SPLIT) -> list[dict]:
    """The task file of `task` as a list of JSON-ready dicts: a header, then one per prompt."""
    header = {"task": {
        "name": task,
        "description": lang.DESCRIPTIONS[task],
        "metric": "accuracy",
        "answer_scope": "vocab",
        "candidates": None,
        "source": f"python -m workbench.zoo.make_tasks --seed {seed}",
        "prepend_bos": True,
    }}
    records = [header]
    for split, batch in split_batches(task, seed, n).items():
        for i in range(len(batch)):
            length = batch.lengths[i]
            rec = {
                "id": f"{task}-{split}-{i:04d}",
                "prompt": " ".join(lang.prompt_words(batch, i)),
                "answer": lang.VOCAB[batch.answer[i]],
            }
            if batch.wrong[i] >= 0:
                rec["wrong"] = [lang.VOCAB[batch.wrong[i]]]
            rec["roles"] = list(batch.roles[i, :length])
            rec["split"] = split
            rec["group"] = str(batch.group[i])
            records.append(rec)
    return records


def write_tasks(out_dir: Path = TASKS_DIR, seed: int = TASK_SEED) -> list[Path]:
    """Write `embedded_<task>.jsonl` for every task into `out_dir`; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for task in lang.GENERATORS:
        path = out_dir / f"{task}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in task_records(task, seed)))
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=TASK_SEED)
    parser.add_argument("--out", type=Path, default=TASKS_DIR)
    args = parser.parse_args(argv)
    for path in write_tasks(args.out, args.seed):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
