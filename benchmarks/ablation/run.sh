#!/usr/bin/env bash
# Ablation on the CPU default: advantage estimator (TRLOO vs GRPO vs RLOO, plus Dr.GRPO) and PR/PRS
# on/off, 3 seeds each. Writes OUT/<variant>/seed<k>/ runs, OUT/table.md (mean +- std over seeds of
# the mean over the first 3 and the last 5 steps of reward/mean and kernel/fast@1.2),
# OUT/<variant>.png (seed-averaged curves, `turnrl plot`) and OUT/ablation.png (reward and
# fast@1.2 against steps, every variant in one chart, `turnrl plot` of several runs).
#
#   benchmarks/ablation/run.sh [BUILD_DIR=build] [OUT=runs/ablation] [STEPS=20] [SEEDS="1 2 3"] [VARIANTS=all]
#
# VARIANTS is a space-separated subset of the names below. Completed runs are skipped, so the
# script can be interrupted and restarted. Runs are niced (nice -n 5) on a shared machine.
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-runs/ablation}
STEPS=${3:-20}
SEEDS=${4:-"1 2 3"}
ONLY=${5:-all}
HERE="$(cd "$(dirname "$0")" && pwd)"
TURNRL="$BUILD/bin/turnrl"
CONFIG="$HERE/../../configs/cpu_default.yaml"
mkdir -p "$OUT"

# name -> --set overrides of configs/cpu_default.yaml (TRLOO + PR + PRS + mismatch correction).
declare -A VARIANTS=(
  [trloo_pr_prs]="advantage.estimator=trloo"
  [grpo_pr_prs]="advantage.estimator=grpo"
  [rloo_pr_prs]="advantage.estimator=rloo"
  [drgrpo_pr_prs]="advantage.estimator=dr_grpo"
  [trloo_no_pr]="advantage.estimator=trloo reward.coverage.enabled=false"
  [trloo_no_prs]="advantage.estimator=trloo rejection.prs.enabled=false"
  [trloo_no_pr_prs]="advantage.estimator=trloo reward.coverage.enabled=false rejection.prs.enabled=false"
)
ORDER="trloo_pr_prs grpo_pr_prs rloo_pr_prs trloo_no_pr_prs trloo_no_pr trloo_no_prs drgrpo_pr_prs"
[ "$ONLY" != all ] && ORDER="$ONLY"

for variant in $ORDER; do
  [ -n "${VARIANTS[$variant]+x}" ] || { echo "unknown variant '$variant'; known: ${!VARIANTS[*]}" >&2; exit 2; }
done
# Seed-major, so that an interrupted ablation has every variant at the same number of seeds.
for seed in $SEEDS; do
  for variant in $ORDER; do
    dir="$OUT/$variant/seed$seed"
    if [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l < "$dir/metrics.jsonl")" -ge "$STEPS" ]; then continue; fi
    sets=(--set "trainer.steps=$STEPS" --set "trainer.seed=$seed" --set "run.dir=$dir" --set run.progress=false)
    for kv in ${VARIANTS[$variant]}; do sets+=(--set "$kv"); done
    echo "== $variant seed $seed ($(date +%H:%M:%S))"
    rm -rf "$dir"
    start=$(date +%s)
    nice -n 5 "$TURNRL" train "$CONFIG" "${sets[@]}"
    echo "$(( $(date +%s) - start ))" > "$dir/wall_seconds"
  done
done

# One number per run: the mean of a metric over steps FROM..TO (1-based; negative = from the end).
window() {  # FILE KEY FIRST_N|-LAST_N
  awk -v key="\"$2\":" -v w="$3" '{ n = split($0, f, ", "); for (i = 1; i <= n; ++i) if (index(f[i], key) == 1 || index(f[i], "{" key) == 1) {
         split(f[i], kv, ": "); gsub(/[}]/, "", kv[2]); v[NR] = kv[2] } }
       END { lo = w > 0 ? 1 : NR + w + 1; hi = w > 0 ? w : NR; s = 0; c = 0
             for (i = lo; i <= hi; ++i) if ((i in v) && v[i] != "null") { s += v[i]; ++c } printf "%.4f\n", c ? s / c : 0 }' "$1"
}
meanstd() { awk '{ s += $1; q += $1 * $1; ++n } END { m = s / n; v = n > 1 ? (q - n * m * m) / (n - 1) : 0; sd = v > 0 ? sqrt(v) : 0; printf "%.2f ± %.2f", m, sd }'; }

{
  echo "| variant | reward, steps 1-3 | reward, last 5 steps | fast@1.2, steps 1-3 | fast@1.2, last 5 steps | correct, last 5 steps |"
  echo "|---|---|---|---|---|---|"
  for variant in $ORDER; do
    seeds_done=""
    for s in $SEEDS; do [ -f "$OUT/$variant/seed$s/metrics.jsonl" ] && seeds_done="$seeds_done $s"; done
    [ -z "$seeds_done" ] && continue
    col() { for s in $seeds_done; do window "$OUT/$variant/seed$s/metrics.jsonl" "$1" "$2"; done | meanstd; }
    echo "| $variant | $(col reward/mean 3) | $(col reward/mean -5) | $(col kernel/fast@1.2 3) | $(col kernel/fast@1.2 -5) | $(col kernel/correct -5) |"
  done
} | tee "$OUT/table.md"
echo "(mean ± sample std over seeds $SEEDS; each cell per run is the mean over the step window; $STEPS steps)" >> "$OUT/table.md"

# Seed-averaged curves per variant, drawn by `turnrl plot` (one panel per metric).
for variant in $ORDER; do
  ls "$OUT/$variant"/seed*/metrics.jsonl > /dev/null 2>&1 || continue
  awk '{ step = ""; n = split($0, f, ", "); for (i = 1; i <= n; ++i) { gsub(/[{}]/, "", f[i]); split(f[i], kv, ": "); k = kv[1]; gsub(/"/, "", k);
         if (k == "step") step = kv[2]; val[k] = kv[2] }
         for (k in val) if (val[k] != "null") { sum[step, k] += val[k]; cnt[step, k]++; keys[k] = 1 } delete val; steps[step] = 1 }
       END { for (s in steps) { line = "{\"step\": " s; for (k in keys) if ((s, k) in sum && k != "step") line = line ", \"" k "\": " sum[s, k] / cnt[s, k]; print line "}" } }' \
    "$OUT/$variant"/seed*/metrics.jsonl | sort -t: -k2 -n > "$OUT/$variant/mean_metrics.jsonl"
  "$TURNRL" plot "$OUT/$variant/mean_metrics.jsonl" --out "$OUT/$variant.png"
done

# Every variant in one chart: reward/mean and kernel/fast@1.2 (seed means) against steps, one
# colour per variant (the legend names each by its folder).
"$TURNRL" plot --metrics reward/mean,kernel/fast@1.2 --out "$OUT/ablation.png" \
  $(for v in $ORDER; do [ -f "$OUT/$v/mean_metrics.jsonl" ] && echo "$OUT/$v/mean_metrics.jsonl"; done)
