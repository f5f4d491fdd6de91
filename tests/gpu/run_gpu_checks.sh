#!/usr/bin/env bash
# The one prepared GPU check (docs/gpu-validation.md): run on a machine with an NVIDIA GPU, from the
# repository root, in an environment where `import vramlab` works (the venv of `make setup`, or
# PYTHONPATH=src with the dependencies installed). Writes everything to ${OUT:-gpu-check}/ and prints
# a summary to paste into docs/gpu-validation.md. Nothing here changes the repository.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 VRAMLAB_GPU_FRACTION=${VRAMLAB_GPU_FRACTION:-0.5}
{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  "$py" -c "import torch, transformers, accelerate, bitsandbytes as b; print('torch', torch.__version__, 'cuda', torch.version.cuda, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__, '| bitsandbytes', b.__version__)"
} 2>&1 | tee "$out/versions.txt"
# 1. every gpu-marked test (labs 00, 02, 05, 06, 07)
"$py" -m pytest -m gpu -rs -p no:cacheprovider --no-header -q tests 2>&1 | tee "$out/pytest-gpu.txt"
# 2. the doctor on a real GPU, and the sampler's cost in GPU mode
"$py" -m vramlab.cli doctor 2>&1 | tee "$out/doctor.txt"
"$py" benchmarks/vram.py 2>&1 | tee "$out/vram-bench.jsonl"
# 3. the GPU-guarded notebooks, executed in a scratch copy (their GPU cells run for real there)
scratch=$(mktemp -d)
cp notebooks/0[5-7]_*.ipynb "$scratch"/
"$py" -m vramlab.labs execute "$scratch"/*.ipynb 2>&1 | tee "$out/notebooks.txt"
cp "$scratch"/*.ipynb "$out"/ 2>/dev/null
echo "gpu check: outputs in $out/"
