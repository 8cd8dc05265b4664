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

# SIGTERM to the launcher reaches every rank: none is left running, the checkpoints already written stay.
run2=$(dirname "$run")/run_term
"$turnrl" train "$source_dir/configs/cpu_default.yaml" --nproc 2 "${common[@]/$run/$run2}" --set trainer.steps=1000 \
  > "$run.log4" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  [[ -d $run2/checkpoints/step_00000001 ]] && break
  sleep 0.1
done
[[ -d $run2/checkpoints/step_00000001 ]] || fail "the run to be stopped wrote no checkpoint in 60 s: $(cat "$run.log4")"
kill -TERM "$launcher"
status=0
wait "$launcher" || status=$?
[[ $status -ne 0 ]] || fail "the stopped launcher exited 0"
sleep 0.5
if pgrep -f "run.dir=$run2" > /dev/null; then
  pkill -KILL -f "run.dir=$run2"
  fail "ranks still running after SIGTERM to the launcher"
fi
[[ -d $run2/checkpoints/step_00000001 ]] || fail "the checkpoint of the stopped run is gone"

if "$turnrl" train "$source_dir/configs/cpu_default.yaml" --nproc 0 "${common[@]}" > "$run.log3" 2>&1; then
  fail "--nproc 0 was accepted"
fi
grep -q -- "--nproc: '0' is not allowed; allowed: an integer in \[1, 1024\]" "$run.log3" || fail "unclear --nproc error: $(cat "$run.log3")"
echo "PASS: turnrl train --nproc 2 (2 steps, resumed to 3), SIGTERM reaches every rank, --nproc 0 refused"
