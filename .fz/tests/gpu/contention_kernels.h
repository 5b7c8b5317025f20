// Compute kernels that stand in for a serving engine's work between all-reduces
// (contention_test.cc): random length, grid and shared memory, up to the most shared memory one
// block may take, so that some of them fit only on a multiprocessor with nothing else on it.
#ifndef TPAR_TESTS_GPU_CONTENTION_KERNELS_H_
#define TPAR_TESTS_GPU_CONTENTION_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tpar_test {

constexpr int kContentionThreads = 256;

// Loads the kernel and allows it `max_smem_bytes` of dynamic shared memory (NOTE [preload]: it
// is launched while other ranks' all-reduces spin).
cudaError_t preloadContentionKernel(int max_smem_bytes);

// Blocks of the kernel with `smem_bytes` that one multiprocessor holds at once.
cudaError_t contentionBlocksPerSm(int smem_bytes, int* blocks);

// `grid` blocks of kContentionThreads threads, each holding `smem_bytes` of shared memory and
// spinning for `cycles` clock cycles.
cudaError_t launchContentionKernel(int grid, int smem_bytes, uint32_t cycles,
                                   cudaStream_t stream);

}  // namespace tpar_test

#endif  // TPAR_TESTS_GPU_CONTENTION_KERNELS_H_
