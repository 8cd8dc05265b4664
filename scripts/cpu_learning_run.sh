#!/usr/bin/env bash
# The CPU SFT -> RL pipeline in which a small Qwen3-architecture model learns to write C++ kernels
# (docs/training.md, "A code-writing model learning on a CPU"): a corpus of compact programs
# checked by the evaluator, a Qwen3 tokenizer trimmed to it, a randomly initialised qwen3-tiny,
# SFT, then code-action RL from the SFT export, and the plots. About 25 minutes on 2 cores
# (measured: 16 s of corpus, 9 minutes of SFT, 14 of RL).
# Usage: scripts/cpu_learning_run.sh [OUT_DIR]   (default runs/cpu_learning; after scripts/setup.sh
# and a build in build/). TURNRL=path/to/turnrl picks another binary.
#
# LibTorch 1.13 from Debian links the reference BLAS, which makes SFT several times slower; this
# script unpacks Debian's OpenBLAS (libopenblas0-pthread, `apt-get download`, nothing installed)
# into .deps/openblas and puts it first on LD_LIBRARY_PATH for the sft and train commands only. If
# the download fails the run goes on with the reference BLAS, slower, and says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
turnrl=${TURNRL:-$root/build/bin/turnrl}
out=${1:-$root/runs/cpu_learning}
cd "$root"
mkdir -p "$out"

openblas_dir=$root/.deps/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread
if [[ ! -f $openblas_dir/libblas.so.3 ]]; then
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download libopenblas0-pthread >/dev/null 2>&1); then
    dpkg-deb -x "$tmp"/libopenblas0-pthread_*.deb "$root/.deps/openblas"
  fi
  rm -rf "$tmp"
fi
blas=()
if [[ -f $openblas_dir/libblas.so.3 ]]; then
  # One OpenBLAS thread per LibTorch thread: LibTorch's own 2 threads already use both cores.
  blas=(env "LD_LIBRARY_PATH=$openblas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" OPENBLAS_NUM_THREADS=1)
else
  echo "cpu_learning_run: OpenBLAS not available (apt-get download libopenblas0-pthread failed);" \
    "SFT and RL run on the reference BLAS, several times slower" >&2
fi

# 1. The corpus: compact C++ for relu_bias, every turn's verdict checked by a real evaluation.
"$turnrl" make-sft-data configs/cpu_qwen3_code.yaml --out "$out/data" --style compact --conversations 240 --seed 1
# 2. The Qwen3 tokenizer cut to the corpus's tokens, and a random qwen3-tiny over it.
"$turnrl" trim-vocab --tokenizer .deps/hf-tokenizers/qwen3 --texts "$out/data/train.jsonl" --out "$out/tokenizer"
"$turnrl" init-model --out "$out/qwen3-tiny" --preset qwen3-tiny --seed 1 --tokenizer "$out/tokenizer"
# 3. SFT, then RL from its export.
"${blas[@]}" "$turnrl" sft configs/cpu_qwen3_sft.yaml --set "run.dir=$out/sft" --set "model.path=$out/qwen3-tiny" \
  --set "data.train=$out/data/train.jsonl"
"${blas[@]}" "$turnrl" train configs/cpu_qwen3_code.yaml --set "run.dir=$out/rl" --set "model.path=$out/sft/export"
# 4. The curves.
"$turnrl" plot "$out/sft/metrics.jsonl" --metrics sft/loss --out "$out/sft.png"
"$turnrl" plot "$out/rl/metrics.jsonl" --metrics critic/score/mean,kernel/correct,kernel/compile,kernel/speedup --out "$out/rl.png"
echo "cpu_learning_run: done; $out/sft/metrics.jsonl, $out/rl/metrics.jsonl, $out/sft.png, $out/rl.png"
