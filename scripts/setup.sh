#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv at the repository root and install the
# workbench with its test extras. Safe to run any number of times: it reinstalls only when
# pyproject.toml changed since the last successful run.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=".venv/.workbench-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    # torch first and pinned: on CPU-only machines that carry the 2.13.0 CPU wheel this takes
    # it from disk instead of a multi-GB CUDA build; elsewhere pip picks the platform's build.
    if ! .venv/bin/python -c "import torch" 2>/dev/null; then
        .venv/bin/python -m pip install --quiet "torch==2.13.0"
    fi
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    rm -f .venv/.workbench-installed-*
    touch "$stamp"
fi
