#!/usr/bin/env bash
# The multi-GPU measurement run: tpar against NCCL on a machine with several GPUs, every step
# batched so that one lease covers it. Writes logs and JSON into OUTDIR.
#   scripts/multi-gpu-run.sh OUTDIR
# Steps: build; tpar doctor; the GPU test suite; tpar bench with correctness checks, one thread
# for all GPUs and one process per GPU; tpar bench 1 KB .. 64 MB for N = 2, 4, 8 against NCCL
# and its P2P variants; tpar verify for kimi-k2 at 8 and 64 tokens. Not yet part of it: torch
# symmetric memory (needs a PyTorch script) and the host-staged transport (not built yet).
set -uo pipefail
out=${1:?usage: scripts/multi-gpu-run.sh OUTDIR}
mkdir -p "$out"
# NVLink multicast stays off in every process (shared machines).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "$0")/.."
status=0
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpus" -lt 2 ]; then
  echo "multi-gpu-run: needs 2 or more GPUs, found $ngpus" >&2
  exit 2
fi
build=${TPAR_BUILD_DIR:-build-gpu}
tpar="$build/tools/tpar/tpar"
ranks=""
for n in 2 4 8; do [ "$n" -le "$ngpus" ] && ranks="$ranks${ranks:+,}$n"; done

echo "== build, GPU tests (virtual ranks) and the one-GPU benchmark"
bash scripts/gpu-check.sh "$out/gpu-check" --no-verify || status=1

echo "== 1. doctor ($ngpus GPUs)"
"$tpar" doctor --json "$out/doctor.json" >"$out/doctor.txt" 2>&1 || status=1
tail -20 "$out/doctor.txt"

echo "== 2. real ranks: one thread for all GPUs, then one process per GPU, every result checked"
"$tpar" bench --ranks "$ranks" --backends tpar,tpar:oneshot,tpar:twoshot,tpar:staged,tpar:hier \
  -b 1K -e 16M -f 4 -n 20 -w 5 >"$out/real-ranks-thread.txt" 2>&1 || status=1
"$tpar" bench --procs --ranks "$ranks" --backends tpar,tpar:twoshot \
  -b 1K -e 16M -f 4 -n 20 -w 5 >"$out/real-ranks-procs.txt" 2>&1 || status=1
grep -hE "wrong elements" "$out"/real-ranks-*.txt

echo "== 3. tpar against NCCL, 1 KB .. 64 MB, bf16, graph mode"
"$tpar" bench --ranks "$ranks" -b 1K -e 64M -f 2 -n 100 -w 10 \
  --backends tpar,tpar:oneshot,tpar:twoshot,tpar:staged,tpar:hier,nccl,nccl:p2p-sys,nccl:shm \
  --json "$out/bench.json" >"$out/bench.txt" 2>&1 || status=1
python3 scripts/plot_bench.py "$out/bench.json" -o "$out/bench.png" || status=1
grep -E "speed-up|x$|wrong elements" "$out/bench.txt" | tail -60

echo "== 4. host-staged transport against NCCL without P2P: the transport is not built yet"

echo "== 5. verify pass, kimi-k2, tp $ngpus, NCCL against tpar"
for t in 8 64; do
  "$tpar" verify --model kimi-k2 --tp "$ngpus" --tokens $t --backends tpar,nccl --iters 20 \
    --json "$out/verify-$t.json" >"$out/verify-$t.txt" 2>&1 || status=1
  tail -8 "$out/verify-$t.txt"
done

# Only a few files travel back from some machines: keep the records, pack the rest.
pack=$(mktemp /tmp/multi-gpu-logs.XXXXXX.tgz)
(cd "$out" && tar czf "$pack" --exclude='*.json' --exclude='*.png' . &&
  find . -mindepth 1 -maxdepth 1 ! -name '*.json' ! -name '*.png' -exec rm -rf {} + &&
  mv "$pack" logs.tgz) || true
exit $status
