#!/usr/bin/env bash
# The multi-GPU measurement run: tpar against NCCL on a machine with several GPUs, every step
# batched so that one lease covers it. Writes logs and JSON into OUTDIR.
#   scripts/multi-gpu-run.sh OUTDIR
# Steps: build; tpar doctor; the GPU test suite; tpar bench with correctness checks, one thread
# for all GPUs and one process per GPU; tpar bench 1 KB .. 64 MB for N = 2, 4, 8 against NCCL
# and its P2P variants, and PyTorch symmetric memory (scripts/torch_symm_bench.py); the
# host-staged transport against NCCL without P2P; tpar verify for kimi-k2 at 8 and 64 tokens.
set -uo pipefail
out=${1:?usage: scripts/multi-gpu-run.sh OUTDIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)  # absolute: the script changes directory below
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
algos=tpar,tpar:oneshot,tpar:twoshot,tpar:staged,tpar:hier,tpar:oneshot-pull,tpar:twoshot-pull,tpar:pipelined,tpar:twoshot-ll
for tr in auto host; do
  "$tpar" bench --transport $tr --ranks "$ranks" --backends $algos \
    -b 1K -e 16M -f 4 -n 20 -w 5 >"$out/real-ranks-thread-$tr.txt" 2>&1 || status=1
  "$tpar" bench --transport $tr --procs --ranks "$ranks" --backends tpar,tpar:twoshot,tpar:pipelined \
    -b 1K -e 16M -f 4 -n 20 -w 5 >"$out/real-ranks-procs-$tr.txt" 2>&1 || status=1
done
grep -hE "wrong elements" "$out"/real-ranks-*.txt

echo "== 3. tpar against NCCL, 1 KB .. 64 MB, bf16, graph mode"
"$tpar" bench --ranks "$ranks" -b 1K -e 64M -f 2 -n 100 -w 10 \
  --backends $algos,nccl,nccl:p2p-sys,nccl:shm \
  --json "$out/bench.json" >"$out/bench.txt" 2>&1 || status=1
python3 scripts/plot_bench.py "$out/bench.json" -o "$out/bench.png" || status=1
grep -E "speed-up|x$|wrong elements" "$out/bench.txt" | tail -60
echo "== 3b. PyTorch symmetric memory, one-shot and two-shot (multicast off)"
for n in ${ranks//,/ }; do
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) timeout 300 torchrun --nproc-per-node $n \
    scripts/torch_symm_bench.py --sizes 1K,4K,16K,64K,256K,1M,4M,16M,64M \
    --json "$out/torch-symm-$n.json" >"$out/torch-symm-$n.txt" 2>&1 || status=1
  tail -20 "$out/torch-symm-$n.txt"
done

echo "== 4. host-staged transport against NCCL without P2P (both through host memory)"
"$tpar" bench --transport host --ranks "$ranks" -b 1K -e 4M -f 2 -n 100 -w 10 \
  --backends tpar,tpar:oneshot-pull,tpar:twoshot-pull,tpar:pipelined,tpar:twoshot-ll,nccl:shm \
  --json "$out/bench-host.json" >"$out/bench-host.txt" 2>&1 || status=1
grep -E "^# host link|speed-up|x$|wrong elements" "$out/bench-host.txt" | tail -40

echo "== 5. verify pass, kimi-k2, tp $ngpus, NCCL against tpar"
for t in 8 64; do
  "$tpar" verify --model kimi-k2 --ranks "$ngpus" --tokens $t --backends tpar,nccl --iters 20 \
    --json "$out/verify-$t.json" >"$out/verify-$t.txt" 2>&1 || status=1
  tail -8 "$out/verify-$t.txt"
done

# Only a few files travel back from some machines: keep the records, pack the rest.
pack=$(mktemp /tmp/multi-gpu-logs.XXXXXX.tgz)
(cd "$out" && tar czf "$pack" --exclude='*.json' --exclude='*.png' . &&
  find . -mindepth 1 -maxdepth 1 ! -name '*.json' ! -name '*.png' -exec rm -rf {} + &&
  mv "$pack" logs.tgz) || true
exit $status
