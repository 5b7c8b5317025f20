#!/usr/bin/env bash
# Virtual ranks between other work (docs/DESIGN.md, "Virtual ranks and other work"), on one GPU:
# the launch shapes cuBLAS picks for `tpar verify`'s GEMMs (under ncu, where it runs), the
# contention stress test (100,000 calls, every algorithm, both transports, ranks gated as
# `tpar verify` gates them), the same calls without the gate (an experiment: they should time
# out), and `tpar verify` of the case that timed out, run again and again. With --old DIR (the
# source tree of an earlier commit) that commit's `tpar verify` runs the same case too.
# Writes OUTDIR/summary.json (scripts/summary.py) and the logs.
#   scripts/contention-check.sh OUTDIR [--old DIR] [--verify-runs N] [--old-verify-runs N]
#                               [--no-stress] [--budget S]   (0 runs: that step is left out)
# Environment: TPAR_COMMIT, TPAR_BUILD_DIR (default build-gpu), TPAR_OLD_BUILD_DIR
# (default build-gpu-old), TPAR_OLD_COMMIT (recorded for --old).
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
[ -n "$old" ] && [ "$old_verify_runs" -gt 0 ] && steps+=(old-verify)
steps=(build gemm-shapes "${steps[@]:1}")
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
    ninja -C "$old_build" -j "$jobs" tpar_cli >"$out/logs/build-old.log" 2>&1 &
    old_pid=$!
  fi
  step_cmd ninja -C "$build" -j "$jobs" "${targets[@]}"
  if [ -n "$old" ]; then
    wait "$old_pid" || { echo "   the old tree did not build (logs/build-old.log)"; step_rc=1; }
  fi
  step_end
fi
[ "$step_rc" = 0 ] || { status=1; finish; }

# Which kernels cuBLAS launches for verify's GEMMs at 48 and 64 tokens: grid, block and
# cluster size (NOTE [rank gate] rests on the cluster launches).
if command -v ncu >/dev/null && step_begin gemm-shapes 120 30; then
  step_cmd nvcc -arch=sm_"${archs%%;*}" -o "$build/gemm_shapes" bench/experiments/gemm_shapes.cu -lcublas
  for t in 48 64; do
    step_cmd ncu --clock-control none --section LaunchStats "$build/gemm_shapes" "$t"
  done
  grep -E "^tokens|Context|Cluster Size|Grid Size|Block Size" "$step_log" | sed 's/^/   /' | head -60
  step_end
fi

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
  grep -oE "^check verify.*-> (ok|FAILED)" "$step_log" | grep -oE "(ok|FAILED)$" | sort | uniq -c | sed 's/^/   /' 
  step_rc=0  # the checks decide
}

if [ "$verify_runs" -gt 0 ] && step_begin verify $((30 * verify_runs + 30)) $((8 * verify_runs)); then
  verify_loop "$build/tools/tpar/tpar" "$verify_runs"
  step_end --log "checks:$step_log"
fi

if [ -n "$old" ]; then
  # A short timeout: the old tree's failures wait it out.
  if [ "$old_verify_runs" -gt 0 ] && step_begin old-verify $((12 * old_verify_runs + 20)) $((8 * old_verify_runs)); then
    verify_loop "$old_build/tools/tpar/tpar" "$old_verify_runs" TPAR_TIMEOUT_MS=5000
    step_end --log "checks:$step_log"
  fi
fi
finish
