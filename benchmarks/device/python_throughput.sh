#!/usr/bin/env bash
# Python backend throughput on the GPU machine (issue 29's measurement; it builds nothing): python_bench
# on cuda with NEW candidates -- every evaluation a candidate text no earlier evaluation of the run has
# seen, so neither turnrl's caches nor Triton's hit -- 5 correctness trials and 100 timed calls per
# side, hacking checks and profiling on, against a fresh python3 per evaluation in the same run.
# TRITON_CACHE_DIR and TORCH_EXTENSIONS_DIR are unset: each worker compiles into its own private
# directory inside its sandbox tmp. Prints evaluations per GPU-hour, the per-candidate phase table
# (docs/evaluator.md, "Throughput") and the wait for a replaced worker with and without a spare.
#
# Usage:  benchmarks/device/python_throughput.sh BUILD_DIR [--python EXE] [--evals N] [--workers-per-device N]
#   BUILD_DIR holds bin/python_bench (cmake --build BUILD_DIR --target python_bench); run it on one GPU
#   (CUDA_VISIBLE_DEVICES=0) for per-GPU-hour figures. Output goes to stdout and to $OUT (default
#   /tmp/turnrl-device-out). Exit status 1 when an evaluation was not correct, 2 when nothing could run.
set -uo pipefail
if (($# < 1)); then
  echo "usage: $0 BUILD_DIR [--python EXE] [--evals N] [--workers-per-device N]"
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
shift
python=python3
evals=40
per_device=4
while (($#)); do
  case "$1" in
    --python) python=$2; shift ;;
    --evals) evals=$2; shift ;;
    --workers-per-device) per_device=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/python_bench_setup.sh"
python_bench_setup python_bench
unset TRITON_CACHE_DIR TORCH_EXTENSIONS_DIR
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/python_throughput_gpu.txt"
"$python" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| triton", triton.__version__, "| gpus", torch.cuda.device_count())' || { echo "FAIL: $python lacks torch/triton"; exit 2; }

# Workers try a network namespace first; a GPU worker that cannot start in one runs without it.
iso=()
if ! "$bench" --device cuda --python "$python" --checks-only --filter honest --quick --tasks \
     <(grep '"id": "kb1_softmax"' data/python_tasks/kernelbench_gpu.jsonl) > "$OUT/python_throughput_preflight.txt" 2>&1; then
  iso=(--no-network-isolation)
fi

status=0
# The pool as configured by default (workers per GPU, a spare, exclusive measurement), then one worker
# per GPU (what it gains from several; half the evaluations, as its baseline's starts run one at a
# time); the replacement wait is measured in the first run only. Not run yet; sized to stay under a
# 10-minute device call with the defaults.
for n in "$per_device" 1; do
  extra=(--retire-after 10 --evals "$evals")
  [[ $n == "$per_device" ]] || extra=(--no-replacement --evals $(((evals + 1) / 2)))
  echo "== python_bench --device cuda --new-candidates, $n worker(s) per GPU"
  "$bench" --device cuda --python "$python" --bench-only --new-candidates --correctness-trials 5 --timing-trials 100 \
    --workers-per-device "$n" "${extra[@]}" "${iso[@]}" 2>&1 | tee "$OUT/python_throughput_w$n.txt"
  ((PIPESTATUS[0] == 0)) || status=1
done
exit $status
