"""Hub tasks fitted to a tokenizer (`per_tokenizer`, `workbench.tasks.fit`): left exactly as
they are where the tokenizer fits them (GPT-2), rewritten so that they still measure what they
claim where it does not (SentencePiece, Llama-3, Qwen / SmolLM2 rules)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.tasks.test_hub_files import ICL_NAMES, TASK_NAMES
from tests.tasks.tokenizer_rules import (
    LLAMA3_PATTERN,
    QWEN2_PATTERN,
    byte_level_like,
    sentencepiece_like,
    stub_model,
)
from workbench import WorkbenchError, encode_task, load_task
from workbench.tasks.fit import FITS, MIN_FIT_EXAMPLES
from workbench.tasks.task import PER_TOKENIZER, Example, Task

STYLES = {
    "sentencepiece": lambda corpus: sentencepiece_like(corpus),
    "llama3": lambda corpus: byte_level_like(corpus, LLAMA3_PATTERN, adds_bos=True),
    "qwen": lambda corpus: byte_level_like(corpus, QWEN2_PATTERN),
}
YEARS = [f" {cc}{yy:02d}" for cc in range(10, 20) for yy in range(100)]
_GT = re.compile(r"from the year (\d\d)(\d)(\d) to the year")


def test_fit_names_match_the_header_names():
    assert tuple(FITS) == PER_TOKENIZER


def _corpus(task: Task) -> list[str]:
    """The texts the task's encoding will see, so a WordLevel vocabulary holds their pieces
    (two answers per prompt: `YEARS` holds every piece of greater-than's other answers)."""
    texts = []
    for e in task.examples:
        texts += [e.prompt, *(e.prompt + a for a in (*e.answers, *e.wrong)[:2])]
        if e.counterfactual:
            texts.append(e.counterfactual)
    return texts + YEARS


class _Tokenizers(dict):
    """(style, task name) -> a rule tokenizer over that task's texts, built on first use."""

    def __missing__(self, key):
        style, name = key
        self[key] = STYLES[style](_corpus(load_task(name)))
        return self[key]


@pytest.fixture(scope="module")
def tokenizers():
    return _Tokenizers()


@pytest.mark.parametrize("style", sorted(STYLES))
@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_hub_task_runs_on_each_tokenizer_style(tokenizers, style, name):
    hf = tokenizers[(style, name)]
    task = load_task(name)
    batch = encode_task(stub_model(hf, n_ctx=2048), task)
    assert len(batch) >= 0.8 * len(task)
    assert batch.prepend_bos is (style != "qwen")
    if name != "greater_than":
        # Word-level pieces keep every word whole: nothing is dropped, and only addition's
        # number answers change.
        assert not batch.dropped
        changed = [e for e, f in zip(task.examples, batch.task.examples, strict=True) if e != f]
        assert not changed or name == "addition"


@pytest.mark.parametrize(
    "style,cut", [("qwen", "17"), ("sentencepiece", "17"), ("llama3", "")]
)
def test_greater_than_asks_for_the_decade_where_years_split_otherwise(tokenizers, style, cut):
    hf = tokenizers[(style, "greater_than")]
    task = load_task("greater_than")
    batch = encode_task(stub_model(hf), task)
    original = {e.id: e for e in task.examples}
    assert set(batch.dropped) == {
        e.id for e in task.examples if _GT.search(e.prompt)[2] in "09"
    }
    for i, ex in enumerate(batch.task.examples):
        cc, t, _ = _GT.search(ex.prompt).groups()
        t = int(t)
        # The prompt is the file's, cut where the decade's token starts: "... year 17" when
        # digits are single tokens, "... year " when Llama-3 writes "173" + "2".
        assert ex.prompt == original[ex.id].prompt[: -2] + cut.replace("17", cc)
        decade = [cc + str(d) if not cut else str(d) for d in range(10)]
        assert [hf.decode([a]) for a in batch.answer_ids[i] if a >= 0] == decade[t + 1 :]
        assert [hf.decode([w]) for w in batch.wrong_ids[i] if w >= 0] == decade[:t]
        # The start year's own decade holds years on both sides: in neither list, nor a
        # candidate, so accuracy is "a later decade beats every earlier one".
        tie = hf.encode(decade[t], add_special_tokens=False)[-1]
        candidates = set(batch.candidate_ids[i].tolist()) - {-1}
        assert tie not in candidates and len(candidates) == 9
    assert batch.counterfactual_tokens.shape == batch.tokens.shape


def test_addition_digits_move_the_space_into_the_prompt(tokenizers):
    task = load_task("addition")
    qwen = encode_task(stub_model(tokenizers[("qwen", "addition")]), task)
    llama3 = encode_task(stub_model(tokenizers[("llama3", "addition")]), task)
    for fitted in (qwen, llama3):
        for ex, orig in zip(fitted.task.examples, task.examples, strict=True):
            assert ex.prompt == orig.prompt + " " and ex.answers == (orig.answers[0][1:],)
    # Qwen / SmolLM2 write "68" as "6" + "8": a multi-token answer, scored by greedy decoding.
    hf = tokenizers[("qwen", "addition")]
    assert qwen.task.answer_tokens == "multi"
    assert [hf.convert_ids_to_tokens(s[0]) for s in qwen.answer_seqs[:2]] == [
        list(a.strip()) for e in task.examples[:2] for a in e.answers
    ]
    # Llama-3 writes it as one token after the space: the task stays single-token.
    assert llama3.task.answer_tokens == "single"


PAIRS = [("The opposite of hot is", " cold"), ("The opposite of up is", " far down")]


def _example(i: int, split: str, group: str | None = None) -> Example:
    prompt, answer = PAIRS[i % 2]  # odd examples have the two-token answer " far down"
    return Example(id=f"e{i}", prompt=prompt, answers=(answer,), split=split, group=group)


def test_drop_unfit_keeps_single_token_answers_and_whole_groups():
    hf = byte_level_like([p + a for p, a in PAIRS], QWEN2_PATTERN)
    # Groups g0..g3 cycle over the examples: g1 and g3 hold the two-token answers; g0, g1
    # are selection groups, g2, g3 held out.
    examples = [
        _example(i, "select" if i % 4 < 2 else "heldout", f"g{i % 4}") for i in range(48)
    ]
    task = Task(name="t", examples=examples, split_by="group", per_tokenizer="drop_unfit")
    batch = encode_task(stub_model(hf), task)
    assert all(e.answers == (" cold",) for e in batch.task.examples)
    assert {e.group for e in batch.task.examples} == {"g0", "g2"}
    assert set(batch.dropped) == {e.id for e in examples if e.group in ("g1", "g3")}
    assert "is 2 tokens" in batch.dropped["e1"]
    kept = [e.id for e in examples if e.group in ("g0", "g2")]
    assert [e.id for e in batch.task.examples] == kept


def test_drop_unfit_refuses_a_split_left_too_small():
    hf = byte_level_like([p + a for p, a in PAIRS], QWEN2_PATTERN)
    # Every held-out example has the two-token answer; the selection split keeps 10.
    examples = [_example(i, ("select", "heldout")[i % 2]) for i in range(2 * MIN_FIT_EXAMPLES)]
    task = Task(name="t", examples=examples, per_tokenizer="drop_unfit")
    with pytest.raises(
        WorkbenchError,
        match=r"task 't': only 0 of 10 heldout examples fit this model's tokenizer \(at least "
        r"10 needed\); first refusal: example 'e1': answer ' far down' is 2 tokens",
    ):
        encode_task(stub_model(hf), task)


@pytest.mark.parametrize("name", ICL_NAMES)
def test_icl_tasks_need_no_fitting(name):
    assert load_task(name).per_tokenizer is None


def test_run_cel_scores_a_task_that_fitting_made_multi_token_on_every_token(tokenizers):
    """addition.jsonl is single-token, but on a Qwen-style (digit-splitting) tokenizer its
    answers are several tokens: `run_cel` must score the fitted task with the sequence scores
    (`multi_token_metric`), not the first token alone, and record what it did."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from tests.helpers import assert_close
    from workbench.logits import answer_logits
    from workbench.metrics.scores import multi_token_metric, score_logits
    from workbench.pipeline import run_cel

    hf = tokenizers[("qwen", "addition")]
    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_heads=2, d_head=8, n_ctx=64,
                                  d_vocab=len(hf), act_fn="gelu", normalization_type="LN",
                                  attn_only=True, seed=0)
    model = HookedTransformer(cfg)
    model.tokenizer = hf
    model.eval()
    task = load_task("addition")
    select = encode_task(model, task, "select")
    assert task.answer_tokens == "single" and select.task.answer_tokens == "multi"
    result = run_cel(model, task, max_size=1, n_random=0, n_boot=10, search_budget=80,
                     check_attribution=False, progress=False)
    assert result.summary["answer_tokens"] == "multi"
    with torch.no_grad():
        seq = multi_token_metric(model, select)
        first_logprob = score_logits(answer_logits(model, select), select)["logprob"]
    assert_close(result.summary["clean"]["select"]["logprob"], float(seq["logprob"].mean()),
                 atol=1e-5)
    assert abs(float(seq["logprob"].mean()) - float(first_logprob.mean())) > 0.1
