"""Fixtures of the search tests: the planted micro model (`tests/search/planted.py`) and its
single-head screening with the candidates marked. A file about the hand-built demo model
(`test_strategies.py`, `test_registry.py`) defines its own `micro`."""

from __future__ import annotations

import pytest

from bench.planted import planted_model
from tests.search.planted import FIRST, MICRO, SECOND
from workbench.screening.screen import screen_heads
from workbench.search.candidates import select_candidates
from workbench.stats import Stats


@pytest.fixture(scope="module")
def micro():
    return planted_model(MICRO)


@pytest.fixture(scope="module")
def micro_screen(micro):
    heads = screen_heads(micro.model, micro.task, stats=Stats(n_boot=200))
    return select_candidates(heads, FIRST, SECOND, 8)
