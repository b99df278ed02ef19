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

from tests.helpers import randomize_biases, tiny_model, write_task  # noqa: E402


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
    from workbench.tasks import load_task

    path = write_task(tmp_path_factory.mktemp("tasks") / "tiny.jsonl")
    return load_task(path)
