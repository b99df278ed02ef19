"""Keywords that moved keep working for one minor version, with a warning that names the move.

The public API (`workbench.__all__`, its signatures pinned by `tests/api_signatures.txt`) is a
promise: a call that worked in the last release must not fail with a bare `TypeError` in this
one. When a keyword is renamed, or moves into a settings object (0.2.0 moved `screen_heads`'
bootstrap settings into `Stats` and its budgets into `Compute`), the function is decorated
with `renamed_keywords`: the old keyword is still accepted, does what it did, and raises a
`DeprecationWarning` that names its replacement and the version that will remove it. The
function's signature (`inspect.signature`) stays the new one, so help, IDEs and the pinned
snapshot show only what to write now. No torch here: the command line imports it.

    @renamed_keywords(holders={"stats": lambda s: s or Stats()}, n_boot="stats.n_boot")
    def screen_heads(model, task, ..., stats: Stats | None = None): ...

    screen_heads(model, task, n_boot=50)   # works, and warns: "... use stats=Stats(n_boot=50)"
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping

# the release that moved the keywords below, and the one that will stop accepting them
SINCE = "0.2.0"
REMOVED_IN = "0.3.0"
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def deprecated(what: str, instead: str) -> None:
    """Warn (`DeprecationWarning`) that `what` is deprecated since `SINCE` and goes in
    `REMOVED_IN`, naming what to write `instead`. The warning is attributed to the first
    caller outside the package (Python shows a `DeprecationWarning` by default only where it
    points at the user's `__main__`)."""
    warnings.warn(f"{what} is deprecated since workbench {SINCE} and will be removed in "
                  f"{REMOVED_IN}; use {instead}", DeprecationWarning,
                  stacklevel=caller_stacklevel())


def caller_stacklevel() -> int:
    """The `stacklevel` that attributes a warning, raised by `warnings.warn` in the function
    that calls this one, to the first caller outside the package."""
    frame, level = sys._getframe(2), 2  # 1 is the function that warns
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def renamed_keywords(holders: Mapping[str, Callable] | None = None, **moves: str) -> Callable:
    """A decorator: old keyword arguments of the function still work, with a warning.

    Args:
        holders: for keywords that moved into a settings object, the function's parameter
            that takes that object -> a function from the parameter's value as called (None
            when not given) to the object to update (its default, built when None).
        moves: old keyword -> `"new"` (renamed: passed on as `new=value`) or
            `"holder.field"` (moved: passed on as `holder=dataclasses.replace(obj,
            field=value)`, `obj` from `holders[holder]`; a holder that is None even then, as
            `race_on=None`, takes nothing: the old keyword had no effect there either).

    Giving an old keyword together with its new form is a `TypeError`, as a repeated keyword
    is. The decorated function keeps its own signature, and records `moves` as
    `renamed_keywords` (the README's API table and the tests read it).
    """
    holders = dict(holders or {})
    for old, new in moves.items():
        holder = new.partition(".")[0] if "." in new else None
        if holder is not None and holder not in holders:
            raise ValueError(f"renamed_keywords: {old!r} moves into {holder!r}, which has no "
                             "entry in holders")

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        name = fn.__name__
        for new in moves.values():
            target = new.partition(".")[0]
            if target not in sig.parameters:
                raise ValueError(f"renamed_keywords: {name}() has no parameter {target!r}")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            given = [k for k in kwargs if k in moves]
            if not given:
                return fn(*args, **kwargs)
            old = {k: kwargs.pop(k) for k in given}
            try:
                bound = sig.bind_partial(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{name}(): {e}") from None
            updated: dict[str, object] = {}
            for key, value in old.items():
                target, _, field = moves[key].partition(".")
                if not field:  # a plain rename
                    if target in bound.arguments:
                        raise TypeError(f"{name}() got {key!r} and its new name {target!r}; "
                                        f"give {target!r} only")
                    deprecated(f"{name}(..., {key}=...)", f"{name}(..., {target}=...)")
                    bound.arguments[target] = value
                    continue
                if target not in updated:
                    updated[target] = holders[target](bound.arguments.get(target))
                obj = updated[target]
                shown = (f"{type(obj).__module__}.{type(obj).__qualname__}" if obj is not None
                         else target)
                deprecated(f"{name}(..., {key}=...)",
                           f"{name}(..., {target}={shown}({field}={value!r}))")
                if obj is not None:
                    updated[target] = dataclasses.replace(obj, **{field: value})
            bound.arguments.update(updated)
            return fn(*bound.args, **bound.kwargs)

        wrapper.renamed_keywords = dict(moves)
        return wrapper

    return decorate
