"""The committed generation task file (`tasks/benchmarks/gen_facts.jsonl`): well-formed, every
target recomputed from the word lists, split by fact, and reproducible.

Read with plain `json` so these checks do not depend on the task loader. Every question is
parsed back from its prompt, its target recomputed from the word list (`tasks/data/*.tsv`), and
every few-shot example checked to be a true pair of the question's own split that neither shows
the target nor names the question's input. The generator is rerun to check the file byte for
byte.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import load_script, read_task_file

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
BENCH_DIR = TASKS_DIR / "benchmarks"
TASK_NAMES = ("gen_facts",)
EXAMPLE_KEYS = {"id", "prompt", "target", "split", "group", "meta"}
SPLITS = ("select", "heldout")
SHOTS = 3


@functools.cache
def _generator():
    return load_script(TASKS_DIR / "generate_gen_tasks.py")


@functools.cache
def _load(name: str) -> tuple[dict, list[dict]]:
    return read_task_file(BENCH_DIR / f"{name}.jsonl")


@functools.cache
def _pairs(subject: str) -> tuple[tuple[str, str], ...]:
    return tuple(_generator().read_pairs(subject))


def _question_input(subject: str, question: str) -> str:
    """The input x of a question written from its subject's template."""
    template = _generator().SUBJECTS[subject][1]
    before, after = template.split("{x}")
    match = re.fullmatch(re.escape(before) + "(.+)" + re.escape(after), question)
    assert match, f"question {question!r} does not follow {template!r}"
    return match[1]


def _parse(example: dict) -> tuple[list[tuple[str, str]], str]:
    """(few-shot (input, answer) pairs, the question's input)."""
    subject = example["meta"]["subject"]
    *blocks, last = example["prompt"].split("\n\n")
    demos = []
    for block in blocks:
        q, a = re.fullmatch(r"Question: (.+)\nAnswer: (.+)", block).groups()
        demos.append((_question_input(subject, q), a))
    question = re.fullmatch(r"Question: (.+)\nAnswer:", last)[1]
    return demos, _question_input(subject, question)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_header(name):
    header, _ = _load(name)
    assert set(header) == {"task"}
    task = header["task"]
    keys = {"name", "description", "metric", "target_delimiter", "generation", "source",
            "split_by"}
    assert set(task) == keys
    assert task["name"] == name and task["metric"] == "exact_match"
    assert task["target_delimiter"] == " " and task["split_by"] == "group"
    assert task["generation"] == {"max_new_tokens": 16, "until": ["\n"],
                                  "extractor": "first_line"}
    assert re.fullmatch(r"python tasks/generate_gen_tasks\.py --seed \d+", task["source"])
    assert "tasks/data/" in task["description"], "the description says where the data came from"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_examples_well_formed(name):
    _, examples = _load(name)
    assert len(examples) == 168
    ids = [e["id"] for e in examples]
    assert len(set(ids)) == len(ids)
    for e in examples:
        assert set(e) == EXAMPLE_KEYS, e["id"]
        assert e["split"] in SPLITS
        assert e["prompt"] and e["prompt"] == e["prompt"].rstrip(), e["id"]
        assert isinstance(e["target"], str) and e["target"] == e["target"].strip(), e["id"]
        # The extractor `first_line` and the stop "\n" can return a target only on one line.
        assert e["target"] and "\n" not in e["target"], e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_targets_recomputed_from_the_word_lists(name):
    for e in _load(name)[1]:
        subject = e["meta"]["subject"]
        _, x = _parse(e)
        assert e["group"] == f"{subject}:{x}", e["id"]
        assert e["target"] == dict(_pairs(subject))[x], e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_few_shot_examples_are_true_and_from_the_question_s_own_split(name):
    gen = _generator()
    _, examples = _load(name)
    groups = {s: {e["group"] for e in examples if e["split"] == s} for s in SPLITS}
    for e in examples:
        subject = e["meta"]["subject"]
        demos, x = _parse(e)
        assert len(demos) == SHOTS and len(set(demos)) == SHOTS, e["id"]
        split_of = gen.pair_splits(0, name, subject)
        other = "heldout" if e["split"] == "select" else "select"
        for dx, dy in demos:
            assert (dx, dy) in set(_pairs(subject)) and dx != x, e["id"]
            assert split_of[dx] == e["split"], (e["id"], dx)
            # No fact of the other split is ever shown (held-out facts never while selecting).
            assert f"{subject}:{dx}" not in groups[other], (e["id"], dx)
            # No shown answer is the target; no shown pair names the input or the target.
            assert e["target"] not in (dx, dy) and x not in (dx, dy), (e["id"], dx, dy)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_groups_never_cross_splits_and_splits_are_halves(name):
    _, examples = _load(name)
    split_of: dict[str, str] = {}
    for e in examples:
        assert split_of.setdefault(e["group"], e["split"]) == e["split"], e["group"]
    assert len(split_of) == len(examples), "one question per fact"
    counts = Counter(e["split"] for e in examples)
    assert counts["select"] == counts["heldout"] == 84
    per_subject = Counter((e["meta"]["subject"], e["split"]) for e in examples)
    assert set(per_subject.values()) == {12} and len(per_subject) == 14


def test_generator_reproduces_files(tmp_path):
    gen = _generator()
    seeds = {_load(name)[0]["task"]["source"].split()[-1] for name in TASK_NAMES}
    assert seeds == {"0"}, f"task files come from other seeds than the tests read: {seeds}"
    written = gen.write_all(tmp_path, seed=0)
    assert sorted(p.name for p in written) == sorted(f"{n}.jsonl" for n in TASK_NAMES)
    for path in written:
        assert path.read_bytes() == (BENCH_DIR / path.name).read_bytes(), path.name
    shipped = sorted(p.name for p in BENCH_DIR.iterdir() if p.name.startswith("gen_"))
    assert shipped == sorted(p.name for p in written)


def test_another_seed_gives_other_files(tmp_path):
    gen = _generator()
    for path in gen.write_all(tmp_path, seed=1):
        assert path.read_bytes() != (BENCH_DIR / path.name).read_bytes(), path.name


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_gen_file_obeys_the_loader_s_rules(name):
    from workbench import load_task
    from workbench.generation.settings import GenerationSettings

    task = load_task(BENCH_DIR / f"{name}.jsonl")  # raises on any broken rule
    assert task.is_generation and task.name == name and len(task) == len(_load(name)[1])
    header, examples = _load(name)
    assert task.generation == GenerationSettings(**header["task"]["generation"])
    first = examples[0]
    assert task.generation.score(" " + first["target"] + "\nQuestion:", first["target"]) == 1.0
    assert task.generation.score(" " + first["target"] + "s", first["target"]) == 0.0
