"""Generation examples in the task format (`workbench.tasks.format`): `prompt` and `target`,
the header's `generation` object, each bad input one error line naming the line (or row) and
the example, and the encoding of a generation task (prompt ids, the target's ids in context)."""

from __future__ import annotations

import json
import re

import pytest

from workbench.errors import WorkbenchError
from workbench.generation.settings import GenerationSettings
from workbench.guards import task_metrics
from workbench.metric_records import check_objective, task_kind
from workbench.results.fingerprint import task_fingerprint
from workbench.tasks.encoding import encode_task
from workbench.tasks.task import Example, Task, load_task
from workbench.tasks.tokenizer import get_tokenizer

GOOD = {"id": "ok", "prompt": "w1 w2", "target": "w3"}


def _write(path, header, *records):
    lines = ([{"task": header}] if header is not None else []) + list(records)
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return path


def test_a_file_with_targets_is_a_generation_task_with_its_settings(tmp_path):
    path = _write(tmp_path / "gen.jsonl",
                  {"name": "gen", "generation": {"max_new_tokens": 5, "until": ["\n", "Q:"],
                                                 "extractor": {"regex": r"(w\d+)"},
                                                 "ignore_case": True}},
                  GOOD, {"id": "b", "prompt": "w2 w3", "target": "w4", "split": "select"})
    task = load_task(path)
    assert task.is_generation and task_kind(task) == "generation"
    assert (task.metric, task.answer_tokens, task.target_delimiter) == ("exact_match", "multi",
                                                                       " ")
    assert task.generation == GenerationSettings(5, ("\n", "Q:"), {"regex": r"(w\d+)"}, True)
    a = task.examples[0]
    assert (a.target, a.answers, a.wrong) == ("w3", (" w3",), ())
    assert task_metrics(task) == ["logprob", "exact_match"]
    check_objective("logprob", "gen", False, "generation")
    with pytest.raises(WorkbenchError, match="'acc' is not defined on generation task"):
        check_objective("acc", "gen", False, "generation")
    # the defaults: no generation object at all
    plain = load_task(_write(tmp_path / "plain.jsonl", None, GOOD))
    assert plain.generation == GenerationSettings(32, ("\n\n",), "first_line")
    assert plain.generation.score(" w3\nw4", "w3") == 1.0


def test_records_make_the_same_task_and_settings_are_part_of_the_fingerprint(tmp_path):
    path = _write(tmp_path / "gen.jsonl", {"name": "gen", "generation": {"max_new_tokens": 5}},
                  GOOD)
    built = Task.from_records([GOOD], name="gen", generation=GenerationSettings(5))
    assert built == load_task(path)
    assert task_fingerprint(built) == task_fingerprint(load_task(path))
    other = Task.from_records([GOOD], name="gen", generation={"max_new_tokens": 6})
    assert task_fingerprint(other) != task_fingerprint(built)


def test_encoding_gives_prompt_ids_and_the_targets_ids_in_context(attn_model):
    rows = [GOOD, {"id": "b", "prompt": "w4 w5 w6", "target": "w7 w8"}]
    n_ctx = attn_model.cfg.n_ctx
    with pytest.raises(WorkbenchError, match=rf"example 'ok': the prompt is \d+ tokens, and with "
                                             f"max_new_tokens {n_ctx} the generation runs past"):
        encode_task(attn_model, Task.from_records(rows, name="gen",
                                                  generation={"max_new_tokens": n_ctx}))
    task = Task.from_records(rows, name="gen", generation={"max_new_tokens": 4})
    batch = encode_task(attn_model, task)
    tok = get_tokenizer(attn_model)
    assert [p.tolist() for p in batch.prompts()] == [
        tok.encode_prompt(e.prompt, None)[0] for e in task.examples]
    assert batch.answer_seqs == [[tok.encode("w3")], [tok.encode("w7 w8")]]
    assert len(batch.answer_seqs[1][0]) == 2
    assert batch.choice_seqs is None


BAD = [  # (header, example fields, words)
    ({"generation": {}}, {"prompt": "w1 w2"}, "missing field 'target'"),
    ({}, {"prompt": "w1 w2", "target": 7}, "'target' must be a non-empty string"),
    ({}, {"prompt": "w1 w2", "target": " "}, "'target' must be a non-empty string"),
    ({}, {"prompt": "w1 w2", "answer": " w3"},
     "this example has 'answer' (+ 'wrong') but the task is generation ('target')"),
    ({}, {"prompt": "w1 w2", "target": "w3", "answer": " w3"}, "not ['answer']"),
    ({}, {"prompt": "w1 w2", "choices": ["a", "b"], "gold": 0, "target": "a"},
     "this example has 'choices' + 'gold' but the task is generation"),
]
BAD_HEADERS = [
    ({"extractor": "greedy"}, "extractor 'greedy' is unknown; expected one of"),
    ({"extractor": {"regex": "(w"}}, "extractor regex '(w' does not compile"),
    ({"regexes_to_ignore": ["[a"]}, "regexes_to_ignore entry '[a' does not compile"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an int >= 1; got 0"),
    ({"max_new_tokens": -3}, "max_new_tokens must be an int >= 1; got -3"),
    ({"max_new_tokens": 2.5}, "max_new_tokens must be an int >= 1; got 2.5"),
    ({"until": ["\n", ""]}, "until lists an empty stop sequence (index 1)"),
    ({"until": "\n"}, "until must be a list of strings"),
    ({"ignore_case": "yes"}, "ignore_case must be true or false"),
    ({"stop": ["\n"]}, "unknown generation keys ['stop']"),
]


@pytest.mark.parametrize(("header", "fields", "words"), BAD)
def test_a_bad_example_is_one_line_naming_its_line_and_id(header, fields, words, tmp_path):
    path = _write(tmp_path / "bad.jsonl", {"name": "bad", **header}, GOOD, {"id": "x", **fields})
    with pytest.raises(WorkbenchError) as err:
        load_task(path)
    message = str(err.value)
    assert "\n" not in message and words in message, message
    assert message.startswith("bad.jsonl line 3, example 'x': "), message
    # the same record from a table names its row
    with pytest.raises(WorkbenchError) as err:
        Task.from_records([GOOD, {"id": "x", **fields}], name="t", **header)
    assert str(err.value).startswith("task 't' row 1, example 'x': ") and words in str(err.value)


@pytest.mark.parametrize(("generation", "words"), BAD_HEADERS)
def test_bad_generation_settings_are_one_line_naming_the_header(generation, words, tmp_path):
    path = _write(tmp_path / "bad.jsonl", {"name": "bad", "generation": generation}, GOOD)
    with pytest.raises(WorkbenchError) as err:
        load_task(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith("bad.jsonl line 1: ") and words in message
    with pytest.raises(WorkbenchError, match="^task 't': .*" + re.escape(words[:12])):
        Task.from_records([GOOD], name="t", generation=generation)


@pytest.mark.parametrize(("rows", "header", "words"), [
    ([{"prompt": "Q?", "answer": " a"}], {"generation": {}},
     r"this example has 'answer' \(\+ 'wrong'\) but the task is generation"),
    ([GOOD], {"metric": "accuracy"}, "metric 'accuracy' is not a generation metric"),
    ([GOOD], {"answer_scope": "candidates"}, "do not apply to generation examples"),
])
def test_a_task_keeps_its_kind_settings_and_metrics(rows, header, words):
    with pytest.raises(WorkbenchError, match=words):
        Task.from_records(rows, name="t", **header)
    with pytest.raises(WorkbenchError, match="max_new_tokens must be an int >= 1"):
        GenerationSettings(max_new_tokens=0)
    with pytest.raises(WorkbenchError, match="generation settings are for generation examples"):
        Task(name="t", examples=[Example("a", "Q?", (" a",))], generation={})
