#include "tools/tpar/common/measure.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tpar_cli {
namespace {

// Inputs whose sums are exact in every datatype: small integers, |sum| <= 8 * ranks (<= 128,
// exact in bf16).
__device__ inline float inputValue(size_t i, int rank) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 3 + (i >> 10)) % 17) - 8);
}

__device__ inline void storeAs(void* p, size_t i, int dtype, float v) {
  if (dtype == tparFloat32) static_cast<float*>(p)[i] = v;
  else if (dtype == tparFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ inline float loadAs(const void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) return static_cast<const float*>(p)[i];
  if (dtype == tparFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__global__ void fillInputs(void* buf, size_t count, int dtype, int rank) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    storeAs(buf, i, dtype, inputValue(i, rank));
}

__global__ void countWrong(const void* out, size_t count, int dtype, int nranks,
                           unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = 0.f;
    for (int r = 0; r < nranks; ++r) want += inputValue(i, r);
    local += loadAs(out, i, dtype) != want;
  }
  if (local) atomicAdd(wrong, local);
}

__global__ void emptyKernel() {}

}  // namespace

size_t elemSize(tparDataType_t d) { return d == tparFloat32 ? 4 : 2; }

cudaError_t setDevice(int dev) {
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess || cur == dev) return e;
  return cudaSetDevice(dev);
}

Ranks::~Ranks() {
  for (size_t r = 0; r < devs.size(); ++r) {
    cudaSetDevice(devs[r]);
    if (r < in.size()) cudaFree(in[r]);
    if (r < out.size()) cudaFree(out[r]);
    if (r < streams.size()) cudaStreamDestroy(streams[r]);
  }
  if (wrong) cudaFreeHost(wrong);
}

std::string Ranks::alloc(const std::vector<int>& d, size_t bytes) {
  devs = d;
  for (int dev : devs) {
    TPAR_CLI_CUDA(cudaSetDevice(dev));
    cudaStream_t s;
    TPAR_CLI_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams.push_back(s);
    void* a = nullptr;
    void* b = nullptr;
    TPAR_CLI_CUDA(cudaMalloc(&a, bytes + 64));
    in.push_back(a);
    TPAR_CLI_CUDA(cudaMalloc(&b, bytes + 64));
    out.push_back(b);
  }
  TPAR_CLI_CUDA(cudaSetDevice(devs[0]));
  TPAR_CLI_CUDA(cudaMallocHost(&wrong, sizeof(*wrong)));
  // Load this file's kernels now: a first launch behind a waiting all-reduce of another rank
  // of the same GPU can deadlock under lazy module loading (NOTE [preload]).
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    fillInputs<<<1, 32, 0, streams[r]>>>(in[r], 0, tparBfloat16, 0);
    countWrong<<<1, 32, 0, streams[r]>>>(out[r], 0, tparBfloat16, 1, wrong);
    emptyKernel<<<1, 32, 0, streams[r]>>>();
    TPAR_CLI_CUDA(cudaGetLastError());
  }
  return sync();
}

std::string Ranks::sync() {
  for (size_t r = 0; r < devs.size(); ++r) TPAR_CLI_CUDA(cudaStreamSynchronize(streams[r]));
  return "";
}

std::string Ranks::fill(const std::vector<void*>& bufs, const std::vector<void*>& poisoned,
               size_t count, tparDataType_t dtype) {
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    fillInputs<<<256, 256, 0, streams[r]>>>(bufs[r], count, dtype,
                                            first_rank + static_cast<int>(r));
    TPAR_CLI_CUDA(cudaGetLastError());
    if (!poisoned.empty())
      TPAR_CLI_CUDA(cudaMemsetAsync(poisoned[r], 0xA7, count * elemSize(dtype), streams[r]));
  }
  return sync();
}

std::string Ranks::countWrongIn(const std::vector<void*>& bufs, size_t count, tparDataType_t dtype,
                                long long* result) {
  *wrong = 0;
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    countWrong<<<128, 256, 0, streams[r]>>>(
        bufs[r], count, dtype, world > 0 ? world : static_cast<int>(devs.size()), wrong);
    TPAR_CLI_CUDA(cudaGetLastError());
  }
  if (std::string e = sync(); !e.empty()) return e;
  *result = static_cast<long long>(*wrong);
  return "";
}

std::string timeFloor(Ranks& rk, int iters, double* us) {
  return timeIt(rk, iters, 2, true, [&]() -> std::string {
    for (size_t r = 0; r < rk.devs.size(); ++r) {
      setDevice(rk.devs[r]);
      emptyKernel<<<1, 32, 0, rk.streams[r]>>>();
    }
    return std::string();
  }, us);
}

}  // namespace tpar_cli
