"""Extractors and exact match: how a generation task reads its answer from generated text.

A generation task's model writes a continuation of its prompt (`workbench.generation.decode`);
an extractor takes the answer from that text, and `exact_match` compares it with the target,
as lm-eval 0.4 scores a `generate_until` task (its gsm8k: a `regex` filter, `take_first`, then
the `exact_match` metric). The extractors (`EXTRACTORS`, or a user regex):

- `none`: the whole generated text;
- `first_line`: the text before the first newline, after its leading whitespace is stripped
  (an answer written on the line after the prompt's);
- `strict-match`: lm-eval's gsm8k rule, regex `#### (\\-?[0-9\\.\\,]+)`, the first match's
  group; no match gives `"[invalid]"`;
- `flexible-extract`: lm-eval's gsm8k rule, regex `(-?[$0-9.,]{2,})|(-?[0-9]+)` with
  `group_select: -1`, the last match, its first non-empty group; no match `"[invalid]"`;
- `{"regex": ..., "group_select": 0, "fallback": "[invalid]"}`: lm-eval's `RegexFilter`:
  `re.findall`, the match at index `group_select` (negative counts from the end), of a match
  with several groups its first non-empty one, stripped; `fallback` when nothing matches (or,
  where lm-eval raises an IndexError, when `group_select` is beyond the matches).

`exact_match` applies lm-eval's options to both texts in lm-eval's order (each of
`regexes_to_ignore` removed with `re.sub`, then `ignore_case` lower-cases, then
`ignore_punctuation` deletes `string.punctuation`), and strips leading and trailing whitespace
before and after them, which lm-eval does not: a target written `"72"` then matches a
generation ending `" 72\\n"`. On texts without surrounding whitespace before or after the
options it is lm-eval's `exact_match` (tests/generation/test_extract.py checks both on a table).

This module imports no torch: the task format checks an extractor when a file is read.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.errors import WorkbenchError

FALLBACK = "[invalid]"  # lm-eval's RegexFilter fallback


@dataclass(frozen=True)
class RegexExtractor:
    """lm-eval's `RegexFilter` followed by `take_first`, on one text (module docstring).

    Attributes:
        regex: the pattern, compiled with `re.compile` (flags inline, as `(?s)`).
        group_select: the index of the match kept among `re.findall`'s (-1: the last).
        fallback: the answer when nothing matches.
    """

    regex: str
    group_select: int = 0
    fallback: str = FALLBACK

    def __call__(self, text: str) -> str:
        matches = re.findall(self.regex, text)
        if not matches or not -len(matches) <= self.group_select < len(matches):
            return self.fallback
        match = matches[self.group_select]
        if isinstance(match, tuple):  # several groups: the first that matched something
            match = next((m for m in match if m), None)
            if match is None:
                return self.fallback
        return match.strip()

    def to_spec(self) -> dict:
        return {"regex": self.regex, "group_select": self.group_select, "fallback": self.fallback}


def _whole(text: str) -> str:
    return text


def _first_line(text: str) -> str:
    return text.lstrip().split("\n", 1)[0]


Extractor = Callable[[str], str]
EXTRACTORS: dict[str, Extractor] = {
    "none": _whole,
    "first_line": _first_line,
    "strict-match": RegexExtractor(r"#### (\-?[0-9\.\,]+)"),
    "flexible-extract": RegexExtractor(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", group_select=-1),
}
DEFAULT_EXTRACTOR = "first_line"
_REGEX_KEYS = ("regex", "group_select", "fallback")


def check_regex(pattern, where: str, what: str) -> str:
    """`pattern` if it is a string that compiles, else one error line naming `what`."""
    if not isinstance(pattern, str):
        raise WorkbenchError(f"{where}: {what} must be a regex string; got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as e:
        raise WorkbenchError(f"{where}: {what} {pattern!r} does not compile ({e}); give a "
                             "Python regular expression") from None
    return pattern


def get_extractor(spec, where: str = "extractor") -> Extractor:
    """The extractor named by `spec`: a name in `EXTRACTORS`, or a dict `{"regex": ...,
    "group_select": 0, "fallback": "[invalid]"}` (module docstring); a bad one is one error
    line naming `where` and what is expected."""
    if isinstance(spec, str):
        if spec not in EXTRACTORS:
            raise WorkbenchError(
                f"{where}: extractor {spec!r} is unknown; expected one of {list(EXTRACTORS)} "
                'or {"regex": "<pattern>", "group_select": 0, "fallback": "[invalid]"}')
        return EXTRACTORS[spec]
    if not isinstance(spec, dict):
        raise WorkbenchError(f"{where}: extractor must be a name in {list(EXTRACTORS)} or an "
                             f"object with 'regex'; got {spec!r}")
    unknown = sorted(set(spec) - set(_REGEX_KEYS))
    if unknown or "regex" not in spec:
        raise WorkbenchError(f"{where}: a regex extractor has keys {list(_REGEX_KEYS)} ('regex' "
                             f"required); got {sorted(spec)}")
    pattern = check_regex(spec["regex"], where, "extractor regex")
    group = spec.get("group_select", 0)
    if type(group) is not int:
        raise WorkbenchError(f"{where}: extractor group_select must be an int (-1: the last "
                             f"match); got {group!r}")
    fallback = spec.get("fallback", FALLBACK)
    if not isinstance(fallback, str):
        raise WorkbenchError(f"{where}: extractor fallback must be a string; got {fallback!r}")
    return RegexExtractor(pattern, group, fallback)


_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize(text: str, ignore_case: bool = False, ignore_punctuation: bool = False,
              regexes_to_ignore: Sequence[str] = ()) -> str:
    """`text` as `exact_match` compares it (module docstring)."""
    text = text.strip()
    for pattern in regexes_to_ignore:
        text = re.sub(pattern, "", text)
    if ignore_case:
        text = text.lower()
    if ignore_punctuation:
        text = text.translate(_PUNCTUATION)
    return text.strip()


def exact_match(pred: str, target: str, ignore_case: bool = False,
                ignore_punctuation: bool = False, regexes_to_ignore: Sequence[str] = ()) -> float:
    """1.0 when the extracted prediction equals the target once both are normalized
    (`normalize`: lm-eval's options, whitespace stripped), else 0.0."""
    options = (ignore_case, ignore_punctuation, tuple(regexes_to_ignore))
    return float(normalize(pred, *options) == normalize(target, *options))
