"""Structural checks: rules a task's tokenization must follow for the task to mean anything.

A task names its checks in its header (`checks`); each runs once a model's tokenizer is known
(`workbench.tasks.ids`), taking `(tokenizer, example, prompt ids without BOS, answer token
lists)`, and raises a `WorkbenchError` naming the example when the rule fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench.tasks.task import Example

Check = Callable[[object, "Example", list[int], list[list[int]]], None]


def _check_year_split(tok, ex: Example, prompt_ids: list[int], answers: list[list[int]]) -> None:
    """Greater-than (Hanna et al.): the last four-digit year of the prompt must split as its
    century + its two last digits, and the prompt must end with that century alone, so that the
    answer (the end year's two digits) is the next token."""
    years = re.findall(r"(?<!\d)(\d\d)(\d\d)(?!\d)", ex.prompt)
    if not years:
        raise WorkbenchError(f"example {ex.id!r}: check year_split finds no four-digit year")
    century, yy = years[-1]
    pieces = [p.strip() for p in tok.str_tokens(prompt_ids)]
    if not any(pieces[i : i + 2] == [century, yy] for i in range(len(pieces) - 1)):
        raise WorkbenchError(
            f"example {ex.id!r}: the start year {century}{yy} is not split as century "
            f"{century!r} + {yy!r} by this tokenizer (prompt tokens {tok.str_tokens(prompt_ids)})"
            "; greater-than needs century + two-digit tokens"
        )
    if not pieces or pieces[-1] != century:
        raise WorkbenchError(
            f"example {ex.id!r}: the prompt's last token is {pieces[-1:]}, not the century "
            f"{century!r}; greater-than needs the end year's century as its own token"
        )


CHECKS: dict[str, Check] = {"year_split": _check_year_split}
