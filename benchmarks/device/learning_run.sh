#!/usr/bin/env bash
# Issue 25's learning evidence on the GPU machine, after run_all.sh built build-device (or with
# --build): a qwen3-tiny policy (real Qwen3 tokenizer and chat template) is warm-started by SFT on
# make-sft-data's verified conversations, then trained by multi-turn code-action RL against the
# real CPU evaluator, TRLOO and GRPO side by side from the same export and seed.
# Writes $OUT/learning.tgz (every run's metrics.jsonl, config.yaml, plots) and $OUT/learning.txt.
#   benchmarks/device/learning_run.sh [--build] [--conversations N] [--rl-steps N] [--seeds "1 2"]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/turnrl-device-out}
mkdir -p "$OUT"
conversations=300
rl_steps=10
seeds="1"
build=0
while (($#)); do
  case "$1" in
    --build) build=1 ;;
    --conversations) conversations=$2; shift ;;
    --rl-steps) rl_steps=$2; shift ;;
    --seeds) seeds=$2; shift ;;
    *) echo "unknown argument $1"; exit 2 ;;
  esac
  shift
done
((build)) && benchmarks/device/run_all.sh --no-tests --no-bench --targets turnrl_cli
source benchmarks/device/deps_prefix.sh >/dev/null 2>&1 || true
turnrl=$PWD/build-device/bin/turnrl
work=/tmp/turnrl-learning
rm -rf "$work" && mkdir -p "$work"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/learning.txt"; }
cores=$(nproc)

log "init-model qwen3-tiny"
"$turnrl" init-model --out "$work/qwen3" --preset qwen3-tiny --seed 1 >>"$OUT/learning.txt"
log "make-sft-data: $conversations conversations, $cores workers"
"$turnrl" make-sft-data configs/cpu_qwen3_code.yaml --out "$work/data" --conversations "$conversations" --seed 1 \
  --set evaluator.workers="$cores" 2>&1 | tail -n 3 | tee -a "$OUT/learning.txt"
log "sft on the GPU"
"$turnrl" sft configs/cpu_qwen3_sft.yaml --set "run.dir=$work/sft" --set "model.path=$work/qwen3" \
  --set model.device=cuda --set model.dtype=float32 --set "data.train=$work/data/train.jsonl" \
  --set "data.validation=$work/data/validation.jsonl" --set run.progress=false 2>&1 | tail -n 5 | tee -a "$OUT/learning.txt"
"$turnrl" plot "$work/sft/metrics.jsonl" --metrics sft/loss,val/loss --out "$work/sft_loss.png" >/dev/null 2>&1

# RL runs in parallel, the evaluator's workers split between them.
runs=()
for seed in $seeds; do
  for estimator in trloo grpo; do
    runs+=("$estimator:$seed")
  done
done
workers=$(( cores / ${#runs[@]} > 1 ? cores / ${#runs[@]} : 1 ))
log "RL: ${runs[*]}, $rl_steps steps each, $workers evaluator workers each"
for r in "${runs[@]}"; do
  estimator=${r%%:*} seed=${r##*:}
  "$turnrl" train configs/cpu_qwen3_code.yaml --set "run.dir=$work/rl_${estimator}_$seed" \
    --set "model.path=$work/sft/export" --set model.device=cuda --set model.dtype=float32 \
    --set trainer.steps="$rl_steps" --set trainer.seed="$seed" --set advantage.estimator="$estimator" \
    --set evaluator.workers="$workers" --set run.progress=false >"$work/rl_${estimator}_$seed.log" 2>&1 &
done
wait
for r in "${runs[@]}"; do
  estimator=${r%%:*} seed=${r##*:}
  tail -n 2 "$work/rl_${estimator}_$seed.log" | tee -a "$OUT/learning.txt"
done
metrics=() labels=()
for r in "${runs[@]}"; do metrics+=("$work/rl_${r%%:*}_${r##*:}/metrics.jsonl"); labels+=("${r/:/ seed }"); done
"$turnrl" plot "${metrics[@]}" --labels "$(IFS=,; echo "${labels[*]}")" --out "$work/rl_reward.png" >/dev/null 2>&1
log "summary (reward/mean per step)"
for m in "${metrics[@]}"; do
  python3 - "$m" <<'PY' | tee -a "$OUT/learning.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = next((k for k in ("reward/mean", "critic/score/mean") if k in rows[0]), None)
print(sys.argv[1].split("/")[-2], key, " ".join(f"{r.get(key, float('nan')):.3f}" for r in rows))
PY
done
(cd "$work" && tar czf "$OUT/learning.tgz" --exclude='*.safetensors' --exclude='checkpoints' --exclude='export' \
   --exclude='qwen3' sft rl_* *.png *.log data/*.json 2>/dev/null)
cp "$work"/*.png "$OUT/" 2>/dev/null
log "done"
