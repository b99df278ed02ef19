"""`CELConfig` and `workbench.options`: options parsed into their named types, written as
their strings (so every results folder's `config.json` reads back the same), no torch. The
threads (`threads="auto"`) are tests/test_environment.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import CELConfig
from workbench.errors import WorkbenchError
from workbench.options import AblationKind, ClusterMode, RankBy, SearchDtype
from workbench.search.registry import strategy_list, strategy_names

REPO_ROOT = Path(__file__).resolve().parent.parent
GOLDEN_CONFIGS = sorted((REPO_ROOT / "tests" / "golden").glob("*/config.json"))


@pytest.mark.parametrize("module", ["workbench.config", "workbench.cli.parser",
                                    "workbench.cli.commands", "workbench.options",
                                    "workbench.environment", "workbench.progress"])
def test_importing_imports_no_torch(module):
    """In a fresh interpreter: the config, the options and the command line (its parser) need
    neither torch nor TransformerLens."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    code = (f"import sys, json, {module}\n"
            "print(json.dumps([m for m in ('torch', 'transformer_lens') if m in sys.modules]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_the_strategy_names_are_the_search_registry():
    from workbench.search.registry import get_strategy, strategies

    assert strategy_list() == tuple(sorted(strategies()))
    assert set(strategy_list()) >= {"beam", "compressed_sensing", "exhaustive", "gates",
                                    "greedy", "interaction"}
    for name in strategy_list():
        assert get_strategy(name) is strategies()[name]
    with pytest.raises(WorkbenchError, match=r"search strategy 'greddy' is unknown; expected "
                       r"one of \[.*\] \(did you mean 'greedy'\?\)"):
        get_strategy("greddy")


def test_options_are_named_types_written_as_strings():
    cfg = CELConfig(model="m", task="t", kind="mean", method="attribution",
                    rank_by="secondary", cluster="group", strategies="beam")
    assert cfg.kind is AblationKind.MEAN and cfg.method == "attribution"
    assert cfg.rank_by is RankBy.SECONDARY and cfg.cluster is ClusterMode.GROUP
    assert cfg.strategies == ("beam",)
    d = cfg.to_dict()
    for key, value in (("kind", "mean"), ("method", "attribution"), ("rank_by", "secondary"),
                       ("cluster", "group")):
        assert d[key] == value and type(d[key]) is str, key  # plain JSON strings
    assert d["strategies"] == ["beam"] and d["others"] == []
    again = CELConfig.from_dict(json.loads(json.dumps(d)))
    assert again == cfg and again.differences(cfg) == []
    # the defaults are members too, not bare strings
    plain = CELConfig(model="m", task="t")
    assert (plain.kind, plain.method, plain.rank_by, plain.cluster) == (
        AblationKind.ZERO, "exact", RankBy.OBJECTIVE, ClusterMode.AUTO)
    assert all(type(v) in (str, int, float, bool, list, type(None))
               for v in plain.to_dict().values())


def test_search_dtype_is_written_only_off_its_default_and_reads_back():
    """float32 (the default) writes no key, so a folder written before the field reads back
    as float32; `auto` (resolved when a run is prepared) and bfloat16 are written as
    themselves."""
    plain = CELConfig(model="m", task="t")
    assert plain.search_dtype is SearchDtype.FLOAT32 and "search_dtype" not in plain.to_dict()
    assert CELConfig.from_dict(plain.to_dict()) == plain
    for value in ("auto", "bfloat16"):
        low = CELConfig(model="m", task="t", search_dtype=value)
        d = low.to_dict()
        assert d["search_dtype"] == value and type(d["search_dtype"]) is str
        again = CELConfig.from_dict(json.loads(json.dumps(d)))
        assert again == low and again.search_dtype is SearchDtype(value)
        assert plain.differences(low) == ["search_dtype"]
    with pytest.raises(WorkbenchError, match=r"search dtype 'float8' is unknown; expected one "
                       r"of \['auto', 'float32', 'bfloat16'\]"):
        CELConfig(model="m", task="t", search_dtype="float8")


@pytest.mark.parametrize("path", GOLDEN_CONFIGS, ids=lambda p: p.parent.name)
def test_golden_configs_read_back_to_the_same_json(path):
    """Existing results folders still resume: their config reads and writes back unchanged."""
    saved = json.loads(path.read_text())["config"]
    cfg = CELConfig.from_dict(saved)
    assert isinstance(cfg.method, str) and isinstance(cfg.cluster, ClusterMode)
    assert json.dumps(cfg.to_dict(), sort_keys=True) == json.dumps(saved, sort_keys=True)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("kind", "maen", "ablation kind 'maen' is unknown; expected one of ['zero', 'mean', "
         "'resample'] (did you mean 'mean'?)"),
        ("method", "exakt", "screening method 'exakt' is unknown; expected one of "
         "['attribution', 'exact'] (did you mean 'exact'?)"),
        ("method", "naive", "CEL screening method must be one of ['attribution', 'exact']; "
         "'naive' is the slow reference"),
        ("rank_by", "objectiv", "rank_by 'objectiv' is unknown; expected one of ['objective', "
         "'secondary'] (did you mean 'objective'?)"),
        ("cluster", "groups", "cluster 'groups' is unknown; expected one of ['auto', 'group', "
         "'none'] (did you mean 'group'?)"),
        ("strategies", ("interaction", "gredy"), "search strategy 'gredy' is unknown; "
         "expected one of ['beam', 'compressed_sensing', 'exhaustive', 'gates', 'greedy', "
         "'interaction'] (did you mean 'greedy'?)"),
        ("strategies", (), "at least one search strategy is needed"),
    ],
)
def test_a_bad_option_names_the_option_the_value_and_the_choices(field, value, message):
    with pytest.raises(WorkbenchError) as e:
        CELConfig(model="m", task="t", **{field: value})
    assert message in str(e.value)


def test_strategy_names_takes_one_name_or_several():
    assert strategy_names("beam") == ("beam",)
    assert strategy_names(["greedy", "beam"]) == ("greedy", "beam")
