#!/usr/bin/env bash
# Installs what building tpar needs, from distribution packages, when it is missing.
# Sourced by scripts/test.sh and scripts/run.sh.
set -euo pipefail

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
command -v git >/dev/null || need+=(git)
[ -f /usr/include/gtest/gtest.h ] || need+=(libgtest-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/hwloc.h ] || need+=(libhwloc-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
if [ ${#need[@]} -gt 0 ]; then
  echo "tpar: installing ${need[*]}" >&2
  if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The CUDA toolkit (12.8 or newer: cudaStreamGetDevice) is not something to fetch silently:
# look where NVIDIA's packages put it.
if ! command -v nvcc >/dev/null; then
  for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin /usr/local/cuda-12*/bin; do
    if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
if ! command -v nvcc >/dev/null; then
  echo "tpar: no CUDA toolkit found (nvcc). Install CUDA 12.8 or newer from NVIDIA's" >&2
  echo "      repository (package cuda-toolkit) and run this again." >&2
  exit 1
fi
