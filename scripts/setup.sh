#!/usr/bin/env bash
# Installs every system dependency of turnrl from Debian 12's archive. Idempotent: a second run
# installs nothing and takes a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev          # LibTorch 1.13 (CPU): tensors, autograd, models
  libyaml-cpp-dev       # training configs
  libfmt-dev            # messages, logs, the progress line
  libeigen3-dev         # CPU-side statistics (timing summaries, bootstrap intervals)
  catch2                # Catch2 v2 tests, discovered by CTest
  python3 python3-torch python3-numpy  # the Python evaluator backend's worker (KernelBench-format tasks)
  redis-server libhiredis-dev          # the remote evaluator (Redis streams) and its tests
  libseccomp-dev        # the evaluator sandbox's system-call filters
)

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
