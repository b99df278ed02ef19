"""The committed multiple-choice task files (`tasks/benchmarks/`): well-formed, correct by the
word lists, balanced, split by fact, and reproducible.

Read with plain `json` so these checks do not depend on the task loader. Every question is
parsed back from its prompt, its gold recomputed from the word list (`tasks/data/*.tsv`), its
distractors checked to be other outputs of that list, and every few-shot example checked to be
a true pair of the question's own split. The generator is rerun to check the files byte for byte.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.tasks.facts import BENCH_DIR, SPLITS, FactFiles

TASK_NAMES = ("mc_facts_letters", "mc_facts_text")
METRIC = {"mc_facts_letters": "acc", "mc_facts_text": "acc_norm"}
SHOTS = {"mc_facts_letters": 5, "mc_facts_text": 3}
EXAMPLE_KEYS = {"id", "prompt", "choices", "gold", "split", "group", "meta"}
FILES = FactFiles("generate_mc_tasks.py", TASK_NAMES, "mc_")


def _parse(name: str, example: dict) -> tuple[list[tuple[str, str]], str, list[str]]:
    """(few-shot (input, answer) pairs, the question's input, its option texts)."""
    gen, subject = FILES.generator, example["meta"]["subject"]
    blocks = example["prompt"].split("\n\n")
    if name == "mc_facts_letters":
        assert blocks[0] == gen.MMLU_HEADER.format(subject=gen.SUBJECTS[subject][0])
        parsed = []
        for block in blocks[1:]:
            question, *options, answer = block.split("\n")
            assert [o[:3] for o in options] == ["A. ", "B. ", "C. ", "D. "], block
            parsed.append((question, [o[3:] for o in options], answer))
        *shots, (question, options, answer) = parsed
        assert answer == "Answer:"
        demos = []
        for q, opts, a in shots:
            letter = re.fullmatch(r"Answer: ([ABCD])", a)[1]
            demos.append((FILES.question_input(subject, q), opts[gen.LETTERS.index(letter)]))
        return demos, FILES.question_input(subject, question), options
    return (*FILES.parse_open(subject, blocks), example["choices"])


@pytest.mark.parametrize("name", TASK_NAMES)
def test_header(name):
    header, _ = FILES.load(name)
    assert set(header) == {"task"}
    task = header["task"]
    keys = {"name", "description", "metric", "target_delimiter", "source", "split_by"}
    assert set(task) == keys
    assert task["name"] == name and task["metric"] == METRIC[name]
    assert task["target_delimiter"] == " " and task["split_by"] == "group"
    assert re.fullmatch(r"python tasks/generate_mc_tasks\.py --seed \d+", task["source"])
    assert "tasks/data/" in task["description"], "the description says where the data came from"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_examples_well_formed(name):
    _, examples = FILES.load(name)
    assert 100 <= len(examples) <= 200
    ids = [e["id"] for e in examples]
    assert len(set(ids)) == len(ids)
    for e in examples:
        assert set(e) == EXAMPLE_KEYS, e["id"]
        assert e["split"] in SPLITS
        assert e["prompt"] and e["prompt"] == e["prompt"].rstrip(), e["id"]
        choices = e["choices"]
        assert isinstance(choices, list) and len(choices) == 4, e["id"]
        assert all(isinstance(c, str) and c and c == c.strip() for c in choices), e["id"]
        assert len(set(choices)) == len(choices), e["id"]
        assert type(e["gold"]) is int and 0 <= e["gold"] < len(choices), e["id"]
        if name == "mc_facts_letters":
            assert choices == ["A", "B", "C", "D"], e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_gold_and_distractors_recomputed_from_the_word_lists(name):
    gen = FILES.generator
    for e in FILES.load(name)[1]:
        subject = e["meta"]["subject"]
        pairs = FILES.pairs(subject)
        _, x, options = _parse(name, e)
        assert e["group"] == f"{subject}:{x}", e["id"]
        y = dict(pairs)[x]
        assert options[e["gold"]] == y, e["id"]
        assert len(set(options)) == 4, e["id"]
        wrong = [o for i, o in enumerate(options) if i != e["gold"]]
        # Same type of answer (outputs of the same list), none a right answer to x either way.
        assert set(wrong) <= set(gen.distractor_pool(list(pairs), x, y)), e["id"]
        assert not {(x, w) for w in wrong} & set(pairs), e["id"]
        assert not {(w, x) for w in wrong} & set(pairs), e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_few_shot_examples_are_true_and_from_the_question_s_own_split(name):
    _, examples = FILES.load(name)
    for e in examples:
        demos, x, options = _parse(name, e)
        assert len(demos) == SHOTS[name], e["id"]
        FILES.check_demos(name, examples, e, demos, x)
        assert not {dy for _, dy in demos} & set(options), "a shown answer is an option"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_groups_never_cross_splits_and_splits_are_halves(name):
    per_subject = FILES.check_groups(FILES.load(name)[1])
    assert len(set(per_subject.values())) == 1, "every subject equally in each split"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_gold_positions_balanced_in_each_split(name):
    _, examples = FILES.load(name)
    for split in SPLITS:
        golds = Counter(e["gold"] for e in examples if e["split"] == split)
        assert sorted(golds) == [0, 1, 2, 3]
        assert max(golds.values()) - min(golds.values()) <= 1, (split, golds)


def test_text_choices_vary_in_length():
    """acc_norm differs from acc only when choices differ in length."""
    _, examples = FILES.load("mc_facts_text")
    varied = sum(len({len(c) for c in e["choices"]}) > 1 for e in examples)
    assert varied >= 0.9 * len(examples)


def test_generator_reproduces_files(tmp_path):
    FILES.check_reproduced(tmp_path)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_mc_file_obeys_the_loader_s_rules(name):
    from workbench import load_task

    path = BENCH_DIR / f"{name}.jsonl"
    task = load_task(path)  # raises on any broken rule
    assert task.name == name and len(task) == len(FILES.load(name)[1])
