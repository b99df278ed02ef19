"""Each strategy's own settings dataclass (`Strategy.settings_type`): built from a config, it
holds exactly the values the strategy read from the config's fields and
`strategy_settings`; a name it does not have is one clear error; the command line's flags
are the strategies' own settings alone."""

from __future__ import annotations

import dataclasses

import pytest

from workbench import WorkbenchError
from workbench.cli.parser import build_parser
from workbench.config import CELConfig
from workbench.search.finalists import KNOCKOUT_EXAMPLES, SCREEN_SHARE
from workbench.search.registry import Setting, Strategy, get_strategy, strategies

BUILT_IN = ("beam", "compressed_sensing", "exhaustive", "gates", "greedy", "interaction")
CONFIG = CELConfig(model="m", task="t", strategies=BUILT_IN, top_m=5, beam_width=3, n_masks=70,
                   knockout_p=0.2, search_budget=400, knockout_examples=8,
                   strategy_settings={"gates": {"steps": 40, "lr": 0.1}})
# what each strategy read before it had its own settings: the config's fields (through the
# search space) and, for gates, `strategy_settings["gates"]` over its defaults
READ = {
    "beam": {"beam_width": 3},
    "compressed_sensing": {"top_m": 5, "n_masks": 70, "knockout_p": 0.2},
    "exhaustive": {"top_m": 5},
    "gates": {"steps": 40, "batch_size": 8, "lr": 0.1, "penalty": 0.05, "init": 1.0,
              "search_budget": 400, "screen_share": SCREEN_SHARE},
    "greedy": {},
    "interaction": {"n_masks": 70, "knockout_p": 0.2, "search_budget": 400,
                    "knockout_examples": 8, "screen_share": SCREEN_SHARE},
}


@pytest.mark.parametrize("name", BUILT_IN)
def test_settings_from_a_config_are_the_values_the_strategy_read(name):
    settings = get_strategy(name).settings_of(CONFIG)
    assert type(settings) is get_strategy(name).settings_type
    assert dataclasses.asdict(settings) == READ[name]


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_default_config_gives_the_settings_defaults(name):
    """A strategy called without settings (`strategy(space)`) runs as a default run does."""
    strategy = get_strategy(name)
    assert strategy.settings_of(CELConfig(model="m", task="t", strategies=(name,))) \
        == strategy.settings_type()


def test_the_defaults_before_settings_existed():
    """The defaults the search space held for every strategy."""
    interaction = get_strategy("interaction").settings_type()
    assert (interaction.knockout_examples, interaction.screen_share) == (KNOCKOUT_EXAMPLES, 0.25)
    assert get_strategy("exhaustive").settings_type().top_m == 8
    assert get_strategy("beam").settings_type().beam_width == 4


@pytest.mark.parametrize("given,message", [
    ({"width": 2}, r"^strategy 'beam' has no settings \['width'\]; expected some of "
                   r"\['beam_width'\]$"),
    ({"beam_width": 0}, r"^beam setting 'beam_width' must be an integer >= 1; got 0$"),
])
def test_a_bad_setting_is_one_clear_error(given, message):
    for build in (get_strategy("beam").build, lambda g: get_strategy("beam")(None, **g)):
        with pytest.raises(WorkbenchError, match=message) as err:
            build(given)
        assert "\n" not in str(err.value)


def test_settings_and_keywords_together_are_refused():
    strategy = get_strategy("beam")
    with pytest.raises(WorkbenchError, match="give its settings or keywords, not both"):
        strategy(None, strategy.build(), beam_width=2)


def test_keywords_build_the_settings_the_function_gets():
    seen = []
    toy = Strategy("toy_seen", lambda space, settings: seen.append(settings), "records",
                   lambda inputs, settings: (0.0, 0.0))
    toy(None)
    assert seen == [{}]
    interaction = get_strategy("interaction")
    assert interaction.build({"screen_share": 0.5, "n_masks": "80"}) == \
        interaction.settings_type(n_masks=80, screen_share=0.5)


def test_a_settings_type_must_match_the_settings_it_declares():
    @dataclasses.dataclass(frozen=True)
    class Wrong:
        k: int = 2

    with pytest.raises(WorkbenchError, match=r"settings \['k'\] are not fields of Wrong"):
        Strategy("toy_wrong", lambda space, settings: None, "", lambda i, s: (0.0, 0.0),
                 settings=(Setting("k", 3, "k"),), settings_type=Wrong)


def _flags(parser) -> set[str]:
    """Every option string of `parser` and its sub-commands."""
    out = set()
    for action in parser._actions:
        out |= set(action.option_strings)
        choices = getattr(action, "choices", None)
        for sub in choices.values() if isinstance(choices, dict) else ():
            out |= _flags(sub)
    return out


def test_the_command_line_flags_are_the_strategies_own_settings():
    """Field settings (`top_m`, `search_budget`, ...) stay `CELConfig` flags; only settings
    in `strategy_settings` get `--<strategy>-<setting>`."""
    prefixes = tuple(f"--{n.replace('_', '-')}-" for n in strategies())
    assert {f for f in _flags(build_parser("cel")) if f.startswith(prefixes)} == {
        "--gates-steps", "--gates-batch-size", "--gates-lr", "--gates-penalty", "--gates-init"}
    args = build_parser("cel").parse_args(["cel", "--strategy", "exhaustive", "--top-m", "3"])
    assert args.top_m == 3
