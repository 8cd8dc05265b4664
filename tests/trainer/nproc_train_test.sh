#!/usr/bin/env bash
# `turnrl train --nproc 2` end to end on CPUs with the real CPU evaluator: two ranks over the TCP
# communicator, rank 0 alone writing the run directory; then --resume continues the run with two
# ranks; a bad --nproc is refused by name.  Usage: nproc_train_test.sh TURNRL_BINARY SOURCE_DIR
set -euo pipefail
turnrl=$1
source_dir=$2
run=$(mktemp -d)/run
trap 'rm -rf "$(dirname "$run")"' EXIT
common=(--set "run.dir=$run" --set trainer.tasks_per_step=2 --set trainer.samples_per_task=2 --set env.max_turns=2
        --set trainer.micro_batch_size=3 --set trainer.threads=1 --set checkpoint.every=1 --set run.progress=false)

fail() { echo "FAIL: $*"; exit 1; }

"$turnrl" train "$source_dir/configs/cpu_default.yaml" --nproc 2 "${common[@]}" --set trainer.steps=2 2>&1 | tee "$run.log1"
[[ -f $run/metrics.jsonl ]] || fail "no metrics.jsonl"
[[ $(wc -l < "$run/metrics.jsonl") -eq 2 ]] || fail "metrics.jsonl has $(wc -l < "$run/metrics.jsonl") lines, expected 2 (rank 0 alone writes)"
grep -q '"dist/world_size": 2' "$run/metrics.jsonl" || fail "metrics do not record world size 2"
grep -q "2 rank(s)" "$run.log1" || fail "the start line does not say 2 ranks"
[[ $(grep -c "turnrl: done at step" "$run.log1") -eq 1 ]] || fail "expected one 'done' line (rank 0)"
[[ -d $run/checkpoints/step_00000002 ]] || fail "no checkpoint for step 2: $(ls "$run/checkpoints")"

"$turnrl" train "$source_dir/configs/cpu_default.yaml" --nproc 2 "${common[@]}" --set trainer.steps=3 --resume 2>&1 | tee "$run.log2"
[[ $(wc -l < "$run/metrics.jsonl") -eq 3 ]] || fail "after --resume metrics.jsonl has $(wc -l < "$run/metrics.jsonl") lines, expected 3"
[[ -d $run/checkpoints/step_00000003 ]] || fail "no checkpoint for step 3 after --resume"

if "$turnrl" train "$source_dir/configs/cpu_default.yaml" --nproc 0 "${common[@]}" > "$run.log3" 2>&1; then
  fail "--nproc 0 was accepted"
fi
grep -q -- "--nproc: '0' is not allowed; allowed: an integer in \[1, 1024\]" "$run.log3" || fail "unclear --nproc error: $(cat "$run.log3")"
echo "PASS: turnrl train --nproc 2 (2 steps, resumed to 3), --nproc 0 refused"
