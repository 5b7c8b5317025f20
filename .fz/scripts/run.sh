#!/usr/bin/env bash
# Builds tpar (if needed) and runs `tpar` on this machine's GPUs: a description of the machine,
# then a short all-reduce benchmark. Arguments are passed to `tpar` (e.g. `bench --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

build=${BUILD_DIR:-build}
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | tr -d . | sort -u | paste -sd';')
else
  archs=90
fi
archs=${TPAR_CUDA_ARCHS:-$archs}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS="$archs" \
  -DTPAR_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target tpar_cli >/dev/null
exec "$build/tools/tpar/tpar" "$@"
