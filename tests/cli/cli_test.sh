#!/usr/bin/env bash
# The turnrl program's command line: --help on every subcommand listed by `turnrl --help` (exit 0,
# options and an example), --version, usage errors (exit 2), a bad --set key named as a --set
# error, a refused estimator, `turnrl plot` on several runs and on a file that is not metrics, and
# the remote backend with built-in tasks (where redis-server is installed).
# Usage: cli_test.sh TURNRL_PROGRAM SOURCE_DIR
set -euo pipefail
turnrl=$1
source_dir=$2
work=$(mktemp -d)
worker=""
cleanup() {
  [[ -n "$worker" ]] && kill "$worker" 2>/dev/null
  if [[ -s "$work/redis.pid" ]]; then
    local pid
    pid=$(cat "$work/redis.pid")
    kill "$pid" 2>/dev/null
    # redis-server writes its last log lines (and a dump) into $work while it exits: removing the
    # folder before it is gone fails with "Directory not empty".
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Runs the command, keeping stdout+stderr in $work/out and the exit status in $status.
run() {
  set +e
  "$@" >"$work/out" 2>&1
  status=$?
  set -e
}
expect_status() {  # expected, what
  [[ $status -eq $1 ]] || { cat "$work/out" >&2; fail "$2: exit status $status, expected $1"; }
}
expect_output() {  # pattern, what
  grep -qE -- "$1" "$work/out" || { cat "$work/out" >&2; fail "$2: output lacks /$1/"; }
}

run "$turnrl" --help
expect_status 0 "turnrl --help"
mapfile -t commands < <(sed -n '/^Subcommands:/,/^$/p' "$work/out" | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p')
for c in train eval evaluate-kernel plot config eval-worker import-kernelbench init-model make-sft-data trim-vocab; do
  printf '%s\n' "${commands[@]}" | grep -qx "$c" || fail "turnrl --help does not list '$c'"
done
for c in "${commands[@]}"; do
  run "$turnrl" "$c" --help
  expect_status 0 "turnrl $c --help"
  expect_output "^Usage: .*$c" "turnrl $c --help"
  expect_output "Example" "turnrl $c --help"
  expect_output "^Options:" "turnrl $c --help"
done
echo "--help works on ${#commands[@]} subcommands: ${commands[*]}"

run "$turnrl" --version
expect_status 0 "turnrl --version"
expect_output "^turnrl [0-9]+\.[0-9]+\.[0-9]+" "--version"
expect_output "^git commit: " "--version"
expect_output "^LibTorch: [0-9]+\.[0-9]+" "--version"
expect_output "^evaluator backends: cpu" "--version"
expect_output "^NCCL: (yes|no)" "--version"

run "$turnrl"
expect_status 2 "turnrl without a command"
run "$turnrl" train "$source_dir/configs/cpu_default.yaml" --no-such-option
expect_status 2 "an unknown option"
run "$turnrl" frobnicate
expect_status 2 "an unknown command"

# --set before or after CONFIG, as --set k=v or --set=k=v.
run "$turnrl" config --set trainer.steps=3 "$source_dir/configs/cpu_default.yaml" --set=trainer.seed=7
expect_status 0 "config with --set before and after CONFIG"
expect_output "^  steps: 3" "--set trainer.steps=3"
expect_output "^  seed: 7" "--set=trainer.seed=7"
# A shipped config by name.
run "$turnrl" config cpu_default
expect_status 0 "config cpu_default (a shipped config by name)"

run "$turnrl" config "$source_dir/configs/cpu_default.yaml" --set trainer.stepz=3
expect_status 1 "a bad --set key"
expect_output "--set 'trainer.stepz=3': trainer.stepz: unknown key" "a bad --set key"
grep -q "cpu_default.yaml:" "$work/out" && fail "a bad --set key is reported in the config file: $(cat "$work/out")"

run "$turnrl" config "$source_dir/configs/cpu_default.yaml" --set advantage.estimator=gae
expect_status 1 "gae without a critic"
expect_output "needs critic values" "gae without a critic"

# plot: two runs side by side, chosen metrics, a PNG; a file that is not metrics is an error.
mkdir -p "$work/trloo" "$work/grpo"
for s in 1 2 3; do
  echo "{\"step\": $s, \"critic/score/mean\": 0.$s, \"actor/entropy\": 1.$s}" >>"$work/trloo/metrics.jsonl"
  echo "{\"step\": $s, \"critic/score/mean\": 0.$((s + 1)), \"actor/entropy\": 2.$s}" >>"$work/grpo/metrics.jsonl"
done
run "$turnrl" plot --metrics critic/score/mean,actor/entropy "$work/trloo/metrics.jsonl" "$work/grpo/metrics.jsonl" \
  --out "$work/ablation.png"
expect_status 0 "plot of two runs"
expect_output "2 run\(s\)" "plot of two runs"
[[ "$(head -c 4 "$work/ablation.png" | tail -c 3)" == "PNG" ]] || fail "plot wrote no PNG"
echo "not metrics" >"$work/notes.txt"
run "$turnrl" plot "$work/notes.txt" --out "$work/notes.png"
expect_status 1 "plot of a file that is not metrics"
expect_output "notes.txt:1:" "plot of a file that is not metrics"
run "$turnrl" plot "$work/trloo/metrics.jsonl" --metrics no/such --out "$work/x.png"
expect_status 1 "plot of a metric no run has"
expect_output "'no/such' is in none of the runs" "plot of a metric no run has"
# evaluator.backend: remote with the built-in tasks: the trainer side sends the suite of
# evaluator.remote.worker_backend, an eval-worker (whose default --backend that is) evaluates it.
if command -v redis-server >/dev/null && "$turnrl" --version | grep -q "remote"; then
  port=$((20000 + RANDOM % 20000))
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  remote=(--set evaluator.backend=remote --set "evaluator.remote.redis_url=redis://127.0.0.1:$port"
          --set evaluator.remote.stream=cli_test --set evaluator.workers=1)
  "$turnrl" eval-worker "${remote[@]}" >"$work/worker.log" 2>&1 &
  worker=$!
  run "$turnrl" evaluate-kernel relu_bias "$source_dir/tests/data/cpu_tasks/relu_bias/honest.cpp" "${remote[@]}" \
    --set env.timing_trials=2
  kill "$worker"
  wait "$worker" || true
  worker=""
  expect_status 0 "evaluate-kernel through the remote backend with a built-in task"
  expect_output "correct: yes" "evaluate-kernel through the remote backend with a built-in task"
  echo "remote backend with the built-in cpu suite: correct"
else
  echo "SKIPPED: remote backend check (no redis-server, or built without hiredis)"
fi
echo "cli: all checks passed"
