#!/usr/bin/env bash
# Downloads (does not install) the Debian packages the GPU machine lacks into .deps/debs/, so that
# `device` calls can carry them; benchmarks/device/run_all.sh unpacks them into a private prefix.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libeigen3-dev catch2 nlohmann-json3-dev libcli11-dev >/dev/null
ls -1
