"""The committed arithmetic generation task (`tasks/benchmarks/gen_arith.jsonl`): well-formed,
every problem and solved example parsed back from its prompt and recomputed, every target what
lm-eval gsm8k's `flexible-extract` reads from the problem's solution, split by arithmetic fact.

Read with plain `json` so these checks do not depend on the task loader (the last test loads it
by name). `test_gen_files.py` reruns the generator and checks this file byte for byte.
"""

from __future__ import annotations

import functools
import re
import string
from collections import Counter

from tests.helpers import load_script, read_task_file
from tests.tasks.facts import BENCH_DIR, SPLITS, TASKS_DIR

NAME = "gen_arith"
EXAMPLE_KEYS = {"id", "prompt", "target", "split", "group", "meta"}
SHOTS = 3
# lm-eval gsm8k's filter and exact_match options (lm_eval/tasks/gsm8k/gsm8k.yaml)
GSM8K_GENERATION = {
    "max_new_tokens": 16, "until": ["\n"], "extractor": "flexible-extract",
    "ignore_case": True, "ignore_punctuation": False,
    "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"],
}  # fmt: skip


@functools.cache
def _gen():
    return load_script(TASKS_DIR / "generate_gen_tasks.py")


@functools.cache
def _file() -> tuple[dict, list[dict]]:
    return read_task_file(BENCH_DIR / f"{NAME}.jsonl")


@functools.cache
def _patterns() -> dict[str, tuple[str, re.Pattern]]:
    """template -> (operation, a regex of its text with groups name, obj, a, b)."""
    out = {}
    for template, op, text in _gen().ARITH_TEMPLATES:
        pattern, seen = "", set()
        for literal, field, _, _ in string.Formatter().parse(text):
            pattern += re.escape(literal)
            if field is None:
                continue
            if field in seen:
                pattern += f"(?P={field})"
            else:
                seen.add(field)
                pattern += {"name": r"(?P<name>[A-Z][a-z]+)", "obj": r"(?P<obj>[a-z]+)",
                            "a": r"(?P<a>\d+)", "b": r"(?P<b>\d+)"}[field]
        out[template] = (op, re.compile(pattern))
    return out


def _problem(question: str) -> tuple[str, str, int, int]:
    """(template, operation, a, b) of a question; it follows exactly one template."""
    found = [(t, op, m) for t, (op, p) in _patterns().items() if (m := p.fullmatch(question))]
    assert len(found) == 1, f"{question!r} follows {len(found)} templates"
    t, op, m = found[0]
    assert m.groupdict().get("name", "Tom") in _gen().ARITH_NAMES, question
    assert m["obj"] in _gen().ARITH_OBJECTS, question
    return t, op, int(m["a"]), int(m["b"])


def _parse(prompt: str) -> tuple[list[tuple[str, str, int, int, str]], tuple[str, str, int, int]]:
    """(solved examples as (template, op, a, b, solution), the question's problem)."""
    blocks = prompt.split("\n\n")
    shots = []
    for block in blocks[:-1]:
        q, solution = re.fullmatch(r"Question: (.+)\nAnswer: (.+)", block).groups()
        shots.append((*_problem(q), solution))
    return shots, _problem(re.fullmatch(r"Question: (.+)\nAnswer:", blocks[-1])[1])


def _flexible_extract(text: str) -> str:
    from workbench.generation.extract import EXTRACTORS

    return EXTRACTORS["flexible-extract"](text)


def test_header():
    header, _ = _file()
    task = header["task"]
    assert set(task) == {"name", "description", "metric", "target_delimiter", "generation",
                         "source", "split_by"}
    assert task["name"] == NAME and task["metric"] == "exact_match"
    assert task["target_delimiter"] == " " and task["split_by"] == "example"
    assert task["generation"] == GSM8K_GENERATION
    assert re.fullmatch(r"python tasks/generate_gen_tasks\.py --seed \d+", task["source"])


def test_examples_well_formed_and_balanced():
    _, examples = _file()
    assert len(examples) == 168
    assert len({e["id"] for e in examples}) == len(examples)
    for e in examples:
        assert set(e) == EXAMPLE_KEYS and e["split"] in SPLITS, e["id"]
        assert e["prompt"] == e["prompt"].rstrip() and re.fullmatch(r"\d+", e["target"]), e["id"]
        assert e["group"] == e["meta"]["template"], e["id"]
    counts = Counter((e["group"], e["split"]) for e in examples)
    assert set(counts.values()) == {7} and len(counts) == 2 * len(_gen().ARITH_TEMPLATES)


def test_problems_and_solved_examples_recomputed():
    gen = _gen()
    for e in _file()[1]:
        shots, (template, op, a, b) = _parse(e["prompt"])
        assert (template, op, [a, b]) == (e["meta"]["template"], e["meta"]["operation"],
                                          e["meta"]["operands"]), e["id"]
        assert e["target"] == str(gen.solve(op, a, b)) and gen.solve(op, a, b) >= 2, e["id"]
        # The target is what flexible-extract reads from the problem's solution.
        assert _flexible_extract(" " + gen.solution(op, a, b)) == e["target"], e["id"]
        assert len(shots) == SHOTS, e["id"]
        for _, s_op, sa, sb, solution in shots:
            assert solution == f"{sa} {s_op} {sb} = {gen.solve(s_op, sa, sb)}", e["id"]
            assert _flexible_extract(" " + solution) == str(gen.solve(s_op, sa, sb)), e["id"]


def test_solved_examples_are_other_templates_facts_and_answers():
    gen = _gen()
    for e in _file()[1]:
        shots, (template, op, a, b) = _parse(e["prompt"])
        templates = [s[0] for s in shots]
        assert template not in templates and len(set(templates)) == SHOTS, e["id"]
        for _, s_op, sa, sb, _ in shots:
            assert gen.fact_of(s_op, sa, sb) != gen.fact_of(op, a, b), e["id"]
            assert str(gen.solve(s_op, sa, sb)) != e["target"], e["id"]


def test_every_arithmetic_fact_is_in_one_split():
    """A fact (a sum's operands unordered, a difference's in order), asked or solved in a
    prompt, belongs to one split only; no problem (template and operands) is in both."""
    gen = _gen()
    split_of: dict[tuple, str] = {}
    problems = Counter()
    for e in _file()[1]:
        shots, (template, op, a, b) = _parse(e["prompt"])
        problems[template, op, a, b] += 1
        for _, s_op, sa, sb, *_ in [*shots, (template, op, a, b)]:
            fact = gen.fact_of(s_op, sa, sb)
            assert split_of.setdefault(fact, e["split"]) == e["split"], (e["id"], fact)
    assert set(problems.values()) == {1}, "each problem is asked once"
    assert set(split_of.values()) == set(SPLITS)


def test_held_out_templates_are_enough_clusters():
    """The confirmation clusters by `group` (the template) when the held-out split has at
    least MIN_CLUSTERS of them (`cluster auto`)."""
    from workbench.confirmation.confirm import MIN_CLUSTERS

    held = {e["group"] for e in _file()[1] if e["split"] == "heldout"}
    assert len(held) >= MIN_CLUSTERS


def test_loads_by_name_with_gsm8k_scoring():
    from workbench import load_task
    from workbench.generation.settings import GenerationSettings

    task = load_task(NAME)  # raises on any broken rule
    assert task.is_generation and task.name == NAME and len(task) == len(_file()[1])
    assert task.generation == GenerationSettings(**GSM8K_GENERATION)
    score = task.generation.score
    assert score(" 3 + 7 = 10\nQuestion:", "10") == 1.0
    assert score(" 10.", "10") == 1.0  # gsm8k drops a final "."
    assert score(" 10 apples", "10") == 1.0 and score(" 1,0", "10") == 1.0
    assert score(" 3 + 7 = 11", "10") == 0.0 and score(" ten", "10") == 0.0
