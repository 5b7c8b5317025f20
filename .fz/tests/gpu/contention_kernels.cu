#include "gpu/contention_kernels.h"

namespace tpar_test {
namespace {

__device__ uint32_t g_contention_sink;

__global__ void __launch_bounds__(kContentionThreads) contentionKernel(uint32_t cycles) {
  extern __shared__ uint32_t smem[];
  const long long start = clock64();
  uint32_t acc = threadIdx.x;
  while (clock64() - start < static_cast<long long>(cycles)) acc = acc * 1664525u + 1013904223u;
  // Never true in practice; keeps the loop (and the shared memory) from being optimized away.
  if (acc == 0x9E3779B9u) {
    smem[threadIdx.x] = acc;
    __syncthreads();
    g_contention_sink = smem[(threadIdx.x + 1) % kContentionThreads];
  }
}

}  // namespace

cudaError_t preloadContentionKernel(int max_smem_bytes) {
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, contentionKernel);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(contentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              max_smem_bytes);
}

cudaError_t contentionBlocksPerSm(int smem_bytes, int* blocks) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, contentionKernel,
                                                       kContentionThreads, smem_bytes);
}

cudaError_t launchContentionKernel(int grid, int smem_bytes, uint32_t cycles,
                                   cudaStream_t stream) {
  contentionKernel<<<grid, kContentionThreads, smem_bytes, stream>>>(cycles);
  return cudaGetLastError();
}

}  // namespace tpar_test
