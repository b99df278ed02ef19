"""The embedded model family: each member loads by name with its architecture, is small, solves
the embedded tasks, shows the CEL effect on the default task, and is reproducible.

The accuracies are facts about the shipped files, so they are checked exactly against the meta
the training script wrote (as in `test_embedded.py`), and against thresholds stated below from
the measured values, so that a retrained member that lost a task fails here.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import pytest
import torch

from workbench import WorkbenchError, evaluate, load_model, load_task
from workbench.zoo import DEFAULT_TASK, EMBEDDED_FAMILY, SIDE_TASKS, embedded_path
from workbench.zoo import language as lang
from workbench.zoo import train as zoo_train

NEW = [name for name in EMBEDDED_FAMILY if name != "embedded"]
TASKS = [DEFAULT_TASK, *SIDE_TASKS]

# Held-out accuracy each member must reach (measured on the shipped files, seed 0; see the
# README's family table). Add, sort and copy are solved by every member (measured 100 %, llama
# copy 99.8 %; chance on copy is 1 in 8 context followers, 12.5 %); the thresholds leave two
# points, so a retrained member whose copy circuit did not form (as the llama member's with
# d_mlp 512: 57.5 %) fails. Map is the conflicting task: marked prompts are solved (measured
# 100 % by every member) and unmarked ones are not (0-0.3 %), so the whole-file accuracy sits
# near one half (measured 48.0-48.2 %).
MIN_ACCURACY = {
    "embedded": {"embedded_copy": 0.98, "embedded_add": 0.98, "embedded_sort": 0.98},
    "embedded_llama": {"embedded_copy": 0.98, "embedded_add": 0.98, "embedded_sort": 0.98},
    "embedded_neox": {"embedded_copy": 0.98, "embedded_add": 0.98, "embedded_sort": 0.98},
}
MIN_MARKED_MAP = 0.98
MAX_UNMARKED_MAP = 0.05
# Removing the recorded best head set (<= 3 heads) must raise held-out map accuracy by at
# least this much and cost copy accuracy. Measured (held-out, deterministic on the shipped
# files): embedded +51.2 pt, neox +37.8 pt, llama +35.0 pt (95 % CI [31.0, 38.5]). Thresholds
# sit under each value and under its interval.
MIN_CEL_GAIN = {"embedded": 0.45, "embedded_llama": 0.3, "embedded_neox": 0.3}


@pytest.fixture(scope="module", params=EMBEDDED_FAMILY)
def member(request):
    return request.param, load_model(request.param, device="cpu")


def _heldout(model, task: str, heads=None):
    return evaluate(model, load_task(task), heads=heads, split="heldout")


def test_family_names_match_the_training_registry():
    assert EMBEDDED_FAMILY[0] == "embedded"
    assert tuple(zoo_train.ARCHITECTURES) == EMBEDDED_FAMILY
    assert len(set(EMBEDDED_FAMILY)) == len(EMBEDDED_FAMILY) == 3


def test_registry_leaves_the_shipped_embedded_recipe_unchanged():
    """The config the registry builds for "embedded" is exactly the shipped model's."""
    from workbench.loading.checkpoint import CONFIG_FILE, _cfg_to_json

    shipped = json.loads((embedded_path("embedded") / CONFIG_FILE).read_text())["cfg"]
    assert _cfg_to_json(zoo_train.TrainConfig(arch="embedded").model_config()) == shipped


@pytest.mark.parametrize("name", EMBEDDED_FAMILY)
def test_member_recipe_is_the_one_its_meta_records(name):
    """`TrainConfig.for_arch` (what the training script runs) gives each shipped member's
    recorded training config: the shared recipe plus its `Architecture.recipe`."""
    meta = load_model(name, device="cpu").workbench_meta
    recorded = {"arch": "embedded", **meta["train_config"]}  # embedded's meta predates `arch`
    assert asdict(zoo_train.TrainConfig.for_arch(name, seed=meta["seed"])) == recorded


@pytest.mark.parametrize(
    "name,expected",
    [
        ("embedded", dict(normalization_type="LN", positional_embedding_type="rotary",
                          rotary_dim=16, n_key_value_heads=None, gated_mlp=False,
                          parallel_attn_mlp=False, act_fn="gelu")),
        ("embedded_llama", dict(normalization_type="RMS", positional_embedding_type="rotary",
                                rotary_dim=16, n_key_value_heads=4, gated_mlp=True,
                                parallel_attn_mlp=False, act_fn="silu")),
        ("embedded_neox", dict(normalization_type="LN", positional_embedding_type="rotary",
                               rotary_dim=8, n_key_value_heads=None, gated_mlp=False,
                               parallel_attn_mlp=True, act_fn="gelu")),
    ],
)
def test_member_loads_by_name_with_its_architecture(name, expected):
    model = load_model(name, device="cpu")
    cfg = model.cfg
    assert {k: getattr(cfg, k) for k in expected} == expected
    assert (cfg.n_layers, cfg.n_heads, cfg.d_head, cfg.d_vocab) == (2, 8, 16, len(lang.VOCAB))
    assert model.word_tokenizer.vocab == lang.VOCAB
    meta = model.workbench_meta
    assert meta["name"] == name  # (the shipped embedded meta predates the `arch` field)
    assert meta["train_config"].get("arch", "embedded") == name
    if cfg.n_key_value_heads is not None:  # grouped-query attention really shares K and V
        assert model.blocks[0].attn._W_K.shape[0] == cfg.n_key_value_heads < cfg.n_heads
    if cfg.normalization_type == "RMS":
        assert type(model.ln_final).__name__ == "RMSNorm"
    if cfg.parallel_attn_mlp:
        assert not hasattr(model.blocks[0], "hook_resid_mid")


@pytest.mark.parametrize("name", EMBEDDED_FAMILY)
def test_member_is_small_and_documented(name):
    size = sum(p.stat().st_size for p in embedded_path(name).iterdir())
    assert size <= 5 * 2**20
    meta = load_model(name, device="cpu").workbench_meta
    assert {"seed", "command", "train_config", "heldout", "cel"} <= set(meta)


def test_member_solves_the_tasks(member):
    name, model = member
    for task in TASKS:
        scores = _heldout(model, task)
        if task == DEFAULT_TASK:
            by_group = scores.groupby("group")["correct"].mean()
        stored = model.workbench_meta["heldout"][task]
        assert (len(scores), int(scores["correct"].sum())) == (stored["n"], stored["correct"])
        if task in MIN_ACCURACY[name]:
            assert scores["correct"].mean() >= MIN_ACCURACY[name][task], (name, task)
    assert by_group["marked"] >= MIN_MARKED_MAP
    assert by_group["unmarked"] <= MAX_UNMARKED_MAP  # the conflict: unmarked map prompts fail


def test_removing_the_recorded_heads_helps_the_default_task(member):
    name, model = member
    cel = model.workbench_meta["cel"]
    best = cel["best"]
    assert 1 <= len(best) <= 3
    # clean accuracies from the meta, which test_member_solves_the_tasks checks exactly
    clean = {t: model.workbench_meta["heldout"][t]["accuracy"] for t in (DEFAULT_TASK,
                                                                         "embedded_copy")}
    after = {t: _heldout(model, t, best)["correct"].mean() for t in clean}
    assert after[DEFAULT_TASK] - clean[DEFAULT_TASK] >= MIN_CEL_GAIN[name], name
    assert after["embedded_copy"] < clean["embedded_copy"] - 0.05, name  # copy pays for it
    n = model.workbench_meta["heldout"][DEFAULT_TASK]["n"]
    assert round(after[DEFAULT_TASK] * n) == cel["heldout_ablated"][DEFAULT_TASK]["correct"]


def test_unknown_embedded_name_lists_the_family():
    with pytest.raises(WorkbenchError, match=r"unknown embedded model 'embedded_gpt3'.*"
                                             r"'embedded', 'embedded_llama', 'embedded_neox'"):
        load_model("embedded_gpt3", device="cpu")
    with pytest.raises(WorkbenchError, match="unknown embedded model"):
        embedded_path("llama")
    with pytest.raises(WorkbenchError, match="architecture 'gpt3' is unknown; expected one of"):
        zoo_train.TrainConfig(arch="gpt3")
    with pytest.raises(WorkbenchError, match="architecture 'gpt3' is unknown; expected one of"):
        zoo_train.TrainConfig.for_arch("gpt3")


def test_missing_member_says_how_to_train_it(monkeypatch, tmp_path):
    import workbench.loading.shipped as shipped

    monkeypatch.setattr(shipped, "ZOO_DIR", tmp_path)  # where `embedded_path` reads it
    with pytest.raises(WorkbenchError, match="train.*--arch embedded_neox"):
        load_model("embedded_neox", device="cpu")


def test_cli_gives_family_members_the_embedded_tasks():
    from workbench.cli.commands import resolve_inputs

    args = argparse.Namespace(model="embedded_llama", task=None, others=None)
    assert resolve_inputs(args) == ("embedded_llama", DEFAULT_TASK, list(SIDE_TASKS), None)


@pytest.fixture
def one_thread():
    """The recipe is deterministic for a fixed thread count; the shipped runs used one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("arch", NEW)
def test_training_is_deterministic_by_seed(arch, one_thread):
    cfg = zoo_train.TrainConfig.for_arch(arch, seed=0)
    a = _state(zoo_train.train(cfg, log_every=0, stop_after=3))
    b = _state(zoo_train.train(cfg, log_every=0, stop_after=3))
    c = _state(zoo_train.train(zoo_train.TrainConfig.for_arch(arch, seed=1), log_every=0,
                               stop_after=3))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embed.W_E"], c["embed.W_E"])


# Relative tolerance on the recorded first losses (10 steps). On this machine a rerun with one
# thread reproduces them bit for bit, and with 2 threads they differ by at most 2.0e-7 (llama)
# and 1.0e-7 (neox, relative): reordered reductions, as on another CPU. Another seed differs at
# every one of the 10 steps by at least 4.4e-5 (llama) and 4.5e-4 (neox), so 1e-5 separates a
# rounding difference from a different recipe.
LOSS_RTOL = 1e-5


@pytest.mark.parametrize("name", NEW)
def test_recorded_recipe_reproduces_its_first_losses(name, one_thread):
    meta = load_model(name, device="cpu").workbench_meta
    cfg = zoo_train.TrainConfig(**meta["train_config"])
    recorded = meta["first_losses"]
    losses: list[float] = []
    zoo_train.train(cfg, log_every=0, stop_after=len(recorded), losses=losses)
    assert losses == pytest.approx(recorded, rel=LOSS_RTOL)
