#!/usr/bin/env bash
# The GPU configs end to end on the GPU machine, after benchmarks/device/run_all.sh built
# build-device: the kernel-plan renderers' GPU tests (CUDA plans through the CUDA evaluator, Triton
# plans through the Python evaluator), then a short run of each GPU training config with the
# recipe's methods and a reduced batch, printing the metrics of every step.
#   benchmarks/device/gpu_plans_and_training.sh [STEPS=2]
#   env: PLAN_TESTS (ctest -R regex, default "plan"; "none" skips), PLAN_TEST_SECONDS, TRAIN_SECONDS,
#        TASKS (4), SAMPLES (4), TURNS (2), CONFIGS ("drkernel_cuda drkernel_triton_cuda")
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/turnrl-device-out}
mkdir -p "$OUT"
steps=${1:-2}
export TURNRL_SOURCE_DIR=$PWD TURNRL_PYTHON_WORKER=$PWD/python/turnrl_eval_worker.py

echo "== kernel-plan GPU tests"
if [[ ${PLAN_TESTS:-plan} != none ]]; then
  timeout "${PLAN_TEST_SECONDS:-900}" ctest --test-dir build-device --output-on-failure -R "${PLAN_TESTS:-plan}" -L cuda \
    > "$OUT/plan_tests.txt" 2>&1
fi
grep -E "tests passed|Failed|Passed|SKIPPED" "$OUT/plan_tests.txt" | tail -n 20
# Per-plan verdicts and speedups the tests print.
grep -E "^\s*(relu_bias|gelu_tanh|swiglu|softmax_rows|layernorm_rows|logsumexp_rows|matmul_bias_relu|matmul_softmax|kb[12]_)" \
  "$OUT/plan_tests.txt" | head -n 200 > "$OUT/plan_verdicts.txt"

tasks=${TASKS:-4} samples=${SAMPLES:-4} turns=${TURNS:-2}
for config in ${CONFIGS:-drkernel_cuda drkernel_triton_cuda}; do
  echo "== turnrl train configs/$config.yaml ($steps steps, $tasks tasks x $samples samples x $turns turns)"
  rm -rf "/tmp/turnrl-runs/$config"
  timeout "${TRAIN_SECONDS:-600}" stdbuf -oL build-device/bin/turnrl train "configs/$config.yaml" --set "run.dir=/tmp/turnrl-runs/$config" \
    --set "trainer.steps=$steps" --set "trainer.tasks_per_step=$tasks" --set "trainer.samples_per_task=$samples" \
    --set "env.max_turns=$turns" --set env.timing_trials=10 --set checkpoint.every="$steps" 2>&1 | tail -n 25
  cp "/tmp/turnrl-runs/$config/metrics.jsonl" "$OUT/${config}_metrics.jsonl" 2>/dev/null
  python3 - "/tmp/turnrl-runs/$config/metrics.jsonl" <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    sys.exit("no metrics written")
for r in rows:
    keys = [k for k in ("step", "reward/mean", "kernel/correct", "kernel/speedup", "kernel/coverage", "kernel/fast@1.2",
                        "time/eval_s", "time/step_s") if k in r]
    print("  " + "  ".join("%s=%s" % (k, round(r[k], 4) if isinstance(r[k], float) else r[k]) for k in keys))
PY
done
