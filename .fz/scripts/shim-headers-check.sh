#!/usr/bin/env bash
# The NCCL drop-in against every NCCL release it claims (docs/nccl_shim.md): for each version,
# nccl.h, nccl_device/ and the list of functions libnccl.so.2 exports are taken from NVIDIA's
# nvidia-nccl-cu13 wheel on PyPI (downloaded once into WORKDIR; the library itself is not kept),
# the shim's sources and the stand-in NCCL of its tests are compiled against those headers with
# the gates nccl_shim/CMakeLists.txt would set, and the compiled shim must define every function
# the headers declare (the export check of the build, without linking the library) and every
# function of NCCL's API that the library exports (each nccl<X> exported with its profiling
# alias pnccl<X>: NOTE [unknown NCCL functions] in nccl_shim/real_nccl.h). A function that
# arrived in a patch release, a signature that changed, a type without a test formatter: each
# shows here as a failure naming the version.
#   scripts/shim-headers-check.sh WORKDIR [VERSION...]   (default: the releases below)
#   scripts/shim-headers-check.sh --include-dir WORKDIR VERSION
#       only downloads VERSION (when not there yet) and prints its include directory, for a
#       build against those headers (scripts/test.sh builds the shim against the newest)
# Environment: CXX (default g++), PYTHON (default python3, with pip).
set -uo pipefail
include_only=0
if [ "${1:-}" = --include-dir ]; then include_only=1; shift; fi
work=${1:?usage: scripts/shim-headers-check.sh [--include-dir] WORKDIR [VERSION...]}
shift
versions=("$@")
# Every release on PyPI from 2.28 on where the set of functions changed, and the newest of each.
[ ${#versions[@]} -gt 0 ] || versions=(2.28.9 2.29.2 2.29.3 2.29.7 2.30.3 2.30.4 2.30.7)
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$work" && work=$(cd "$work" && pwd)
cxx=${CXX:-g++}
py=${PYTHON:-python3}
cuda_inc=""
for d in /usr/local/cuda/include /usr/local/cuda-13*/include /usr/local/cuda-12*/include; do
  [ -f "$d/cuda_runtime_api.h" ] && { cuda_inc=$d; break; }
done
[ -n "$cuda_inc" ] || { echo "shim-headers-check: no CUDA toolkit headers found" >&2; exit 2; }
# The shim's own rows, then the stand-in NCCL and the forwarding test, which are generated from
# the same rows and need a value and a formatter for every parameter type.
sources=(nccl_shim/shim_forward.cc nccl_shim/shim_entry.cc nccl_shim/shim_init.cc
         nccl_shim/tests/standin_nccl.cc nccl_shim/tests/shim_child_test.cc)
gated=$(grep -oE '^#if TPAR_NCCL_DECLARES\([A-Za-z0-9_]+\)' nccl_shim/nccl_api.def |
        sed 's/.*(\(.*\))/\1/')
# Downloads release $1 into $work/nccl-$1 (headers, and exports.txt: libnccl.so.2's exported
# functions); false when it cannot.
fetch() {
  local v=$1 inc=$work/nccl-$1/nvidia/nccl/include wheel_dir=$work/wheel-$1 attempt ok=0
  [ -f "$inc/nccl.h" ] && [ -s "$work/nccl-$v/exports.txt" ] && return 0
  for attempt in 1 2 3; do
    if "$py" -m pip download --disable-pip-version-check -q --no-deps --retries 5 \
         --timeout 60 -d "$wheel_dir" "nvidia-nccl-cu13==$v"; then ok=1; break; fi
    sleep 10
  done
  [ $ok = 1 ] || { echo "could not download nvidia-nccl-cu13==$v" >&2; return 1; }
  rm -rf "$work/unzip-$v" "$work/nccl-$v"
  "$py" -m zipfile -e "$wheel_dir"/nvidia_nccl_cu13-"$v"-*.whl "$work/unzip-$v" &&
    mkdir -p "$work/nccl-$v/nvidia/nccl" &&
    mv "$work/unzip-$v/nvidia/nccl/include" "$inc" &&
    nm -D --defined-only "$work/unzip-$v/nvidia/nccl/lib/libnccl.so.2" |
      awk '$2 == "T" || $2 == "W" || $2 == "i" {print $3}' | sort -u >"$work/nccl-$v/exports.txt"
  local rc=$?
  rm -rf "$wheel_dir" "$work/unzip-$v"
  [ $rc = 0 ] && [ -s "$work/nccl-$v/exports.txt" ]
}

if [ $include_only = 1 ]; then
  [ ${#versions[@]} = 1 ] || { echo "usage: $0 --include-dir WORKDIR VERSION" >&2; exit 2; }
  fetch "${versions[0]}" >&2 || exit 1
  echo "$work/nccl-${versions[0]}/nvidia/nccl/include"
  exit 0
fi

passed=0 failed=0
for v in "${versions[@]}"; do
  inc=$work/nccl-$v/nvidia/nccl/include
  if ! fetch "$v"; then
    echo "FAIL nccl $v: could not download nvidia-nccl-cu13==$v"
    failed=$((failed + 1)); continue
  fi
  names=$work/names-$v.txt
  cmake -DINCLUDE_DIR="$inc" -DOUT="$names" -P nccl_shim/list_nccl_api.cmake || {
    echo "FAIL nccl $v: cannot list the functions of its nccl.h"; failed=$((failed + 1)); continue; }
  defs=(-DNCCL_OS_LINUX=1)
  for n in $gated; do
    grep -qx "$n" "$names" && defs+=("-DTPAR_NCCL_DECLARES_$n=1")
  done
  objs=() bad=""
  for src in "${sources[@]}"; do
    obj=$work/obj-$v-$(basename "$src" .cc).o
    if ! "$cxx" -std=c++17 -c -fPIC "${defs[@]}" -DTPAR_SHIM_LIBRARY='""' \
         -DTPAR_STANDIN_LIBRARY='""' -DTPAR_STANDIN_NEWER_LIBRARY='""' -DTPAR_SHIM_TEST_OBJECT='""' -DTPAR_SOURCE_DIR='""' \
         -DTPAR_NCCL_API_NAMES='""' -I"$inc" -Inccl_shim -Inccl_shim/tests -Isrc -Iinclude -Itests \
         -I. -I"$cuda_inc" "$src" -o "$obj" 2>"$obj.log"; then
      bad="$bad $src"
      continue
    fi
    [[ $src == nccl_shim/tests/* ]] || objs+=("$obj")
  done
  if [ -n "$bad" ]; then
    echo "FAIL nccl $v: does not compile:$bad"
    for src in $bad; do grep -m 3 error "$work/obj-$v-$(basename "$src" .cc).o.log" | sed 's/^/     /'; done
    failed=$((failed + 1)); continue
  fi
  defined=$(nm --defined-only "${objs[@]}" | awk '$2 == "T" {print $3}' | sort -u)
  missing=$(comm -23 <(sort -u "$names") <(echo "$defined"))
  if [ -n "$missing" ]; then
    echo "FAIL nccl $v: the shim defines no $(echo "$missing" | wc -l) function(s) its headers declare: $(echo $missing)"
    failed=$((failed + 1)); continue
  fi
  exports=$work/nccl-$v/exports.txt
  api=$(grep '^nccl' "$exports" | while read -r f; do grep -qx "p$f" "$exports" && echo "$f"; done)
  unknown=$(comm -23 <(echo "$api" | sort -u) <(echo "$defined"))
  if [ -n "$unknown" ]; then
    echo "FAIL nccl $v: its libnccl.so.2 exports $(echo "$unknown" | wc -l) function(s) of NCCL's API the shim does not define: $(echo $unknown)"
    failed=$((failed + 1)); continue
  fi
  echo "ok   nccl $v: $(wc -l <"$names") functions declared, $(echo "$api" | wc -l) exported by the library, all defined (${#defs[@]} gates)"
  passed=$((passed + 1))
done
echo "shim-headers-check: $passed passed, $failed failed"
[ $failed = 0 ]
