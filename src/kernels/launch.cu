#include "kernels/launch.h"

#include "kernels/kernel_table.h"

namespace tpar {
namespace kernels {

uint32_t makeCallMeta(tparDataType_t dtype, tparRedOp_t op, Algo algo, uint64_t total_count,
                      bool nccl_attached) {
  // 24 bits of a hash of the whole call's count: pieces of differently sized calls then differ
  // even where one piece's count happens to match.
  uint64_t h = total_count * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<uint32_t>(dtype) | (static_cast<uint32_t>(op) << 2) |
         (static_cast<uint32_t>(algo) << 4) | (nccl_attached ? 1u << 7 : 0u) |
         (static_cast<uint32_t>(h & 0xFFFFFFu) << 8);
}

uint64_t workVectors(Algo algo, uint64_t count, size_t elem_bytes, int nranks) {
  const uint64_t per_vec = kVecBytes / elem_bytes;
  const uint64_t vecs = (count + per_vec - 1) / per_vec;
  // Two-shot spreads (peer, position) pairs over the threads in its push and gather phases;
  // staged and hierarchical give each thread one position of a chunk (hierarchical's chunks
  // are per island position, sized by the caller through `nranks` = ranks per island).
  switch (algo) {
    case Algo::kOneShot: return vecs;
    case Algo::kTwoShot: return (vecs + nranks - 1) / nranks * (nranks > 1 ? nranks - 1 : 1);
    case Algo::kStaged: return (vecs + nranks - 1) / nranks;
    case Algo::kHier: return (vecs + nranks - 1) / nranks * (nranks > 1 ? nranks - 1 : 1);
    case Algo::kOneShotPull: return vecs;
    case Algo::kTwoShotPull:
    case Algo::kPipelined:
    case Algo::kTwoShotLL:
      return (vecs + nranks - 1) / nranks * (nranks > 1 ? nranks - 1 : 1);
  }
  return vecs;
}

int threadsFor(uint64_t work, int blocks, int max_threads) {
  const uint64_t per_block = (work + blocks - 1) / blocks;
  uint64_t t = (per_block + 31) / 32 * 32;
  if (t < 64) t = 64;
  if (t > static_cast<uint64_t>(max_threads)) t = max_threads;
  return static_cast<int>(t);
}

cudaError_t launchAllReduce(Algo algo, tparDataType_t dtype, const AllReduceArgs& args,
                            int blocks, int threads, bool overlap, cudaStream_t stream) {
  const bool wide = args.nranks > 8;
  const void* fn = nullptr;
  switch (algo) {
    case Algo::kOneShot: fn = oneShotKernel(dtype, wide); break;
    case Algo::kTwoShot: fn = twoShotKernel(dtype, wide); break;
    case Algo::kStaged: fn = stagedKernel(dtype, wide); break;
    case Algo::kHier: fn = hierKernel(dtype, wide); break;
    case Algo::kOneShotPull: fn = oneShotPullKernel(dtype, wide); break;
    case Algo::kTwoShotPull: fn = twoShotPullKernel(dtype, wide); break;
    case Algo::kPipelined: fn = pipelinedKernel(dtype, wide); break;
    case Algo::kTwoShotLL: fn = twoShotLLKernel(dtype, wide); break;
  }
  if (fn == nullptr) return cudaErrorInvalidValue;
  void* params[] = {const_cast<AllReduceArgs*>(&args)};
  if (!overlap) return cudaLaunchKernel(fn, dim3(blocks), dim3(threads), params, 0, stream);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, fn, params);
}

// NOTE [preload]
// Under lazy module loading (the CUDA 12+ default) a kernel's module is loaded at its first
// launch, and loading waits for the device to go idle. A rank whose first kernel spins waiting
// for a peer on another stream then blocks that peer's first launch: a deadlock (seen on an
// H200: two streams, spin/set, hangs under LAZY, fine under EAGER). Touching every kernel with
// cudaFuncGetAttributes at communicator init loads them all up front.
cudaError_t preloadKernels() {
  cudaError_t result = cudaSuccess;
  forEachKernel([&](const void* fn) {
    cudaFuncAttributes attr;
    if (result == cudaSuccess) result = cudaFuncGetAttributes(&attr, fn);
  });
  return result;
}

cudaError_t maxActiveBlocksPerSm(int threads, int* blocks) {
  int best = 1 << 30;
  cudaError_t result = cudaSuccess;
  forEachKernel([&](const void* fn) {
    int b = 0;
    if (result == cudaSuccess)
      result = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, fn, threads, 0);
    if (result == cudaSuccess && b < best) best = b;
  });
  *blocks = best;
  return result;
}

}  // namespace kernels
}  // namespace tpar
