"""lm-eval task YAMLs over local files for the tests (nothing is downloaded): the shipped
ARC-style fixture (`data/arc_style.yaml`) with its data paths made absolute, and tasks over the
tiny GPT-2's word vocabulary (`tests.helpers.save_tiny_gpt2`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
ROOT = DATA.parent.parent.parent

METRICS = """metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


def arc_style(folder: Path, **overrides: str) -> Path:
    """`data/arc_style.yaml` copied into `folder` with its `data_files` absolute (so lm-eval
    reads them from any working directory) and each `key: value` line of `overrides`
    replaced or added. Returns the YAML's path."""
    return local_yaml("arc_style", folder, **overrides)


def gsm_style(folder: Path, **overrides: str) -> Path:
    """`data/gsm_style.yaml` (a GSM8K-style generate_until task) copied as `arc_style`."""
    return local_yaml("gsm_style", folder, **overrides)


def local_yaml(stem: str, folder: Path, **overrides: str) -> Path:
    """`data/<stem>.yaml` copied into `folder` as `arc_style` describes."""
    text = (DATA / f"{stem}.yaml").read_text()
    for name in (f"{stem}_train.jsonl", f"{stem}.jsonl"):
        text = text.replace(f"tests/lm_eval/data/{name}", str(DATA / name))
    lines, skipping = [], False
    for line in text.splitlines():  # drop each overridden key with its indented block
        if not line.startswith((" ", "-")):
            skipping = line.split(":")[0] in overrides
        if not skipping:
            lines.append(line)
    lines += [f"{k}: {v}" for k, v in overrides.items()]
    path = folder / f"{overrides.get('task', stem)}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def word_task(folder: Path, n: int = 30, n_words: int = 20, seed: int = 0,
              name: str = "tiny_mc") -> Path:
    """A multiple-choice task over the words `w0..w{n-1}` in `folder` (`name.yaml` and its
    JSONL): contexts of 2-5 words, 2-4 distinct choices of 1-3 words each (so `acc_norm`
    differs from `acc`), a random gold choice. Returns the YAML's path."""
    rng = np.random.default_rng(seed)

    def words(k: int) -> str:
        return " ".join(f"w{int(j)}" for j in rng.integers(0, n_words, size=k))

    rows = []
    for i in range(n):
        choices: list[str] = []
        k = int(rng.integers(2, 5))
        while len(choices) < k:
            c = words(int(rng.integers(1, 4)))
            choices += [c] if c not in choices else []
        rows.append({"id": i, "text": words(int(rng.integers(2, 6))), "choices": choices,
                     "label": int(rng.integers(0, len(choices)))})
    data = folder / f"{name}.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    path = folder / f"{name}.yaml"
    path.write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{text}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: label\n'
        + METRICS
    )
    return path
