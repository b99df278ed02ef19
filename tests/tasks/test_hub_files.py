"""The committed hub task files: well-formed, correct by their own rule, and reproducible.

Read with plain `json` so these checks do not depend on the task loader. Each example's
answer is recomputed from its prompt (the sum, the capital, the antonym, the repeated word...)
using the generator's tables, and the generator is rerun to check the files byte for byte.
Last, every shipped task file (`tasks/*.jsonl`) loads: `load_task` finds no broken rule.
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path

import pytest

from tests.helpers import load_script, read_task_file
from workbench import load_task

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
ICL_NAMES = (
    "antonyms", "country_capital", "country_currency", "english_french", "present_past",
    "singular_plural", "person_occupation",
)  # fmt: skip
TASK_NAMES = ("ioi", "greater_than", "capitals", "addition", "induction", *ICL_NAMES)
# Greater-than answers continue a year ("17" + "32"), so they carry no leading space.
NO_SPACE_TASKS = {"greater_than"}
EXAMPLE_KEYS = {
    "id",
    "prompt",
    "answer",
    "wrong",
    "roles",
    "split",
    "group",
    "counterfactual",
    "meta",
}
MIN_EXAMPLES = 145
MAX_BYTES = 1_000_000  # all hub task files and their word lists together


@functools.cache
def _generator():
    return load_script(TASKS_DIR / "generate_hub_tasks.py")


@functools.cache
def _load(name: str) -> tuple[dict, list[dict]]:
    return read_task_file(TASKS_DIR / f"{name}.jsonl")


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
    from workbench.tasks.format import HEADER_KEYS
    from workbench.tasks.task import METRIC_NAMES

    header, _ = _load(name)
    assert set(header) == {"task"}
    task = header["task"]
    expected = {"name", "description", "metric", "answer_scope", "candidates", "source"}
    assert expected | {"split_by"} <= set(task) <= set(HEADER_KEYS)
    assert task["name"] == name
    assert isinstance(task["description"], str) and task["description"]
    assert task["metric"] in METRIC_NAMES
    # No BOS forced: each model gets the ids its own tokenizer gives.
    assert "prepend_bos" not in task
    assert task.get("answer_tokens", "single") == ("multi" if name in ICL_NAMES else "single")
    assert re.fullmatch(r"python tasks/generate_hub_tasks\.py --seed \d+", task["source"])
    if task["answer_scope"] == "candidates":
        candidates = task["candidates"]
        assert candidates and all(isinstance(c, str) for c in candidates)
        assert len(set(candidates)) == len(candidates)
    else:
        assert task["answer_scope"] == "vocab" and task["candidates"] is None


def test_total_size_is_small():
    files = [TASKS_DIR / f"{n}.jsonl" for n in TASK_NAMES] + list((TASKS_DIR / "data").glob("*"))
    assert sum(f.stat().st_size for f in files) < MAX_BYTES


@pytest.mark.parametrize("name", TASK_NAMES)
def test_groups_never_cross_splits(name):
    header, examples = _load(name)
    if header["task"]["split_by"] != "group":
        return
    split_of: dict[str, str] = {}
    for e in examples:
        assert split_of.setdefault(e["group"], e["split"]) == e["split"], e["group"]
    if name in ICL_NAMES:
        assert len(split_of) >= 145, "too few independent pairs"


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
        template = gen.CAPITAL_TEMPLATES[e["meta"]["template"]]
        assert e["prompt"] == template.format(country=e["group"]), e
        assert e["answer"] == f" {capital_of[e['group']]}", e
    units = _units_by_split(examples, lambda e: e["answer"])
    assert not units["select"] & units["heldout"], "a country is in both splits"


def _demos(prompt: str) -> tuple[list[tuple[str, str]], str]:
    """The (x, y) demonstrations of a function-vector prompt and its query x."""
    blocks = prompt.split("\n\n")
    demos = [tuple(re.fullmatch(r"Q: (.+)\nA: (.+)", b).groups()) for b in blocks[:-1]]
    query = re.fullmatch(r"Q: (.+)\nA:", blocks[-1])[1]
    return demos, query


@pytest.mark.parametrize("name", ICL_NAMES)
def test_icl_rule_and_no_heldout_pair_in_a_select_prompt(name):
    gen = _generator()
    pairs = gen.read_pairs(name)
    assert len(pairs) >= 145 and len({x for x, _ in pairs}) == len(pairs)
    output = dict(pairs)
    examples = _load(name)[1]
    assert sorted(e["group"] for e in examples) == sorted(output), "each pair is one query"
    split_of = {e["group"]: e["split"] for e in examples}
    for e in examples:
        demos, query = _demos(e["prompt"])
        assert query == e["group"] and e["answer"] == f" {output[query]}", e["id"]
        assert 5 <= len(demos) <= 10, e["id"]
        for x, y in demos:
            assert output[x] == y, e["id"]
            assert x != query, e["id"]
            # Demonstrations come from the example's own split: no held-out pair is ever
            # shown while selecting heads, and no selected pair leaks into a held-out prompt.
            assert split_of[x] == e["split"], (e["id"], x)
    heldout_pairs = {(x, output[x]) for x, s in split_of.items() if s == "heldout"}
    for e in examples:
        if e["split"] == "select":
            shown = set(_demos(e["prompt"])[0]) | {(e["group"], e["answer"].strip())}
            assert not shown & heldout_pairs, e["id"]


def test_ioi_rule():
    gen = _generator()
    names = set(gen.NAMES)
    assert len(gen.IOI_TEMPLATES) == 15
    seen = {(t, o): 0 for t in range(15) for o in ("ABBA", "BABA")}
    for e in _load("ioi")[1]:
        io, (s,) = e["answer"].strip(), [w.strip() for w in e["wrong"]]
        assert io in names and s in names and io != s, e
        t, order = e["meta"]["template"], e["meta"]["order"]
        seen[(t, order)] += 1
        mentions = [m for m in re.findall(r"\b[A-Z][a-z]+\b", e["prompt"]) if m in names]
        assert mentions == ([io, s, s] if order == "ABBA" else [s, io, s]), e
        assert e["group"] == "+".join(sorted((io, s)))
        # ABC counterfactual: the same template with three distinct other names.
        cf = [m for m in re.findall(r"\b[A-Z][a-z]+\b", e["counterfactual"]) if m in names]
        assert len(cf) == 3 and len(set(cf)) == 3 and not set(cf) & {io, s}, e
        strip = lambda text, ns: functools.reduce(lambda a, n: a.replace(n, "_"), ns, text)  # noqa: E731
        assert strip(e["prompt"], {io, s}) == strip(e["counterfactual"], set(cf)), e["id"]
        assert not e["prompt"].startswith((io, s)), "a sentence-initial name has no space"
    assert len(set(seen.values())) == 1, "templates and orders are balanced"


def test_greater_than_rule():
    header, examples = _load("greater_than")
    task = header["task"]
    assert task["metric"] == "prob_diff" and task["checks"] == ["year_split"]
    candidates = task["candidates"]
    assert candidates == [f"{y:02d}" for y in range(100)]
    per_yy: dict[int, int] = {}
    for e in examples:
        match = re.search(r"from the year (\d\d)(\d\d) to the year (\d\d)\Z", e["prompt"])
        assert match and match[1] == match[3], e["prompt"]
        start = int(match[2])
        per_yy[start] = per_yy.get(start, 0) + 1
        assert e["group"] == match[1] + match[2]
        assert e["answer"] and all(int(a) > start for a in e["answer"]), e["id"]
        assert all(int(w) <= start for w in e["wrong"]), e["id"]
        assert sorted(e["answer"] + e["wrong"]) == candidates, e["id"]
        assert e["counterfactual"] == e["prompt"].replace(match[1] + match[2], match[1] + "01", 1)
    assert sorted(per_yy) == list(range(2, 99)) and len(set(per_yy.values())) == 1


def test_induction_rule():
    for e in _load("induction")[1]:
        words = e["prompt"].split()
        last = words[-1]
        first = words.index(last)
        assert first not in (0, len(words) - 1), e["id"]
        assert e["answer"] == f" {words[first + 1]}", e["id"]
        assert words.count(last) == 2, e["id"]
        cf = e["counterfactual"].split()
        n = int(e["group"][3:])
        assert len(cf) == len(words) and cf[:n] == words[:n], e["id"]
        assert len(set(cf)) == len(cf), "nothing repeats in the counterfactual"


def test_generator_reproduces_files(tmp_path):
    gen = _generator()
    seeds = {_load(name)[0]["task"]["source"].split()[-1] for name in TASK_NAMES}
    assert len(seeds) == 1, f"task files come from different seeds: {seeds}"
    written = gen.write_all(tmp_path, seed=int(seeds.pop()))
    assert sorted(p.name for p in written) == sorted(f"{n}.jsonl" for n in TASK_NAMES)
    for path in written:
        assert path.read_bytes() == (TASKS_DIR / path.name).read_bytes(), path.name


@pytest.mark.parametrize("path", sorted(TASKS_DIR.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_shipped_task_obeys_the_rules(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    task = load_task(path)  # raises on any broken rule
    assert task.name == path.stem and len(task) == len(lines) - 1
