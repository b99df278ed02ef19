"""`bench/gen_reference.py`, the independent generation scorer: its decoding is lm-eval's own
`HFLM.generate_until` on the same weights (a tiny GPT-2), its stop-string cut lm-eval's
`postprocess_generated_text`, its regex extractors lm-eval's `RegexFilter`, and its exact match
lm-eval's `exact_match` (on texts without surrounding whitespace, which the generation contract
strips and lm-eval does not)."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import pytest

from tests.helpers import load_script, save_tiny_gpt2

ROOT = Path(__file__).resolve().parents[1]
TEXTS = (
    "",
    "42",
    " The answer is 1,234.",
    "Step 1: 3 + 4 = 7. #### 7\nQuestion: next",
    "#### -2.5 and then #### 9",
    "She paid $12.50 for 3 pens, so 15",
    "no number here",
    " Lima\n\nQuestion: What is",
)


@functools.cache
def _bench():
    return load_script(ROOT / "bench" / "gen_reference.py")


@pytest.mark.parametrize("name", ["strict-match", "flexible-extract"])
def test_gsm8k_extractors_are_lm_eval_s_regex_filter(name):
    extraction = pytest.importorskip("lm_eval.filters.extraction")
    spec = _bench().NAMED[name]
    lm_filter = extraction.RegexFilter(regex_pattern=spec["regex"],
                                       group_select=spec["group_select"])
    expected = [out[0] for out in lm_filter.apply([[t] for t in TEXTS], [None] * len(TEXTS))]
    got = [_bench().extract(t, name) for t in TEXTS]
    assert got == expected
    assert "[invalid]" in got and len(set(got)) >= 3, "the table exercises matches and misses"


def test_a_user_regex_is_lm_eval_s_regex_filter():
    extraction = pytest.importorskip("lm_eval.filters.extraction")
    spec = {"regex": r"answer is (\S+?)\.?$", "group_select": 0, "fallback": "none"}
    lm_filter = extraction.RegexFilter(spec["regex"], 0, "none")
    expected = [out[0] for out in lm_filter.apply([[t] for t in TEXTS], [None] * len(TEXTS))]
    assert [_bench().extract(t, spec) for t in TEXTS] == expected
    assert "1,234" in expected


def test_first_line_and_none():
    assert _bench().extract(" Lima\nQuestion:", "first_line") == "Lima"
    assert _bench().extract("\n\n Andorra la Vella \nx", "first_line") == "Andorra la Vella "
    assert _bench().extract(" a\nb", "none") == " a\nb"


@pytest.mark.parametrize("options", [
    {},
    {"ignore_case": True},
    {"ignore_punctuation": True},
    {"ignore_case": True, "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]},
])
def test_exact_match_is_lm_eval_s_on_stripped_texts(options):
    metrics = pytest.importorskip("lm_eval.api.metrics")
    words = ("72", "72.", "$72", "1,234", "1234", "####72", "Lima", "lima", "Lima!")
    if options.get("regexes_to_ignore"):  # gsm8k's regexes remove "#### " whole
        words += ("#### 72", "#### 1,234.")
    for pred, ref in itertools.product(words, repeat=2):
        expected = metrics.exact_match_hf_evaluate([pred], [ref], **options)["exact_match"]
        assert _bench().exact_match(pred, ref, options) == bool(expected), (pred, ref, options)
    assert _bench().exact_match(" 72\n", "72", {}), "surrounding whitespace is stripped"


def test_cut_at_stops_is_lm_eval_s():
    utils = pytest.importorskip("lm_eval.models.utils")
    for text, until in [("a\nb\n\nc", ["\n\n"]), ("a\nb", ["\n", "b"]), ("xQuestion: y", [
            "Question:", "</s>"]), ("abc", []), ("abc", [""])]:
        assert _bench().cut_at_stops(text, until) == utils.postprocess_generated_text(
            text, until, None)


def test_generate_is_lm_eval_s_hf_generate_until(tmp_path):
    """The same weights through lm-eval's HFLM and through the script: the same texts, with
    and without a stop string that cuts them."""
    hf_mod = pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.api.instance import Instance
    from transformers import AutoTokenizer, GPT2LMHeadModel

    folder = save_tiny_gpt2(tmp_path / "gpt2")
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    lm = hf_mod.HFLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=4)
    contexts = ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9", "w10 w11"]
    plain = [_bench().generate(model, tokenizer, c, 8, [])[2] for c in contexts]
    assert all(len(t.split()) >= 2 for t in plain), plain
    stop = plain[0].split()[1]  # the second word of the first text: a cut that bites
    for until in ([], [stop], [" w0", stop]):
        requests = [
            Instance("generate_until", {}, (c, {"until": list(until), "max_gen_toks": 8,
                                                "do_sample": False}), i)
            for i, c in enumerate(contexts)
        ]
        expected = lm.generate_until(requests, disable_tqdm=True)
        got = [_bench().generate(model, tokenizer, c, 8, list(until))[2] for c in contexts]
        assert got == expected, until
    assert got[0] != plain[0], "the stop string cut the first text"
