"""Decoding many head sets at once (`greedy_generate_masks`) against each set decoded alone
(`greedy_generate` under that set's `mask_hooks`) and against the reference
(`naive_generate`, one full forward per row per step), token for token; and the scorer's
joint path for a generation task (`generation_masks_metric`) against one call per mask.

Groups of a few rows (`rows_per_pass`) make one batch hold rows of several masks and of
prompts of different lengths; the masks are chosen so that they change what the model
writes (checked), else the comparison could not tell masks apart. Models: the three embedded
models (rotary), the tiny GPT-2-like model (absolute positions), and the tiny random GGUF
Llama and Gemma-3 (sliding-window layers) of `test_decode.py`.
"""

from __future__ import annotations

import pytest
import torch

from tests.generation.test_decode import embedded, tiny_gguf  # noqa: F401 (fixtures)
from workbench import WorkbenchError
from workbench.ablation import Ablation, compute_head_means
from workbench.generation import decode
from workbench.generation.decode import greedy_generate, naive_generate
from workbench.generation.masked import greedy_generate_masks
from workbench.scoring.interface import masks_of


def _masks(model):
    last = model.cfg.n_layers - 1
    return masks_of(model, [[], [(0, 1)], [(0, 0), (last, 2)], [(last, 0)], [(0, 1), (0, 2)]])


def _alone(model, prompts, masks, n, until, ablation, ref=greedy_generate):
    out = []
    for m in range(len(masks)):
        with model.hooks(fwd_hooks=ablation.mask_hooks(model, masks[m : m + 1])):
            out += ref(model, prompts, n, until).tokens
    return out


def _check(model, prompts, n=6, until=(), ablation=None, rows_per_pass=3):
    ablation = ablation or Ablation()
    masks = _masks(model)
    joint = greedy_generate_masks(model, prompts, masks, n, until, ablation, rows_per_pass)
    assert joint.tokens == _alone(model, prompts, masks, n, until, ablation)
    assert joint.tokens == _alone(model, prompts, masks, n, until, ablation, naive_generate)
    per_mask = [joint.tokens[m * len(prompts):(m + 1) * len(prompts)] for m in range(len(masks))]
    assert len({str(t) for t in per_mask}) >= 3  # the masks change what is written
    return joint


def test_embedded_joint_equals_each_mask_alone(embedded):  # noqa: F811
    model, prompts = embedded
    _check(model, prompts)
    means = compute_head_means(model, torch.nn.utils.rnn.pad_sequence(prompts, True)[:, :3])
    _check(model, prompts, ablation=Ablation("mean", means))


def test_absolute_positions_joint_equals_each_mask_alone(gpt2_like_model):
    tok = gpt2_like_model.word_tokenizer
    prompts = [torch.tensor(tok.encode(p, prepend_bos=True))
               for p in ["w1 w2 w3", "w4", "w5 w6 w7 w8 w9 w10", "w3 w3"]]
    _check(gpt2_like_model, prompts, n=5)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_tiny_gguf_joint_equals_each_mask_alone(tiny_gguf, family):  # noqa: F811
    """Gemma-3's local layers (a 4-token window) count distance in cache slots: rows of
    different masks and lengths share a padded cache."""
    model, _, _, prompts = tiny_gguf[family]
    joint = _check(model, prompts, n=8, until=["mat"], rows_per_pass=4)
    assert joint.n_forwards == decode.decode_forwards(
        [len(p) for p in prompts] * 5, [len(t) for t in joint.tokens], 4)


def test_a_model_without_a_cache_decodes_each_row_alone(embedded, monkeypatch):  # noqa: F811
    model, prompts = embedded
    monkeypatch.setattr(decode, "can_cache", lambda model: False)
    masks = _masks(model)
    joint = greedy_generate_masks(model, prompts, masks, 4)
    assert joint.tokens == _alone(model, prompts, masks, 4, (), Ablation(), naive_generate)
    assert joint.n_forwards == sum(len(t) for t in joint.tokens)


def test_bad_input_is_one_line(embedded):  # noqa: F811
    model, prompts = embedded
    masks = _masks(model)
    means = compute_head_means(model, torch.nn.utils.rnn.pad_sequence(prompts, True)[:, :3])
    for kwargs, message in [
        ({"ablation": Ablation("mean", means, per_position=True)}, "averaged means"),
        ({"ablation": "resample"}, "zero or mean ablation"),
        ({"masks": masks[:, :1]}, "masks must be [n_masks >= 1"),
        ({"masks": masks[:0]}, "masks must be [n_masks >= 1"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
    ]:
        args = {"masks": masks, "max_new_tokens": 3} | kwargs
        with pytest.raises(WorkbenchError, match=message.replace("[", r"\[")) as err:
            greedy_generate_masks(model, prompts, **args)
        assert "\n" not in str(err.value)


def test_the_scorer_decodes_masks_together_as_one_at_a_time(attn_model):
    """`MaskScorer` with `generation_metric` (joint: `masks_metric`) and with the same metric
    without it (one call per mask under its hooks) give the same scores: `exact_match`
    exactly, `logprob` bit for bit (the same passes), on every row and on a slice."""
    from tests.metrics.test_generation import gen_task
    from workbench.metrics.generation import generation_metric
    from workbench.scoring.custom import masks_per_call
    from workbench.scoring.scorer import MaskScorer
    from workbench.tasks.encoding import encode_task

    batch = encode_task(attn_model, gen_task(attn_model, 40))
    masks = masks_of(attn_model, [["L0H1"], ["L1H2", "L0H0"], ["L1H3"], [], ["L0H2"]] * 3)

    def one_at_a_time(model, data):
        return generation_metric(model, data)

    means = compute_head_means(attn_model, batch.tokens)
    for ablation in (Ablation(), Ablation("mean", means)):
        joint = MaskScorer(attn_model, batch, ablation, generation_metric)
        alone = MaskScorer(attn_model, batch, ablation, one_at_a_time)
        assert masks_per_call(generation_metric, batch, ablation) == 6
        assert masks_per_call(one_at_a_time, batch, ablation) == 1
        rows = torch.tensor([3, 0, 17, 8])
        for kw in ({}, {"rows": rows}):
            got, want = joint.score(masks, **kw), alone.score(masks, **kw)
            assert torch.equal(got["exact_match"], want["exact_match"])
            assert torch.equal(got["logprob"], want["logprob"])
        assert len(set(got["exact_match"].sum(1).tolist())) > 1  # the masks differ
