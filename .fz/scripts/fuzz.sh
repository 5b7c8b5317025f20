#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang and runs each for a bounded time.
#   scripts/fuzz.sh                  build, then fuzz every target for FUZZ_SECONDS
#   scripts/fuzz.sh fuzz_tuning      only the targets named
# Environment: FUZZ_SECONDS (default 20, per target), FUZZ_BUILD_DIR (default build-fuzz),
#              FUZZ_KEEP_GOING=1 (keep fuzzing past a crash to collect every distinct one;
#              libFuzzer's fork mode, for triage: by default a target stops at its first crash),
#              FUZZ_CXX (a clang++; default: clang++, else the newest clang++-N on PATH; CXX is
#              not used, since a CI machine may set it to g++ for the main build),
#              CUDA_HOME (default: the toolkit of nvcc on PATH, else /usr/local/cuda).
# Exit status: 0 when every target ran clean, or when clang or libFuzzer is missing (skipped,
# with a message; FUZZ_SKIP_STATUS=N makes a skip exit N instead, so that a caller can tell a
# skip from a pass); 1 when a target crashed or broke an invariant (the input is saved under
# FUZZ_BUILD_DIR/crashes/<target>/); 2 when the build fails.
#
# The targets compile only the host sources of the three parsers, with the sanitizers; the
# CUDA kernels are never built here, and libcudart is linked only because error.cc maps CUDA
# errors. Nothing is written to tests/fuzz/corpus: each target fuzzes a copy of its seeds in the
# build folder, which keeps what it found for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-20}
build=${FUZZ_BUILD_DIR:-build-fuzz}
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "fuzz: FUZZ_SECONDS must be a positive whole number, not '$seconds'" >&2
  exit 2
fi

# --- the compiler: clang with its libFuzzer runtime, or a skip -------------------------------
cxx=${FUZZ_CXX:-}
if [ -z "$cxx" ]; then
  if command -v clang++ >/dev/null; then
    cxx=clang++
  else
    cxx=$(compgen -c clang++- | grep -E '^clang\+\+-[0-9]+$' | sort -t- -k2 -n | tail -n1 || true)
  fi
fi
if [ -z "$cxx" ] || ! command -v "$cxx" >/dev/null; then
  echo "fuzz: skipped: no clang++ found (install clang and its runtime, e.g. libclang-rt-dev)"
  exit "${FUZZ_SKIP_STATUS:-0}"
fi
if ! "$cxx" --version 2>/dev/null | grep -qi clang; then
  echo "fuzz: skipped: $cxx is not clang (libFuzzer needs clang); set FUZZ_CXX=clang++"
  exit "${FUZZ_SKIP_STATUS:-0}"
fi

mkdir -p "$build"
probe="$build/probe"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
  'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$probe.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe.cc" -o "$probe" >"$probe.log" 2>&1; then
  echo "fuzz: skipped: $cxx cannot link -fsanitize=fuzzer,address,undefined (install the"
  echo "      compiler-rt runtime, e.g. libclang-rt-14-dev for clang-14); see $probe.log"
  exit "${FUZZ_SKIP_STATUS:-0}"
fi

# --- the libraries the parsers use -------------------------------------------------------------
missing=()
if [ -z "${CUDA_HOME:-}" ]; then
  if command -v nvcc >/dev/null; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else
    CUDA_HOME=/usr/local/cuda
  fi
fi
if [ ! -f "$CUDA_HOME/include/cuda_runtime_api.h" ]; then
  missing+=("the CUDA toolkit's headers (no $CUDA_HOME/include; set CUDA_HOME)")
fi
cuda_lib=""
for d in "$CUDA_HOME/lib64" "$CUDA_HOME/lib" "$CUDA_HOME/targets/x86_64-linux/lib"; do
  if [ -e "$d/libcudart.so" ]; then cuda_lib=$d; break; fi
done
[ -n "$cuda_lib" ] || missing+=("libcudart.so under $CUDA_HOME")
if command -v pkg-config >/dev/null && pkg-config --exists hwloc; then
  read -r -a hwloc_cflags <<<"$(pkg-config --cflags hwloc)"
  read -r -a hwloc_libs <<<"$(pkg-config --libs hwloc)"
else
  missing+=("hwloc (libhwloc-dev and pkg-config)")
fi
json_cflags=()
if command -v pkg-config >/dev/null && pkg-config --exists nlohmann_json; then
  read -r -a json_cflags <<<"$(pkg-config --cflags nlohmann_json)"
elif ! echo '#include <nlohmann/json.hpp>' |
    "$cxx" -x c++ -std=c++17 -fsyntax-only - 2>/dev/null; then
  missing+=("nlohmann-json (nlohmann-json3-dev)")
fi
if [ ${#missing[@]} -gt 0 ]; then
  printf 'fuzz: cannot build, missing: %s\n' "${missing[@]}" >&2
  exit 2
fi

# --- build -------------------------------------------------------------------------------------
# Every target: its own file plus the library sources it needs, named so that a source that
# starts to need more fails to link here rather than being pulled in silently.
declare -A sources=(
  [fuzz_env]="src/base/env.cc src/base/error.cc"
  # tuner.cc reads TPAR_TUNING_FILE through processEnv, hence env.cc; algorithm names come from
  # the registry, whose kernel sets are empty in this build (kernel_sets_stub.cc).
  [fuzz_tuning]="src/tuner/tuner.cc src/base/env.cc src/base/error.cc
                 src/registry/algorithms.cc src/base/user_file.cc tests/fuzz/kernel_sets_stub.cc"
  # topology_live.cc (CUDA devices, NVML) is left out: the XML reader does not call it.
  # log.cc and env.cc: the reader warns once when the crash guard's helper is missing.
  [fuzz_topology]="src/topology/topology_xml.cc src/topology/xml_probe.cc
                   src/topology/pcie_tree.cc src/topology/topology.cc src/base/error.cc
                   src/base/log.cc src/base/env.cc src/base/user_file.cc"
)
# The crash guard's helper (NOTE [topology crash guard]), built plainly next to the targets,
# where the reader looks for it: a file that crashes hwloc kills the helper, not the fuzzer.
probe_sources="src/topology/hwloc_probe_main.cc src/topology/topology_xml.cc
               src/topology/xml_probe.cc src/topology/pcie_tree.cc src/topology/topology.cc
               src/base/error.cc src/base/log.cc src/base/env.cc src/base/user_file.cc"
declare -A max_len=([fuzz_env]=1024 [fuzz_tuning]=4096 [fuzz_topology]=32768)
declare -A corpus=([fuzz_env]=env [fuzz_tuning]=tuning [fuzz_topology]=topology)
all_targets=(fuzz_env fuzz_tuning fuzz_topology)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  if [ -z "${sources[$t]+x}" ]; then
    echo "fuzz: unknown target '$t' (targets: ${all_targets[*]})" >&2
    exit 2
  fi
done

# -O1 keeps the fuzzer fast while leaving the sanitizer reports readable; no sanitizer recovers,
# so that undefined behaviour stops the run like a crash.
san=(-fsanitize=address,undefined -fno-sanitize-recover=all)
cxxflags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unused-parameter
          -Iinclude -Isrc -Itests/fuzz -I"$CUDA_HOME/include" "${hwloc_cflags[@]}"
          "${json_cflags[@]}")
ldflags=(-L"$cuda_lib" -Wl,-rpath,"$cuda_lib" -lcudart "${hwloc_libs[@]}" -ldl -pthread)

obj_dir="$build/obj"
mkdir -p "$obj_dir"
compile() {  # source -> object; the library is instrumented for coverage but has no main
  local src=$1 obj="$obj_dir/$(echo "$1" | tr / _).o"
  "$cxx" "${cxxflags[@]}" "${san[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj"
}
declare -A wanted=()
for t in "${targets[@]}"; do
  for s in ${sources[$t]}; do wanted[$s]=1; done
done
echo "fuzz: building ${targets[*]} with $cxx into $build"
pids=()
for s in "${!wanted[@]}"; do
  compile "$s" & pids+=($!)
done
for t in "${targets[@]}"; do
  "$cxx" "${cxxflags[@]}" "${san[@]}" -fsanitize=fuzzer-no-link -c "tests/fuzz/$t.cc" \
    -o "$obj_dir/$t.o" & pids+=($!)
done
build_ok=1
for p in "${pids[@]}"; do wait "$p" || build_ok=0; done
if [ "$build_ok" != 1 ]; then
  echo "fuzz: build failed" >&2
  exit 2
fi
if [[ " ${targets[*]} " == *" fuzz_topology "* ]]; then
  # shellcheck disable=SC2086
  if ! "$cxx" "${cxxflags[@]}" -O1 $probe_sources "${ldflags[@]}" -o "$build/tpar-hwloc-probe"; then
    echo "fuzz: building tpar-hwloc-probe failed" >&2
    exit 2
  fi
fi
for t in "${targets[@]}"; do
  objs=("$obj_dir/$t.o")
  for s in ${sources[$t]}; do objs+=("$obj_dir/$(echo "$s" | tr / _).o"); done
  if ! "$cxx" -fsanitize=fuzzer "${san[@]}" "${objs[@]}" "${ldflags[@]}" -o "$build/$t"; then
    echo "fuzz: linking $t failed" >&2
    exit 2
  fi
done

# --- run ---------------------------------------------------------------------------------------
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
# Leaks inside dependencies that tpar cannot free (the file says which and why).
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/tests/fuzz/lsan.supp"
mode=()
if [ "${FUZZ_KEEP_GOING:-0}" = 1 ]; then
  mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
failed=()
summary=()
for t in "${targets[@]}"; do
  work="$build/corpus/${corpus[$t]}"
  crashes="$build/crashes/$t"
  mkdir -p "$work" "$crashes"
  crashes_before=$(find "$crashes" -type f | wc -l)
  cp tests/fuzz/corpus/"${corpus[$t]}"/* "$work/"
  log="$build/$t.log"
  echo "fuzz: $t for ${seconds} s (log: $log)"
  start=$(date +%s)
  rc=0
  "$build/$t" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=10 \
    -rss_limit_mb=4096 -dict="tests/fuzz/dict/${corpus[$t]}.dict" -print_final_stats=1 \
    -artifact_prefix="$crashes/" "${mode[@]}" "$work" >"$log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  new_crashes=$(( $(find "$crashes" -type f | wc -l) - crashes_before ))
  # Fork mode prints no final stats; its progress lines start with the total run count too.
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  [ -n "$runs" ] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n1 | tr -d '#' || true)
  files=$(find "$work" -type f | wc -l)
  bytes=$(find "$work" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  kb=$(( (bytes + 1023) / 1024 ))
  if [ "$rc" = 0 ] && [ "$new_crashes" = 0 ]; then
    status=ok
  else
    status="FAILED (exit $rc, crashing inputs: $new_crashes)"
    failed+=("$t")
    tail -n 40 "$log" >&2
  fi
  summary+=("$(printf '%s: %s, %s runs in %s s, corpus %d files (%d KiB)' "$t" "$status" \
    "${runs:-?}" "$elapsed" "$files" "$kb")")
done

echo
for line in "${summary[@]}"; do echo "fuzz: $line"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashing inputs are under $build/crashes/ (reproduce: $build/<target> <file>)" >&2
  exit 1
fi
