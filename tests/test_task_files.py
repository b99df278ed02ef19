"""The committed hub task files: well-formed, correct by their own rule, and reproducible.

Read with plain `json` so these checks do not depend on the task loader. Each example's
answer is recomputed from its prompt (the sum, the capital, the antonym, the repeated word...)
using the generator's tables, and the generator is rerun to check the files byte for byte.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import string
from pathlib import Path

import pytest

TASKS_DIR = Path(__file__).resolve().parent.parent / "tasks"
TASK_NAMES = ("ioi", "greater_than", "capitals", "addition", "antonyms", "induction")
# Greater-than answers continue a year ("17" + "32"), so they carry no leading space.
NO_SPACE_TASKS = {"greater_than"}
EXAMPLE_KEYS = {"id", "prompt", "answer", "wrong", "roles", "split", "group"}
MIN_EXAMPLES = 200


@functools.cache
def _generator():
    spec = importlib.util.spec_from_file_location(
        "generate_hub_tasks", TASKS_DIR / "generate_hub_tasks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _load(name: str) -> tuple[dict, list[dict]]:
    lines = (TASKS_DIR / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    return records[0], records[1:]


def _answers(example: dict) -> list[str]:
    answer = example["answer"]
    return list(answer) if isinstance(answer, list) else [answer]


def _template_regex(template: str) -> re.Pattern:
    """A format string as a regex with one named group per field."""
    parts = []
    for literal, field, _, _ in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(f"(?P<{field}>[^,?\\n]+)")
    return re.compile("".join(parts) + r"\Z")


def _match_any(templates, prompt: str) -> re.Match:
    for template in templates:
        match = _template_regex(template).match(prompt)
        if match:
            return match
    raise AssertionError(f"prompt matches no template: {prompt!r}")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_header(name):
    header, _ = _load(name)
    assert set(header) == {"task"}
    task = header["task"]
    expected = {"name", "description", "metric", "answer_scope", "candidates", "source"}
    assert set(task) == expected | {"prepend_bos"}
    assert task["name"] == name
    assert isinstance(task["description"], str) and task["description"]
    assert task["metric"] in {"accuracy", "logprob", "logit_diff"}
    assert task["prepend_bos"] is True
    assert re.fullmatch(r"python tasks/generate_hub_tasks\.py --seed \d+", task["source"])
    if task["answer_scope"] == "candidates":
        candidates = task["candidates"]
        assert candidates and all(isinstance(c, str) for c in candidates)
        assert len(set(candidates)) == len(candidates)
    else:
        assert task["answer_scope"] == "vocab" and task["candidates"] is None


@pytest.mark.parametrize("name", TASK_NAMES)
def test_examples_well_formed(name):
    header, examples = _load(name)
    candidates = header["task"]["candidates"]
    assert len(examples) >= MIN_EXAMPLES
    ids = [e["id"] for e in examples]
    assert len(set(ids)) == len(ids)
    for e in examples:
        assert set(e) <= EXAMPLE_KEYS and {"id", "prompt", "answer", "split"} <= set(e), e
        assert "roles" not in e, "hub tasks cannot know token boundaries"
        assert e["split"] in {"select", "heldout"}
        assert e["prompt"] and e["prompt"] == e["prompt"].rstrip(), e["id"]
        answers = _answers(e) + e.get("wrong", [])
        assert _answers(e) and all(isinstance(a, str) and a.strip() for a in answers)
        assert not set(_answers(e)) & set(e.get("wrong", [])), e["id"]
        if name in NO_SPACE_TASKS:
            assert all(a == a.strip() for a in answers), e["id"]
        else:
            assert all(a.startswith(" ") and a[1:] == a.strip() for a in answers), e["id"]
        if candidates is not None:
            assert set(answers) <= set(candidates), e["id"]


@pytest.mark.parametrize("name", TASK_NAMES)
def test_splits_non_empty_and_disjoint(name):
    _, examples = _load(name)
    prompts = {s: {e["prompt"] for e in examples if e["split"] == s} for s in ("select", "heldout")}
    assert prompts["select"] and prompts["heldout"]
    assert not prompts["select"] & prompts["heldout"]
    n_select = sum(e["split"] == "select" for e in examples)
    assert 0.4 <= n_select / len(examples) <= 0.6


def _units_by_split(examples, unit_of) -> dict[str, set]:
    units = {"select": set(), "heldout": set()}
    for e in examples:
        units[e["split"]].add(unit_of(e))
    return units


def test_addition_rule():
    for e in _load("addition")[1]:
        a, b = map(int, re.fullmatch(r"(\d\d) \+ (\d\d) =", e["prompt"]).groups())
        assert e["answer"] == f" {a + b}" and 10 <= a + b <= 99, e


def test_capitals_rule():
    gen = _generator()
    capital_of = dict(gen.CAPITALS)
    examples = _load("capitals")[1]
    for e in examples:
        country = _match_any(gen.CAPITAL_TEMPLATES, e["prompt"])["country"]
        assert e["answer"] == f" {capital_of[country]}", e
    units = _units_by_split(examples, lambda e: e["answer"])
    assert not units["select"] & units["heldout"], "a country is in both splits"


def test_antonyms_rule():
    gen = _generator()
    opposite = {}
    for a, b in gen.ANTONYM_PAIRS:
        opposite[a], opposite[b] = b, a
    assert len(opposite) == 2 * len(gen.ANTONYM_PAIRS), "a word is in two pairs"
    examples = _load("antonyms")[1]
    for e in examples:
        match = _match_any(gen.ANTONYM_TEMPLATES, e["prompt"]).groupdict()
        assert e["answer"] == f" {opposite[match['word']]}", e
        if "shot" in match:
            assert match["shot_answer"] == opposite[match["shot"]], e
            assert match["shot"] not in (match["word"], opposite[match["word"]]), e

    def pair_of(e):
        answer = e["answer"].strip()
        return frozenset((answer, opposite[answer]))

    units = _units_by_split(examples, pair_of)
    assert not units["select"] & units["heldout"], "an antonym pair is in both splits"


def test_ioi_rule():
    names = set(_generator().NAMES)
    for e in _load("ioi")[1]:
        io, (s,) = e["answer"].strip(), [w.strip() for w in e["wrong"]]
        assert io in names and s in names and io != s, e
        mentions = re.findall(r"\b[A-Z][a-z]+\b", e["prompt"])
        assert mentions.count(io) == 1 and mentions.count(s) == 2, e
        assert not e["prompt"].startswith((io, s)), "a sentence-initial name has no space"


def test_greater_than_rule():
    header, examples = _load("greater_than")
    candidates = header["task"]["candidates"]
    assert candidates == [f"{y:02d}" for y in range(100)]
    for e in examples:
        match = re.search(r"from the year (\d\d)(\d\d) to the year (\d\d)\Z", e["prompt"])
        assert match and match[1] == match[3], e["prompt"]
        start = int(match[2])
        assert e["answer"] and all(int(a) > start for a in e["answer"]), e["id"]
        assert all(int(w) <= start for w in e["wrong"]), e["id"]
        assert sorted(e["answer"] + e["wrong"]) == candidates, e["id"]


def test_induction_rule():
    for e in _load("induction")[1]:
        words = e["prompt"].split()
        last = words[-1]
        first = words.index(last)
        assert first not in (0, len(words) - 1), e["id"]
        assert e["answer"] == f" {words[first + 1]}", e["id"]
        assert words.count(last) == 2, e["id"]


def test_generator_reproduces_files(tmp_path):
    gen = _generator()
    seeds = {_load(name)[0]["task"]["source"].split()[-1] for name in TASK_NAMES}
    assert len(seeds) == 1, f"task files come from different seeds: {seeds}"
    written = gen.write_all(tmp_path, seed=int(seeds.pop()))
    assert sorted(p.name for p in written) == sorted(f"{n}.jsonl" for n in TASK_NAMES)
    for path in written:
        assert path.read_bytes() == (TASKS_DIR / path.name).read_bytes(), path.name
