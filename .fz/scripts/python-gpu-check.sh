#!/usr/bin/env bash
# The Python package on a GPU machine, in one batch: build and install it, run its GPU tests
# (one process with virtual ranks; real ranks under torchrun), measure the host cost of an eager
# call and the CUDA-graph time per call against `tpar bench` at the same sizes, and run the
# tensor-parallel Llama check. Writes logs and JSON records into OUTDIR.
#   scripts/python-gpu-check.sh OUTDIR [--ranks N] [--skip-tests] [--skip-model]
# Needs python3 with torch (CUDA), pytest, transformers, scikit-build-core and nanobind, as on
# the lent GPU machines; builds the C++ tree too (for `tpar bench`) unless TPAR_BUILD_DIR holds
# one already.
set -uo pipefail
out=${1:?usage: scripts/python-gpu-check.sh OUTDIR [--ranks N] [--skip-tests] [--skip-model]}
shift
ranks=""
tests=1
model=1
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=$2; shift ;;
    --skip-tests) tests=0 ;;
    --skip-model) model=0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out" && out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
status=0
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ranks=${ranks:-$ngpus}
commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}  # the device copy's git may be stale: pass TPAR_COMMIT
export TPAR_GIT_COMMIT=$commit
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')
archs=${archs:-90}
build=${TPAR_BUILD_DIR:-build-gpu}

echo "== build the C++ tree ($build) and the Python package (archs $archs, commit $commit)"
t0=$SECONDS
if [ ! -x "$build/tools/tpar/tpar" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS="$archs" \
    -DTPAR_GIT_COMMIT="$commit" -DTPAR_BUILD_TESTS=OFF >"$out/cmake.log" 2>&1 &&
    ninja -C "$build" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
CMAKE_ARGS="-DTPAR_CUDA_ARCHS=$archs -DTPAR_GIT_COMMIT=$commit" \
  python3 -m pip install -q --no-build-isolation --no-deps . >"$out/pip.log" 2>&1 ||
  { tail -30 "$out/pip.log"; exit 1; }
echo "   built in $((SECONDS - t0)) s"
cd tests/python  # import the installed package, not the source tree

if [ $tests = 1 ]; then
  echo "== pytest, one process (CPU tests, virtual ranks on GPU 0)"
  timeout 300 python3 -m pytest -q -rs -p no:cacheprovider --ignore=test_distributed.py . \
    >"$out/pytest-single.log" 2>&1 || status=1
  tail -4 "$out/pytest-single.log"
  echo "== pytest under torchrun, $ranks ranks (one process per GPU)"
  timeout 400 torchrun --nproc-per-node "$ranks" -m pytest -q -rs -p no:cacheprovider -x \
    test_distributed.py >"$out/pytest-dist.log" 2>&1 || status=1
  grep -E "passed|failed|error" "$out/pytest-dist.log" | tail -6
fi

echo "== host cost and CUDA-graph time per call, $ranks ranks"
timeout 300 torchrun --nproc-per-node "$ranks" -m tpar.check overhead \
  --json "$out/python-overhead.json" >"$out/python-overhead.txt" 2>&1 || status=1
tail -14 "$out/python-overhead.txt"
echo "== the same sizes with tpar bench (one process per GPU, in place column)"
timeout 200 "../../$build/tools/tpar/tpar" bench --procs --ranks "$ranks" --backends tpar \
  -b 12K -e 4M -f 2 -n 100 -w 10 --json "$out/bench-procs.json" >"$out/bench-procs.txt" 2>&1 || status=1
python3 - "$out/python-overhead.json" "$out/bench-procs.json" <<'EOF' | tee "$out/python-vs-bench.txt"
import json, sys
py = json.load(open(sys.argv[1]))
bench = json.load(open(sys.argv[2]))
rows = {r["bytes"]: r for r in bench["rows"] if r["backend"] == "tpar"}
print(f"{'bytes':>10} {'python graph us':>16} {'bench us (in place)':>20} {'ratio':>7}")
worst = 0.0
for g in py["graph"]:
    b = rows.get(g["bytes"])
    if not b:
        print(f"{g['bytes']:10d} {g['graph_us_per_call']:16.2f} {'(not in bench)':>20}")
        continue
    ref = b["us_in_place"]
    ratio = g["graph_us_per_call"] / ref
    worst = max(worst, abs(ratio - 1))
    print(f"{g['bytes']:10d} {g['graph_us_per_call']:16.2f} {ref:20.2f} {ratio:7.3f}")
print(f"largest difference {100 * worst:.1f}% (target 5%)")
EOF

if [ $model = 1 ]; then
  echo "== tensor-parallel Llama decoder, TP $ranks"
  timeout 400 torchrun --nproc-per-node "$ranks" -m tpar.check model \
    --json "$out/tp-model.json" >"$out/tp-model.txt" 2>&1 || status=1
  tail -12 "$out/tp-model.txt"
fi
exit $status
