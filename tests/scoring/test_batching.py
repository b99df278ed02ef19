"""The unembedding runs only where a metric reads.

At Gemma-3's 262,144-token vocabulary the unembedding is larger than the rest of the model,
and every position's logits of a 64 x 20-token batch take 1.3 GB. Every path of the workbench
that reads logits must run the final norm and unembedding at the positions it reads: one per
prompt for a single-token answer, one per answer token for a multi-token answer, none for the
head means. A forward hook on `model.unembed` records what it is fed; each path is also
checked against the whole-forward result it replaces.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from tests.helpers import assert_close, tiny_model, write_task
from workbench import compute_head_means, encode_task, evaluate, load_task, screen_heads
from workbench.ablation import compute_resample_z
from workbench.explain.capture import capture
from workbench.tasks.task import Example, Task


@contextmanager
def unembed_inputs(model):
    """Shapes of every input the unembedding sees inside the block."""
    seen: list[tuple[int, ...]] = []
    handle = model.unembed.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape))
    try:
        yield seen
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def model():
    return tiny_model(attn_only=False, n_layers=2, n_heads=4, seed=11)


@pytest.fixture(scope="module")
def batch(model, tmp_path_factory):
    path = write_task(tmp_path_factory.mktemp("unembed") / "t.jsonl", n=24, seed=4)
    return encode_task(model, load_task(path))


def _one_position_per_row(seen, rows: int) -> None:
    assert seen, "the unembedding never ran"
    assert all(s[1] == 1 for s in seen), f"unembedding fed whole sequences: {seen}"
    assert sum(s[0] for s in seen) <= rows, (seen, rows)


def test_evaluate_and_screening_unembed_answer_positions_only(model, batch):
    n = len(batch)
    with unembed_inputs(model) as seen:
        evaluate(model, batch)
    _one_position_per_row(seen, n)
    with unembed_inputs(model) as seen:
        screen_heads(model, batch, method="exact")
    assert seen and all(s[1] == 1 for s in seen)
    with unembed_inputs(model) as seen:
        screen_heads(model, batch, method="attribution")
    assert seen and all(s[1] == 1 for s in seen)


def test_head_means_and_resample_never_unembed(model, batch):
    with unembed_inputs(model) as seen:
        means = compute_head_means(model, batch)
        resampled = compute_resample_z(model, batch.tokens)
    assert seen == []
    # the same z as a whole forward's cache
    _, cache = model.run_with_cache(batch.tokens)
    z = torch.stack([cache[f"blocks.{l}.attn.hook_z"] for l in range(model.cfg.n_layers)], dim=2)
    assert torch.equal(resampled, z)
    real = torch.arange(z.shape[1], device=batch.lengths.device)[None] < batch.lengths[:, None]
    expected = (z * real[:, :, None, None, None]).sum((0, 1)) / real.sum()
    assert_close(means.averaged, expected)


def test_capture_unembeds_answer_positions_and_matches_whole_forward(model, batch):
    with unembed_inputs(model) as seen:
        got = capture(model, batch, batch_size=8)
    _one_position_per_row(seen, len(batch))
    logits, cache = model.run_with_cache(batch.tokens)
    rows = torch.arange(len(batch))
    assert_close(got.logits, logits[rows, batch.answer_pos])
    assert_close(got.scale, cache["ln_final.hook_scale"][rows, batch.answer_pos, 0])


def test_multi_token_answers_unembed_answer_tokens_only(model):
    tok = model.word_tokenizer
    prompts = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w0 w11"]
    examples = [
        Example(id=f"m{i}", prompt=p, answers=("w3 w4 w5", "w9 w8"), wrong=("w15",),
                split="select")
        for i, p in enumerate(prompts)
    ]
    task = Task(name="multi", examples=examples, answer_tokens="multi", metric="logit_diff")
    with unembed_inputs(model) as seen:
        scores = evaluate(model, task, batch_size=3)
    assert all(s[1] == 1 for s in seen)
    # one row per answer token, and one per prompt for the first-token margin over `wrong`
    assert sum(s[0] for s in seen) == len(prompts) * (3 + 2) + len(prompts)
    for i, p in enumerate(prompts):  # against one whole forward per answer
        ids = tok.encode(p, prepend_bos=True)
        logps = []
        for answer in ("w3 w4 w5", "w9 w8"):
            a = tok.encode(answer)
            with torch.no_grad():
                lp = model(torch.tensor([ids + a]))[0].log_softmax(-1)
            logps.append(sum(float(lp[len(ids) - 1 + k, t]) for k, t in enumerate(a)))
        assert_close(scores["logprob"].iloc[i], torch.tensor(logps).logsumexp(0))
