#!/usr/bin/env bash
# The engines' all-reduce + RMSNorm fusion with tpar's plugin, without a GPU (docs/integration.md,
# "Fused all-reduce + RMSNorm"): tests/engines/test_vllm_fusion.py and test_sglang_fusion.py,
# each in a process of its own (each points an engine at a stand-in platform or group), with
# vLLM 0.33.0's and SGLang 0.5.23's own code from their wheels, installed with --no-deps into
# WORKDIR next to pinned import dependencies (scripts/engine-wheels.sh), on PYTHONPATH over the
# venv's torch and tpar. vLLM's kernel library links libcuda.so.1, which a machine without a
# driver lacks: the CUDA toolkit's stub library stands in for it (no call reaches it).
#   scripts/engine-fusion-check.sh [--python PY] [--work WORKDIR] [--junit-dir DIR]
# Defaults: --python ${TPAR_PYENV:-build/pyenv}/bin/python (a venv with torch and the tpar wheel,
# as scripts/python-tests.sh makes it), --work build/engine-wheels (shared with
# scripts/engine-check.sh: the wheels are downloaded and installed once). With --junit-dir each
# file writes its JUnit report there (engine-fusion-vllm.xml, engine-fusion-sglang.xml).
# Environment: TPAR_ENGINE_WHEELS (a directory holding the wheels: no download), TPAR_CUDA_STUB
# (a directory holding libcuda.so; default: the toolkit's lib64/stubs).
set -uo pipefail
py="" work="" junit=""
abs() { case $1 in */*) realpath -ms "$1" ;; *) echo "$1" ;; esac; }
while [ $# -gt 0 ]; do
  case $1 in
    --python) py=$(abs "$2"); shift 2 ;;
    --work) work=$(realpath -m "$2"); shift 2 ;;
    --junit-dir) junit=$(realpath -m "$2"); shift 2 ;;
    *) sed -n '/^#   scripts/p' "$0" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.." || exit 2
. scripts/engine-wheels.sh
# Absolute, for the tests run from their own directory (a venv's python stays the link it is).
py=$(abs "${py:-${TPAR_PYENV:-build/pyenv}/bin/python}")
work=${work:-build/engine-wheels}
command -v "$py" >/dev/null ||
  { echo "engine-fusion-check: no Python at $py (scripts/python-tests.sh makes the venv)" >&2
    exit 2; }
mkdir -p "$work" && work=$(cd "$work" && pwd)
logs=$work/logs-fusion
rm -rf "$logs" && mkdir -p "$logs"

stub_dir=${TPAR_CUDA_STUB:-}
if [ -z "$stub_dir" ]; then
  for d in "${CUDA_HOME:-/nonexistent}/lib64/stubs" /usr/local/cuda/lib64/stubs \
           /usr/local/cuda/targets/x86_64-linux/lib/stubs; do
    [ -f "$d/libcuda.so" ] && { stub_dir=$d; break; }
  done
fi
[ -n "$stub_dir" ] && [ -f "$stub_dir/libcuda.so" ] ||
  { echo "engine-fusion-check: no libcuda.so stub (set TPAR_CUDA_STUB to a directory that" \
         "holds one, e.g. a CUDA toolkit's lib64/stubs)" >&2; exit 2; }
mkdir -p "$work/cuda-stub" && ln -sf "$stub_dir/libcuda.so" "$work/cuda-stub/libcuda.so.1"

t0=$SECONDS
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
for e in vllm:$vllm_version sglang:$sglang_version; do
  name=${e%%:*} version=${e#*:}
  if ! whl=$(wheel_of "$name" "$version") || [ -z "$whl" ] ||
     ! install_into "$work/$name-$version" "$(basename "$whl") $pyver" "$whl" \
       >"$logs/install-$name.log" 2>&1; then
    echo "FAIL $name $version: could not download or install its wheel ($logs/install-$name.log)"
    exit 1
  fi
done
for d in deps:deps fusion-deps:fusion_deps; do
  dir=$work/${d%%:*}
  declare -n list=${d#*:}
  if ! install_into "$dir" "${list[*]} $pyver" "${list[@]}" >"$logs/install-${d%%:*}.log" 2>&1
  then
    echo "FAIL could not install ${d%%:*} ($logs/install-${d%%:*}.log)"
    exit 1
  fi
  unset -n list
done
echo "     engines' wheels and dependencies ready in $((SECONDS - t0)) s ($work)"

rc=0
for e in vllm:$vllm_version sglang:$sglang_version; do
  name=${e%%:*} version=${e#*:}
  t1=$SECONDS
  report=()
  [ -n "$junit" ] && mkdir -p "$junit" && report=(--junitxml "$junit/engine-fusion-$name.xml")
  # The test file's own directory first (its conftest), then the engine, then the dependencies.
  (cd tests/engines &&
     env LD_LIBRARY_PATH="$work/cuda-stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
       PYTHONPATH="$work/$name-$version:$work/deps:$work/fusion-deps" \
       TPAR_ENGINE_PLUGIN=1 "$py" -m pytest -q -rs -p no:cacheprovider "${report[@]}" \
       "test_${name}_fusion.py") >"$logs/$name.log" 2>&1
  status=$?
  last=$(grep -E '(passed|failed|error|skipped)' "$logs/$name.log" | tail -n 1)
  if [ $status = 0 ] && ! grep -q "skipped" <<<"$last"; then
    echo "PASS $name $version fusion: $last ($((SECONDS - t1)) s)"
  else
    echo "FAIL $name $version fusion: ${last:-no result} (log: $logs/$name.log)"
    tail -n 30 "$logs/$name.log" | sed 's/^/     | /'
    rc=1
  fi
done
exit $rc
