#include "gpu/busy_kernel.h"

namespace tpar_test {
namespace {

__global__ void busyKernel(const volatile uint32_t* release, uint64_t max_ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    if (*release != 0) return;
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > max_ns) return;
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t preloadBusyKernel() {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, busyKernel);
}

cudaError_t launchBusyKernel(const volatile uint32_t* release_dev, uint64_t max_ms,
                             cudaStream_t stream) {
  busyKernel<<<1, 1, 0, stream>>>(release_dev, max_ms * 1000000ull);
  return cudaGetLastError();
}

}  // namespace tpar_test
