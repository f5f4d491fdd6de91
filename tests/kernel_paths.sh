#!/usr/bin/env bash
# Run the numeric tests that depend on PyTorch's CPU kernel path under every path this CPU offers
# (ATEN_CPU_CAPABILITY=default, avx2, avx512), and print which ran. Issue 26: a float32 quantized result
# follows the kernel path's rounding, so a bound must hold on every path, and the reproducible (float64)
# path must give the same number to 1e-6 on each. 27-45 s a pass in CI before the float64 W4A4KV4 row got its
# clip search (2026-12-05); that row adds about a minute (the CPU seconds of benchmarks/kernel_spread.py's fp64 mode).
#
#   tests/kernel_paths.sh                 # every path the CPU has, one thread each
#   PATHS="default avx2" THREADS="1 2" tests/kernel_paths.sh
#   PARALLEL=1 PATHS="avx2 avx512" tests/kernel_paths.sh    # the passes side by side (one core each)
#   PARALLEL=1 PASSES="default/2 avx2/1 avx512/1" tests/kernel_paths.sh   # path/threads pairs (CI); a path this
#                                                    # CPU lacks is left out, with a line saying so
#   PYTHON=/path/to/python tests/kernel_paths.sh   (default: .venv/bin/python, else python3)
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
HAVE=$(PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} "$PY" -c \
    "from vramlab.numerics import available_kernel_paths as a; print(' '.join(a()))") || exit 1
PATHS=${PATHS:-$HAVE}
THREADS=${THREADS:-1}
# the passes: "path/threads" words, from PASSES or from every PATHS x THREADS
passes=()
if [ -n "${PASSES:-}" ]; then
    for pass in $PASSES; do
        case " $HAVE " in
            *" ${pass%/*} "*) passes+=("$pass") ;;
            *) echo "== kernel path ${pass%/*}: not offered by this CPU (it offers: $HAVE); left out" ;;
        esac
    done
else
    for path in $PATHS; do for threads in $THREADS; do passes+=("$path/$threads"); done; done
fi
if [ "${#passes[@]}" = 0 ]; then
    echo "== no kernel path to run: PASSES=\"${PASSES:-}\" names none this CPU offers ($HAVE)"
    exit 1
fi
# The tests whose numbers move with the kernel path, or must not (the float64 rows). The 8-window live row
# (test_live_quantized_row_matches_the_table, ~1 min) runs in CI's pytest (VRAMLAB_LIVE_TABLE=1) on the machine's own path only.
# VRAMLAB_KERNEL_PATHS=1 runs the clip-searched float64 W4A4KV4 row too (about 70 s a pass; make test skips it).
TESTS=(
    "tests/test_numerics.py"
    "tests/test_quant.py::test_real_model_w8a8_close_to_fp32_and_w16a4_breaks"
    "tests/test_quarot_results.py::test_reproducible_rows_match_the_reference_to_1e_6"
    "tests/test_quarot_results.py::test_reproducible_clip_searched_row_matches_the_reference_to_1e_6"
)
# (tests/test_mixed_bits.py's live reference search is on the same float64 path and runs in make test on the
# machine's own path: here it cost about 45 s a pass, and CI went past 20 minutes, 2026-12-05.)
status=0
ran=()
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# one pass: one kernel path at one thread count; with PARALLEL=1 the passes run side by side (each has its own
# process and thread count, so a 1-thread pass leaves the other core to the next one), their output printed in order
one_pass() {
    local path=$1 threads=$2 start
    start=$(date +%s)
    echo "== kernel path: ATEN_CPU_CAPABILITY=$path, $threads thread(s)"
    if VRAMLAB_KERNEL_PATHS=1 ATEN_CPU_CAPABILITY=$path OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
        PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} "$PY" -m pytest -p no:cacheprovider -n 0 -q \
        -o addopts="" "${TESTS[@]}"; then
        echo "$path/${threads}t: passed ($(( $(date +%s) - start )) s)" > "$logs/$path-$threads.result"
    else
        echo "$path/${threads}t: FAILED" > "$logs/$path-$threads.result"
    fi
}
pids=()
for pass in "${passes[@]}"; do
    if [ "${PARALLEL:-0}" = 1 ]; then
        one_pass "${pass%/*}" "${pass#*/}" > "$logs/${pass/\//-}.log" 2>&1 &
        pids+=($!)
    else
        one_pass "${pass%/*}" "${pass#*/}"
    fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
for pass in "${passes[@]}"; do
    [ "${PARALLEL:-0}" = 1 ] && cat "$logs/${pass/\//-}.log"
    result=$(cat "$logs/${pass/\//-}.result" 2>/dev/null || echo "${pass}t: FAILED (no result)")
    ran+=("$result")
    case $result in *FAILED*) status=1 ;; esac
done
echo "== kernel paths run: ${ran[*]}"
exit $status
