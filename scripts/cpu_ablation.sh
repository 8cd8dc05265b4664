#!/usr/bin/env bash
# The CPU code-writing ablation (docs/training.md, "Ablation and held-out evaluation of the
# code-writing model"): one shared start (scripts/cpu_learning_start.sh: corpus, trimmed
# tokenizer, qwen3-tiny, SFT), then RL arms from that same SFT export, each at every seed:
#   trloo            configs/cpu_qwen3_code.yaml as it is (TRLOO, PR and PRS on)
#   grpo             advantage.estimator=grpo (standardised per task and turn)
#   trloo_no_pr_prs  TRLOO with the coverage reward (PR) and profiling rejection sampling (PRS) off
#   no_update        optimizer.lr=0: the SFT export samples and is scored as in RL, never updated
#                    (the control: what the RL-time metrics do from sampling alone)
#   trloo_stop, grpo_stop   TRLOO and GRPO with env.target_speedup=1.2: an episode ends at its
#                    first correct turn at 1.2x or faster, so fewer episodes reach turn 2 than
#                    turn 1 (the per-turn group sizes the paper's argument for TRLOO is about)
#   no_update_stop   their control: optimizer.lr=0 with env.target_speedup=1.2
# then `turnrl eval` of the SFT export (once per seed, eval.seed = the seed) and of each run's
# final checkpoint on relu_bias (the task SFT and RL saw) and the held-out tasks, and
# scripts/cpu_ablation_table.py's table of mean +- std over seeds (and each arm's seed-mean
# curves, OUT/ARM/mean_metrics.jsonl, which `turnrl plot` draws in OUT/ablation.png).
#
# Usage: scripts/cpu_ablation.sh [OUT_DIR]   (default runs/cpu_ablation; after scripts/setup.sh and
# a build in build/). Environment: STEPS (RL steps an arm, default 8), SEEDS (default "1 2 3"),
# ARMS (a subset of the names above, default trloo grpo trloo_no_pr_prs no_update), START (a folder
# holding a finished start, OUT of an earlier ablation: its sft/export is used; default OUT), HELD_OUT (comma-separated CPU tasks
# neither SFT nor RL saw, default gelu_tanh), EVAL_SAMPLES (episodes a task, default 8),
# TURNRL (the binary). Finished runs and evaluations are skipped, so an interrupted ablation
# restarts where it stopped; runs go seed by seed, so every arm has the same seeds done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
turnrl=${TURNRL:-$root/build/bin/turnrl}
out=${1:-$root/runs/cpu_ablation}
steps=${STEPS:-8}
seeds=${SEEDS:-"1 2 3"}
arms=${ARMS:-"trloo grpo trloo_no_pr_prs no_update"}
held_out=${HELD_OUT:-gelu_tanh}
eval_samples=${EVAL_SAMPLES:-8}
cd "$root"
source scripts/cpu_learning_start.sh
config=configs/cpu_qwen3_code.yaml

arm_overrides() {  # ARM -> its --set overrides of the config
  case $1 in
    trloo) ;;
    grpo) echo "--set advantage.estimator=grpo" ;;
    trloo_no_pr_prs) echo "--set reward.coverage.enabled=false --set rejection.prs.enabled=false" ;;
    no_update) echo "--set optimizer.lr=0" ;;
    trloo_stop) echo "--set env.target_speedup=1.2" ;;
    grpo_stop) echo "--set advantage.estimator=grpo --set env.target_speedup=1.2" ;;
    no_update_stop) echo "--set optimizer.lr=0 --set env.target_speedup=1.2" ;;
    *) echo "cpu_ablation: unknown arm '$1'; known: trloo grpo trloo_no_pr_prs no_update trloo_stop grpo_stop no_update_stop" >&2; return 2 ;;
  esac
}
for arm in $arms; do arm_overrides "$arm" > /dev/null; done

cpu_blas_setup
start=${START:-$out}
export_dir=$start/sft/export
if [[ ! -f $export_dir/config.json ]]; then cpu_learning_start "$start"; fi

# The evaluation, one task at a time (the report's levels would pool relu_bias with the held-out
# level-1 tasks): sampled as RL samples (temperature 0.7, no top-p cut: at temperature 1 nearly
# every answer of this model breaks somewhere), eval.seed = the run's seed.
evaluate() {  # CHECKPOINT SEED NAME: writes OUT/eval/NAME_TASK_seedSEED.{json,txt} for each task
  local task prefix
  for task in relu_bias ${held_out//,/ }; do
    prefix=$out/eval/$3_${task}_seed$2
    [[ -f $prefix.json ]] && continue
    echo "== eval $3 on $task, seed $2 ($(date +%H:%M:%S))"
    "${blas[@]}" "$turnrl" eval "$config" --checkpoint "$1" --set "model.path=$export_dir" --set "run.dir=$out/eval/run" \
      --set "tasks.include=[$task]" --set eval.split=all --set "eval.samples=$eval_samples" \
      --set eval.temperature=0.7 --set eval.top_p=1 --set "eval.pass_k=[1]" --set "eval.fast_p=[1,1.2]" \
      --set "eval.seed=$2" --json "$prefix.json.tmp" > "$prefix.txt"
    mv "$prefix.json.tmp" "$prefix.json"
  done
}

mkdir -p "$out/eval"
for seed in $seeds; do evaluate "$export_dir" "$seed" sft; done
for seed in $seeds; do
  for arm in $arms; do
    dir=$out/$arm/seed$seed
    if [[ ! -f $dir/metrics.jsonl ]] || (( $(wc -l < "$dir/metrics.jsonl") < steps )); then
      echo "== $arm seed $seed, $steps steps ($(date +%H:%M:%S))"
      rm -rf "$dir"
      # shellcheck disable=SC2046  # the overrides are words
      "${blas[@]}" "$turnrl" train "$config" --set "run.dir=$dir" --set "model.path=$export_dir" \
        --set "trainer.seed=$seed" --set "trainer.steps=$steps" --set checkpoint.every=0 --set checkpoint.keep_last=1 \
        --set run.progress=false $(arm_overrides "$arm")
    fi
    evaluate "$(ls -d "$dir"/checkpoints/step_* | tail -1)" "$seed" "$arm"
  done
done

python3 scripts/cpu_ablation_table.py "$out" --arms "$arms" --seeds "$seeds" --held-out "$held_out" | tee "$out/table.md"
labels=$(echo $arms | tr ' ' ,)
"$turnrl" plot --metrics critic/score/mean,kernel/correct,adv/group_size/turn_2/mean --labels "$labels" --out "$out/ablation.png" \
  $(for arm in $arms; do echo "$out/$arm/mean_metrics.jsonl"; done)
echo "cpu_ablation: done; $out/table.md, $out/ablation.png"
