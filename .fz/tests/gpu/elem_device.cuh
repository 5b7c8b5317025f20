// Element helpers for the test kernels (test_util.cu, stress_kernels.cu): reading, writing and
// rounding one element of any tparDataType_t, a 64-bit mixer for inputs derived from seeds, and
// the reduction of two values as tparAllReduce does it (fp32, rounded to nearest).
#ifndef TPAR_TESTS_GPU_ELEM_DEVICE_CUH_
#define TPAR_TESTS_GPU_ELEM_DEVICE_CUH_

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "tpar/tpar.h"

namespace tpar_test {

// splitmix64's finalizer.
__device__ __host__ inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

__device__ inline float loadAsFloat(const void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) return static_cast<const float*>(p)[i];
  if (dtype == tparFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__device__ inline void storeFromFloat(void* p, size_t i, int dtype, float v) {
  if (dtype == tparFloat32) static_cast<float*>(p)[i] = v;
  else if (dtype == tparFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ inline uint32_t bitsOf(const void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) return static_cast<const uint32_t*>(p)[i];
  return static_cast<const uint16_t*>(p)[i];
}

__device__ inline uint32_t roundBits(float x, int dtype) {
  if (dtype == tparFloat32) return __float_as_uint(x);
  if (dtype == tparFloat16) return __half_as_ushort(__float2half_rn(x));
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ inline float bitsToFloat(uint32_t b, int dtype) {
  if (dtype == tparFloat32) return __uint_as_float(b);
  if (dtype == tparFloat16) return __half2float(__ushort_as_half(static_cast<uint16_t>(b)));
  return __uint_as_float(b << 16);
}

__device__ inline float combine(float acc, float x, int op) {
  return op == tparSum ? __fadd_rn(acc, x) : (op == tparMax ? fmaxf(acc, x) : fminf(acc, x));
}

}  // namespace tpar_test

#endif  // TPAR_TESTS_GPU_ELEM_DEVICE_CUH_
