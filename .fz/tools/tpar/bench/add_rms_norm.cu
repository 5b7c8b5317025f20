#include "tools/tpar/bench/add_rms_norm.h"

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace tpar_cli {
namespace {

__device__ __forceinline__ float toF(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float toF(__half x) { return __half2float(x); }
__device__ __forceinline__ float toF(float x) { return x; }
template <typename T>
__device__ __forceinline__ T fromF(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 fromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half fromF<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ float fromF<float>(float x) { return x; }


// One block per row; a thread's vectors c = threadIdx.x + k * blockDim.x, k < kVecs.
template <typename T, int kVecs>
__global__ void addRmsNorm(const T* __restrict__ sum, T* residual, const T* __restrict__ weight,
                           T* out, int hidden, float eps) {
  constexpr int kPer = 16 / sizeof(T);
  const int row_vecs = hidden / kPer;
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  float r[kVecs][kPer];
  float squares = 0;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= row_vecs) continue;
    uint4 sv = reinterpret_cast<const uint4*>(sum + base)[c];
    uint4 rv = sv;
    if (residual != nullptr) rv = reinterpret_cast<const uint4*>(residual + base)[c];
    const T* s = reinterpret_cast<const T*>(&sv);
    T* rr = reinterpret_cast<T*>(&rv);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const float z = residual != nullptr ? toF(rr[i]) + toF(s[i]) : toF(s[i]);
      squares += z * z;
      rr[i] = fromF<T>(z);
      r[k][i] = toF(rr[i]);
    }
    if (residual != nullptr) reinterpret_cast<uint4*>(residual + base)[c] = rv;
  }
  // The block's sum of squares: warps by shuffle, then the first warp over the warps' sums.
  __shared__ float warp_sums[32];
  __shared__ float total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xFFFFFFFFu, squares, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = squares;
  __syncthreads();
  if (threadIdx.x < 32) {
    const int warps = (blockDim.x + 31) / 32;
    float t = threadIdx.x < warps ? warp_sums[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, o);
    if (threadIdx.x == 0) total = t;
  }
  __syncthreads();
  const float inv = rsqrtf(total / static_cast<float>(hidden) + eps);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= row_vecs) continue;
    const uint4 wv = reinterpret_cast<const uint4*>(weight)[c];
    const T* w = reinterpret_cast<const T*>(&wv);
    uint4 yv;
    T* y = reinterpret_cast<T*>(&yv);
#pragma unroll
    for (int i = 0; i < kPer; ++i) y[i] = fromF<T>(toF(fromF<T>(r[k][i] * inv)) * toF(w[i]));
    reinterpret_cast<uint4*>(out + base)[c] = yv;
  }
}

template <typename T>
cudaError_t launchTyped(const void* sum, void* residual, const void* weight, void* out,
                        size_t tokens, size_t hidden, float eps, cudaStream_t stream) {
  constexpr int kPer = 16 / sizeof(T);
  const int row_vecs = static_cast<int>(hidden) / kPer;
  // As few vectors a thread as 1024 threads allow, then as few threads as that needs.
  const int vecs = row_vecs <= 1024 ? 1 : row_vecs <= 2048 ? 2 : 4;
  const int threads = ((row_vecs + vecs - 1) / vecs + 31) / 32 * 32;
  const auto* s = static_cast<const T*>(sum);
  auto* r = static_cast<T*>(residual);
  const auto* w = static_cast<const T*>(weight);
  auto* o = static_cast<T*>(out);
  const dim3 grid(static_cast<unsigned>(tokens));
  const int h = static_cast<int>(hidden);
  if (vecs == 1) addRmsNorm<T, 1><<<grid, threads, 0, stream>>>(s, r, w, o, h, eps);
  else if (vecs == 2) addRmsNorm<T, 2><<<grid, threads, 0, stream>>>(s, r, w, o, h, eps);
  else addRmsNorm<T, 4><<<grid, threads, 0, stream>>>(s, r, w, o, h, eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launchAddRmsNorm(const void* sum, void* residual, const void* weight, void* out,
                             size_t tokens, size_t hidden, float eps, tparDataType_t dtype,
                             cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (hidden == 0 || hidden % 8 != 0 || hidden > 16384) return cudaErrorInvalidValue;
  switch (dtype) {
    case tparBfloat16:
      return launchTyped<__nv_bfloat16>(sum, residual, weight, out, tokens, hidden, eps, stream);
    case tparFloat16:
      return launchTyped<__half>(sum, residual, weight, out, tokens, hidden, eps, stream);
    case tparFloat32:
      return launchTyped<float>(sum, residual, weight, out, tokens, hidden, eps, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace tpar_cli
