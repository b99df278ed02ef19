"""The committed generation task files (`tasks/benchmarks/gen_*.jsonl`) are reproducible, and
`gen_facts.jsonl` is well-formed, every target recomputed from the word lists, split by fact.

Read with plain `json` so these checks do not depend on the task loader. Every question is
parsed back from its prompt, its target recomputed from the word list (`tasks/data/*.tsv`), and
every few-shot example checked to be a true pair of the question's own split that neither shows
the target nor names the question's input. The generator is rerun to check the file byte for
byte (`gen_arith.jsonl`'s own checks are in `test_gen_arith_file.py`).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.tasks.facts import BENCH_DIR, SPLITS, FactFiles

TASK_NAMES = ("gen_facts",)  # the word-fact files this module checks
EXAMPLE_KEYS = {"id", "prompt", "target", "split", "group", "meta"}
SHOTS = 3
FILES = FactFiles("generate_gen_tasks.py", (*TASK_NAMES, "gen_arith"), "gen_")


def _parse(example: dict) -> tuple[list[tuple[str, str]], str]:
    """(few-shot (input, answer) pairs, the question's input)."""
    return FILES.parse_open(example["meta"]["subject"], example["prompt"].split("\n\n"))


@pytest.mark.parametrize("name", TASK_NAMES)
def test_header(name):
    header, _ = FILES.load(name)
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
    _, examples = FILES.load(name)
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
    for e in FILES.load(name)[1]:
        subject = e["meta"]["subject"]
        _, x = _parse(e)
        assert e["group"] == f"{subject}:{x}", e["id"]
        assert e["target"] == dict(FILES.pairs(subject))[x], e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_few_shot_examples_are_true_and_from_the_question_s_own_split(name):
    _, examples = FILES.load(name)
    for e in examples:
        demos, x = _parse(e)
        assert len(demos) == SHOTS and len(set(demos)) == SHOTS, e["id"]
        FILES.check_demos(name, examples, e, demos, x)
        for dx, dy in demos:
            # No shown answer is the target; no shown pair names the input or the target.
            assert e["target"] not in (dx, dy) and x not in (dx, dy), (e["id"], dx, dy)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_groups_never_cross_splits_and_splits_are_halves(name):
    _, examples = FILES.load(name)
    per_subject = FILES.check_groups(examples)
    assert Counter(e["split"] for e in examples)["select"] == 84
    assert set(per_subject.values()) == {12} and len(per_subject) == 14


def test_generator_reproduces_files(tmp_path):
    FILES.check_reproduced(tmp_path)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_gen_file_obeys_the_loader_s_rules(name):
    from workbench import load_task
    from workbench.generation.settings import GenerationSettings

    task = load_task(BENCH_DIR / f"{name}.jsonl")  # raises on any broken rule
    assert task.is_generation and task.name == name and len(task) == len(FILES.load(name)[1])
    header, examples = FILES.load(name)
    assert task.generation == GenerationSettings(**header["task"]["generation"])
    first = examples[0]
    assert task.generation.score(" " + first["target"] + "\nQuestion:", first["target"]) == 1.0
    assert task.generation.score(" " + first["target"] + "s", first["target"]) == 0.0
