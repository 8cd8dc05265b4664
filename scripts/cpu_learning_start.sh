# Sourced by scripts/cpu_learning_run.sh and scripts/cpu_ablation.sh: the start both RL runs share
# (docs/training.md, "A code-writing model learning on a CPU").
#   cpu_blas_setup            sets the array `blas`: the command prefix that runs sft and train on
#                             Debian's OpenBLAS (empty, with a warning, if it cannot be had)
#   cpu_learning_start OUT    writes OUT/data (the compact relu_bias corpus), OUT/tokenizer (the
#                             Qwen3 tokenizer trimmed to it), OUT/qwen3-tiny (random init) and
#                             OUT/sft (SFT; OUT/sft/export is where RL starts)
# Both expect `root` (the repository) and `turnrl` (the binary) to be set, and `set -euo pipefail`.
#
# LibTorch 1.13 from Debian links the reference BLAS, which makes SFT several times slower; this
# unpacks Debian's OpenBLAS (libopenblas0-pthread, `apt-get download`, nothing installed) into
# .deps/openblas, to be put first on LD_LIBRARY_PATH for the sft and train commands only.

cpu_blas_setup() {
  local openblas_dir=$root/.deps/openblas/usr/lib/x86_64-linux-gnu/openblas-pthread
  if [[ ! -f $openblas_dir/libblas.so.3 ]]; then
    local tmp
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
    echo "cpu_blas_setup: OpenBLAS not available (apt-get download libopenblas0-pthread failed);" \
      "SFT and RL run on the reference BLAS, several times slower" >&2
  fi
}

cpu_learning_start() {
  local out=$1
  mkdir -p "$out"
  # 1. The corpus: compact C++ for relu_bias, every turn's verdict checked by a real evaluation.
  "$turnrl" make-sft-data configs/cpu_qwen3_code.yaml --out "$out/data" --style compact --conversations 240 --seed 1
  # 2. The Qwen3 tokenizer cut to the corpus's tokens, and a random qwen3-tiny over it.
  "$turnrl" trim-vocab --tokenizer .deps/hf-tokenizers/qwen3 --texts "$out/data/train.jsonl" --out "$out/tokenizer"
  "$turnrl" init-model --out "$out/qwen3-tiny" --preset qwen3-tiny --seed 1 --tokenizer "$out/tokenizer"
  # 3. SFT; RL starts from its export.
  "${blas[@]}" "$turnrl" sft configs/cpu_qwen3_sft.yaml --set "run.dir=$out/sft" --set "model.path=$out/qwen3-tiny" \
    --set "data.train=$out/data/train.jsonl"
}
