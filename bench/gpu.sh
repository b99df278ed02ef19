#!/usr/bin/env bash
# GPU check, one script, at most ~9.7 minutes (580 s of step limits plus start-up): the test suite on CUDA, then the forward,
# screening and real-model benchmarks on the GPU. Downloads nothing (HF_HUB_OFFLINE=1, no pip).
#
#   bash bench/gpu.sh                  # from the repository root
#   PYTHON=/path/to/python bash bench/gpu.sh
#   HF_FOLDER=/path/to/smollm2-hf bash bench/gpu.sh   # also bench/forward.py against HF
#
# Each step has its own time limit and the script goes on after a failed step; the summary at
# the end lists every step's exit status. Logs go to $OUT (or bench-gpu-logs/) as well.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH="$PWD"
LOGS="${OUT:-bench-gpu-logs}"
mkdir -p "$LOGS"

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
        PYTHON=.venv/bin/python
    else
        PYTHON=python3
    fi
fi
if ! "$PYTHON" - <<'EOF'
import sys
try:
    import torch, transformer_lens  # noqa: F401
except ImportError as e:
    sys.exit(f"gpu.sh: {e}; this script installs nothing: give PYTHON= an interpreter with the "
             "workbench's dependencies")
if not torch.cuda.is_available():
    sys.exit("gpu.sh: torch.cuda.is_available() is False; expected a CUDA device")
print("python", sys.version.split()[0], "torch", torch.__version__, "GPU",
      torch.cuda.get_device_name(0))
EOF
then
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>/dev/null | tee "$LOGS/gpu.txt"

declare -A STATUS
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$LOGS/$name.txt"
    local rc=${PIPESTATUS[0]}
    STATUS[$name]="rc $rc, $((SECONDS - t0)) s"
    echo "=== $name: ${STATUS[$name]}"
}

# 1. the test suite with CUDA visible (tests that build models on the default device use the
#    GPU; the CUDA-only tests run instead of skipping); every failure listed, not only the first
step tests 300 "$PYTHON" -m pytest tests -q -p no:cacheprovider --maxfail=25 --durations=10
# 2. the forward against Hugging Face's (needs a local HF folder)
if [ -n "${HF_FOLDER:-}" ]; then
    step forward 40 "$PYTHON" bench/forward.py "$HF_FOLDER" --device cuda --rounds 10
else
    echo "=== forward: skipped (set HF_FOLDER to a local Hugging Face model folder)"
    STATUS[forward]="skipped"
fi
# 3. exact and attribution screening against the naive loop, GPT-2-small shape
step screen 60 "$PYTHON" bench/screen.py --device cuda --heads-per-layer 2
# 4. a whole CEL run per stage, new vs the pipeline without racing, both run
step real_embedded 60 "$PYTHON" bench/real.py --model embedded --old run --device cuda
# 5. the real model by name (fails at once where `smollm2-135m` is not loadable offline)
step real_smollm2 120 "$PYTHON" bench/real.py --model smollm2-135m --task induction \
    --device cuda

echo "=== summary (logs in $LOGS/)"
for name in tests forward screen real_embedded real_smollm2; do
    echo "$name: ${STATUS[$name]:-not run}"
done | tee "$LOGS/summary.txt"
