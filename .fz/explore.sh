#!/usr/bin/env bash
# Exploration run (not part of the repository).
set -u
cd "$(dirname "$0")"
export TPAR_COMMIT=$(cat .commit) TPAR_CUDA_ARCHS=90 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
left() { echo $(( 560 - ($(date +%s) - t0) )); }
nvidia-smi > $OUT/nvidia-smi.txt 2>&1
echo "== table $(date -u +%T)"
timeout $(left) bash scripts/peer-flashinfer.sh table /tmp/bp $OUT/peer > $OUT/peer.log 2>&1; echo "table rc=$? at $(( $(date +%s) - t0 ))s"
ninja -C /tmp/bp tpar_host_link tpar_host_cost > $OUT/build2.log 2>&1; echo "build2 rc=$?"
T=/tmp/bp/tools/tpar/tpar
timeout 60 /tmp/bp/bench/experiments/tpar_host_cost --ranks 1 > $OUT/host-cost.txt 2>&1; echo "host-cost rc=$? at $(( $(date +%s) - t0 ))s"
timeout 90 /tmp/bp/bench/experiments/tpar_host_link > $OUT/host-link.txt 2>&1; echo "host-link rc=$? at $(( $(date +%s) - t0 ))s"
TPAR_MAX_BLOCKS=64 timeout 60 $T bench --transport p2p --ranks 2,4,8 --sizes 12K,112K,384K,1M,4M -n 200 -w 20 --json $OUT/bench-dev-mb64.json > $OUT/bench-dev-mb64.log 2>&1; echo "mb64 rc=$? at $(( $(date +%s) - t0 ))s"
for r in 4 2 8; do
  l=$(left); [ $l -gt 20 ] || break
  TPAR_MAX_BLOCKS=64 timeout $(( l < 120 ? l : 120 )) $T tune --ranks $r --transport p2p --sizes 12K,112K,384K,1M,4M --blocks 4,8,16,32,48,64 --threads 64,128,256,512 --dry-run --no-nccl > $OUT/tune-dev-$r.txt 2>&1; echo "tune $r rc=$? at $(( $(date +%s) - t0 ))s"
done
