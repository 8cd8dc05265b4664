#!/usr/bin/env bash
# compute-sanitizer's independent verdict on the CUDA backend's out-of-bounds candidate: the
# evaluator flags it (guard bands, `out_of_bounds_write`), and memcheck, following the worker
# process, reports the invalid global writes; the honest candidate of the same task is clean.
# Under memcheck the worker runs without guard bands and without PyTorch's caching allocator
# (TURNRL_CUDA_GUARD_BANDS=0, PYTORCH_NO_CUDA_MEMORY_CACHING=1): a write into a guard band or into
# a cached block is inside an allocation, which memcheck cannot call out of bounds.
#   benchmarks/device/sanitizer_check.sh [BUILD_DIR=build-device]
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build-device}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
tmp=$(mktemp -d)
python3 - "$tmp" <<'PY'
import json, sys
out = sys.argv[1]
for c in json.load(open("benchmarks/device/cuda_candidates.json"))["candidates"]:
    if c["task"] == "swiglu" and c["expect"] in ("out_of_bounds", "correct") and c["kind"] in ("out_of_bounds", "honest"):
        open(f"{out}/{c['expect']}.cu", "w").write(c["source"])
PY
for kind in out_of_bounds correct; do
  echo "== swiglu / $kind: turnrl's verdict, then compute-sanitizer memcheck on the worker"
  "$BUILD/bin/turnrl" evaluate-kernel swiglu "$tmp/$kind.cu" --set evaluator.backend=cuda --set env.timing_trials=5 \
    2>&1 | grep -E "^(stage|hacking|time)"
  TURNRL_CUDA_GUARD_BANDS=0 PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SAN" --tool memcheck --target-processes all --print-limit 3 \
    "$BUILD/bin/turnrl" evaluate-kernel swiglu "$tmp/$kind.cu" --set evaluator.backend=cuda \
    --set env.timing_trials=2 --set env.correctness_trials=1 > "$tmp/san-$kind.txt" 2>&1
  echo "memcheck: $(grep -c 'Invalid __global__ write' "$tmp/san-$kind.txt") invalid global writes reported; $(grep -E 'ERROR SUMMARY' "$tmp/san-$kind.txt" | tail -n 1)"
done
rm -rf "$tmp"
