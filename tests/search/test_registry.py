"""The strategy registry: a strategy is one module plus its test. A toy strategy registered
here, from a test module, is known by name to the config, the command line, the pipeline and
the estimate, and runs end to end with its own setting."""

from __future__ import annotations

import dataclasses
import math
from itertools import combinations

import pytest

from tests.helpers import assert_close, micro_cel
from workbench import WorkbenchError, evaluate, summarize
from workbench.cli.commands import run_options
from workbench.cli.parser import build_parser
from workbench.config import CELConfig
from workbench.estimate import stage_forwards
from workbench.pipeline import prepare_run, run_cel
from workbench.racing import first_slice
from workbench.screening.stage import screen_race_rule
from workbench.search.registry import (
    CostInputs,
    Setting,
    Strategy,
    get_strategy,
    register,
    strategies,
    strategy_list,
    strategy_names,
    unregister,
)
from workbench.tasks.task import load_task

NAME = "toy_pairs"


def toy_pairs(space, settings) -> None:
    """Every single head and pair among the first `k` screening candidates."""
    heads = space.candidates[: settings["k"]]
    sets = [(h,) for h in heads] + list(combinations(heads, 2))
    space.score_sets(sets, NAME)


def _cost(inputs: CostInputs, settings) -> tuple[float, float]:
    k = settings["k"]
    return 0.0, k + math.comb(k, 2)


# certain: its sets are among the first k candidates, which every run has (topped up to top_m)
TOY = Strategy(NAME, toy_pairs, "singles and pairs among the first k candidates", _cost,
               ranked=True, settings=(Setting("k", 3, "candidates to pair", low=2),),
               certain=True)


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister(NAME)


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    model, main, _ = micro_cel(tmp_path_factory.mktemp("micro"))
    return model, load_task(main)


def test_the_built_in_strategies_are_registered_by_their_modules():
    assert set(strategy_list()) == {"beam", "compressed_sensing", "exhaustive", "gates",
                                    "greedy", "interaction"}
    for name, strategy in strategies().items():
        assert strategy.name == name and strategy.summary and callable(strategy.function())
    ranked = {n for n, s in strategies().items() if s.ranked}
    assert ranked == {"exhaustive", "greedy", "beam"}


def test_a_registered_strategy_is_a_name_the_config_and_cli_know(toy):
    assert NAME in strategy_list() and strategy_names(NAME) == (NAME,)
    cfg = CELConfig(model="m", task="t", strategies=(NAME,), strategy_settings={NAME: {"k": 4}})
    assert cfg.to_dict()["strategy_settings"] == {NAME: {"k": 4}}
    assert CELConfig.from_dict(cfg.to_dict()) == cfg
    # without settings the config's JSON has no such key (older folders read back the same)
    assert "strategy_settings" not in CELConfig(model="m", task="t").to_dict()
    args = build_parser("cel").parse_args(["cel", "--strategy", NAME, "--toy-pairs-k", "5"])
    options = run_options(args)
    assert options["strategies"] == [NAME]
    assert options["strategy_settings"] == {NAME: {"k": "5"}}
    fields = {k: v for k, v in options.items() if k in CELConfig.__dataclass_fields__}
    assert CELConfig(model="m", task="t", **fields).strategy_settings == {NAME: {"k": 5}}
    assert screen_race_rule((NAME,)) == "hurts"  # ranked: screening ranks every candidate


@pytest.mark.parametrize("settings,message", [
    ({NAME: {"k": 1}}, r"toy_pairs setting 'k' must be an integer >= 2; got 1"),
    ({NAME: {"k": "many"}}, r"toy_pairs setting 'k' must be an integer >= 2; got 'many'"),
    ({NAME: {"j": 2}}, r"strategy 'toy_pairs' has no settings \['j'\]; expected some of \['k'\]"),
    ({"beam": {"beam_width": 2}}, r"settings for strategy 'beam', which this run does not use"),
])
def test_bad_strategy_settings_are_refused_in_one_line(toy, settings, message):
    with pytest.raises(WorkbenchError, match=message):
        CELConfig(model="m", task="t", strategies=(NAME,), strategy_settings=settings)


def test_a_field_setting_is_given_as_the_config_field():
    with pytest.raises(WorkbenchError, match=r"\['beam_width'\] of strategy 'beam' are CELConfig"):
        CELConfig(model="m", task="t", strategies=("beam",),
                  strategy_settings={"beam": {"beam_width": 2}})


def test_two_strategies_may_not_share_a_name(toy):
    register(TOY)  # the same record again: no change
    with pytest.raises(WorkbenchError, match="already registered"):
        register(dataclasses.replace(TOY, summary="another"))
    assert get_strategy(NAME) is TOY


def test_the_toy_strategy_runs_end_to_end_and_scores_exactly(toy, micro):
    """run_cel with the toy strategy and its setting: every set it asks for is in combos.csv,
    its gain equal to `evaluate`'s on the selection split, and the pre-run estimate is the
    strategy's own cost."""
    model, task = micro
    settings = dict(strategies=(NAME,), strategy_settings={NAME: {"k": 4}}, top_m=4,
                    max_size=2, n_random=10, n_boot=100, adaptive=False, progress=False)
    run = prepare_run(model, task, **settings)
    assert stage_forwards(run)["search"] == (4 + 6, 4 + 6)  # not raced: both ends
    raced = prepare_run(model, task, **{**settings, "adaptive": True})
    n = len(raced.select)
    assert_close(stage_forwards(raced)["search"][0], 10 * first_slice(n) / n)
    # a strategy whose sets depend on screening's outcome counts none at the low end
    uncertain = dataclasses.replace(TOY, certain=False)
    unregister(NAME)
    register(uncertain)
    try:
        assert stage_forwards(raced)["search"] == (0.0, 10.0)
    finally:
        unregister(NAME)
        register(TOY)
    result = run_cel(model, task, plots=False, **settings)
    combos = result.combos
    assert set(combos["strategy"]) == {NAME}
    candidates = result.summary["candidates"][:4]
    want = {*candidates, *(",".join(sorted(p)) for p in combinations(candidates, 2))}
    assert set(combos["heads"]) == want
    clean = summarize(evaluate(model, task, split="select"), by=None).loc[0, "accuracy"]
    for row in combos.itertuples():
        heads = row.heads.split(",")
        ablated = summarize(evaluate(model, task, heads, split="select"), by=None)
        assert_close(row.d_accuracy, ablated.loc[0, "accuracy"] - clean)
    assert result.config.strategy_settings == {NAME: {"k": 4}}
