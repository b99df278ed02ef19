"""The extractors and `exact_match` against lm-eval's own code: its `RegexFilter` built from the
filter definitions of its gsm8k YAML, and its `exact_match` metric, on a table of tricky texts
(commas, dollars, negative numbers, no match, several matches, a trailing period)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workbench.errors import WorkbenchError
from workbench.generation.extract import (
    EXTRACTORS,
    RegexExtractor,
    exact_match,
    get_extractor,
    normalize,
)

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is the optional extra lm_eval")
from lm_eval.api.metrics import exact_match_hf_evaluate  # noqa: E402
from lm_eval.filters.extraction import RegexFilter  # noqa: E402

GSM8K = yaml.safe_load((Path(lm_eval.__file__).parent / "tasks/gsm8k/gsm8k.yaml").read_text())

TEXTS = [
    "Natalia sold 48 clips in April.\n#### 72",
    "#### 1,234\nQuestion: next",
    "#### -5",
    "The answer is $1,000.",
    "She owes -12 dollars, then 3.",
    "no number here",
    "",
    "#### 5 and later #### 6",
    "First 10, then 20, finally 30.",
    "It is 7.",
    "  \n 42 apples\nthen 43",
    "#### .",
    "Cost: $5",
    "x 1 y",
]


def _lm_eval_filter(name: str):
    """lm-eval's regex filter of gsm8k's `filter_list` entry `name`, built from the YAML."""
    entry = next(f for f in GSM8K["filter_list"] if f["name"] == name)
    regex, take = entry["filter"]
    assert regex["function"] == "regex" and take["function"] == "take_first"
    args = {k: v for k, v in regex.items() if k != "function"}
    return RegexFilter(**args)


@pytest.mark.parametrize("name", ["strict-match", "flexible-extract"])
def test_gsm8k_extractors_are_lm_evals_filters(name):
    ours, theirs = EXTRACTORS[name], _lm_eval_filter(name)
    want = [r[0] for r in theirs.apply([[t] for t in TEXTS], [{}] * len(TEXTS))]
    assert [ours(t) for t in TEXTS] == want


def test_the_extractors_on_an_exact_table():
    strict, flex = EXTRACTORS["strict-match"], EXTRACTORS["flexible-extract"]
    table = {  # text: (strict-match, flexible-extract, first_line)
        "Natalia sold 48 clips in April.\n#### 72": ("72", "72",
                                                    "Natalia sold 48 clips in April."),
        "#### 1,234\nQuestion: next": ("1,234", "1,234", "#### 1,234"),
        "#### -5": ("-5", "-5", "#### -5"),
        "The answer is $1,000.": ("[invalid]", "$1,000.", "The answer is $1,000."),
        "She owes -12 dollars, then 3.": ("[invalid]", "3.", "She owes -12 dollars, then 3."),
        "no number here": ("[invalid]", "[invalid]", "no number here"),
        "#### 5 and later #### 6": ("5", "6", "#### 5 and later #### 6"),
        "  \n 42 apples\nthen 43": ("[invalid]", "43", "42 apples"),
    }
    for text, (s, f, line) in table.items():
        assert (strict(text), flex(text), EXTRACTORS["first_line"](text)) == (s, f, line), text
    assert EXTRACTORS["none"]("  a\nb ") == "  a\nb "


@pytest.mark.parametrize("group_select", [0, 1, -1, -2, 5])
def test_a_user_regex_is_lm_evals_regex_filter(group_select):
    spec = {"regex": r"(\d+)|([a-z]+)", "group_select": group_select, "fallback": "none"}
    ours = get_extractor(spec)
    theirs = RegexFilter(spec["regex"], group_select, "none")
    for text in TEXTS:
        try:
            want = theirs.apply([[text]], [{}])[0][0]
        except IndexError:  # lm-eval raises where group_select is beyond the matches
            want = "none"
        assert ours(text) == want, text
    assert get_extractor({"regex": "x"}) == RegexExtractor("x", 0, "[invalid]")


OPTIONS = [  # (ignore_case, ignore_punctuation, regexes_to_ignore)
    (False, False, ()),
    (True, False, ()),
    (False, True, ()),
    tuple(GSM8K["metric_list"][0][k] for k in ("ignore_case", "ignore_punctuation",
                                              "regexes_to_ignore")),
]
PAIRS = [  # (prediction, target)
    ("72", "72"), ("72.", "72"), ("1,234", "1234"), ("$1,000", "1000"), ("-5", "5"),
    ("-5", "-5"), ("Paris", "paris"), ("Paris!", "Paris"), ("[invalid]", "72"),
    ("#### 72", "Natalia sold 48.\n#### 72"), ("3.5", "35"), ("", ""),
]


@pytest.mark.parametrize("options", OPTIONS)
def test_exact_match_is_lm_evals_on_texts_without_surrounding_whitespace(options):
    case, punct, regexes = options
    for pred, target in PAIRS:
        want = exact_match_hf_evaluate([pred], [target], regexes_to_ignore=list(regexes) or None,
                                       ignore_case=case, ignore_punctuation=punct)
        got = exact_match(pred, target, case, punct, regexes)
        assert got == want["exact_match"], (pred, target, options)


def test_exact_match_strips_whitespace_where_lm_eval_does_not():
    # lm-eval compares " 72\n" with "72" as different; a generation's line break is not the
    # answer, so the workbench strips both before and after the options
    assert exact_match_hf_evaluate([" 72\n"], ["72"])["exact_match"] == 0.0
    assert exact_match(" 72\n", "72") == 1.0
    # a removed "$" leaves " 72", stripped after the options too
    assert normalize("$ 72", regexes_to_ignore=[r"\$"]) == "72"
    # the gsm8k options on its own target form and a flexible-extract answer
    _, _, regexes = OPTIONS[3]
    flex = EXTRACTORS["flexible-extract"]("So the total is $1,234.")
    assert exact_match(flex, "Work...\n#### 1234", True, False, regexes) == 1.0


BAD = [
    ("greedy", "extractor 'greedy' is unknown; expected one of"),
    ({"regex": "(unclosed"}, "extractor regex '(unclosed' does not compile"),
    ({"pattern": "x"}, "a regex extractor has keys ['regex', 'group_select', 'fallback']"),
    ({"regex": "x", "group_select": "1"}, "group_select must be an int"),
    ({"regex": "x", "fallback": None}, "fallback must be a string"),
    (3, "extractor must be a name in"),
]


@pytest.mark.parametrize(("spec", "words"), BAD)
def test_a_bad_extractor_is_one_line_naming_it(spec, words):
    with pytest.raises(WorkbenchError) as err:
        get_extractor(spec, "t.jsonl line 1")
    message = str(err.value)
    assert "\n" not in message and message.startswith("t.jsonl line 1: ") and words in message
