#!/usr/bin/env bash
# One call on the GPU machine: build turnrl against PyTorch's LibTorch (CUDA), run every test
# (CUDA ones included), then every benchmark on the GPU. Output goes to stdout and to $OUT.
#
# Here (once):   scripts/fetch_device_debs.sh            # yaml-cpp, fmt, Eigen, Catch2, nlohmann-json as .debs
# Device call:   run(command="benchmarks/device/run_all.sh", carry=[".deps"])
#   optional args: --no-tests, --tests CTEST_ARGS (e.g. "-L cuda"), --no-bench,
#                  --bench NAME (repeatable; default: every *_bench), --bench-args "ARGS" (to each
#                  benchmark after --device cuda, e.g. "--profile"),
#                  --targets "T1 T2" (build only these CMake targets, e.g. "turnrl_cli python_bench")
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/turnrl-device-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

run_tests=1
run_benches=1
ctest_args=()
benches=()
bench_args=()
targets=()
while (($#)); do
  case "$1" in
    --no-tests) run_tests=0 ;;
    --no-bench) run_benches=0 ;;
    --tests) read -r -a ctest_args <<<"$2"; shift ;;
    --bench) benches+=("$2"); shift ;;
    --bench-args) read -r -a bench_args <<<"$2"; shift ;;
    --targets) read -r -a targets <<<"$2"; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done

source benchmarks/device/deps_prefix.sh
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"

start=$(date +%s)
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix/usr;$prefix/usr/share/eigen3/cmake" \
  -DPKG_CONFIG_EXECUTABLE="$pkg_config" -DCMAKE_CUDA_ARCHITECTURES=90a 2>&1 | tail -n 5 | tee "$OUT/configure.txt"
cmake --build build-device -j "$(nproc)" ${targets[@]:+--target "${targets[@]}"} -- -k 0 2>&1 | grep -E "error|FAILED|warning: unused" | head -n 60 | tee "$OUT/build.txt"
echo "build: $(( $(date +%s) - start )) s"

if ((run_tests)); then
  ctest --test-dir build-device --output-on-failure -j 4 "${ctest_args[@]}" > "$OUT/ctest.txt" 2>&1
  grep -E "tests passed|Failed|\*\*\*|SKIPPED|Exception|Timeout" "$OUT/ctest.txt" | tail -n 40
fi
((run_benches)) || exit 0
if ((${#benches[@]} == 0)); then
  for b in build-device/bin/*_bench; do benches+=("$(basename "$b")"); done
fi
for b in "${benches[@]}"; do
  echo "== $b --device cuda"
  "build-device/bin/$b" --device cuda "${bench_args[@]}" 2>&1 | tee "$OUT/$b.txt"
  # Same-run Python baselines, where a benchmark has one.
  if [[ -f "benchmarks/device/$b.py" ]]; then
    echo "== $b.py --device cuda (PyTorch baseline)"
    python3 "benchmarks/device/$b.py" --device cuda 2>&1 | tee "$OUT/${b}_py.txt"
  fi
done
# The Python backend's throughput with new candidates (issue 29's figure) rides along with python_bench.
if [[ " ${benches[*]} " == *" python_bench "* ]]; then
  echo "== python_throughput.sh"
  benchmarks/device/python_throughput.sh build-device
fi
