#!/usr/bin/env bash
# Builds tpar and runs its test suite. On a machine without a GPU the GPU tests are reported as
# skipped (CTest "Not Run"), never as passed. It ends with the counts of every tier (ran,
# passed, failed, skipped, disabled) and exits 1 when any test or tier failed.
#   scripts/test.sh            build into build/; run the unit tests under AddressSanitizer +
#                              UndefinedBehaviorSanitizer, the fuzz targets for a bounded time,
#                              the Python package's tests, then every test (CTest); and build
#                              examples/consumer against the installed package, pkg-config and
#                              add_subdirectory (scripts/check-package.sh)
# Environment: TPAR_CUDA_ARCHS (default: 90 here; the release build lists every architecture),
#              BUILD_DIR (default build), TPAR_TEST_SANITIZE=0 / TPAR_TEST_FUZZ=0 /
#              TPAR_TEST_PACKAGE=0 to skip those, FUZZ_SECONDS (default 20 per target),
#              TPAR_NCCL_HEADERS_VERSION (default 2.30.7: the nccl.h the drop-in is built with),
#              TPAR_TEST_SHIM_HEADERS=0 to skip building the NCCL drop-in against the headers
#              of every NCCL release it claims (scripts/shim-headers-check.sh, downloads them),
#              TPAR_TEST_PYTHON=0 to skip the Python package (scripts/python-tests.sh: builds it
#              into a virtual environment), TPAR_TEST_ENGINES=0 to skip the NCCL drop-in under
#              PyTorch, vLLM's and SGLang's NCCL loaders (scripts/engine-check.sh: uses that
#              environment's torch, downloads the engines' wheels into $BUILD_DIR/engine-wheels;
#              also installs torch 2.11 into $BUILD_DIR/pyenv-torch211 for its import checks,
#              TPAR_TEST_TORCH211=0 to leave that out), TPAR_TEST_ENGINE_FUSION=0 to skip
#              vLLM's and SGLang's all-reduce + RMSNorm fusion with tpar's plugin
#              (scripts/engine-fusion-check.sh: the same wheels, more import dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

build=${BUILD_DIR:-build}
archs=${TPAR_CUDA_ARCHS:-90}
# The NCCL drop-in is built against the nccl.h of the newest NCCL it claims (from NVIDIA's wheel),
# so that it has every function of NCCL 2.28 to 2.30; one built against an older nccl.h stops a
# process that loads a newer NCCL (NOTE [unknown NCCL functions] in nccl_shim/real_nccl.h).
nccl_version=${TPAR_NCCL_HEADERS_VERSION:-2.30.7}
nccl_args=()
if nccl_inc=$(bash scripts/shim-headers-check.sh --include-dir "$build/nccl-headers" "$nccl_version"); then
  nccl_args=(-DTPAR_NCCL_INCLUDE_DIR="$nccl_inc")
else
  echo "tpar: NCCL $nccl_version's headers could not be downloaded; the drop-in is built against" \
       "the nccl.h CMake finds, and the engine checks will name what it lacks" >&2
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTPAR_CUDA_ARCHS="$archs" \
  "${nccl_args[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"

# Every tier runs even after another failed, and writes a report; the summary at the end counts
# what ran, passed, failed and was skipped in each (scripts/test-summary.py).
reports=$(realpath -m "$build/test-reports")
rm -rf "$reports" && mkdir -p "$reports"
summary_args=()
tier() {  # tier NAME COMMAND...: runs it, records its exit status for the summary
  local name=$1 rc=0
  shift
  "$@" || rc=$?
  summary_args+=(--tier "$name=$rc")
}
off() { summary_args+=(--tier "$1=off:$2"); }

if [ "${TPAR_TEST_PACKAGE:-1}" != 0 ]; then
  tier "package (consumer)" env TPAR_CUDA_ARCHS="$archs" bash scripts/check-package.sh "$build"
else
  off "package (consumer)" "TPAR_TEST_PACKAGE=0"
fi

if [ "${TPAR_TEST_SANITIZE:-1}" != 0 ]; then
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
  cmake -S . -B "$build-asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTPAR_CUDA_ARCHS="$archs" \
    -DTPAR_SANITIZE=address,undefined -DTPAR_BUILD_EXAMPLES=OFF >/dev/null
  if cmake --build "$build-asan" -j "$(nproc)" --target tpar_unit_tests; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$build-asan/tests/tpar_unit_tests" --gtest_brief=1 \
      --gtest_output="xml:$reports/unit-asan.xml" || true
  fi
  summary_args+=(--gtest "unit tests, ASan+UBSan=$reports/unit-asan.xml")
else
  off "unit tests, ASan+UBSan" "TPAR_TEST_SANITIZE=0"
fi

if [ "${TPAR_TEST_FUZZ:-1}" != 0 ] && [ -x scripts/fuzz.sh ]; then
  echo "== fuzz targets, ${FUZZ_SECONDS:-20} s each"
  tier "fuzz, ${FUZZ_SECONDS:-20} s per target" \
    env FUZZ_SECONDS="${FUZZ_SECONDS:-20}" FUZZ_SKIP_STATUS=77 bash scripts/fuzz.sh
else
  off "fuzz" "TPAR_TEST_FUZZ=0"
fi

if [ "${TPAR_TEST_SHIM_HEADERS:-1}" != 0 ]; then
  echo "== the NCCL drop-in against the headers of NCCL 2.28 to 2.30"
  tier "shim vs NCCL headers" bash scripts/shim-headers-check.sh "$build/nccl-headers"
else
  off "shim vs NCCL headers" "TPAR_TEST_SHIM_HEADERS=0"
fi

if [ "${TPAR_TEST_PYTHON:-1}" != 0 ]; then
  echo "== Python package: build, install, tests"
  # Its output also goes to a log, whose end the summary repeats if the tier fails.
  TPAR_PYTEST_JUNIT="$reports/python.xml" bash scripts/python-tests.sh 2>&1 |
    tee "$reports/python.log" || true
  summary_args+=(--pytest "python=$reports/python.xml" --log "python=$reports/python.log")
else
  off "python" "TPAR_TEST_PYTHON=0"
fi

if [ "${TPAR_TEST_ENGINES:-1}" = 0 ]; then
  off "shim vs engines" "TPAR_TEST_ENGINES=0"
elif [ ! -x "${TPAR_PYENV:-build/pyenv}/bin/python" ]; then
  off "shim vs engines" "no venv with torch at ${TPAR_PYENV:-build/pyenv}: the python tier makes it"
else
  echo "== the NCCL drop-in under PyTorch, vLLM and SGLang (no GPU)"
  # The previous PyTorch pin too (2.11, NCCL 2.28.9), for the import checks only: a venv of its
  # own, about 2.5 minutes and 4.6 GB (TPAR_TEST_TORCH211=0 leaves it out).
  older=()
  if [ "${TPAR_TEST_TORCH211:-1}" != 0 ]; then
    env211=$build/pyenv-torch211
    # A failed install is not skipped: the checks of that Python then fail, naming it.
    { [ -x "$env211/bin/python" ] || python3 -m venv "$env211"; } &&
      "$env211/bin/python" -m pip install --disable-pip-version-check -q --retries 10 \
        --timeout 60 torch==2.11.0 || echo "tpar: torch 2.11 could not be installed" >&2
    older=(--extra-python "$env211/bin/python")
  fi
  tier "shim vs engines" bash scripts/engine-check.sh --shim "$build/nccl_shim/libtpar_nccl.so" \
    --work "$build/engine-wheels" "${older[@]}"
fi

if [ "${TPAR_TEST_ENGINE_FUSION:-1}" = 0 ]; then
  off "engine fusion" "TPAR_TEST_ENGINE_FUSION=0"
elif [ ! -x "${TPAR_PYENV:-build/pyenv}/bin/python" ]; then
  off "engine fusion" "no venv with torch at ${TPAR_PYENV:-build/pyenv}: the python tier makes it"
else
  echo "== vLLM's and SGLang's all-reduce + RMSNorm fusion with tpar's plugin (no GPU)"
  tier "engine fusion" bash scripts/engine-fusion-check.sh --work "$build/engine-wheels" \
    --junit-dir "$reports"
  for e in vllm sglang; do
    summary_args+=(--pytest "engine fusion, $e=$reports/engine-fusion-$e.xml")
  done
fi

echo "== every test (CTest)"
(cd "$build" && ctest --output-on-failure --timeout 900 -j "$(nproc)" \
   --output-junit "$reports/ctest.xml") || true
(cd "$build" && ctest --show-only=json-v1 >"$reports/ctest-tests.json") || true

# The closing lines: the counts of every tier, so that skips are never read as passes.
exec python3 scripts/test-summary.py --ctest "$reports/ctest.xml" \
  --ctest-tests "$reports/ctest-tests.json" "${summary_args[@]}"
