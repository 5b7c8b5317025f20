#!/usr/bin/env bash
# Builds tpar on a GPU machine, runs every GPU test and the latency benchmark, and writes logs
# and JSON into OUTDIR.
#   scripts/gpu-check.sh OUTDIR [--no-tests] [--no-bench] [--no-verify] [--filter GTEST_FILTER]
#                               [--sanitize] [--soak]
#   --sanitize  compute-sanitizer memcheck, racecheck and synccheck over the one-rank and
#               multi-process GPU tests (a few minutes; docs/RELIABILITY.md says what they cover)
#   --soak      1,000,000 graph-replayed all-reduces per transport (disabled in the normal run)
# Only the new checks: scripts/gpu-check.sh OUT --no-tests --no-bench --sanitize --soak
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [--no-tests] [--no-bench] [--filter F]}
shift
run_tests=1
run_bench=1
run_verify=1
run_sanitize=0
run_soak=0
filter='*'
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) run_tests=0 ;;
    --no-bench) run_bench=0 ;;
    --no-verify) run_verify=0 ;;
    --filter) filter=$2; shift ;;
    --sanitize) run_sanitize=1 ;;
    --soak) run_soak=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the script changes directory below
# NVLink multicast stays off everywhere (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.."
status=0

nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
nvidia-smi topo -m >>"$out/nvidia-smi.txt" 2>&1 || true
# Build only for the GPUs present (the full list is for release builds).
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')
archs=${archs:-90}
build=${TPAR_BUILD_DIR:-build-gpu}
echo "== build (archs $archs) into $build"
commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS="$archs" \
  -DTPAR_GIT_COMMIT="$commit" \
  >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; exit 1; }
ninja -C "$build" >"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }

if [ $run_tests = 1 ]; then
  echo "== unit tests"
  "$build/tests/tpar_unit_tests" >"$out/unit.log" 2>&1 || status=1
  tail -3 "$out/unit.log"
  echo "== GPU tests (filter $filter)"
  timeout 540 "$build/tests/tpar_gpu_tests" --gtest_filter="$filter" >"$out/gpu-tests.log" 2>&1 || status=1
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[ *OK \]|tests? ran" "$out/gpu-tests.log" | tail -80
fi

# compute-sanitizer. Virtual ranks cannot run under it: the tools may run kernels one at a time,
# and N ranks of one process are N kernels that wait for each other (each would time out). So it
# checks (1) one-rank communicators of this process (every kernel, both transports) and one
# kernel timing out alone, and (2) the multi-process tests with each worker under its own
# compute-sanitizer (TPAR_TEST_WORKER_WRAPPER): processes time-slice the GPU, so their kernels
# need not be resident together. racecheck and synccheck look at shared memory and barriers,
# which do not depend on the transport: they run the default transport only.
if [ $run_sanitize = 1 ]; then
  echo "== compute-sanitizer"
  cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$cs" ] && [ -x "$c" ] && cs=$c
  done
  if [ -z "$cs" ]; then
    echo "compute-sanitizer not found (set COMPUTE_SANITIZER)"
    status=1
  else
    "$cs" --version >"$out/sanitize-version.txt" 2>&1
    for tool in memcheck racecheck synccheck; do
      if [ $tool = memcheck ]; then
        opts="--leak-check full"
        one='*AllReduceSingleRank.*:*OneRankSweep.*:AllReduceArguments.EdgeValues*:Faults.TimesOutWhenPeerNeverArrives'
        mp='*MultiProcess.*'
        budget_one=60 budget_mp=120
      else
        opts=""
        one='*AllReduceSingleRank.*/default:*OneRankSweep.*/default'
        mp='*MultiProcess.TwoProcesses*/default'
        budget_one=40 budget_mp=40
      fi
      t0=$(date +%s)
      TPAR_TIMEOUT_MS=10000 timeout -k 10 $budget_one "$cs" --tool $tool $opts --error-exitcode 86 \
        --log-file "$out/sanitize-$tool-one-rank.txt" "$build/tests/tpar_gpu_tests" \
        --gtest_filter="$one" >"$out/sanitize-$tool-one-rank-tests.log" 2>&1
      rc_one=$?
      t1=$(date +%s)
      TPAR_TIMEOUT_MS=10000 \
        TPAR_TEST_WORKER_WRAPPER="$cs --tool $tool $opts --error-exitcode 86 --log-file $out/sanitize-$tool-{tag}.txt" \
        timeout -k 10 $budget_mp "$build/tests/tpar_gpu_tests" --gtest_filter="$mp" \
        >"$out/sanitize-$tool-mp-tests.log" 2>&1
      rc_mp=$?
      t2=$(date +%s)
      echo "  $tool: one rank: exit $rc_one in $((t1 - t0)) s; multi-process: exit $rc_mp in $((t2 - t1)) s"
      grep -h "ERROR SUMMARY" "$out"/sanitize-$tool-*.txt 2>/dev/null | sort | uniq -c
      grep -hE "^\[  (FAILED|PASSED|SKIPPED) |tests? ran" "$out/sanitize-$tool-one-rank-tests.log" \
        "$out/sanitize-$tool-mp-tests.log"
      [ $rc_one = 0 ] && [ $rc_mp = 0 ] || status=1
    done
  fi
fi

if [ $run_soak = 1 ]; then
  echo "== soak: 1,000,000 graph-replayed all-reduces per transport"
  timeout 600 "$build/tests/tpar_gpu_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='*Soak.DISABLED_*' >"$out/soak.log" 2>&1 || status=1
  grep -E "all-reduces on|^\[  (FAILED|PASSED|SKIPPED) |^\[ *OK \]|tests? ran" "$out/soak.log"
fi

echo "== example"
"$build/examples/tpar_example_allreduce" 2>&1 | tee "$out/example.txt" || status=1

if [ $run_bench = 1 ]; then
  echo "== bench"
  "$build/tools/tpar/tpar" bench --ranks 2,4,8 --sizes 12K,112K,384K,1M,4M -n 200 -w 20 \
    --json "$out/bench.json" 2>&1 | tee "$out/bench.txt" || status=1
  python3 scripts/plot_bench.py "$out/bench.json" -o "$out/bench.png" || status=1
  echo "== bench, host-staged transport (floors from the host link measured in the same run)"
  "$build/tools/tpar/tpar" bench --transport host --ranks 2,4,8 \
    --sizes 4K,12K,48K,112K,384K,1M,4M -n 200 -w 20 \
    --json "$out/bench-host.json" >"$out/bench-host.txt" 2>&1 || status=1
  grep -E "^# host link|^# +size|  tpar |wrong elements" "$out/bench-host.txt"
  python3 scripts/plot_bench.py "$out/bench-host.json" -o "$out/bench-host.png" || status=1
  echo "== doctor"
  "$build/tools/tpar/tpar" doctor --json "$out/doctor.json" >"$out/doctor.txt" 2>&1 || status=1
  tail -25 "$out/doctor.txt"
  echo "== tune, then bench with the measured table"
  "$build/tools/tpar/tpar" tune --ranks 8 --sizes 4K,64K,512K,4M -n 30 \
    --output "$out/tuning.json" >"$out/tune.txt" 2>&1 || status=1
  tail -12 "$out/tune.txt"
  TPAR_TUNING_FILE="$out/tuning.json" "$build/tools/tpar/tpar" bench --ranks 8 --backends tpar \
    --sizes 4K,64K,512K,4M -n 50 >"$out/bench-tuned.txt" 2>&1 || status=1
  grep -E "^# +size|  tpar |wrong" "$out/bench-tuned.txt"
  echo "== verify (kimi-k2 shape, tp 8, 8 and 64 tokens)"
  [ $run_verify = 1 ] && for t in 8 64; do
    "$build/tools/tpar/tpar" verify --model kimi-k2 --ranks 8 --tokens $t --iters 10 \
      --json "$out/verify-$t.json" >"$out/verify-$t.txt" 2>&1 || status=1
    tail -16 "$out/verify-$t.txt"
  done
fi
# Only a few files travel back from some machines: keep the records, pack the rest.
pack=$(mktemp /tmp/gpu-check-logs.XXXXXX.tgz)
(cd "$out" && tar czf "$pack" --exclude='*.json' --exclude=bench.png . &&
  find . -maxdepth 1 -type f ! -name '*.json' ! -name bench.png -delete && mv "$pack" logs.tgz) || true
exit $status
