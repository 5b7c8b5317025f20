// The streaming kernels of the link probes (probes.cu) and of bench/experiments/host_link.cu:
// every thread stores, or loads, 16-byte vectors over a buffer, grid-strided. Each includer gets
// its own copies (internal linkage).
#ifndef TPAR_CLI_DOCTOR_STREAM_KERNELS_CUH_
#define TPAR_CLI_DOCTOR_STREAM_KERNELS_CUH_

#include <cstddef>

namespace tpar_cli {
namespace {

__global__ void storeStream(int4* dst, size_t n, int seed) {
  const int4 v = make_int4(seed, seed ^ 0x5a5a5a5a, ~seed, seed + 1);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = v;
}

// Four independent loads per step keep enough requests in flight to cover a PCIe round trip.
// The folded value is stored only when it matches one value, so the loads cannot be dropped
// (storing it by chance is harmless).
__global__ void loadStream(const int4* src, size_t n, int* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  int acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 a = __ldcg(src + i), b = __ldcg(src + i + stride);
    const int4 c = __ldcg(src + i + 2 * stride), d = __ldcg(src + i + 3 * stride);
    acc ^= (a.x ^ a.y ^ a.z ^ a.w) + (b.x ^ b.y ^ b.z ^ b.w) + (c.x ^ c.y ^ c.z ^ c.w) +
           (d.x ^ d.y ^ d.z ^ d.w);
  }
  for (; i < n; i += stride) {
    const int4 a = __ldcg(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x13572468) *sink = acc;
}

}  // namespace
}  // namespace tpar_cli

#endif  // TPAR_CLI_DOCTOR_STREAM_KERNELS_CUH_
