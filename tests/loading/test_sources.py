"""One list of model sources: `load_model` and the command line's name check read the same
records, so a source registered here is accepted by the check and used by `load_model`."""

from __future__ import annotations

import pytest

import workbench.loading.sources as sources
from tests.helpers import tiny_model
from workbench import WorkbenchError
from workbench.loading.model import load_model
from workbench.loading.shipped import REAL_MODELS
from workbench.loading.sources import ModelSource, check_model_name, find_source, register_source
from workbench.zoo import EMBEDDED_FAMILY

LOADED = []


def toy_loader(name, device, dtype):
    LOADED.append((name, str(device), dtype))
    return tiny_model(device="cpu")


@pytest.fixture
def toy_source(monkeypatch):
    monkeypatch.setattr(sources, "SOURCES", list(sources.SOURCES))
    return register_source(ModelSource(
        "toy", "a toy model (toy-*)", lambda name: name.startswith("toy-"),
        "tests.loading.test_sources:toy_loader", lambda: ("toy-one",)))


def test_every_named_model_is_claimed_by_its_source():
    for name in EMBEDDED_FAMILY:
        assert find_source(name).name == "embedded"
    for name in REAL_MODELS:
        assert find_source(name).name == "shipped"
    assert [s.name for s in sources.SOURCES] == [
        "embedded", "shipped", "gguf", "checkpoint", "hf_folder", "hub"]


def test_a_registered_source_is_checked_and_loaded(toy_source):
    with pytest.raises(WorkbenchError, match="unknown model 'toy_one'.*did you mean 'toy-one'"):
        check_model_name("toy_one")
    check_model_name("toy-one")  # claimed: no error, no torch
    assert find_source("toy-one") is toy_source
    LOADED.clear()
    model = load_model("toy-one", device="cpu")
    assert LOADED == [("toy-one", "cpu", None)] and model.cfg.n_layers == 2
    with pytest.raises(WorkbenchError, match=r"a toy model \(toy-\*\)"):
        check_model_name("tay")


def test_a_source_name_is_registered_once(toy_source):
    with pytest.raises(WorkbenchError, match="already registered"):
        register_source(toy_source)


def test_unclaimed_paths_are_refused_before_loading(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(WorkbenchError, match="is a file but not a GGUF file"):
        load_model(tmp_path / "notes.txt", device="cpu")
    with pytest.raises(WorkbenchError, match="holds neither a workbench checkpoint"):
        load_model(tmp_path, device="cpu")
    with pytest.raises(WorkbenchError, match="unknown embedded model 'embedded_gpt'"):
        load_model("embedded_gpt", device="cpu")
