#!/usr/bin/env bash
# The second run of by-target-kernel-apart.patch (docs/PERFORMANCE.md, "The by-target kernel
# with the other kernels' code untouched"): by-target-kernel.patch without its rewrite of the
# flag poll shared with the other kernels, so that every kernel of the tree compiles to the same
# PTX (checked on the build machine) and only the new kernel differs. Trees: the tree, the tree
# built a second time (base2: what two builds of one tree differ by in this run) and the patch;
# scripts/compare-variants.sh, every tree checked first, 6 rounds, the first run's rows (host
# memory, 4 and 8 ranks, auto and the two-shot pull forced, 64K to 384K);
# decide_by_target_kernel_apart_2.py (the second rule, written after the first run and before
# this one); where it merges and time is left, the patched tree's GPU tests.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 CUDA_DEVICE_MAX_CONNECTIONS=32
N=by-target-kernel-apart2-${NEW_SHA:?}; O=$OUT/$N; mkdir -p $O; L=$O/log.txt; T0=$(date +%s); D=${DEADLINE:-585}
t() { echo "== $(( $(date +%s) - T0 ))s $*" | tee -a $L; }
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv > $O/gpu.txt; cat $O/gpu.txt >> $L
cp bench/experiments/calls/by-target-kernel-apart-2.sh bench/experiments/calls/decide_by_target_kernel_apart_2.py $O/
echo "head=$NEW_SHA" >> $L
t variants
CHECK=1 ROUNDS=${ROUNDS:-6} JOBS=5 timeout $(( D - 30 )) scripts/compare-variants.sh $O/var \
  "base=. base2=. apart=.+bench/experiments/variants/by-target-kernel-apart.patch" \
  "host|CUDA_VISIBLE_DEVICES=0|--transport host --ranks 4,8 --backends tpar,tpar:twoshot-pull --sizes 64K,96K,112K,256K,384K -n 30 -w 5" \
  > $O/variants.txt 2> $O/variants.err; echo variants rc=$? >> $L
(cd $O && python3 decide_by_target_kernel_apart_2.py > decision.txt 2>&1); tail -6 $O/decision.txt >> $L
# Where it merges, the GPU tests that run the new kernel (the host transport's, the all-reduce
# and graph suites, the pipelined shapes), on the tree compare-variants built, with the time left.
if grep -q "^decision: merge" $O/decision.txt && [ $(( D - ( $(date +%s) - T0 ) )) -gt 240 ]; then
  t "tests of the patched tree"
  timeout $(( D - ( $(date +%s) - T0 ) - 150 )) bash -c "cmake -S /tmp/exp-src-apart -B /tmp/exp-build-apart -DTPAR_BUILD_TESTS=ON > $O/build-tests.log 2>&1 && cmake --build /tmp/exp-build-apart -j16 --target tpar_gpu_tests >> $O/build-tests.log 2>&1"; echo "build rc=$?" >> $L
  timeout $(( D - ( $(date +%s) - T0 ) - 10 )) /tmp/exp-build-apart/tests/tpar_gpu_tests \
    --gtest_filter='*HostTransport*:*AllReduce*:*Graph*:*PipelinedShapes*:-*Soak*:*Killed*:*Contention*' > $O/gpu_tests.txt 2>&1
  echo "tests rc=$?" >> $L; tail -3 $O/gpu_tests.txt >> $L
fi
t "done"
cd $OUT && tar -czf by-target-kernel-apart-2.tgz $N && rm -rf $N
