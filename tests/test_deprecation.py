"""`workbench.deprecation.renamed_keywords`: old keywords still work, warn, and name the new
spelling; the new signature is what `inspect` shows."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import pytest

from workbench.deprecation import renamed_keywords


@dataclasses.dataclass(frozen=True)
class Settings:
    n: int = 1
    level: float = 0.5


@renamed_keywords(holders={"settings": lambda s: s or Settings()}, n="settings.n",
                  level="settings.level", size="width")
def draw(shape, width: int = 3, settings: Settings | None = None):
    return shape, width, settings or Settings()


def test_new_spelling_is_silent_and_the_signature_is_the_new_one():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert draw("a", 4, Settings(2)) == ("a", 4, Settings(2))
    assert list(inspect.signature(draw).parameters) == ["shape", "width", "settings"]
    assert draw.renamed_keywords == {"n": "settings.n", "level": "settings.level",
                                     "size": "width"}


def test_renamed_and_moved_keywords_work_and_warn():
    with pytest.warns(DeprecationWarning, match=r"draw\(\.\.\., size=\.\.\.\).*use "
                      r"draw\(\.\.\., width=\.\.\.\)"):
        assert draw("a", size=7) == ("a", 7, Settings())
    with pytest.warns(DeprecationWarning) as caught:
        got = draw("a", n=5, level=0.9)
    assert got == ("a", 3, Settings(5, 0.9))
    assert len(caught) == 2 and all(w.filename == __file__ for w in caught)
    assert "settings=tests.test_deprecation.Settings(n=5)" in str(caught[0].message)
    # moved into a holder that was given, positionally: its other fields are kept
    with pytest.warns(DeprecationWarning):
        assert draw("a", 3, Settings(2, 0.1), level=0.7) == ("a", 3, Settings(2, 0.7))


def test_old_and_new_together_is_an_error():
    with pytest.raises(TypeError, match="new name 'width'"):
        draw("a", width=2, size=3)
    with pytest.raises(TypeError, match="draw\\(\\)"):
        draw("a", 1, 2, 3, n=1)  # too many positional arguments, said as Python says it


def test_a_move_must_name_a_holder_and_a_parameter():
    with pytest.raises(ValueError, match="holders"):
        renamed_keywords(n="settings.n")
    with pytest.raises(ValueError, match="no parameter 'nope'"):
        renamed_keywords(x="nope")(draw.__wrapped__)
