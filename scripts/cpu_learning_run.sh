#!/usr/bin/env bash
# The CPU SFT -> RL pipeline in which a small Qwen3-architecture model learns to write C++ kernels
# (docs/training.md, "A code-writing model learning on a CPU"): a corpus of compact programs
# checked by the evaluator, a Qwen3 tokenizer trimmed to it, a randomly initialised qwen3-tiny,
# SFT, then code-action RL from the SFT export, and the plots. About 25 minutes on 2 cores
# (measured: 16 s of corpus, 9 minutes of SFT, 14 of RL).
# Usage: scripts/cpu_learning_run.sh [OUT_DIR]   (default runs/cpu_learning; after scripts/setup.sh
# and a build in build/). TURNRL=path/to/turnrl picks another binary. The steps up to SFT are
# scripts/cpu_learning_start.sh's, which scripts/cpu_ablation.sh shares; sft and train run on
# Debian's OpenBLAS where it can be had (see there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
turnrl=${TURNRL:-$root/build/bin/turnrl}
out=${1:-$root/runs/cpu_learning}
cd "$root"
source scripts/cpu_learning_start.sh

cpu_blas_setup
cpu_learning_start "$out"
# 4. RL from the SFT export.
"${blas[@]}" "$turnrl" train configs/cpu_qwen3_code.yaml --set "run.dir=$out/rl" --set "model.path=$out/sft/export"
# 5. The curves.
"$turnrl" plot "$out/sft/metrics.jsonl" --metrics sft/loss --out "$out/sft.png"
"$turnrl" plot "$out/rl/metrics.jsonl" --metrics critic/score/mean,kernel/correct,kernel/compile,kernel/speedup --out "$out/rl.png"
echo "cpu_learning_run: done; $out/sft/metrics.jsonl, $out/rl/metrics.jsonl, $out/sft.png, $out/rl.png"
