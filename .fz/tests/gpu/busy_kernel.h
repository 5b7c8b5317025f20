// A kernel that keeps the GPU busy until the host releases it: a stand-in for work tpar cannot
// end, such as an NCCL call whose peer never joins it (NOTE [bounded abort]).
#ifndef TPAR_TESTS_GPU_BUSY_KERNEL_H_
#define TPAR_TESTS_GPU_BUSY_KERNEL_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace tpar_test {

// Loads the kernel now (NOTE [preload]: it may be launched while all-reduces spin).
cudaError_t preloadBusyKernel();

// One thread that spins until *release (host memory mapped into the GPU) is non-zero, or
// max_ms have passed, so that a failed test cannot leave the GPU busy for good.
cudaError_t launchBusyKernel(const volatile uint32_t* release_dev, uint64_t max_ms,
                             cudaStream_t stream);

}  // namespace tpar_test

#endif  // TPAR_TESTS_GPU_BUSY_KERNEL_H_
