#!/usr/bin/env bash
# The multi-GPU run (TP = N, N = every GPU of the machine, or --ranks N): tpar against NCCL, NCCL
# without P2P and PyTorch symmetric memory, the GPU tests with real ranks, the island
# algorithms, the Python and NCCL-drop-in checks under PyTorch, the kimi-k2 verify pass, the
# fused all-reduce + RMSNorm and the compressed wire formats.
# Writes OUTDIR/summary.json (scripts/summary.py), the JSON records and plots, and logs.tgz.
#   scripts/multi-gpu-run.sh OUTDIR [--steps LIST] [--ranks N] [--budget S] [--dry-run]
# Run scripts/multi-gpu-run.sh --help for the steps and the command lines of one lease.
# shellcheck disable=SC2317  # the steps are functions called by name (step_$name)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/steps.sh

# name, then "LIMIT EXPECT": the seconds its commands may take together, and about how long it
# takes on 8 H200s (a guess until the first 8-GPU run; the budget check uses it).
steps=(build gpu-tests shim-tests doctor python-tests tp-model verify-8 verify-64 torch-symm bench
  bench-host bench-procs islands islands-forced shim-torch host-cost tune fused verify-fused
  tp-model-fused wire)
step_limits=([build]="360 60" [gpu-tests]="420 300" [shim-tests]="120 30"
  [doctor]="180 90" [python-tests]="240 90" [tp-model]="240 90" [verify-8]="120 40"
  [verify-64]="120 40" [torch-symm]="240 90" [bench]="300 150" [bench-host]="300 180"
  [bench-procs]="240 100" [islands]="180 50" [islands-forced]="180 50" [shim-torch]="400 240"
  [host-cost]="120 30" [tune]="420 240" [fused]="240 90" [verify-fused]="240 100"
  [tp-model-fused]="540 360" [wire]="480 300")
# The commands of one lease: each fits in one command of the GPU machines (10 minutes).
leases=("1-2" "3-7" "8-10" "11-14" "15-16" "17,19" "18,20")
fixture=tests/fixtures/topology/rootport_2socket_8gpu.xml

usage() {
  cat <<EOF
usage: scripts/multi-gpu-run.sh OUTDIR [--steps LIST] [--ranks N] [--budget S] [--dry-run]
  --steps LIST  step names or numbers, ranges a-b, comma-separated (default all); step 0
                (build) always runs first and is a no-op when the build directory is current
  --ranks N     ranks (and GPUs 0..N-1) to use; default every GPU of the machine, 2 or more
  --budget S    end the run within S seconds (default 560; 0: no limit): a step that no longer
                fits is "not run", and finish names the steps left for the next command
  --dry-run     print each chosen step's commands and limits; needs no GPU, runs nothing
Environment: TPAR_COMMIT (the commit recorded; default git HEAD, which may be stale on the GPU
machines), TPAR_MACHINE_KIND (recorded in summary.json), TPAR_BUILD_DIR (default build-gpu),
PYTHON (default python3; its torch and torchrun). NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are exported (multicast stays off).

steps (LIMIT s / about s on 8 H200s, a guess until measured; what each step records):
  0  build           $(lim build)  cmake + ninja (-DTPAR_CUDA_ARCHS of the GPUs, the NCCL drop-in
                              with nccl.h from python's nvidia package); pip install of the
                              Python package when step 4, 5, 14 or 19 is chosen
  1  gpu-tests       $(lim gpu-tests)  tpar_gpu_tests on the N GPUs (threads and one process per GPU)
  2  shim-tests      $(lim shim-tests)  tpar_shim_gpu_tests (the NCCL drop-in against real NCCL)
  3  doctor          $(lim doctor)  tpar doctor -> doctor.json
  4  python-tests    $(lim python-tests)  torchrun N x pytest tests/python/test_distributed.py
  5  tp-model        $(lim tp-model)  torchrun N x tpar.check model (tensor-parallel Llama) -> tp-model.json
  6  verify-8        $(lim verify-8)  tpar verify kimi-k2, N ranks, 8 tokens, tpar algorithms and NCCL
                              -> verify-8.json
  7  verify-64       $(lim verify-64)  the same at 64 tokens -> verify-64.json
  8  torch-symm      $(lim torch-symm)  PyTorch symmetric memory one-shot and two-shot, 1 KiB..64 MiB,
                              multicast off -> torch-symm.json
  9  bench           $(lim bench)  tpar bench 1 KiB..64 MiB, every backend (tpar algorithms, nccl,
                              nccl:p2p-sys, nccl:shm = NCCL without P2P), --transport auto
                              -> bench.json, bench.png (with torch-symm.json when step 8 ran)
  10 bench-host      $(lim bench-host)  the same with --transport host (receive regions in host memory;
                              each row's host-link floor) -> bench-host.json, bench-host.png
  11 bench-procs     $(lim bench-procs)  tpar bench --procs -G 0 (one process per GPU: eager calls, and
                              graph replays up to 4 MiB beside them), 1 KiB..64 MiB by 4x,
                              every backend, checked -> bench-procs.json
  12 islands         $(lim islands)  tpar, twoshot, staged, hier; the topology as discovered
                              -> islands.json
  13 islands-forced  $(lim islands-forced)  the same with TPAR_TOPO_FILE=<the fixture below>, whose first N
                              GPUs make islands 4+4 at 8 ranks, 2+2 at 4 (other N: skipped)
                              -> islands-forced.json, islands.png (both runs)
  14 shim-torch      $(lim shim-torch)  scripts/shim-check.sh steps 2-5 and 7 at N ranks (PyTorch on the
                              drop-in, pass-through, NCCL loaded by path, torch.distributed
                              latency, the model step with and without the drop-in)
                              -> shim/torch-shim-check.json, shim/shim-bench.json, ...
  15 host-cost       $(lim host-cost)  tpar bench --host-cost: the host time of one call with the stream
                              held, beside a bare launch, tpar and NCCL -> host-cost.json
  16 tune            $(lim tune)  tpar tune --quick on both transports, one thread and one process
                              per GPU, 12 KiB..4 MiB: the gain over the defaults; on the host
                              with one thread also the wire formats' thresholds (--wire)
                              -> tune-p2p.json, tune-host-procs.json, ...
  17 fused           $(lim fused)  tpar bench --fused: the fused all-reduce + residual + RMSNorm
                              (bf16, FP8 and NVFP4 out) against tpar's all-reduce, tpar's
                              all-reduce + the separate norm kernel and NCCL + the same kernel,
                              hidden 4096/7168/8192, tokens 1/8/64 -> fused.json
  18 verify-fused    $(lim verify-fused)  tpar verify kimi-k2 --fused, N ranks, 1, 8 and 64 tokens, tpar
                              and NCCL -> verify-fused-1.json, verify-fused-8.json, ...
  19 tp-model-fused  $(lim tp-model-fused)  torchrun 2 and 4 x tpar.check model --fused --wire fp8 int8
                              int4 (TP sizes up to N; the first GPUs), ranks bitwise equal; as
                              chosen, then with TPAR_TRANSPORT=host TPAR_WIRE_MIN_BYTES=0, where
                              the formats carry every call -> tp-model-fused-2.json,
                              tp-model-fused-host-2.json, tp-model-fused-4.json, ...
  20 wire            $(lim wire)  tpar bench --wire none,fp8,int8,int4, 1 MiB..256 MiB by 4x, tpar
                              and NCCL, --transport auto and host (NCCL without P2P beside)
                              -> wire.json, wire-host.json

One lease (back to back, so that the machine and its build directory stay warm):
$(for l in "${leases[@]}"; do
    echo "  TPAR_COMMIT=<sha> TPAR_MACHINE_KIND=nvidia-h200-x8 bash scripts/multi-gpu-run.sh \$OUT --steps $l"
  done)
Each command returns summary.json, logs.tgz and up to 6 records; steps that did not fit are
named at the end ("not run: ...") for one more command. On 4 GPUs, --ranks 4 (or nothing).
The fixture of step 13: $fixture
Exit status: 0 every chosen step passed or was skipped; 1 a step failed; 2 usage; 3 fewer GPUs
than the run needs.
EOF
}
lim() { local l; read -r -a l <<<"${step_limits[$1]}"; printf '%3s/%-3s' "${l[0]}" "${l[1]}"; }

out="" list=all ranks="" budget=560 dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --steps) list=${2:-}; shift ;;
    --ranks) ranks=${2:-}; shift ;;
    --budget) budget=${2:-}; shift ;;
    --dry-run) dry=1 ;;
    -*) echo "multi-gpu-run: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "multi-gpu-run: one OUTDIR only ($out, $1)" >&2; exit 2; }
       out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "multi-gpu-run: OUTDIR missing (see --help)" >&2; exit 2; }
if [ -n "$ranks" ] && ! [[ $ranks =~ ^[0-9]+$ && $ranks -ge 2 ]]; then
  echo "multi-gpu-run: --ranks $ranks: want a whole number, 2 or more" >&2
  exit 2
fi
[[ $budget =~ ^[0-9]+$ ]] || { echo "multi-gpu-run: --budget $budget: want seconds" >&2; exit 2; }
chosen=$(steps_chosen steps "$list") || { echo "multi-gpu-run: bad --steps (see --help)" >&2; exit 2; }
chosen=$(grep -vx build <<<"$chosen")  # build always runs, first
want() { [[ $'\n'build$'\n'$chosen$'\n' == *$'\n'$1$'\n'* ]]; }

ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$dry" = 1 ]; then
  n=${ranks:-$((ngpus >= 2 ? ngpus : 8))}
else
  n=${ranks:-$ngpus}
  if [ -z "$ranks" ] && [ "$ngpus" -lt 2 ]; then
    echo "multi-gpu-run: needs 2 or more GPUs, found $ngpus" >&2
    exit 3
  fi
  if [ "$ngpus" -lt "$n" ]; then
    echo "multi-gpu-run: needs $n GPUs, found $ngpus" >&2
    exit 3
  fi
  mkdir -p "$out" || exit 2
fi
out=$(realpath -m "$out")  # absolute: commands run in other directories
# NVLink multicast stays off in every process (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
if [ "$n" -lt "$ngpus" ] && [ -z "${CUDA_VISIBLE_DEVICES:-}" ]; then
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))
  export CUDA_VISIBLE_DEVICES
fi
commit=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export TPAR_COMMIT=$commit TPAR_GIT_COMMIT=$commit
py=${PYTHON:-python3}
torchrun=("$py" -m torch.distributed.run --nproc-per-node "$n")
build=${TPAR_BUILD_DIR:-build-gpu}
tpar=$build/tools/tpar/tpar
run_end=$((budget > 0 ? SECONDS + budget : 0))
# Every size from 1 KiB to 64 MiB, doubling (what tpar bench -b 1K -e 64M -f 2 runs).
symm_sizes=$(for k in 1 2 4 8 16 32 64 128 256 512; do printf '%sK,' $k; done
  for m in 1 2 4 8 16 32; do printf '%sM,' $m; done; printf 64M)

need_torch() {  # the step is skipped where python has no CUDA torch
  [ "$dry" = 1 ] || "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' \
    >/dev/null 2>&1 || { step_skip "$py has no CUDA-enabled torch"; return 1; }
}

step_build() {
  local archs inc shim=() built=1
  step_begin build || return 1
  archs=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . |
    sort -u | paste -sd';')
  inc=$(nccl_include_of "$py")
  [ -n "$inc" ] && shim=(-DTPAR_NCCL_INCLUDE_DIR="$inc" -DTPAR_BUILD_NCCL_SHIM=ON)
  step_cmd cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTPAR_CUDA_ARCHS="${archs:-90}" -DTPAR_GIT_COMMIT="$commit" "${shim[@]}" &&
    step_cmd ninja -C "$build" || built=0
  # A failed install fails this step and the Python steps, not the others.
  if [ $built = 1 ] && { want python-tests || want tp-model || want shim-torch ||
    want tp-model-fused; }; then
    step_cmd CMAKE_ARGS="-DTPAR_CUDA_ARCHS=${archs:-90} -DTPAR_GIT_COMMIT=$commit" \
      "$py" -m pip install -q --no-build-isolation --no-deps .
  fi
  step_end
  [ $built = 1 ]
}

step_gpu-tests() {
  step_begin gpu-tests || return 0
  step_cmd "$build/tests/tpar_gpu_tests"
  step_end --log "gtest:$step_log"
}

step_shim-tests() {
  step_begin shim-tests || return 0
  if [ "$dry" != 1 ] && [ ! -x "$build/nccl_shim/tests/tpar_shim_gpu_tests" ]; then
    step_skip "the NCCL drop-in was not built (no nccl.h found)"
    return 0
  fi
  step_cmd TPAR_DEBUG=info "$build/nccl_shim/tests/tpar_shim_gpu_tests"
  step_end --log "gtest:$step_log"
}

step_doctor() {
  step_begin doctor || return 0
  step_cmd "$tpar" doctor --json "$out/doctor.json"
  step_end --log "checks:$step_log" --record doctor.json
}

step_python-tests() {
  step_begin python-tests || return 0
  need_torch || return 0
  # From tests/python, so that the installed package is imported, not the source tree.
  step_cmd --chdir=tests/python "${torchrun[@]}" -m pytest -q -rs -p no:cacheprovider \
    test_distributed.py
  step_end --log "pytest-ranks:$step_log"
}

step_tp-model() {
  step_begin tp-model || return 0
  need_torch || return 0
  step_cmd --chdir=tests/python "${torchrun[@]}" -m tpar.check model --json "$out/tp-model.json"
  step_end --log "checks:$step_log" --record tp-model.json
}

step_verify() {  # step_verify TOKENS
  step_begin "verify-$1" || return 0
  step_cmd "$tpar" verify --model kimi-k2 --ranks "$n" --tokens "$1" --iters 20 \
    --backends tpar,tpar:oneshot,tpar:twoshot,tpar:staged,tpar:hier,nccl --json "$out/verify-$1.json"
  step_end --log "checks:$step_log" --record "verify-$1.json"
}
step_verify-8() { step_verify 8; }
step_verify-64() { step_verify 64; }

step_torch-symm() {
  step_begin torch-symm || return 0
  need_torch || return 0
  step_cmd "${torchrun[@]}" scripts/torch_symm_bench.py --sizes "$symm_sizes" \
    --json "$out/torch-symm.json"
  step_end --log "symm:$step_log" --record torch-symm.json
}

# bench_step NAME PLOT-EXTRA BENCH-ARGS...: one tpar bench run, its JSON and plot.
bench_step() {
  local name=$1 extra=$2
  shift 2
  step_cmd "$tpar" bench --ranks "$n" "$@" --json "$out/$name.json"
  # Plot what there is, also after wrong elements.
  if [ "$dry" = 1 ] || [ -f "$out/$name.json" ]; then
    step_cmd "$py" scripts/plot_bench.py "$out/$name.json" ${extra:+"$extra"} -o "$out/$name.png"
  fi
  if [ "$dry" != 1 ]; then  # tpar against NCCL, in the console
    grep -E '^#  tpar +[0-9]+ ranks' "$step_log" | head -20
  fi
  step_end --log "bench:$step_log" --record "$name.json" --record "$name.png"
}

step_bench() {
  step_begin bench || return 0
  local symm=""
  [ "$dry" = 1 ] || [ -f "$out/torch-symm.json" ] && symm=$out/torch-symm.json
  bench_step bench "$symm" --transport auto -b 1K -e 64M -f 2
}

step_bench-host() {
  step_begin bench-host || return 0
  bench_step bench-host "" --transport host -b 1K -e 64M -f 2
}

step_bench-procs() {
  step_begin bench-procs || return 0
  step_cmd "$tpar" bench --procs -G 0 --ranks "$n" -b 1K -e 64M -f 4 --json "$out/bench-procs.json"
  step_end --log "bench:$step_log" --record bench-procs.json
}

islands_backends=tpar,tpar:twoshot,tpar:staged,tpar:hier
step_islands() {
  step_begin islands || return 0
  step_cmd "$tpar" bench --ranks "$n" --backends "$islands_backends" -b 1K -e 64M -f 4 \
    --json "$out/islands.json"
  step_end --log "bench:$step_log" --record islands.json
}

step_islands-forced() {
  step_begin islands-forced || return 0
  if [ "$n" != 8 ] && [ "$n" != 4 ]; then
    step_skip "a forced split needs 4 or 8 ranks ($fixture's first N GPUs: 2+2 or 4+4), not $n"
    return 0
  fi
  step_cmd TPAR_TOPO_FILE="$fixture" "$tpar" bench --ranks "$n" --backends "$islands_backends" \
    -b 1K -e 64M -f 4 --json "$out/islands-forced.json"
  local both=("$out/islands-forced.json")
  [ "$dry" = 1 ] || [ -f "$out/islands.json" ] && both+=("$out/islands.json")
  step_cmd "$py" scripts/plot_bench.py "${both[@]}" -o "$out/islands.png"
  step_end --log "bench:$step_log" --record islands-forced.json --record islands.png
}

step_shim-torch() {
  step_begin shim-torch || return 0
  need_torch || return 0
  if [ "$dry" != 1 ] && [ ! -f "$build/nccl_shim/libtpar_nccl.so" ]; then
    step_skip "the NCCL drop-in was not built (no nccl.h found)"
    return 0
  fi
  step_cmd STEPS="2 3 4 5 7" NPROC="$n" PYTHON="$py" bash scripts/shim-check.sh "$out/shim" "$build"
  local logs=() f
  for f in torch-shim-check torch-shim-check-disabled pynccl-shim-check; do
    logs+=(--log "checks:shim/$f.txt")
  done
  step_end "${logs[@]}" --record shim/torch-shim-check.json --record shim/shim-bench.json \
    --record shim/bench-nccl.json --record shim/bench-shim.json \
    --record shim/tp-model-shim-bench.json
}

issue14_sizes=12K,112K,384K,1M,4M
step_host-cost() {
  step_begin host-cost || return 0
  step_cmd "$tpar" bench --ranks "$n" --host-cost --backends tpar,nccl --sizes "$issue14_sizes" \
    --json "$out/host-cost.json"
  step_end --log "rows:$step_log" --record host-cost.json
}

# The tables are records of what the search found, not tables for the next runs (--output).
step_tune() {
  step_begin tune || return 0
  local t mode
  # The host run with one thread also measures the wire formats' thresholds (--wire needs it).
  for t in p2p host; do
    for mode in "" --procs; do
      local wire=()
      [ "$t" = host ] && [ -z "$mode" ] && wire=(--wire fp8,int8,int4)
      step_cmd "$tpar" tune --ranks "$n" --quick --transport "$t" ${mode:+"$mode"} "${wire[@]}" \
        --sizes "$issue14_sizes" --output "$out/tune-$t${mode:+-procs}.json"
    done
  done
  step_end --record tune-p2p.json --record tune-host.json --record tune-p2p-procs.json \
    --record tune-host-procs.json
}

# The fused call's issue sizes: hidden sizes of the models served, decode and verify tokens.
step_fused() {
  step_begin fused || return 0
  step_cmd "$tpar" bench --fused --ranks "$n" --hidden 4096,7168,8192 --tokens 1,8,64 \
    --json "$out/fused.json"
  step_end --log "fused:$step_log" --record fused.json
}

step_verify-fused() {
  step_begin verify-fused || return 0
  local t records=()
  for t in 1 8 64; do
    step_cmd "$tpar" verify --model kimi-k2 --ranks "$n" --tokens "$t" --iters 20 --fused \
      --backends tpar,nccl --json "$out/verify-fused-$t.json"
    records+=(--record "verify-fused-$t.json")
  done
  step_end --log "checks:$step_log" "${records[@]}"
}

# TP 2 and 4 (those the machine has) on its first GPUs: the fused op and the wire formats in
# the tensor-parallel model, every rank's output bitwise equal. Under auto, ranks with P2P keep
# their calls in GPU memory, where the formats stay off (docs/WIRE.md); the second run puts
# them on the host transport with every call in the format, as the run on one GPU did.
step_tp-model-fused() {
  step_begin tp-model-fused || return 0
  need_torch || return 0
  local tp records=()
  for tp in 2 4; do
    [ "$tp" -le "$n" ] || continue
    step_cmd --chdir=tests/python CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((tp - 1)))" "$py" \
      -m torch.distributed.run --nproc-per-node "$tp" -m tpar.check model --fused \
      --wire fp8 int8 int4 --json "$out/tp-model-fused-$tp.json"
    step_cmd --chdir=tests/python CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((tp - 1)))" \
      TPAR_TRANSPORT=host TPAR_WIRE_MIN_BYTES=0 "$py" \
      -m torch.distributed.run --nproc-per-node "$tp" -m tpar.check model --fused \
      --wire fp8 int8 int4 --json "$out/tp-model-fused-host-$tp.json"
    records+=(--record "tp-model-fused-$tp.json" --record "tp-model-fused-host-$tp.json")
  done
  step_end --log "checks:$step_log" "${records[@]}"
}

step_wire() {
  step_begin wire || return 0
  step_cmd "$tpar" bench --ranks "$n" --wire none,fp8,int8,int4 --backends tpar,nccl \
    --transport auto -b 1M -e 256M -f 4 --json "$out/wire.json"
  step_cmd "$tpar" bench --ranks "$n" --wire none,fp8,int8,int4 --backends tpar,nccl:shm \
    --transport host -b 1M -e 256M -f 4 --json "$out/wire-host.json"
  step_end --log "bench:$step_log" --record wire.json --record wire-host.json
}

if [ "$dry" = 1 ]; then
  echo "# dry run: $n ranks, steps: build" "${chosen//$'\n'/ }"
else
  echo "multi-gpu-run: $n of $ngpus GPUs, commit $commit, into $out"
  python3 scripts/summary.py start "$out" --script scripts/multi-gpu-run.sh --commit "$commit" \
    --steps "$(IFS=,; echo "${steps[*]}")" || exit 1
fi
status=0
if step_build; then
  for s in $chosen; do
    [ "$s" = build ] || "step_$s"
  done
elif [ "$dry" != 1 ]; then
  echo "multi-gpu-run: no build (it failed, or did not fit in the budget); no other step can run"
fi
if [ "$dry" = 1 ]; then
  total_limit=0 total_expect=0
  for s in build $chosen; do
    read -r -a l <<<"${step_limits[$s]}"
    total_limit=$((total_limit + l[0])) total_expect=$((total_expect + l[1]))
  done
  echo "# about $total_expect s in all (at most $total_limit s; budget $budget s)"
  exit 0
fi
python3 scripts/summary.py finish "$out" --rerun "scripts/multi-gpu-run.sh OUTDIR --steps" \
  --chosen "$chosen" || status=1
python3 scripts/summary.py pack "$out" || status=1
exit $status
