#!/usr/bin/env bash
# Downloads (does not install) the Debian packages the GPU machine lacks into .deps/debs/, so that
# `device` calls can carry them; benchmarks/device/run_all.sh unpacks them into a private prefix
# (benchmarks/device/deps_prefix.sh) without touching the image's own libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/debs
cd .deps/debs
# Build dependencies (headers, CMake/pkg-config files) and the runtime libraries they link; the
# image's own zlib, PCRE2 and libseccomp are used where it has them (deps_prefix.sh decides).
apt-get download libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libeigen3-dev catch2 \
  nlohmann-json3-dev libcli11-dev libicu-dev libicu72 libpcre2-dev libpcre2-8-0 libseccomp-dev \
  libseccomp2 zlib1g-dev zlib1g pkgconf pkgconf-bin libpkgconf3 libhiredis-dev libhiredis0.14 >/dev/null
ls -1
