"""Every public function on a TransformerBridge in compatibility mode, against a reference.

One tiny GPT-2 (2 layers x 4 heads, random weights and biases, a word-level Hugging Face
tokenizer) is saved to a temporary folder once per session (`save_tiny_gpt2`). The bridge
boots from that folder, `load_model` loads the same folder as a HookedTransformer, and
transformers loads it as itself. Each number a workbench function gives on the bridge is
compared with the same function on the HookedTransformer (the same weights, converted by
TransformerLens) or with Hugging Face's own forward with the head's `c_proj` input rows zeroed
(`hf_head_removed`). The bridge's logits differ from Hugging Face's by a constant per position
(compatibility mode centres the unembedding, as `load_model` does), so log-probabilities and
logit differences are compared, never raw logits.

Measured on this model (float32, CPU), the largest differences are 5.7e-6 (a normalized logit
difference, a ratio to a mean of 0.5 nats), 4.1e-6 (full-vocabulary log-probs of an ablated
forward, bridge vs Hugging Face) and at most 2.2e-6 in every other metric, head mean,
screening effect, CEL table and explanation table: within the shared `assert_close`
tolerance (1e-5 absolute plus 1e-5 relative) throughout.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch

from tests.helpers import assert_close, hf_head_removed, save_tiny_gpt2, write_spaced_task
from workbench import (
    CELResult,
    HeadSet,
    ablated,
    compute_head_means,
    encode_task,
    evaluate,
    explain_heads,
    head_table,
    load_model,
    load_task,
    run_cel,
    screen_heads,
    summarize,
)
from workbench.errors import WorkbenchError
from workbench.logits import answer_logits, is_bridge, logits_at, unembed_at

O_PROJ = "transformer.h.{l}.attn.c_proj"  # GPT-2's attention output projection (Conv1D)
D_HEAD = 8
NUMERIC = ["correct", "logprob", "logit_diff", "prob_diff", "normalized_logit_diff"]


def _boot(folder, compatibility: bool = True):
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers(str(folder), device="cpu")
    if compatibility:  # value biases unfolded, so that zeroing hook_z removes a head
        bridge.enable_compatibility_mode(disable_warnings=True, fold_value_biases=False)
    return bridge


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory):
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny_gpt2"))


@pytest.fixture(scope="session")
def trio(gpt2_folder):
    """`(bridge, hooked, hf)`: the same weights as a TransformerBridge (compatibility mode),
    a HookedTransformer (`load_model`) and a Hugging Face model."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(gpt2_folder, dtype=torch.float32).eval()
    return _boot(gpt2_folder), load_model(str(gpt2_folder), device="cpu"), hf


@pytest.fixture(scope="session")
def spaced_task(tmp_path_factory):
    return load_task(write_spaced_task(tmp_path_factory.mktemp("tasks") / "spaced.jsonl"))


def _hf_scores(hf, batch) -> dict[str, torch.Tensor]:
    """Log-prob of the (first) answer and logit difference against the (first) wrong answer,
    from Hugging Face's own forward, at each prompt's answer position."""
    with torch.no_grad():
        logits = hf(batch.tokens).logits
    logp = logits[torch.arange(len(batch)), batch.answer_pos].log_softmax(-1)
    answer = logp.gather(1, batch.answer_ids[:, :1])[:, 0]
    wrong = logp.gather(1, batch.wrong_ids[:, :1])[:, 0]
    return {"logprob": answer, "logit_diff": answer - wrong}


def _assert_frames_equal(actual: pd.DataFrame, expected: pd.DataFrame, msg: str) -> None:
    """Same columns and non-numeric values; numeric values within `assert_close`."""
    assert list(actual.columns) == list(expected.columns), msg
    numeric = list(actual.select_dtypes("number").columns)
    other = [c for c in actual.columns if c not in numeric]
    pd.testing.assert_frame_equal(actual[other], expected[other], obj=msg)
    assert_close(actual[numeric].to_numpy(float), expected[numeric].to_numpy(float), msg=msg)


def test_evaluate_on_a_bridge_equals_the_hooked_model_and_hugging_face(trio, spaced_task):
    """A crash once found here: `unembed_at` put a bridge's logits through `ln_final`."""
    bridge, hooked, hf = trio
    assert is_bridge(bridge) and not is_bridge(hooked)
    batch = encode_task(bridge, spaced_task)
    assert torch.equal(batch.tokens, encode_task(hooked, spaced_task).tokens)
    scores = evaluate(bridge, spaced_task)
    reference = evaluate(hooked, spaced_task)
    _assert_frames_equal(scores, reference, "evaluate: bridge vs HookedTransformer")
    for name, values in _hf_scores(hf, batch).items():
        assert_close(scores[name].to_numpy(), values, msg=name)
    assert scores["logprob"].std() > 0.1  # the model's answers differ: a real comparison
    _assert_frames_equal(summarize(scores), summarize(reference), "summarize")


@pytest.mark.parametrize("compatibility", [True, False], ids=["compatibility", "plain"])
def test_zero_and_mean_ablation_on_a_bridge_remove_the_head_from_hugging_face(
    trio, spaced_task, gpt2_folder, compatibility
):
    """`evaluate(heads=...)`, `ablated` and `compute_head_means` on a bridge against Hugging
    Face's forward with the head's input columns of `c_proj` zeroed (and, for mean ablation,
    its mean output added to the bias). Without compatibility mode the bridge keeps Hugging
    Face's weights unprocessed, and removal works there too."""
    _, hooked, hf = trio
    bridge = trio[0] if compatibility else _boot(gpt2_folder, compatibility=False)
    batch = encode_task(bridge, spaced_task)
    means = compute_head_means(bridge, spaced_task)
    assert_close(means.averaged, compute_head_means(hooked, spaced_task).averaged)
    for layer, head in [(0, 1), (1, 2)]:
        zero = evaluate(bridge, spaced_task, heads=[(layer, head)])
        mean = evaluate(bridge, spaced_task, heads=[(layer, head)], kind="mean", means=means)
        with hf_head_removed(hf, O_PROJ, layer, head, D_HEAD):
            hf_zero = _hf_scores(hf, batch)
        mean_z = means.averaged[layer, head]
        with hf_head_removed(hf, O_PROJ, layer, head, D_HEAD, mean_z=mean_z):
            hf_mean = _hf_scores(hf, batch)
            with ablated(bridge, [(layer, head)], "mean", means), torch.no_grad():
                logits = bridge(batch.tokens[:1])
            expected = hf(batch.tokens[:1]).logits
        assert_close(logits.log_softmax(-1), expected.log_softmax(-1), msg="ablated")
        for name in ("logprob", "logit_diff"):
            assert_close(zero[name].to_numpy(), hf_zero[name], msg=f"zero L{layer}H{head}")
            assert_close(mean[name].to_numpy(), hf_mean[name], msg=f"mean L{layer}H{head}")
        assert (zero["logprob"] - evaluate(bridge, spaced_task)["logprob"]).abs().max() > 1e-3


def test_resample_and_per_position_ablation_on_a_bridge_equal_the_hooked_model(
    trio, spaced_task
):
    bridge, hooked, _ = trio
    heads = ["L0H3", "L1H0"]
    _assert_frames_equal(
        evaluate(bridge, spaced_task, heads=heads, kind="resample"),
        evaluate(hooked, spaced_task, heads=heads, kind="resample"),
        "resample",
    )
    # prompts of one length have a mean z at each position
    shortest = min(len(e.prompt.split()) for e in spaced_task.examples)
    same = dataclasses.replace(spaced_task, examples=[
        e for e in spaced_task.examples if len(e.prompt.split()) == shortest
    ])
    means = compute_head_means(bridge, same)
    reference = compute_head_means(hooked, same)
    assert means.per_position is not None and means.n_prompts > 1
    assert_close(means.per_position, reference.per_position)
    _assert_frames_equal(
        evaluate(bridge, same, heads=heads, kind="mean", means=means, per_position=True),
        evaluate(hooked, same, heads=heads, kind="mean", means=reference, per_position=True),
        "per-position mean",
    )


def test_multi_token_answers_on_a_bridge_equal_the_hooked_model(trio, tmp_path):
    """`sequence_scores` runs full forwards over prompt + answer: the same on both models."""
    bridge, hooked, _ = trio
    path = write_spaced_task(
        tmp_path / "multi.jsonl", n=8,
        header={"name": "multi", "metric": "accuracy", "answer_tokens": "multi"},
    )
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records[1:]:
        r["answer"] = r["answer"] + " w1"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    task = load_task(path)
    scores = evaluate(bridge, task, heads=["L1H1"])
    _assert_frames_equal(scores, evaluate(hooked, task, heads=["L1H1"]), "multi-token")
    assert "first_logprob" in scores


@pytest.mark.parametrize("method", ["exact", "attribution"])
def test_screen_heads_on_a_bridge_equals_the_hooked_model(trio, spaced_task, method):
    """Exact screening on a bridge runs each head's forward in full (a bridge cannot restart
    at a layer); it must still equal the HookedTransformer's prefix-reusing screen, and the
    attribution estimates must be the same estimates."""
    bridge, hooked, _ = trio
    means = compute_head_means(bridge, spaced_task, split="select")
    table = screen_heads(bridge, spaced_task, kind="mean", method=method, means=means)
    reference = screen_heads(
        hooked, spaced_task, kind="mean", method=method,
        means=compute_head_means(hooked, spaced_task, split="select"),
    )
    _assert_frames_equal(table, reference, f"screen_heads {method}")
    assert table["d_logprob"].abs().max() > 0.05
    effects = head_table(
        {"d_logprob": table["d_logprob"].to_numpy().reshape(2, 4)},
        bridge.cfg.n_layers, bridge.cfg.n_heads,
    )
    assert_close(effects["d_logprob"].to_numpy(), reference["d_logprob"].to_numpy())
    assert list(effects["head_name"]) == list(reference["head_name"])


def test_run_cel_on_a_bridge_equals_the_hooked_model_and_reloads(trio, spaced_task, tmp_path):
    bridge, hooked, _ = trio
    side = load_task(write_spaced_task(tmp_path / "side.jsonl", n=8, seed=1))
    settings = dict(
        others=[side], kind="mean", method="attribution", check_attribution=True,
        strategy="exhaustive", max_size=2, top_m=3, n_random=5, n_boot=50, plots=False,
        model_name="tiny-gpt2",
    )
    result = run_cel(bridge, spaced_task, out_dir=tmp_path / "bridge", **settings)
    reference = run_cel(hooked, spaced_task, **settings)
    for name in ("heads", "combos", "confirmation", "side_effects"):
        table = getattr(result, name)
        assert len(table), name
        _assert_frames_equal(table, getattr(reference, name), f"run_cel {name}")
    assert result.config.model == "tiny-gpt2"
    loaded = CELResult.load(tmp_path / "bridge")
    _assert_frames_equal(loaded.confirmation, result.confirmation, "CELResult.load")


def test_explain_heads_on_a_bridge_equals_the_hooked_model(trio, spaced_task):
    """Attention by role, DLA, OV and QK circuits (the bridge's attention scale is its
    Hugging Face module's), and removal vs DLA."""
    bridge, hooked, _ = trio
    explained = explain_heads(bridge, spaced_task, ["L1H2", "L0H1"], split=None)
    reference = explain_heads(hooked, spaced_task, ["L1H2", "L0H1"], split=None)
    assert explained.heads == reference.heads == HeadSet.of(bridge, ["L0H1", "L1H2"])
    assert explained.comparison == reference.comparison
    for field in dataclasses.fields(explained):
        value = getattr(explained, field.name)
        if isinstance(value, pd.DataFrame):
            assert len(value), field.name
            _assert_frames_equal(value, getattr(reference, field.name), field.name)
    config = {k: v for k, v in explained.config.items() if k != "model"}
    assert config == {k: v for k, v in reference.config.items() if k != "model"}


def test_a_bridge_cannot_restart_at_a_layer_and_says_so(trio, spaced_task, monkeypatch):
    """What a bridge cannot do is refused with a WorkbenchError naming it: a forward that
    starts at a later layer (Hugging Face's forward runs the layers), `unembed_at` on the
    logits a bridge returns where a HookedTransformer returns the final residual, and a QK
    table where the wrapped attention module has no `scaling`."""
    bridge, hooked, _ = trio
    batch = encode_task(bridge, spaced_task)
    resid = torch.zeros(len(batch), batch.tokens.shape[1], bridge.cfg.d_model)
    with pytest.raises(WorkbenchError, match="TransformerBridge cannot start a forward at layer 1"):
        answer_logits(bridge, batch, resid=resid, start_at_layer=1)
    logits = bridge(batch.tokens, stop_at_layer=bridge.cfg.n_layers)  # stops nowhere
    with pytest.raises(WorkbenchError, match="d_model=32; got shape .*use logits_at"):
        unembed_at(bridge, logits, batch.answer_pos)
    with torch.no_grad():
        at = logits_at(bridge, batch.tokens, batch.answer_pos)
        expected = bridge(batch.tokens)[torch.arange(len(batch)), batch.answer_pos]
        hooked_at = logits_at(hooked, batch.tokens, batch.answer_pos)
    assert_close(at, expected)
    assert_close(at.log_softmax(-1), hooked_at.log_softmax(-1))
    # an attention module whose scale cannot be read: the QK table says so
    monkeypatch.delattr(bridge.blocks[0].attn.original_component, "scaling")
    with pytest.raises(WorkbenchError, match="cannot tell layer 0's attention scale"):
        explain_heads(bridge, spaced_task, ["L0H1"], split="select")
    # a bridge without an `unembed.hook_in` gives every position's logits, read at `pos`
    monkeypatch.setattr(type(bridge), "hook_dict", property(lambda self: {}))
    with torch.no_grad():
        assert_close(logits_at(bridge, batch.tokens, batch.answer_pos), expected)
