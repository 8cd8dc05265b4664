#!/usr/bin/env bash
# Ablation on the CPU default: advantage estimator (TRLOO vs GRPO vs RLOO) and PR/PRS on/off,
# 3 seeds each. Writes OUT/<variant>/seed<k>/ runs, OUT/table.md (mean +- std over seeds of the
# mean reward and fast@1.2 over the last 5 steps) and OUT/<variant>.png (seed-averaged curves).
#
#   benchmarks/ablation/run.sh [BUILD_DIR=build] [OUT=runs/ablation] [STEPS=20]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-runs/ablation}
STEPS=${3:-20}
TURNRL="$BUILD/bin/turnrl"
CONFIG="$(dirname "$0")/../../configs/cpu_default.yaml"
mkdir -p "$OUT"

declare -A VARIANTS=(
  [trloo_pr_prs]="advantage.estimator=trloo"
  [grpo_pr_prs]="advantage.estimator=dr_grpo"
  [rloo_pr_prs]="advantage.estimator=rloo"
  [trloo_no_pr]="advantage.estimator=trloo reward.coverage.enabled=false"
  [trloo_no_prs]="advantage.estimator=trloo rejection.prs.enabled=false"
  [trloo_no_pr_prs]="advantage.estimator=trloo reward.coverage.enabled=false rejection.prs.enabled=false"
)

for variant in "${!VARIANTS[@]}"; do
  for seed in 1 2 3; do
    dir="$OUT/$variant/seed$seed"
    [ -f "$dir/checkpoints/step_$(printf %08d "$STEPS")/policy.pt" ] && continue
    sets=(--set "trainer.steps=$STEPS" --set "trainer.seed=$seed" --set "run.dir=$dir" --set run.progress=false)
    for kv in ${VARIANTS[$variant]}; do sets+=(--set "$kv"); done
    echo "== $variant seed $seed"
    rm -rf "$dir"
    "$TURNRL" train "$CONFIG" "${sets[@]}"
  done
done

# One number per run: the mean of a metric over the last 5 steps.
last5() {  # FILE KEY
  awk -v key="\"$2\":" '{ n = split($0, f, ", "); for (i = 1; i <= n; ++i) if (index(f[i], key)) { split(f[i], kv, ": "); gsub(/[}]/, "", kv[2]); v[NR] = kv[2] } }
       END { s = 0; c = 0; for (i = NR - 4; i <= NR; ++i) if (i in v) { s += v[i]; ++c } printf "%.4f\n", c ? s / c : 0 }' "$1"
}
meanstd() { awk '{ s += $1; q += $1 * $1; ++n } END { m = s / n; sd = n > 1 ? sqrt((q - n * m * m) / (n - 1)) : 0; printf "%.3f +- %.3f", m, sd }'; }

{
  echo "| variant | reward (last 5 steps) | fast@1.2 (last 5 steps) |"
  echo "|---|---|---|"
  for variant in $(echo "${!VARIANTS[@]}" | tr ' ' '\n' | sort); do
    r=$(for s in 1 2 3; do last5 "$OUT/$variant/seed$s/metrics.jsonl" reward/mean; done | meanstd)
    f=$(for s in 1 2 3; do last5 "$OUT/$variant/seed$s/metrics.jsonl" kernel/fast@1.2; done | meanstd)
    echo "| $variant | $r | $f |"
  done
} | tee "$OUT/table.md"

# Seed-averaged curves per variant, drawn by `turnrl plot`.
for variant in "${!VARIANTS[@]}"; do
  awk '{ step = ""; n = split($0, f, ", "); for (i = 1; i <= n; ++i) { gsub(/[{}]/, "", f[i]); split(f[i], kv, ": "); k = kv[1]; gsub(/"/, "", k);
         if (k == "step") step = kv[2]; val[k] = kv[2] }
         for (k in val) if (val[k] != "null") { sum[step, k] += val[k]; cnt[step, k]++; keys[k] = 1 } delete val; steps[step] = 1 }
       END { for (s in steps) { line = "{\"step\": " s; for (k in keys) if ((s, k) in sum && k != "step") line = line ", \"" k "\": " sum[s, k] / cnt[s, k]; print line "}" } }' \
    "$OUT/$variant"/seed*/metrics.jsonl | sort -t: -k2 -n > "$OUT/$variant/mean_metrics.jsonl"
  "$TURNRL" plot "$OUT/$variant/mean_metrics.jsonl" --out "$OUT/$variant.png"
done
