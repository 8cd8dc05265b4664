#!/usr/bin/env bash
# The Python backend on the GPU machine (it builds nothing): the KernelBench-style Triton tasks of
# data/python_tasks/kernelbench_gpu.jsonl (levels 1 and 2), each with an honest Triton candidate and
# planted hacks (data/python_candidates/<task>/), checked against the expectation on each
# candidate's first line -- then the benchmark: per-candidate overhead of the persistent worker pool
# against a fresh python3 interpreter per evaluation, same tasks, same run.
#
# Usage:  benchmarks/device/python_backend.sh BUILD_DIR [--python EXE] [--quick]
#   BUILD_DIR holds bin/python_bench (cmake --build BUILD_DIR --target python_bench).
#   Output goes to stdout and to $OUT (default /tmp/turnrl-device-out). Exit status 1 when a check
#   or the benchmark failed, 2 when nothing could run.
set -uo pipefail
if (($# < 1)); then
  echo "usage: $0 BUILD_DIR [--python EXE] [--quick]"
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
shift
python=python3
quick=()
while (($#)); do
  case "$1" in
    --python) python=$2; shift ;;
    --quick) quick=(--quick) ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/python_bench_setup.sh"
python_bench_setup python_bench

echo "== environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/python_backend_gpu.txt"
if ! "$python" -c 'import sys, torch, triton; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| triton", triton.__version__, "| cuda available", torch.cuda.is_available(), "| gpus", torch.cuda.device_count())'; then
  echo "FAIL: $python cannot import torch and triton"
  exit 2
fi

# Preflight: one honest candidate. Workers try to unshare a user + network namespace (no network);
# if a GPU worker cannot start or run inside it, everything below runs without that isolation.
iso=()
echo
echo "== preflight: kb1_softmax/honest_triton with network isolation"
if ! "$bench" --device cuda --python "$python" --checks-only --filter honest --tasks \
     <(grep '"id": "kb1_softmax"' data/python_tasks/kernelbench_gpu.jsonl) --quick 2>&1 | tee "$OUT/python_backend_preflight.txt"; then
  echo "preflight failed with network isolation; retrying without it"
  iso=(--no-network-isolation)
  if ! "$bench" --device cuda --python "$python" --checks-only --filter honest --quick "${iso[@]}" --tasks \
       <(grep '"id": "kb1_softmax"' data/python_tasks/kernelbench_gpu.jsonl) 2>&1 | tee -a "$OUT/python_backend_preflight.txt"; then
    echo "FAIL: the honest softmax candidate does not pass on this machine (see above); stopping"
    exit 1
  fi
fi

status=0
echo
echo "== checks: every candidate of every GPU task (expectation from its first line)"
"$bench" --device cuda --python "$python" --checks-only "${quick[@]}" "${iso[@]}" 2>&1 | tee "$OUT/python_backend_checks.txt"
((PIPESTATUS[0] == 0)) || status=1

echo
echo "== benchmark: persistent pool vs fresh python3 per evaluation (Triton cache shared by both)"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/turnrl-python-bench-triton-cache}
"$bench" --device cuda --python "$python" --bench-only "${quick[@]}" "${iso[@]}" 2>&1 | tee "$OUT/python_backend_bench.txt"
((PIPESTATUS[0] == 0)) || status=1

echo
if ((status == 0)); then echo "python_backend.sh: ALL PASSED"; else echo "python_backend.sh: FAILURES (see FAIL lines above)"; fi
exit $status
