"""Answers in context under the tokenization rules of Llama-2, Llama-3 and Qwen (local tokenizers
built from their documented rules, see `tests/tokenizer_rules.py`)."""

from __future__ import annotations

import pytest

from tests.tokenizer_rules import (
    LLAMA3_PATTERN,
    QWEN2_PATTERN,
    byte_level_like,
    sentencepiece_like,
    stub_model,
)
from workbench import WorkbenchError, encode_task
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
