#!/usr/bin/env bash
# What costs the two-shot push forced on the host at 256 KiB against 1407f0e (docs/PERFORMANCE.md,
# "The no-P2P issue's tables at 23175ee"): the tree, the kernels of 1407f0e (OLD, a folder holding
# `git archive 1407f0e`), twoshot-host-kernel8.patch (the 8-rank kernel for the two-shot push on
# the host above 128 KiB, as 1407f0e ran every group) and twoshot-narrow-user.patch (4-byte
# accesses of the caller's buffers, as before the rebuild); scripts/compare-variants.sh, every
# tree checked first, 6 rounds; the two-shot push forced at 2 and 4 ranks, 32 KiB to 512 KiB, and
# auto at 4 ranks where it runs the two-shot push (64 and 96 KiB); then
# decide_twoshot_host_256k.py (the rule, written before the run).
#   OLD=.fzo/old1407 NEW_SHA=<commit> DEADLINE=585 bash bench/experiments/calls/twoshot-host-256k.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_MAX_CONNECTIONS=32
N=twoshot-host-256k-${NEW_SHA:?}; O=$OUT/$N; mkdir -p $O; L=$O/log.txt; T0=$(date +%s); D=${DEADLINE:-585}
t() { echo "== $(( $(date +%s) - T0 ))s $*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $O/gpu.txt; cat $O/gpu.txt >> $L
cp bench/experiments/calls/twoshot-host-256k.sh bench/experiments/calls/decide_twoshot_host_256k.py $O/
echo "head=$NEW_SHA old=${OLD:?}" >> $L
[ -f "$OLD/src/kernels/two_shot.cu" ] || { t "no 1407f0e tree at $OLD"; exit 2; }
t variants
V=bench/experiments/variants
CHECK=1 ROUNDS=${ROUNDS:-6} JOBS=4 timeout $(( D - 30 )) scripts/compare-variants.sh $O/var \
  "base=. old=$OLD k8=.+$V/twoshot-host-kernel8.patch narrow=.+$V/twoshot-narrow-user.patch" \
  "forced|CUDA_VISIBLE_DEVICES=0|--transport host --ranks 2,4 --backends tpar:twoshot --sizes 32K,128K,256K,512K -n 30 -w 5" \
  "auto|CUDA_VISIBLE_DEVICES=0|--transport host --ranks 4 --backends tpar --sizes 64K,96K -n 30 -w 5" \
  > $O/variants.txt 2> $O/variants.err; echo variants rc=$? >> $L
(cd $O && python3 decide_twoshot_host_256k.py > decision.txt 2>&1); tail -8 $O/decision.txt >> $L
t "done"
cd $OUT && tar -czf twoshot-host-256k.tgz $N && rm -rf $N
