#!/usr/bin/env bash
# Large KernelBench-style problems through the Python backend on the GPU machine (it builds nothing):
# bin/python_bigproblems_bench with >= 1 G input elements (an element-wise sigmoid and a row-sum
# reduction, 4 GiB of float32 input each; a level-2 GEMM + GELU + scale at an eighth of that), the
# reference as candidate, against the KernelBench-eval style baseline (inputs on the host) in the same
# run. Goal (issue 29): every problem's right verdict (correct outputs, then no_candidate_work) in
# <= 5 s. A second pass at 2 G elements (8 GiB inputs) follows unless --quick.
#
# Usage:  benchmarks/device/python_bigproblems.sh BUILD_DIR [--python EXE] [--quick]
#   BUILD_DIR holds bin/python_bigproblems_bench (cmake --build BUILD_DIR --target python_bigproblems_bench).
#   Output goes to stdout and to $OUT (default /tmp/turnrl-device-out). Exit status 1 when a verdict
#   was wrong, 2 when nothing could run.
set -uo pipefail
if (($# < 1)); then
  echo "usage: $0 BUILD_DIR [--python EXE] [--quick]"
  exit 2
fi
build=$(cd "$1" && pwd) || exit 2
shift
python=python3
quick=0
while (($#)); do
  case "$1" in
    --python) python=$2; shift ;;
    --quick) quick=1 ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
source "$(dirname "$0")/python_bench_setup.sh"
python_bench_setup python_bigproblems_bench
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/python_bigproblems_gpu.txt"
if ! "$python" -c 'import torch; assert torch.cuda.is_available(); print("torch", torch.__version__)'; then
  echo "FAIL: $python cannot import torch with CUDA"
  exit 2
fi

status=0
run() {
  local elements=$1 log=$2
  shift 2
  echo
  echo "== $elements input elements"
  "$bench" --device cuda --python "$python" --elements "$elements" "$@" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}
# Workers try a network namespace first, as python_backend.sh does; without it if a GPU worker cannot.
iso=()
if ! run 1073741824 "$OUT/python_bigproblems_1g.txt"; then
  if grep -q "did not start\|namespace" "$OUT/python_bigproblems_1g.txt"; then
    iso=(--no-network-isolation)
    run 1073741824 "$OUT/python_bigproblems_1g.txt" "${iso[@]}" || status=1
  else
    status=1
  fi
fi
if ((quick == 0)); then
  run 2147483648 "$OUT/python_bigproblems_2g.txt" "${iso[@]}" || status=1
fi
echo
if ((status == 0)); then echo "python_bigproblems.sh: ALL PASSED"; else echo "python_bigproblems.sh: FAILURES (see above)"; fi
exit $status
