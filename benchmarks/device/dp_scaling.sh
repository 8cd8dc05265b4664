#!/usr/bin/env bash
# Scaling efficiency of a data-parallel training step: `turnrl train --nproc N` for each N, the
# per-rank batch held fixed (tasks_per_step = BASE_TASKS x N: weak scaling), steps 2.. averaged.
# efficiency(N) = episodes/s at N / (N x episodes/s at 1).
#   benchmarks/device/dp_scaling.sh BUILD_DIR CONFIG "1 2 4 8" [--set key=value ...]
#   env: STEPS (4), BASE_TASKS (4)
# On the GPU machine: benchmarks/device/dp_scaling.sh build-device configs/drkernel_cuda.yaml "1 2"
# (needs a kind with as many GPUs as the largest N). On CPUs it runs with configs/cpu_default.yaml.
set -euo pipefail
build=$1 config=$2 counts=$3
shift 3
steps=${STEPS:-4} base=${BASE_TASKS:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export NCCL_NVLS_ENABLE=0
printf "%-6s %-12s %-14s %-16s %-12s\n" ranks tasks/step "step s (2..)" "episodes/s" efficiency
base_rate=""
for n in $counts; do
  run="$out/run$n"
  "$build/bin/turnrl" train "$config" --nproc "$n" --set "run.dir=$run" --set "trainer.steps=$steps" \
    --set "trainer.tasks_per_step=$((base * n))" --set run.progress=false --set checkpoint.every=0 "$@" \
    > "$out/log$n" 2>&1 || { echo "--nproc $n failed:"; tail -n 20 "$out/log$n"; exit 1; }
  read -r step_s rate < <(python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]  # step 1 pays worker starts and compiles
s = sum(r["time/step_s"] for r in rows) / len(rows)
e = sum(r["rollout/episodes"] for r in rows) / len(rows)
print("%.3f %.3f" % (s, e / s))
PY
)
  [[ -z $base_rate ]] && base_rate=$rate
  eff=$(python3 -c "print('%.2f' % ($rate / ($n * $base_rate)))")
  printf "%-6s %-12s %-14s %-16s %-12s\n" "$n" "$((base * n))" "$step_s" "$rate" "$eff"
done
