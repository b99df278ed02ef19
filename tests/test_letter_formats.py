"""`bench/letter_formats.py`, the letter-format probe: its base variant is the shipped letter
task question for question, and every variant keeps the generator's rules (letters as the only
choices, one split per fact, balanced gold letters, true answers at the gold letter)."""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import read_task_file

ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _bench():
    import importlib.util
    import sys

    # Registered before it runs: its dataclass looks its own module up in sys.modules.
    spec = importlib.util.spec_from_file_location("letter_formats", ROOT / "bench" /
                                                  "letter_formats.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["letter_formats"] = module
    spec.loader.exec_module(module)
    return module


def test_the_base_variant_is_the_shipped_letter_task():
    lf = _bench()
    _, shipped = read_task_file(ROOT / "tasks" / "benchmarks" / "mc_facts_letters.jsonl")
    built = lf.build(lf.VARIANTS["base"])
    assert len(built) == len(shipped)
    for b, s in zip(built, shipped, strict=True):
        assert {k: b[k] for k in ("id", "prompt", "choices", "gold", "split", "group")} == {
            k: s[k] for k in ("id", "prompt", "choices", "gold", "split", "group")}


@pytest.mark.parametrize("key", sorted(_bench().VARIANTS))
def test_every_variant_keeps_the_generator_s_rules(key):
    lf = _bench()
    v = lf.VARIANTS[key]
    records = lf.build(v)
    letters = list(lf.LETTERS[: v.n_options])
    split_of: dict[str, str] = {}
    for r in records:
        assert r["choices"] == letters and r["prompt"] == r["prompt"].rstrip()
        assert split_of.setdefault(r["group"], r["split"]) == r["split"]
        subject, x = r["group"].split(":", 1)
        answers = dict(lf.read_pairs(subject))
        *shots, last = r["prompt"].split("\n\n")[1:]
        options = last.split("\n")[1:-1]
        assert len(options) == v.n_options and answers[x] in options[r["gold"]]
        shown = [re.search(r"Answer: \(?([A-H])\)?$", s)[1] for s in shots]
        assert len(shown) == v.shots
        if v.balanced:
            counts = Counter(shown)
            assert max(counts.values()) - min(counts.values()) <= 1, (r["id"], shown)
    for split in lf.SPLITS:
        golds = Counter(r["gold"] for r in records if r["split"] == split)
        assert sorted(golds) == list(range(v.n_options))
        assert max(golds.values()) - min(golds.values()) <= 1, (key, split, golds)
