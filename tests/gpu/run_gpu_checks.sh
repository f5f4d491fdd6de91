#!/usr/bin/env bash
# The one prepared GPU check (docs/gpu-validation.md). Run from the repository root. Writes everything to
# ${OUT:-gpu-check}/ (logs, junit XML, recordings/) and prints the time of each step and the total; sized to
# finish within 10 minutes on the project's lent H200 (each step has its own timeout, and the remaining steps
# are skipped with a line once 9 minutes have passed). Nothing here changes the repository.
#
# Without a CUDA GPU every GPU step prints "skip: no CUDA GPU (CPU mode)" and the script exits 0.
#
# On the lent H200 (Python 3.12, torch 2.11, transformers 5.17, accelerate 1.15, nvidia-ml-py, pytest,
# psutil, pandas, narwhals present; no package index there) carry the missing wheels in .whl/ (git-ignored).
# Fetch them once, on a machine with pip and a registry, from the repository root:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
#     -d .whl bitsandbytes==0.50.2 plotly==7.1.0
#
# (43 MB + 9.7 MB: with the 2.3 MB tree, under the device tool's 64 MiB per call. plotly's needs, narwhals
# and packaging, and bitsandbytes', torch/numpy/packaging, are in the image. ipywidgets and nbval are not
# carried: they need IPython / ipykernel / jupyter_client, absent there, and no step below uses them: no
# notebook is executed on the device, and pytest runs with -o addopts="" -p no:nbval.)
# Then, with the device tool: run(command="OUT=$OUT tests/gpu/run_gpu_checks.sh", carry=[".whl"],
# timeout_s=600). This script runs the install line of the device notes itself when .whl/ holds wheels:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD/src
#
# No model is carried (too big): the memory experiments build SmolLM2-135M from its bundled config with random
# weights (memory does not depend on the values). Two gpu tests load the real model and are deselected when it
# is absent (listed below, NEEDS_MODEL); the dispatch error and its fixes still run, on random weights, in the
# "dispatch" recording step.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
py=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 VRAMLAB_GPU_FRACTION=${VRAMLAB_GPU_FRACTION:-0.5} OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
BUDGET_S=${BUDGET_S:-540}   # start no step after this many seconds (the device tool's limit is 600)
t_start=$(date +%s.%N)
NEEDS_MODEL=(
  "tests/test_models.py::test_load_on_gpu_in_float16_applies_the_guard"
  "tests/test_dispatch.py::test_gpu_trigger_and_fix_with_smollm2"
)
GPU_TEST_FILES=(tests/test_bnb_doctor.py tests/test_dispatch.py tests/test_models.py tests/test_device.py
  tests/test_vram_allocator.py tests/test_vram_monitor.py tests/test_vram_ledger.py tests/test_quant.py
  tests/test_dryrun.py)

elapsed() { echo "$(date +%s.%N) $t_start" | awk '{printf "%.1f", $1 - $2}'; }
# step NAME TIMEOUT_S CMD...: run one step under a timeout, log it to $out/NAME.txt, print its time
step() {
  local name=$1 limit=$2; shift 2
  if awk -v e="$(elapsed)" -v b="$BUDGET_S" 'BEGIN{exit !(e > b)}'; then
    echo "skip: $name (the ${BUDGET_S} s budget is spent)" | tee -a "$out/summary.txt"; return
  fi
  local t0; t0=$(date +%s.%N)
  echo "== $name"
  timeout --kill-after=10 "$limit" "$@" > >(tee "$out/$name.txt") 2>&1
  local rc=$?
  sleep 0.2
  local dt; dt=$(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}')
  [ "$rc" = 124 ] && rc="124 (timed out after ${limit} s)"
  echo "time: $name ${dt} s, exit $rc" | tee -a "$out/summary.txt"
}
skip_gpu() { echo "skip: $1: no CUDA GPU (CPU mode)" | tee -a "$out/summary.txt"; }

: > "$out/summary.txt"
# 0. the carried wheels
if compgen -G ".whl/*.whl" > /dev/null; then
  step install 120 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
# 1. versions and the GPU
step versions 60 bash -c '
  date -u +"date: %Y-%m-%d %H:%M UTC"
  if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed "s/^/gpu: /"; else echo "gpu: no nvidia-smi"; fi
  '"$py"' -c "
import importlib, torch
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"| cuda available:\", torch.cuda.is_available())
for m in (\"transformers\", \"accelerate\", \"bitsandbytes\", \"plotly\", \"pynvml\", \"psutil\"):
    try:
        print(m, getattr(importlib.import_module(m), \"__version__\", \"(no __version__)\"))
    except Exception as e:
        print(m, \"MISSING:\", type(e).__name__, str(e).splitlines()[0][:200])
"'
if ! "$py" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  for s in "pytest -m gpu" "dry run vs GPU (forward and generate, flash/cuDNN and math)" "doctor on the GPU" "sampler cost in GPU mode (benchmarks/vram.py)" \
           "recordings: monitor" "recordings: allocator (default vs expandable, capped OOM, snapshot)" "recordings: ledger" \
           "recordings: doctor + one injected fault (hidden_runtime)" "recordings: dispatch error and fixes on CUDA"; do skip_gpu "$s"; done
  echo "total: $(elapsed) s (CPU mode: nothing measured)" | tee -a "$out/summary.txt"
  exit 0
fi
# 2. every gpu-marked test; the two that load the real model only where it is present
deselect=()
if ! "$py" -c "import sys; from vramlab import models; sys.exit(0 if models.find_gguf() or models._is_converted(models.converted_path()) else 1)" 2>/dev/null; then
  for t in "${NEEDS_MODEL[@]}"; do
    echo "skip: $t needs the real SmolLM2 model (not carried)" | tee -a "$out/summary.txt"; deselect+=(--deselect "$t")
  done
fi
step pytest-gpu 150 "$py" -m pytest -m gpu -rs -p no:cacheprovider -p no:nbval -o addopts="" --no-header -q \
  --junitxml="$out/pytest-gpu.xml" "${deselect[@]}" "${GPU_TEST_FILES[@]}"
# 2b. the dry run against the GPU: SmolLM2 bf16 at (1, 512) and (8, 2048), prefill + 16 decode steps, forward and
#     generate mode, the GPU's kernel and math forced (sdpa_kernel(SDPBackend.MATH)), random weights (issue 27)
step dryrun-vs-gpu 240 "$py" tests/gpu/dryrun_vs_gpu.py --out "$out"
# 3. the doctor on the GPU (text and JSON); the injected fault runs in record-doctor (step 5), which prints it
step doctor 45 "$py" -m vramlab.cli doctor
"$py" -m vramlab.cli doctor --json > "$out/doctor.json" 2>/dev/null
# 4. what the sampler costs in GPU mode
step vram-bench 40 "$py" benchmarks/vram.py --seconds 5
# 5. the recordings (allocator experiments, capped OOM, snapshot, ledger, doctor, dispatch on random weights)
for s in monitor allocator ledger doctor dispatch; do
  step "record-$s" 90 "$py" -m vramlab.vram.recordings record --out "$out/recordings" --only "$s"
done
ls -la "$out/recordings" 2>/dev/null
echo "total: $(elapsed) s; outputs in $out/ (copy $out/recordings/* to src/vramlab/results/gpu/)" | tee -a "$out/summary.txt"
