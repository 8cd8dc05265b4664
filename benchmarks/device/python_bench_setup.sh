# Sourced by the Python backend's device scripts (python_backend.sh, python_throughput.sh,
# python_bigproblems.sh) once they have parsed their arguments into $build:
#   python_bench_setup NAME   cd to the repository root, point the benchmark at this tree's worker
#                             script, create $OUT, and set $bench to $build/bin/NAME (exit 2 when
#                             it is not built).
python_bench_setup() {
  cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
  export TURNRL_SOURCE_DIR=$PWD TURNRL_PYTHON_WORKER=$PWD/python/turnrl_eval_worker.py
  OUT=${OUT:-/tmp/turnrl-device-out}
  mkdir -p "$OUT"
  bench="$build/bin/$1"
  if [[ ! -x $bench ]]; then
    echo "FAIL: $bench not found; build it with: cmake --build $build --target $1"
    exit 2
  fi
}
