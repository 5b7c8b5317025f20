#!/usr/bin/env bash
# Builds tpar and runs its test suite. On a machine without a GPU the GPU tests are reported as
# skipped (CTest "Not Run"), never as passed.
#   scripts/test.sh            build into build/; run the unit tests under AddressSanitizer +
#                              UndefinedBehaviorSanitizer, the fuzz targets for a bounded time,
#                              the Python package's tests, then every test (CTest); and build
#                              examples/consumer against the installed package, pkg-config and
#                              add_subdirectory (scripts/check-package.sh)
# Environment: TPAR_CUDA_ARCHS (default: 90 here; the release build lists every architecture),
#              BUILD_DIR (default build), TPAR_TEST_SANITIZE=0 / TPAR_TEST_FUZZ=0 /
#              TPAR_TEST_PACKAGE=0 to skip those, FUZZ_SECONDS (default 20 per target),
#              TPAR_TEST_PYTHON=0 to skip the Python package (scripts/python-tests.sh: builds it
#              into a virtual environment).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

build=${BUILD_DIR:-build}
archs=${TPAR_CUDA_ARCHS:-90}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPAR_CUDA_ARCHS="$archs" >/dev/null
cmake --build "$build" -j "$(nproc)"

if [ "${TPAR_TEST_PACKAGE:-1}" != 0 ]; then
  TPAR_CUDA_ARCHS="$archs" bash scripts/check-package.sh "$build"
fi

if [ "${TPAR_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B "$build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTPAR_CUDA_ARCHS="$archs" \
    -DTPAR_SANITIZE=address,undefined -DTPAR_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build-asan" -j "$(nproc)" --target tpar_unit_tests
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build-asan/tests/tpar_unit_tests" --gtest_brief=1
fi

if [ "${TPAR_TEST_FUZZ:-1}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  echo "== fuzz targets, ${FUZZ_SECONDS:-20} s each"
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} bash scripts/fuzz.sh
fi

if [ "${TPAR_TEST_PYTHON:-1}" != 0 ]; then
  echo "== Python package: build, install, tests"
  bash scripts/python-tests.sh
fi

# The full suite last, so that its summary is the run's closing line.
cd "$build"
ctest --output-on-failure --timeout 900 -j "$(nproc)"
