#!/usr/bin/env bash
# Virtual ranks between other work (docs/DESIGN.md, "Virtual ranks and other work"), on one GPU:
# the contention stress test (100,000 calls, every algorithm, both transports), the launch-order
# hazard kept as an experiment, and `tpar verify` of the case that timed out, run again and
# again. With --old DIR (a source tree of an earlier commit, the contention test files copied in)
# the same checks run on that tree too, and verify with the grid bounded by hand: what shows
# which cause the fix removed. Writes OUTDIR/summary.json (scripts/summary.py) and the logs.
#   scripts/contention-check.sh OUTDIR [--old DIR] [--verify-runs N] [--old-verify-runs N]
#                               [--no-stress] [--budget S]   (0 runs: that step is left out)
# Environment: TPAR_COMMIT, TPAR_BUILD_DIR (default build-gpu), TPAR_OLD_BUILD_DIR
# (default build-gpu-old), TPAR_OLD_COMMIT (recorded for --old), TPAR_OLD_FILTER (the stress
# cases run on the old tree; default four of them: each failure there waits out its timeout).
set -uo pipefail
out=${1:?usage: scripts/contention-check.sh OUTDIR [--old DIR] [--verify-runs N] [--budget S]}
shift
old=""
verify_runs=20
old_verify_runs=5
run_stress=1
budget=0
while [ $# -gt 0 ]; do
  case "$1" in
    --old) old=$2; shift ;;
    --verify-runs) verify_runs=$2; shift ;;
    --old-verify-runs) old_verify_runs=$2; shift ;;
    --no-stress) run_stress=0 ;;
    --budget) budget=$2; shift ;;
    *) echo "contention-check: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for n in "$verify_runs" "$old_verify_runs" "$budget"; do
  [[ $n =~ ^[0-9]+$ ]] || { echo "contention-check: $n: want a whole number" >&2; exit 2; }
done
[ -z "$old" ] || [ -f "$old/CMakeLists.txt" ] || { echo "contention-check: --old $old: no CMakeLists.txt" >&2; exit 2; }
[ -z "$old" ] || old=$(cd "$old" && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.." || exit 2
source scripts/steps.sh
dry=0
run_end=$((budget > 0 ? SECONDS + budget : 0))
status=0
commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
old_commit=${TPAR_OLD_COMMIT:-old}
steps=(build contention hazard)
[ "$verify_runs" -gt 0 ] && steps+=(verify)
[ -n "$old" ] && steps+=(old-contention)
[ -n "$old" ] && [ "$old_verify_runs" -gt 0 ] && steps+=(old-verify old-verify-bounded)
python3 scripts/summary.py start "$out" --script scripts/contention-check.sh --commit "$commit" \
  --steps "$(IFS=,; echo "${steps[*]}")" || exit 1
finish() {
  python3 scripts/summary.py finish "$out" || status=1
  python3 scripts/summary.py pack "$out" || status=1
  exit $status
}
mkdir -p "$out/logs"
nvidia-smi >"$out/logs/nvidia-smi.txt" 2>&1 || true
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')
archs=${archs:-90}
build=${TPAR_BUILD_DIR:-build-gpu}
old_build=$(realpath -m "${TPAR_OLD_BUILD_DIR:-build-gpu-old}")
targets=(tpar_gpu_tests tpar_cli)

# Both trees at once: half the cores each.
jobs=$(( $(nproc) / (${#old} > 0 ? 2 : 1) ))
if step_begin build 600 240; then
  step_cmd cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS="$archs" \
    -DTPAR_GIT_COMMIT="$commit" -DTPAR_BUILD_EXAMPLES=OFF
  if [ -n "$old" ]; then
    step_cmd cmake -S "$old" -B "$old_build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTPAR_CUDA_ARCHS="$archs" -DTPAR_GIT_COMMIT="$old_commit" -DTPAR_BUILD_EXAMPLES=OFF
    ninja -C "$old_build" -j "$jobs" "${targets[@]}" >"$out/logs/build-old.log" 2>&1 &
    old_pid=$!
  fi
  step_cmd ninja -C "$build" -j "$jobs" "${targets[@]}"
  if [ -n "$old" ]; then
    wait "$old_pid" || { echo "   the old tree did not build (logs/build-old.log)"; step_rc=1; }
  fi
  step_end
fi
[ "$step_rc" = 0 ] || { status=1; finish; }

stress_filter='*ContentionAllReduce.*'
if [ $run_stress = 1 ] && step_begin contention 420 200; then
  step_cmd "$build/tests/tpar_gpu_tests" --gtest_filter="$stress_filter"
  grep -E "^\[ contention \]|^\[  FAILED  \]" "$step_log" | tail -20
  step_end --log "gtest:$step_log"
fi

if [ $run_stress = 1 ] && step_begin hazard 120 40; then
  step_cmd "$build/tests/tpar_gpu_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='ContentionAllReduceHazard.*'
  grep -E "^\[ (hazard|contention) \]" "$step_log"
  step_end --log "gtest:$step_log"
fi

# `tpar verify` of the case that timed out, `runs` times in a row: each run one "check" line.
verify_loop() {  # verify_loop TPAR RUNS [VAR=value...]
  local tpar=$1 runs=$2 i rc
  shift 2
  for ((i = 1; i <= runs; i++)); do
    rc=0
    step_cmd env TPAR_ALLOW_SHARED_DEVICE=1 "$@" "$tpar" verify --model kimi-k2 --ranks 8 \
      --tokens 64 || rc=$?
    if [ $rc = 0 ]; then
      echo "check verify run $i (kimi-k2, 8 virtual ranks, 64 tokens) -> ok" >>"$step_log"
    else
      echo "check verify run $i (kimi-k2, 8 virtual ranks, 64 tokens) -> FAILED (exit $rc)" >>"$step_log"
    fi
  done
  grep -E "^check verify" "$step_log" | sort | uniq -c | sed 's/^/   /' | tail -3
  step_rc=0  # the checks decide
}

if [ "$verify_runs" -gt 0 ] && step_begin verify $((30 * verify_runs + 30)) $((8 * verify_runs)); then
  verify_loop "$build/tools/tpar/tpar" "$verify_runs"
  step_end --log "checks:$step_log"
fi

if [ -n "$old" ]; then
  old_filter=${TPAR_OLD_FILTER:-'*ContentionAllReduce.*/auto_default:*ContentionAllReduce.*/auto_host:*ContentionAllReduce.*/oneshot_default:*ContentionAllReduce.*/twoshot_host'}
  if [ $run_stress = 1 ] && step_begin old-contention 240 90; then
    step_cmd "$old_build/tests/tpar_gpu_tests" --gtest_filter="$old_filter"
    grep -E "^\[ contention \]|^\[  FAILED  \]" "$step_log" | tail -20
    step_end --log "gtest:$step_log"
  fi
  # A short timeout: the old tree's failures wait it out.
  if [ "$old_verify_runs" -gt 0 ] && step_begin old-verify $((12 * old_verify_runs + 20)) $((8 * old_verify_runs)); then
    verify_loop "$old_build/tools/tpar/tpar" "$old_verify_runs" TPAR_TIMEOUT_MS=5000
    step_end --log "checks:$step_log"
  fi
  # The old tree with the grid bounded as NOTE [virtual-rank residency] bounds it: 8 ranks on
  # this GPU's SMs, (sms - 1) / 7 blocks.
  sms=$(python3 - <<'PY' 2>/dev/null
import ctypes, ctypes.util
import glob
names = [ctypes.util.find_library("cudart")] + sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"))
rt = next(ctypes.CDLL(n) for n in names if n)
v = ctypes.c_int(0)
rt.cudaDeviceGetAttribute(ctypes.byref(v), 16, 0)  # cudaDevAttrMultiProcessorCount
print(v.value)
PY
)
  [[ ${sms:-} =~ ^[1-9][0-9]*$ ]] || sms=132
  bounded=$(( (sms - 1) / 7 ))
  if [ "$old_verify_runs" -gt 0 ] && step_begin old-verify-bounded $((12 * old_verify_runs + 20)) $((8 * old_verify_runs)); then
    echo "   TPAR_MAX_BLOCKS=$bounded ($sms SMs)" | tee -a "$step_log"
    verify_loop "$old_build/tools/tpar/tpar" "$old_verify_runs" TPAR_TIMEOUT_MS=5000 \
      TPAR_MAX_BLOCKS=$bounded
    step_end --log "checks:$step_log"
  fi
fi
finish
