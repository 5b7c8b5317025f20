#!/usr/bin/env bash
# Builds tpar on a GPU machine, runs every GPU test and the latency benchmark, and writes
# OUTDIR/summary.json (scripts/summary.py: each step's command, status and counts), the JSON
# records and logs.tgz.
#   scripts/gpu-check.sh OUTDIR [--no-tests] [--no-bench] [--no-verify] [--filter GTEST_FILTER]
#                               [--sanitize] [--soak] [--fused] [--python] [--budget S]
#   --sanitize  compute-sanitizer memcheck, racecheck and synccheck over the one-rank and
#               multi-process GPU tests (a few minutes; docs/RELIABILITY.md says what they cover)
#   --soak      1,000,000 graph-replayed all-reduces per transport (disabled in the normal run)
#   --fused     the fused all-reduce + residual add + RMSNorm: its GPU tests with each path
#               forced (two-shot with the owner's norm too), `tpar bench --fused` on both transports and `tpar verify --model
#               kimi-k2 --fused` at 1, 8 and 64 tokens
#   --python    build tpar._C in the same tree and run tests/python/test_single_process.py
#               against it (virtual ranks; python3 with torch and pytest)
#   --budget S  end within S seconds: steps that no longer fit are "not run" (default: no limit)
# Only the new checks: scripts/gpu-check.sh OUT --no-tests --no-bench --sanitize --soak
# The fused call alone: scripts/gpu-check.sh OUT --no-bench --filter '*Fused*' --fused --python
# Steps (as summary.json names them): build unit-tests gpu-tests sanitize-memcheck
# sanitize-racecheck sanitize-synccheck soak example python bench bench-host doctor tune
# bench-tuned verify-8 verify-64 fused-paths bench-fused bench-fused-host verify-fused-1
# verify-fused-8 verify-fused-64. Environment: TPAR_COMMIT (the commit recorded; default git HEAD),
# TPAR_MACHINE_KIND (recorded), TPAR_BUILD_DIR (default build-gpu), COMPUTE_SANITIZER, PYTHON
# (default python3, with matplotlib for the plots).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [--no-tests] [--no-bench] [--filter F] [--budget S]}
shift
run_tests=1
run_bench=1
run_verify=1
run_sanitize=0
run_soak=0
run_fused=0
run_python=0
filter='*'
budget=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) run_tests=0 ;;
    --no-bench) run_bench=0 ;;
    --no-verify) run_verify=0 ;;
    --filter) filter=$2; shift ;;
    --sanitize) run_sanitize=1 ;;
    --soak) run_soak=1 ;;
    --fused) run_fused=1 ;;
    --python) run_python=1 ;;
    --budget) budget=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget $budget: want seconds" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the script changes directory below
# NVLink multicast stays off everywhere (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.." || exit 2
source scripts/steps.sh
dry=0
run_end=$((budget > 0 ? SECONDS + budget : 0))
status=0
commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
all_steps=(build unit-tests gpu-tests sanitize-memcheck sanitize-racecheck sanitize-synccheck soak
  example python bench bench-host doctor tune bench-tuned verify-8 verify-64 fused-paths
  bench-fused bench-fused-host verify-fused-1 verify-fused-8 verify-fused-64)
python3 scripts/summary.py start "$out" --script scripts/gpu-check.sh --commit "$commit" \
  --steps "$(IFS=,; echo "${all_steps[*]}")" || exit 1
finish() {
  python3 scripts/summary.py finish "$out" || status=1
  python3 scripts/summary.py pack "$out" || status=1
  exit $status
}

mkdir -p "$out/logs"
nvidia-smi >"$out/logs/nvidia-smi.txt" 2>&1 || true
nvidia-smi topo -m >>"$out/logs/nvidia-smi.txt" 2>&1 || true
# Build only for the GPUs present (the full list is for release builds).
archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd';')
archs=${archs:-90}
build=${TPAR_BUILD_DIR:-build-gpu}
tpar=$build/tools/tpar/tpar
py=${PYTHON:-python3}  # with matplotlib, for the plots
step_begin build 900 60 || { status=1; finish; }
echo "   archs $archs, into $build"
nccl_inc=$(nccl_include_of "$py")
shim_args=()
[ -n "$nccl_inc" ] && shim_args=(-DTPAR_NCCL_INCLUDE_DIR="$nccl_inc")
[ $run_python = 1 ] && shim_args+=(-DTPAR_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$py")")
step_cmd cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_CUDA_ARCHS="$archs" \
  -DTPAR_GIT_COMMIT="$commit" "${shim_args[@]}" && step_cmd ninja -C "$build"
step_end
[ "$step_rc" = 0 ] || { status=1; finish; }

if [ $run_tests = 1 ]; then
  if step_begin unit-tests 300 30; then
    step_cmd "$build/tests/tpar_unit_tests"
    step_end --log "gtest:$step_log"
  fi
  if step_begin gpu-tests 540 240; then
    echo "   filter $filter"
    step_cmd "$build/tests/tpar_gpu_tests" --gtest_filter="$filter"
    grep -E "^\[  (FAILED|SKIPPED) |tests? ran" "$step_log" | tail -40
    step_end --log "gtest:$step_log"
  fi
fi

# compute-sanitizer. Virtual ranks cannot run under it: the tools may run kernels one at a time,
# and N ranks of one process are N kernels that wait for each other (each would time out). So it
# checks (1) one-rank communicators of this process (every kernel, both transports) and one
# kernel timing out alone, and (2) the multi-process tests with each worker under its own
# compute-sanitizer (TPAR_TEST_WORKER_WRAPPER): processes time-slice the GPU, so their kernels
# need not be resident together. racecheck and synccheck look at shared memory and barriers,
# which do not depend on the transport: they run the default transport only.
if [ $run_sanitize = 1 ]; then
  cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [ -z "$cs" ] && [ -x "$c" ] && cs=$c
  done
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
    step_begin "sanitize-$tool" $((budget_one + budget_mp + 30)) $((budget_one + budget_mp)) || continue
    if [ -z "$cs" ]; then
      echo "compute-sanitizer not found (set COMPUTE_SANITIZER)" | tee -a "$step_log"
      step_rc=1
      step_end
      continue
    fi
    "$cs" --version >"$out/logs/sanitize-version.txt" 2>&1
    rep=$out/logs/sanitize-$tool
    # shellcheck disable=SC2086  # opts is a list of options
    step_cmd TPAR_TIMEOUT_MS=10000 timeout -k 10 $budget_one "$cs" --tool $tool $opts \
      --error-exitcode 86 --log-file "$rep-one-rank.txt" "$build/tests/tpar_gpu_tests" \
      --gtest_filter="$one"
    step_cmd TPAR_TIMEOUT_MS=10000 \
      TPAR_TEST_WORKER_WRAPPER="$cs --tool $tool $opts --error-exitcode 86 --log-file $rep-{tag}.txt" \
      timeout -k 10 $budget_mp "$build/tests/tpar_gpu_tests" --gtest_filter="$mp"
    grep -h "ERROR SUMMARY" "$rep"-*.txt 2>/dev/null | sort | uniq -c
    reports=()
    for f in "$rep"-*.txt; do [ -f "$f" ] && reports+=(--log "sanitizer:$f"); done
    step_end --log "gtest:$step_log" "${reports[@]}"
  done
fi

if [ $run_soak = 1 ] && step_begin soak 600 120; then
  echo "   1,000,000 graph-replayed all-reduces per transport"
  step_cmd "$build/tests/tpar_gpu_tests" --gtest_also_run_disabled_tests \
    --gtest_filter='*Soak.DISABLED_*'
  grep -E "all-reduces on" "$step_log"
  step_end --log "gtest:$step_log"
fi

if step_begin example 60 5; then
  step_cmd "$build/examples/tpar_example_allreduce"
  cat "$step_log"
  step_end
fi

# The Python package from this build: its sources with the extension built beside the library
# (the build tree's RPATH finds libtpar), imported instead of any installed tpar.
if [ $run_python = 1 ] && step_begin python 300 90; then
  pyroot=$(cd "$build" && pwd)/pyroot  # absolute: the build directory may be either
  rm -rf "$pyroot" && mkdir -p "$pyroot/tpar"
  cp -r python/tpar/. "$pyroot/tpar"/ && cp "$build"/python/_C*.so "$pyroot/tpar"/
  step_cmd env PYTHONPATH="$pyroot" PYTHONUNBUFFERED=1 "$py" -m pytest -q -rs \
    -p no:cacheprovider tests/python/test_single_process.py
  tail -20 "$step_log"
  step_end --log "pytest:$step_log"
fi

if [ $run_fused = 1 ]; then
  # The fused tests again with every call forced onto one path: one kernel (row groups where
  # rows are few) and the all-reduce followed by the norm kernel.
  if step_begin fused-paths 400 220; then
    # One kernel; the all-reduce, then the norm kernel; two-shot with the owner's norm wherever
    # it applies (GPU memory, no quantized output), the composite path elsewhere.
    for paths in "1G 1" "0 0" "0 1"; do
      set -- $paths
      step_cmd env TPAR_FUSED_ONESHOT_MAX_BYTES=$1 TPAR_FUSED_TWOSHOT=$2 \
        "$build/tests/tpar_gpu_tests" --gtest_filter='*FusedAddRmsNorm*'
    done
    grep -E "^\[  (FAILED|SKIPPED) |tests? ran" "$step_log" | tail -20
    step_end --log "gtest:$step_log"
  fi
  for tr in auto host; do
    name=bench-fused$([ $tr = host ] && echo -host)
    step_begin "$name" 300 90 || continue
    # Host memory: 8 ranks, 1 to 64 tokens (its slow rows take long); GPU memory: the
    # crossovers between the paths too.
    ranks=$([ $tr = host ] && echo 8 || echo 2,4,8)
    tokens=$([ $tr = host ] && echo 1,8,64 || echo 1,8,16,32,64,256)
    step_cmd "$tpar" bench --fused --transport $tr --ranks $ranks --hidden 4096,7168,8192 \
      --tokens $tokens -n 200 -w 20 --json "$out/$name.json"
    # The measurement behind TPAR_FUSED_ONESHOT_MAX_BYTES and TPAR_FUSED_TWOSHOT: each path
    # forced, same run (limit 1G: one kernel; 0 with two-shot off: the composite path; 0 with
    # it on: two-shot with the owner's norm, GPU memory only).
    for paths in "1G 1 limit-1G" "0 0 limit-0" "0 1 twoshot"; do
      set -- $paths
      [ $tr = host ] && [ $3 = twoshot ] && continue
      step_cmd env TPAR_FUSED_ONESHOT_MAX_BYTES=$1 TPAR_FUSED_TWOSHOT=$2 "$tpar" bench --fused \
        --transport $tr --ranks $ranks --hidden 4096,7168,8192 --tokens $tokens -n 200 -w 20 \
        --json "$out/logs/$name-$3.json"
    done
    cat "$step_log"
    step_end --log "fused:$step_log" --record "$name.json"
  done
  for t in 1 8 64; do
    step_begin "verify-fused-$t" 180 40 || continue
    step_cmd "$tpar" verify --model kimi-k2 --ranks 8 --tokens $t --iters 10 --fused \
      --json "$out/verify-fused-$t.json"
    tail -24 "$step_log"
    step_end --log "checks:$step_log" --record "verify-fused-$t.json"
  done
fi

if [ $run_bench = 1 ]; then
  if step_begin bench 300 60; then
    step_cmd "$tpar" bench --ranks 2,4,8 --sizes 12K,112K,384K,1M,4M -n 200 -w 20 \
      --json "$out/bench.json"
    step_cmd "$py" scripts/plot_bench.py "$out/bench.json" -o "$out/bench.png"
    grep -E "^ +[0-9]+ |wrong elements" "$step_log"
    step_end --log "bench:$step_log" --record bench.json --record bench.png
  fi
  # Floors from the host link measured in the same run.
  if step_begin bench-host 300 90; then
    step_cmd "$tpar" bench --transport host --ranks 2,4,8 \
      --sizes 4K,12K,48K,112K,384K,1M,4M -n 200 -w 20 --json "$out/bench-host.json"
    step_cmd "$py" scripts/plot_bench.py "$out/bench-host.json" -o "$out/bench-host.png"
    grep -E "^# host link|^# +size|  tpar |wrong elements" "$step_log"
    step_end --log "bench:$step_log" --record bench-host.json --record bench-host.png
  fi
  if step_begin doctor 180 60; then
    step_cmd "$tpar" doctor --json "$out/doctor.json"
    tail -25 "$step_log"
    step_end --log "checks:$step_log" --record doctor.json
  fi
  if step_begin tune 300 120; then
    step_cmd "$tpar" tune --ranks 8 --sizes 4K,64K,512K,4M -n 30 --output "$out/tuning.json"
    tail -12 "$step_log"
    step_end --record tuning.json
  fi
  if step_begin bench-tuned 120 30; then
    if [ -f "$out/tuning.json" ]; then
      step_cmd TPAR_TUNING_FILE="$out/tuning.json" "$tpar" bench --ranks 8 --backends tpar \
        --sizes 4K,64K,512K,4M -n 50
      grep -E "^# +size|  tpar |wrong" "$step_log"
      step_end --log "bench:$step_log"
    else
      step_skip "no tuning table (the tune step did not write one)"
    fi
  fi
  if [ $run_verify = 1 ]; then  # kimi-k2 shape, tp 8, 8 and 64 tokens
    for t in 8 64; do
      step_begin "verify-$t" 180 40 || continue
      step_cmd "$tpar" verify --model kimi-k2 --ranks 8 --tokens $t --iters 10 \
        --json "$out/verify-$t.json"
      tail -16 "$step_log"
      step_end --log "checks:$step_log" --record "verify-$t.json"
    done
  fi
fi
finish
