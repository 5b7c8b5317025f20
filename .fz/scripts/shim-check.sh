#!/usr/bin/env bash
# libtpar_nccl.so (the NCCL drop-in, docs/nccl_shim.md) on a GPU machine: its GPU tests, PyTorch's
# NCCL process group on it, NCCL loaded by path as vLLM and SGLang load it, and the all-reduce
# latency of torch.distributed with and without it (and with a tuning table measured here).
# Builds nothing: give it a build directory made with the shim (TPAR_BUILD_NCCL_SHIM=ON).
#   scripts/shim-check.sh OUTDIR [BUILD_DIR]     (BUILD_DIR default: $TPAR_BUILD_DIR or build-gpu)
# Environment: NPROC (default: every GPU), PYTHON (default python3; torchrun from the same
# installation), STEPS (default "0 1 2 3 4 5 6", on one GPU "0 2 3": the numbered steps below
# to run; each takes under 2 minutes on 2 H200s except 6, the tuning run and what uses its
# table; 7, the model step with and without the shim, needs the tpar Python package).
# Writes into OUTDIR: logs, torch-shim-check.json, bench-{nccl,shim,shim-tuned}.json and
# shim-bench.json (the runs side by side). Exit status 1 when a check failed.
set -uo pipefail
out=${1:?usage: scripts/shim-check.sh OUTDIR [BUILD_DIR]}
build=${2:-${TPAR_BUILD_DIR:-build-gpu}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
build=$(cd "$build" 2>/dev/null && pwd) || { echo "no build directory $build" >&2; exit 2; }
# NVLink multicast stays off in every process (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shim=$build/nccl_shim/libtpar_nccl.so
[ -f "$shim" ] || { echo "$shim is missing: configure with -DTPAR_BUILD_NCCL_SHIM=ON" >&2; exit 2; }
py=${PYTHON:-python3}
torchrun=("$py" -m torch.distributed.run)
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
n=${NPROC:-$ngpus}
export TPAR_COMMIT=${TPAR_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
tests=nccl_shim/tests
status=0
if [ "$n" -lt 1 ]; then
  echo "shim-check: needs a GPU, found none" >&2
  exit 2
fi
# One GPU: a group of one rank, which tpar leaves to NCCL, so steps 0, 2 and 3 check that every
# call passes through the shim to the real NCCL and comes back exact; the rest need 2 ranks.
if [ "$n" -lt 2 ]; then
  steps=" ${STEPS:-0 2 3} "
  for s in $steps; do
    case $s in 0|2|3) ;; *) echo "shim-check: step $s needs 2 or more GPUs, found $n" >&2; exit 2 ;; esac
  done
else
  steps=" ${STEPS:-0 1 2 3 4 5 6} "
fi
want() { [[ $steps == *" $1 "* ]]; }

if want 0; then
echo "== 0. import torch with the shim preloaded"
LD_PRELOAD=$shim "$py" -c 'import torch; print("   torch", torch.__version__, "NCCL",
  ".".join(map(str, torch.cuda.nccl.version())), "through the shim")' >"$out/import-torch.txt" 2>&1 ||
  status=1
cat "$out/import-torch.txt"
fi
run_torch() {  # run_torch LOG ARGS...: one process per GPU, first $n GPUs
  local log=$1
  shift
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) timeout 300 "${torchrun[@]}" --nproc-per-node "$n" \
    "$@" >"$log" 2>&1
}

if want 1; then
echo "== 1. GPU tests of the shim (C++, real NCCL, $ngpus GPUs)"
TPAR_DEBUG=info timeout 600 "$build/nccl_shim/tests/tpar_shim_gpu_tests" >"$out/shim-gpu-tests.log" 2>&1 || status=1
grep -E "^\[  (FAILED|PASSED|SKIPPED) |^\[ *OK \]|tests? ran" "$out/shim-gpu-tests.log"
fi

if want 2; then
echo "== 2. PyTorch's process group on the shim ($n ranks, LD_PRELOAD)"
LD_PRELOAD=$shim TPAR_DEBUG=info run_torch "$out/torch-shim-check.txt" \
  $tests/torch_shim_check.py --shim "$shim" --json "$out/torch-shim-check.json" || status=1
grep -E "^# |^FAILED|torch_shim_check:" "$out/torch-shim-check.txt" | head -40
echo "   tpar log lines (rank 0 and 1): $(grep -c 'tpar .* INFO libtpar_nccl.so' "$out/torch-shim-check.txt")"
grep -E "INFO libtpar_nccl.so.*(forwarding to NCCL|tpar communicator made|every call goes to NCCL|destroyed)" \
  "$out/torch-shim-check.txt" | sed 's/^/   /' | head -12
fi

if want 3; then
echo "== 3. the same with TPAR_SHIM_DISABLE=1 (pure pass-through)"
LD_PRELOAD=$shim TPAR_SHIM_DISABLE=1 run_torch "$out/torch-shim-check-disabled.txt" \
  $tests/torch_shim_check.py --shim "$shim" --disabled || status=1
grep -E "^FAILED|torch_shim_check:" "$out/torch-shim-check-disabled.txt" | head -20
fi

if want 4; then
echo "== 4. NCCL loaded by path (vLLM's VLLM_NCCL_SO_PATH, SGLang's SGLANG_NCCL_SO_PATH)"
TPAR_DEBUG=info run_torch "$out/pynccl-shim-check.txt" $tests/pynccl_shim_check.py --shim "$shim" || status=1
grep -E "route|^FAILED|pynccl_shim_check:" "$out/pynccl-shim-check.txt" | head -20
for engine in vllm sglang; do
  if "$py" -c "import $engine" >/dev/null 2>&1; then
    echo "   $engine is installed: point its variable at $shim to run it on the shim"
  else
    echo "   $engine is not installed here: only its way of loading NCCL was checked (above)"
  fi
done
fi

if want 5; then
echo "== 5. torch.distributed.all_reduce latency, bf16, 1 KiB .. 64 MiB, without and with the shim"
run_torch "$out/bench-nccl.txt" $tests/torch_shim_bench.py --label nccl --json "$out/bench-nccl.json" || status=1
LD_PRELOAD=$shim run_torch "$out/bench-shim.txt" $tests/torch_shim_bench.py --label shim --shim "$shim" \
  --json "$out/bench-shim.json" || status=1
fi
if want 6 && [ -x "$build/tools/tpar/tpar" ]; then
  echo "== 6. tpar tune with NCCL as a candidate ($n GPUs), then the shim with that table"
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) timeout 900 "$build/tools/tpar/tpar" tune --ranks "$n" \
    -d bfloat16 --output "$out/tuning.json" >"$out/tune.txt" 2>&1 || status=1
  tail -8 "$out/tune.txt"
  if [ -f "$out/tuning.json" ]; then
    LD_PRELOAD=$shim TPAR_TUNING_FILE=$out/tuning.json run_torch "$out/bench-shim-tuned.txt" \
      $tests/torch_shim_bench.py --label shim-tuned --shim "$shim" \
      --json "$out/bench-shim-tuned.json" || status=1
    LD_PRELOAD=$shim TPAR_TUNING_FILE=$out/tuning.json run_torch "$out/torch-shim-check-tuned.txt" \
      $tests/torch_shim_check.py --shim "$shim" || status=1
    grep -E "^FAILED|torch_shim_check:" "$out/torch-shim-check-tuned.txt" | head -20
  fi
fi
if want 7; then
  echo "== 7. the tensor-parallel model step (tpar.check model) with PyTorch's NCCL and on the shim"
  if "$py" -c "import tpar" >/dev/null 2>&1; then
    # The same command twice: its nccl column is plain NCCL, then NCCL through the shim.
    (cd tests/python && run_torch "$out/tp-model-nccl.txt" -m tpar.check model --json "$out/tp-model-nccl.json") ||
      status=1
    (cd tests/python && LD_PRELOAD=$shim run_torch "$out/tp-model-shim.txt" -m tpar.check model \
      --json "$out/tp-model-shim.json") || status=1
    "$py" $tests/torch_shim_bench.py --merge-model "$out/tp-model-nccl.json" "$out/tp-model-shim.json" \
      -o "$out/tp-model-shim-bench.json" | tee "$out/tp-model-shim-bench.txt" || status=1
  else
    echo "   the tpar Python package is not installed: the model step needs it (pip install .)"
    status=1
  fi
fi
# The runs side by side, from whatever runs OUTDIR holds (also when 5 and 6 ran separately).
runs=()
for r in nccl shim shim-tuned; do
  [ -f "$out/bench-$r.json" ] && runs+=("$out/bench-$r.json")
done
if [ ${#runs[@]} -ge 2 ] && [ -f "$out/bench-nccl.json" ]; then
  "$py" $tests/torch_shim_bench.py --merge "${runs[@]}" -o "$out/shim-bench.json" |
    tee "$out/shim-bench.txt" || status=1
fi
exit $status
