#!/usr/bin/env bash
# SFT -> RL end to end on CPUs, as configs/cpu_qwen3_sft.yaml describes it, two steps each at a
# tiny size: `turnrl make-sft-data` writes a few verified conversations, `turnrl trim-vocab` cuts
# the real Qwen3 tokenizer down to their tokens (and checks that they re-encode the same), `turnrl
# init-model` makes a qwen3-tiny folder over it, `turnrl sft` trains on them and exports an HF
# folder, `turnrl train` (code actions, configs/cpu_qwen3_code.yaml) starts from that export, and
# `turnrl sft --resume` continues the finished run without redoing a step.
# Usage: sft_rl_pipeline_test.sh TURNRL_BINARY SOURCE_DIR
set -euo pipefail
turnrl=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$turnrl" make-sft-data --out "$work/data" --conversations 4 --seed 1 --set evaluator.workers=2
"$turnrl" trim-vocab --tokenizer "$source_dir/.deps/hf-tokenizers/qwen3" --texts "$work/data/train.jsonl" \
  --out "$work/tokenizer" | tee "$work/trim.log"
grep -qE '^check: ([0-9]+) of \1 texts and ([0-9]+) of \2 chat renderings' "$work/trim.log" || fail "trim-vocab's check"
"$turnrl" init-model --out "$work/qwen3" --preset qwen3-tiny --seed 1 --tokenizer "$work/tokenizer"
vocab=$(sed -n 's/^ *"vocab_size": \([0-9]*\).*/\1/p' "$work/qwen3/config.json")
eos=$(sed -n 's/^ *"eos_token_id": \([0-9]*\).*/\1/p' "$work/qwen3/config.json")
((vocab < 151669 && eos < vocab)) || fail "init-model over the trimmed tokenizer: vocab_size $vocab, eos_token_id $eos"

sft=(--set "run.dir=$work/sft" --set "model.path=$work/qwen3" --set "data.train=$work/data/train.jsonl"
     --set data.validation= --set data.max_length=768 --set sft.steps=2 --set sft.micro_batch_size=1
     --set sft.grad_accum=2 --set sft.threads=2 --set optimizer.warmup_steps=1 --set run.progress=false)
"$turnrl" sft "$source_dir/configs/cpu_qwen3_sft.yaml" "${sft[@]}" 2>&1 | tee "$work/sft.log"
[[ $(wc -l < "$work/sft/metrics.jsonl") -eq 2 ]] || fail "sft metrics.jsonl: $(wc -l < "$work/sft/metrics.jsonl") lines, expected 2"
grep -q '"sft/loss"' "$work/sft/metrics.jsonl" || fail "no sft/loss in metrics.jsonl"
for f in config.json model.safetensors tokenizer.json; do
  [[ -f $work/sft/export/$f ]] || fail "the export has no $f: $(ls "$work/sft/export")"
done
[[ -d $work/sft/checkpoints/step_00000002/policy ]] || fail "no HF policy folder in the step-2 checkpoint"
"$turnrl" sft "$source_dir/configs/cpu_qwen3_sft.yaml" "${sft[@]}" --resume 2>&1 | tee "$work/sft_resume.log"
[[ $(wc -l < "$work/sft/metrics.jsonl") -eq 2 ]] || fail "--resume of a finished run added steps"

"$turnrl" train "$source_dir/configs/cpu_qwen3_code.yaml" --set "run.dir=$work/rl" --set "model.path=$work/sft/export" \
  --set trainer.steps=2 --set trainer.tasks_per_step=1 --set trainer.samples_per_task=2 --set env.max_turns=1 \
  --set sampling.max_new_tokens=16 --set 'tasks.include=[relu_bias]' --set checkpoint.every=0 \
  --set trainer.threads=2 --set run.progress=false 2>&1 | tee "$work/rl.log"
[[ $(wc -l < "$work/rl/metrics.jsonl") -eq 2 ]] || fail "rl metrics.jsonl: $(wc -l < "$work/rl/metrics.jsonl") lines, expected 2"

# `turnrl eval` of the export on a training task and a held-out one (split seed 1 at a quarter holds
# gelu_tanh out, relu_bias in): one sampling, reported for the held-out task, the training task and both.
"$turnrl" eval "$source_dir/configs/cpu_qwen3_code.yaml" --checkpoint "$work/sft/export" --set "model.path=$work/sft/export" \
  --set 'tasks.include=[relu_bias,gelu_tanh]' --set tasks.validation_fraction=0.25 --set tasks.split_seed=1 \
  --set eval.samples=2 --set 'eval.pass_k=[1]' --set env.max_turns=1 --set sampling.max_new_tokens=16 \
  --set trainer.threads=2 --json "$work/eval.json" --episodes "$work/episodes.jsonl" 2>&1 | tee "$work/eval.log"
grep -q '^held-out tasks (gelu_tanh):' "$work/eval.log" || fail "eval printed no held-out table"
grep -q '^training tasks (relu_bias):' "$work/eval.log" || fail "eval printed no training table"
grep -q '^relu_bias ' "$work/eval.log" || fail "eval printed no per-task row"
for key in eval/held_out/pass@1/all eval/train/pass@1/all eval/pass@1/all eval/task/gelu_tanh/pass@1 \
  eval/task/relu_bias/fast@1.2; do
  grep -q "\"$key\"" "$work/eval.json" || fail "eval.json has no $key"
done
# Every episode, two tasks x eval.samples, one JSON line each with its turns.
[[ $(wc -l < "$work/episodes.jsonl") -eq 4 ]] || fail "episodes.jsonl: $(wc -l < "$work/episodes.jsonl") lines, expected 4"
grep -q '"task": "gelu_tanh", "episode": [0-9]*, "turns": \[{"observation": ' "$work/episodes.jsonl" ||
  fail "episodes.jsonl has no gelu_tanh episode with its turns"
echo "PASS"
