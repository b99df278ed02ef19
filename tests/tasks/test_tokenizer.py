"""Prompts as the model's own tokenizer writes them (BOS and EOS only where it adds them), and
the shipped models' Hugging Face tokenizer: same ids as the word tokenizer, TransformerLens's
string methods working on it."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import assert_close
from tests.tasks.tokenizer_rules import (
    QWEN2_PATTERN,
    byte_level_like,
    sentencepiece_like,
    stub_model,
)
from workbench import WorkbenchError, encode_task, load_model, load_task
from workbench.tasks.task import Example, Task
from workbench.tasks.tokenizer import HFTokenizer

PAIRS = [("The opposite of hot is", " cold"), ("The opposite of fast is", " slow")]
EMBEDDED_TASKS = ("embedded_copy", "embedded_map", "embedded_add", "embedded_sort")


def _task(pairs=PAIRS, roles=None, **kwargs) -> Task:
    examples = [
        Example(id=f"e{i}", prompt=p, answers=(a,), split="select", roles=roles)
        for i, (p, a) in enumerate(pairs)
    ]
    return Task(name="t", examples=examples, **kwargs)


@pytest.mark.parametrize(
    "make,lead",
    [
        (lambda c: byte_level_like(c, QWEN2_PATTERN), 0),  # Qwen / SmolLM2: no BOS
        (lambda c: sentencepiece_like(c), 1),  # Llama-2: <s> first
        (lambda c: sentencepiece_like(c, adds_eos=True), 1),  # <s> ... </s>
    ],
)
def test_prompt_ids_follow_the_tokenizer(make, lead):
    hf = make([p + a for p, a in PAIRS])
    batch = encode_task(stub_model(hf), _task())
    assert batch.prepend_bos is (lead == 1)
    for i, (p, a) in enumerate(PAIRS):
        n = int(batch.lengths[i])
        own = hf(p)["input_ids"]
        # Exactly the tokenizer's ids, less an EOS it appends (the prompt is continued).
        expected = own[:-1] if own[-1] == hf.eos_token_id else own
        assert batch.tokens[i, :n].tolist() == expected
        assert expected[:lead] == [hf.bos_token_id] * lead
        # The answer is the token after the prompt's own in prompt + answer, specials aside.
        body = hf(p + a, add_special_tokens=False)["input_ids"]
        assert batch.answer_ids[i, 0] == body[-1] and expected[lead:] == body[:-1]


def test_forcing_bos_on_and_off():
    no_bos = byte_level_like([p + a for p, a in PAIRS], QWEN2_PATTERN)
    with_bos = sentencepiece_like([p + a for p, a in PAIRS])
    on = encode_task(stub_model(no_bos), _task(prepend_bos=True))
    off = encode_task(stub_model(with_bos), _task(prepend_bos=False))
    assert on.prepend_bos and not off.prepend_bos
    p = PAIRS[0][0]
    assert on.tokens[0, : on.lengths[0]].tolist() == [no_bos.bos_token_id, *no_bos.encode(p)]
    assert off.tokens[0, : off.lengths[0]].tolist() == with_bos(p, add_special_tokens=False)[
        "input_ids"
    ]
    # Forcing BOS where the tokenizer adds it already changes nothing.
    same = encode_task(stub_model(with_bos), _task(prepend_bos=True))
    default = encode_task(stub_model(with_bos), _task())
    assert torch.equal(same.tokens, default.tokens)


def test_roles_and_counterfactuals_follow_the_effective_bos():
    hf = sentencepiece_like(["The opposite of hot is cold", "The opposite of big is small"])
    n_words = len(hf("The opposite of hot is", add_special_tokens=False)["input_ids"])
    roles = ["x"] * n_words
    ex = Example(id="e0", prompt="The opposite of hot is", answers=(" cold",), split="select",
                 roles=tuple(roles), counterfactual="The opposite of big is")
    for prepend_bos, lead in ((None, ["bos"]), (False, [])):
        batch = encode_task(stub_model(hf), Task(name="t", examples=[ex], prepend_bos=prepend_bos))
        assert batch.roles[0] == [*lead, *roles]
        assert batch.counterfactual_tokens.shape == batch.tokens.shape
        assert batch.counterfactual_tokens[0].tolist() == hf.encode(
            "The opposite of big is", add_special_tokens=prepend_bos is None
        )
    wrong = Example(id="e1", prompt=ex.prompt, answers=ex.answers, split="select",
                    roles=("x",) * (n_words + 1))
    with pytest.raises(WorkbenchError, match=rf"example 'e1': {n_words + 1} roles for {n_words}"):
        encode_task(stub_model(hf), Task(name="t", examples=[wrong]))


class _SpecialInside:
    """A tokenizer whose `tokenizer(text)` puts a special token inside the text's tokens."""

    def __init__(self, hf):
        self.hf, self.all_special_ids = hf, hf.all_special_ids
        self.bos_token_id, self.eos_token_id = hf.bos_token_id, hf.eos_token_id

    def encode(self, text, add_special_tokens=True):
        return self.hf.encode(text, add_special_tokens=add_special_tokens)

    def __call__(self, text, **kwargs):
        ids = self.hf(text, add_special_tokens=False)["input_ids"]
        return {"input_ids": [ids[0], self.bos_token_id, *ids[1:]]}


def test_a_tokenizer_that_puts_specials_inside_the_text_is_refused():
    tok = HFTokenizer(_SpecialInside(byte_level_like([p for p, _ in PAIRS], QWEN2_PATTERN)))
    with pytest.raises(WorkbenchError, match="set the task's prepend_bos to true or false"):
        tok.encode_prompt(PAIRS[0][0])
    ids, lead = tok.encode_prompt(PAIRS[0][0], prepend_bos=False)
    assert lead == 0 and ids == tok.encode(PAIRS[0][0])


# --- the shipped models' Hugging Face tokenizer --------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    return load_model("embedded")


@pytest.mark.parametrize("name", EMBEDDED_TASKS)
def test_hf_tokenizer_ids_equal_the_word_tokenizers_on_every_embedded_prompt(embedded, name):
    word, hf = embedded.word_tokenizer, embedded.tokenizer
    prompts = [e.prompt for e in load_task(name).examples]
    assert [hf(p)["input_ids"] for p in prompts] == [word.encode(p, True) for p in prompts]
    assert [hf(p, add_special_tokens=False)["input_ids"] for p in prompts[:50]] == [
        word.encode(p) for p in prompts[:50]
    ]
    # And encode_task (which reads the word tokenizer) gives what `tokenizer(prompt)` gives.
    batch = encode_task(embedded, load_task(name).head(40))
    for i, p in enumerate(prompts[:40]):
        assert batch.tokens[i, : batch.lengths[i]].tolist() == hf(p)["input_ids"]


def test_transformer_lens_string_methods_on_the_embedded_model(embedded):
    word = embedded.word_tokenizer
    text = load_task("embedded_add").examples[0].prompt
    ids = word.encode(text, prepend_bos=True)
    assert embedded.cfg.default_prepend_bos and embedded.cfg.tokenizer_prepends_bos
    assert embedded.to_tokens(text).tolist() == [ids]
    assert embedded.to_tokens(text, prepend_bos=False).tolist() == [ids[1:]]
    assert embedded.to_str_tokens(text) == word.str_tokens(ids)
    assert embedded.to_string(torch.tensor(ids[1:])) == text
    tokens = torch.tensor([ids])
    assert_close(embedded(text), embedded(tokens), atol=0.0, rtol=0.0)
    # Right padding in a batch, with the word tokenizer's pad id.
    short = " ".join(text.split()[:3])
    batch = embedded.to_tokens([text, short])
    assert batch[1].tolist() == word.encode(short, True) + [word.pad_id] * (len(ids) - 4)


def test_an_unknown_word_is_one_clear_error_on_a_shipped_model(embedded):
    """`model("...")`, `to_tokens` and `tokenizer(...)` with a word outside the embedded
    language: a WorkbenchError naming the word, not tokenizers' "Missing [UNK] token"."""
    from workbench.errors import WorkbenchError

    text = load_task("embedded_add").examples[0].prompt
    for call in (lambda t: embedded(t), embedded.to_tokens, embedded.tokenizer,
                 lambda t: embedded.tokenizer([text, t]), embedded.tokenizer.tokenize):
        with pytest.raises(WorkbenchError, match="word 'zorblax' is not in this model's "
                                                 "vocabulary") as info:
            call(text + " zorblax")
        assert "UNK" not in str(info.value)
    assert embedded.to_tokens(text).tolist() == [embedded.word_tokenizer.encode(text, True)]


def test_generate_on_the_embedded_model_is_greedy_decoding(embedded):
    word = embedded.word_tokenizer
    text = load_task("embedded_add").examples[0].prompt
    out = embedded.generate(text, max_new_tokens=3, do_sample=False, verbose=False,
                            stop_at_eos=False)
    ids = word.encode(text, prepend_bos=True)
    with torch.no_grad():
        for _ in range(3):
            ids.append(int(embedded(torch.tensor([ids]))[0, -1].argmax()))
    assert out == word.decode(ids[1:])
