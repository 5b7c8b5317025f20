#!/usr/bin/env bash
# Builds examples/consumer the three ways a project gets tpar, and runs what it built:
#   1. against the installed tree: cmake --install, then find_package(tpar) (shared and static)
#   2. through pkg-config (tpar.pc of the same installed tree)
#   3. through add_subdirectory of this source tree (tpar builds its library only)
# Usage: scripts/check-package.sh BUILD_DIR   (a configured and built tpar build directory)
# Environment: TPAR_CUDA_ARCHS (default 90), TPAR_CHECK_SUBDIRECTORY=0 skips step 3 (it compiles
# the library a second time).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/check-package.sh BUILD_DIR}
archs=${TPAR_CUDA_ARCHS:-90}
prefix="$PWD/$build/install"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

echo "== package: install into $prefix, build examples/consumer with find_package(tpar)"
rm -rf "$prefix" "$build-consumer-package" "$build-consumer-subdirectory"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S examples/consumer -B "$build-consumer-package" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build-consumer-package" >/dev/null
"$build-consumer-package/consumer"
"$build-consumer-package/consumer_static"

echo "== pkg-config: cc main.c \$(pkg-config --cflags --libs tpar)"
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --exact-version="$(
  sed -n 's/^#define TPAR_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\).*/\2/p' include/tpar/tpar.h |
    paste -sd.)" tpar
# shellcheck disable=SC2046
cc examples/consumer/main.c -o "$build-consumer-package/consumer_pc" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs tpar) \
  -Wl,-rpath,"$prefix/lib"
"$build-consumer-package/consumer_pc"

if [ "${TPAR_CHECK_SUBDIRECTORY:-1}" != 0 ]; then
  echo "== add_subdirectory: examples/consumer with tpar's sources inside its build"
  cmake -S examples/consumer -B "$build-consumer-subdirectory" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DTPAR_CONSUMER_MODE=subdirectory -DTPAR_SOURCE="$PWD" \
    -DTPAR_CUDA_ARCHS="$archs" "${launcher[@]}" >/dev/null
  if ! cmake --build "$build-consumer-subdirectory" -j "$(nproc)" >"$build-consumer-subdirectory.log" 2>&1; then
    tail -n 40 "$build-consumer-subdirectory.log"
    exit 1
  fi
  "$build-consumer-subdirectory/consumer"
  "$build-consumer-subdirectory/consumer_static"
fi
echo "== package checks passed"
