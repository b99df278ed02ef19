"""The screening methods' registry: a method is one module plus its test. A toy method
registered here is known to the config, the command line, `screen_heads`, the pipeline (an
estimate is checked against exact screening by its record, not its name) and the estimate."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.helpers import micro_cel
from workbench import WorkbenchError
from workbench.cli.parser import build_parser
from workbench.config import CELConfig
from workbench.estimate import stage_forwards
from workbench.pipeline import prepare_run, run_cel
from workbench.screening.registry import (
    ScreenCostInputs,
    ScreenMethod,
    cel_methods,
    get_method,
    methods,
    register,
    unregister,
)
from workbench.screening.screen import exact_diffs, screen_heads
from workbench.tasks.task import load_task

NAME = "toy_exact"
CALLS = []


def toy_diffs(*args, **kwargs):
    """Exact screening, counted: a method that calls itself an estimate, to be checked."""
    CALLS.append(1)
    return exact_diffs(*args, **kwargs)


TOY = ScreenMethod(NAME, toy_diffs, "exact screening under another name",
                   lambda inputs: (7.0, 7.0), restarts=False, exact=False)


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister(NAME)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, _ = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main)


def test_the_built_in_methods_declare_what_they_are():
    m = methods()
    assert set(m) == {"exact", "attribution", "naive"}
    assert cel_methods() == ("attribution", "exact")
    assert [n for n in m if m[n].gradients] == ["attribution"]
    assert {n for n in m if m[n].exact} == {"exact", "naive"}
    inputs = ScreenCostInputs(n_heads=144, n_metrics=2, first=0.25)
    assert m["exact"].cost(inputs) == (36.0, 144.0)
    # no racing: the same whatever the first slice; a forward and a backward per metric
    low, high = m["attribution"].cost(inputs)
    assert m["attribution"].cost(ScreenCostInputs(144, 2, 1.0)) == (low, high)
    assert 1.0 < low < high


def test_a_registered_method_is_known_by_name(toy, micro):
    model, task = micro
    assert NAME in cel_methods() and get_method(NAME, cel=True) is TOY
    assert CELConfig(model="m", task="t", method=NAME).method == NAME
    parser = build_parser("cel")
    assert parser.parse_args(["cel", "--method", NAME]).method == NAME
    ours = screen_heads(model, task, method=NAME)
    exact = screen_heads(model, task, method="exact")
    assert ours.attrs["method"] == NAME
    np.testing.assert_array_equal(ours["d_accuracy"], exact["d_accuracy"])
    run = prepare_run(model, task, method=NAME, adaptive=False, check_attribution=False,
                      side_screening=False)
    assert stage_forwards(run)["screen"] == (7.0, 7.0)  # the record's cost


def test_an_estimating_method_is_checked_against_exact_screening(toy, micro):
    """The pipeline reads `exact=False` from the record: it runs the exact check and reports
    the rank correlation (1 here: the toy method is exact screening)."""
    model, task = micro
    CALLS.clear()
    result = run_cel(model, task, method=NAME, max_size=1, top_m=2, n_random=5, n_boot=50,
                     strategies=("exhaustive",), plots=False, progress=False)
    assert CALLS and set(result.summary["attribution_rank_correlation"]) >= {"accuracy"}
    rho = result.summary["attribution_rank_correlation"]["logprob"]
    assert rho == pytest.approx(1.0)
    assert "exact_d_logprob" in result.heads


def test_a_method_name_is_registered_once(toy):
    with pytest.raises(WorkbenchError, match="already registered"):
        register(dataclasses.replace(TOY, summary="another"))
    with pytest.raises(WorkbenchError, match=r"'naive' is the slow reference"):
        get_method("naive", cel=True)
