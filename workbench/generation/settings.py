"""A generation task's settings: how its model decodes and how its answer is read and compared.

`GenerationSettings` is the task header's `generation` object (`tasks/README.md`), checked
when a task file is read (`from_header`, each bad value one error line naming the line) and
when a `Task` is built in Python (`__post_init__`). Its defaults are lm-eval's where lm-eval
has one (`max_gen_toks` 32) and a plain answer's otherwise: decoding stops at a blank line, and
the answer is the first line of the generated text.

This module imports no torch: the task format reads it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from workbench.errors import WorkbenchError
from workbench.generation.extract import (
    DEFAULT_EXTRACTOR,
    Extractor,
    check_regex,
    exact_match,
    get_extractor,
)

DEFAULT_MAX_NEW_TOKENS = 32  # lm-eval's max_gen_toks
DEFAULT_UNTIL = ("\n\n",)


@dataclass(frozen=True)
class GenerationSettings:
    """How a generation task decodes and scores (module docstring).

    Attributes:
        max_new_tokens: tokens decoded at most per example (>= 1).
        until: stop sequences (non-empty strings): the text is cut before the first one; a
            row also stops at the model's EOS token.
        extractor: a name in `workbench.generation.extract.EXTRACTORS`, or a regex extractor
            `{"regex": ..., "group_select": 0, "fallback": "[invalid]"}`.
        ignore_case, ignore_punctuation, regexes_to_ignore: lm-eval's `exact_match` options,
            applied to the extracted answer and to the target.
    """

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    until: tuple[str, ...] = DEFAULT_UNTIL
    extractor: str | dict = DEFAULT_EXTRACTOR
    ignore_case: bool = False
    ignore_punctuation: bool = False
    regexes_to_ignore: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        self.check("generation settings")

    def check(self, where: str) -> None:
        """Each field of its type and range, or one error line naming `where`."""
        n = self.max_new_tokens
        if type(n) is not int or n < 1:
            raise WorkbenchError(f"{where}: generation max_new_tokens must be an int >= 1; got "
                                 f"{n!r}")
        until = self.until
        if not (isinstance(until, list | tuple) and all(isinstance(u, str) for u in until)):
            raise WorkbenchError(f"{where}: generation until must be a list of strings; got "
                                 f"{until!r}")
        if "" in until:
            raise WorkbenchError(f"{where}: generation until lists an empty stop sequence "
                                 f"(index {list(until).index('')}), which would stop before the "
                                 "first token; give non-empty strings")
        get_extractor(self.extractor, where)
        for key in ("ignore_case", "ignore_punctuation"):
            if type(getattr(self, key)) is not bool:
                raise WorkbenchError(f"{where}: generation {key} must be true or false; got "
                                     f"{getattr(self, key)!r}")
        regexes = self.regexes_to_ignore
        if not isinstance(regexes, list | tuple):
            raise WorkbenchError(f"{where}: generation regexes_to_ignore must be a list of "
                                 f"regex strings; got {regexes!r}")
        for pattern in regexes:
            check_regex(pattern, where, "generation regexes_to_ignore entry")
        object.__setattr__(self, "until", tuple(until))
        object.__setattr__(self, "regexes_to_ignore", tuple(regexes))

    @classmethod
    def from_header(cls, obj, where: str) -> GenerationSettings:
        """The settings of a header's `generation` object (keys all optional), or one error
        line naming `where`: an unknown key, or a value of the wrong type or range."""
        if obj is None:
            return cls()
        if isinstance(obj, GenerationSettings):
            obj.check(where)
            return obj
        if not isinstance(obj, dict):
            raise WorkbenchError(f"{where}: task header 'generation' must be an object; got "
                                 f"{obj!r}")
        known = list(cls.__dataclass_fields__)
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise WorkbenchError(f"{where}: unknown generation keys {unknown}; known keys: "
                                 f"{known}")
        settings = cls.__new__(cls)  # checked with `where`, not __post_init__'s generic name
        for key in known:
            object.__setattr__(settings, key, obj.get(key, cls.__dataclass_fields__[key].default))
        settings.check(where)
        return settings

    @property
    def extract(self) -> Extractor:
        """The extractor as a function of the generated text."""
        return get_extractor(self.extractor)

    def score(self, text: str, target: str) -> float:
        """1.0 when the answer extracted from generated `text` matches `target`, else 0.0."""
        return exact_match(self.extract(text), target, self.ignore_case,
                           self.ignore_punctuation, self.regexes_to_ignore)

    def to_dict(self) -> dict:
        """The settings as the header's JSON object."""
        out = asdict(self)
        out["until"], out["regexes_to_ignore"] = list(self.until), list(self.regexes_to_ignore)
        return out
