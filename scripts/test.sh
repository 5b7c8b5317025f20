#!/usr/bin/env bash
# Builds tpar and runs its test suite. On a machine without a GPU the GPU tests are reported as
# skipped (CTest "Not Run"), never as passed.
#   scripts/test.sh            build into build/ and run every test
# Environment: TPAR_CUDA_ARCHS (default: 90 here; the release build lists every architecture),
#              BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

build=${BUILD_DIR:-build}
archs=${TPAR_CUDA_ARCHS:-90}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPAR_CUDA_ARCHS="$archs" >/dev/null
cmake --build "$build" -j "$(nproc)"
cd "$build"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
