// Device half of the host-transport stress test (stress_kernels.h).
#include "gpu/stress_kernels.h"

#include "registry/algorithms.h"
#include "gpu/elem_device.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

namespace tpar_test {
namespace {

// NOTE [stress inputs]
// Every input element is a function of (call seed, rank, index), so the
// check kernel of each rank recomputes the whole reference itself (the fp32 sum in rank order,
// rounded once, as tparAllReduce promises) without reading any other rank's buffer, and no
// host work is needed per call beyond the launches.
// Uniform in [-1, 1) with 24 bits, rounded to the datatype, returned as the float the
// all-reduce will read back.
__device__ __forceinline__ float stressInput(uint64_t seed, int rank, size_t i, int dtype) {
  const uint64_t h =
      mix(seed ^ (static_cast<uint64_t>(rank) << 56) ^ (i * 0x9E3779B97F4A7C15ull));
  const float f =
      static_cast<float>(static_cast<int64_t>(h >> 40) - (1ll << 23)) / float(1 << 23);
  if (dtype == tparFloat16) return __half2float(__float2half_rn(f));
  if (dtype == tparBfloat16) return __bfloat162float(__float2bfloat16_rn(f));
  return f;
}

__device__ __forceinline__ void stressPoison(void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) static_cast<uint32_t*>(p)[i] = 0xA7A7A7A7u;
  else static_cast<uint16_t*>(p)[i] = 0xA7A7u;
}

constexpr unsigned char kPoison = 0xA7;

// Writes rank `rank`'s inputs of call `seed` into `send`, poisons `recv` (out of place) and the
// guard bytes after the output in both cases.
__global__ void stressFill(void* send, void* recv, size_t count, int dtype, uint64_t seed,
                           int rank, bool in_place) {
  const size_t es = tpar::elementBytes(static_cast<tparDataType_t>(dtype));
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += stride) {
    storeFromFloat(send, i, dtype, stressInput(seed, rank, i, dtype));
    if (!in_place) stressPoison(recv, i, dtype);
  }
  if (blockIdx.x == 0 && threadIdx.x < kStressGuardBytes)
    static_cast<unsigned char*>(recv)[count * es + threadIdx.x] = kPoison;
}

__global__ void stressCheck(const void* recv, size_t count, int dtype, int op, uint64_t seed,
                            int nranks, unsigned long long call, StressCounters* c) {
  const size_t es = tpar::elementBytes(static_cast<tparDataType_t>(dtype));
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  unsigned long long wrong = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += stride) {
    float acc = stressInput(seed, 0, i, dtype);
    for (int r = 1; r < nranks; ++r) {
      acc = combine(acc, stressInput(seed, r, i, dtype), op);
    }
    wrong += bitsOf(recv, i, dtype) != roundBits(acc, dtype);
  }
  unsigned long long guard = 0;
  if (blockIdx.x == 0 && threadIdx.x < kStressGuardBytes)
    guard = static_cast<const unsigned char*>(recv)[count * es + threadIdx.x] != kPoison;
  if (wrong) atomicAdd(&c->wrong, wrong);
  if (guard) atomicAdd(&c->guard, guard);
  if (wrong || guard) atomicMin(&c->first_bad, call);
}

int blocksFor(size_t count) {
  return static_cast<int>(std::min<size_t>((count + 255) / 256, 128));
}

}  // namespace

StressCounterSet::~StressCounterSet() { cudaFree(dev_); }

cudaError_t StressCounterSet::init(int nranks) {
  nranks_ = nranks;
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&dev_), sizeof(StressCounters) * nranks);
  const std::vector<StressCounters> none(nranks, StressCounters{0, 0, ~0ull});
  if (e == cudaSuccess)
    e = cudaMemcpy(dev_, none.data(), sizeof(StressCounters) * nranks, cudaMemcpyHostToDevice);
  return e;
}

std::string StressCounterSet::failure(
    const std::function<std::string(unsigned long long)>& describe) const {
  std::vector<StressCounters> got(nranks_);
  const cudaError_t e =
      cudaMemcpy(got.data(), dev_, sizeof(StressCounters) * nranks_, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return std::string("reading the counters: ") + cudaGetErrorString(e);
  for (int r = 0; r < nranks_; ++r) {
    const StressCounters& k = got[r];
    if (k.wrong == 0 && k.guard == 0) continue;
    return "rank " + std::to_string(r) + ": " + std::to_string(k.wrong) + " wrong elements, " +
           std::to_string(k.guard) + " guard bytes overwritten; first bad call " +
           (k.first_bad == ~0ull ? std::string("unknown")
                                 : std::to_string(k.first_bad) + " (" + describe(k.first_bad) + ")");
  }
  return "";
}

cudaError_t preloadStressKernels() {
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, stressFill);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, stressCheck);
  return err;
}

cudaError_t launchStressFill(void* send, void* recv, size_t count, tparDataType_t dtype,
                             uint64_t seed, int rank, bool in_place, cudaStream_t stream) {
  stressFill<<<blocksFor(count), 256, 0, stream>>>(send, recv, count, dtype, seed, rank,
                                                   in_place);
  return cudaGetLastError();
}

cudaError_t launchStressCheck(const void* recv, size_t count, tparDataType_t dtype,
                              tparRedOp_t op, uint64_t seed, int nranks, unsigned long long call,
                              StressCounters* c, cudaStream_t stream) {
  stressCheck<<<blocksFor(count), 256, 0, stream>>>(recv, count, dtype, op, seed, nranks, call,
                                                    c);
  return cudaGetLastError();
}

}  // namespace tpar_test
