#!/usr/bin/env bash
# The generation engine on the GPU in one call: builds only what it needs, runs its tests (CPU and
# CUDA: graph replay equals eager, GPU equals CPU, the fused kernels against the plain ops), then
# engine_bench (fused kernels on and off) and transformers' generate on the same shapes
# (engine_bench.py), whose combined table comes last.
#   run(command="benchmarks/device/engine_bench.sh", carry=[".deps"])
# Extra arguments go to run_all.sh (e.g. --no-tests).
exec "$(dirname "$0")/run_all.sh" --targets "test_model test_model_cuda engine_bench" --tests "-R generation_engine|fused_decoder" \
  --bench engine_bench "$@"
