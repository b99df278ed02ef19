"""The hub (`workbench.loading.hub`, `workbench.loading.names`): an offline hub name answers at
once without torch, an unreachable hub is one line without retries, an answering hub lets
loading go on, and `hub_repo` agrees with TransformerLens's names. No test touches the network:
the hub is kept out by `HF_HUB_OFFLINE=1` (conftest) or a stand-in for huggingface_hub's
request."""

from __future__ import annotations

import errno
import time

import pytest

import workbench.cli.parser as cli
from workbench.errors import WorkbenchError


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("workbench: error: "), err
    return err[0]


def test_an_offline_hub_name_answers_at_once_without_torch(capsys):
    """Under HF_HUB_OFFLINE=1 (conftest) a hub name not in the cache is refused before torch
    would be needed, in one line naming HF_HUB_OFFLINE=1 and --model /path."""
    t0 = time.perf_counter()
    assert cli.main(["cel", "--model", "pythia-70m", "--task", "ioi", "--quiet"]) == 2
    elapsed = time.perf_counter() - t0
    line = _one_error_line(capsys)
    assert "'EleutherAI/pythia-70m' is not in the local Hugging Face cache" in line, line
    assert "HF_HUB_OFFLINE=1" in line and "--model /path" in line, line
    assert elapsed < 5.0, elapsed


def test_an_unreachable_hub_is_one_line_without_retries(monkeypatch):
    """With the hub out of reach (a stand-in for huggingface_hub's request that fails as a
    refused connection does), loading asks once, never calls TransformerLens's loader, and
    says HF_HUB_OFFLINE=1 and --model /path."""
    import huggingface_hub
    from huggingface_hub import constants
    from transformer_lens import HookedTransformer

    from workbench.loading import load_model

    asked = []

    def refused(url, *args, **kwargs):
        asked.append(url)
        raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")

    def never(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", refused)
    monkeypatch.setattr(HookedTransformer, "from_pretrained", never)
    with pytest.raises(WorkbenchError) as info:
        load_model("gpt2", device="cpu")
    message = str(info.value)
    assert "\n" not in message and "the Hugging Face hub is unreachable for 'gpt2'" in message
    assert "HF_HUB_OFFLINE=1" in message and "--model /path" in message
    assert asked == ["https://huggingface.co/gpt2/resolve/main/config.json"]


def test_a_hub_that_answers_lets_loading_go_on(monkeypatch):
    """Any answer of the hub counts as reachable: the probe raises nothing."""
    import huggingface_hub
    from huggingface_hub import constants

    from workbench.loading.names import check_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda *a, **k: object())
    check_hub("gpt2")

    def weird(*args, **kwargs):
        raise KeyError("not a transport failure")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", weird)
    with pytest.raises(KeyError):  # a bug is not reported as an unreachable hub
        check_hub("gpt2")


def test_hub_repo_agrees_with_transformer_lens():
    """`names.hub_repo` (no torch) maps every official name and alias as TransformerLens's
    own `get_official_model_name` does."""
    from transformer_lens.loading_from_pretrained import make_model_alias_map

    from workbench.loading.names import hub_repo
    from workbench.loading.shipped import REAL_MODELS as SHIPPED_REAL

    aliases = make_model_alias_map()
    assert len(aliases) > 100
    for name, official in aliases.items():
        # a shipped model loads without the hub, whatever TransformerLens calls it
        assert hub_repo(name) == (None if name in SHIPPED_REAL else official), name
    assert hub_repo("embedded") is None and hub_repo("smollm2-135m") is None
    assert hub_repo("no-such-model") is None
