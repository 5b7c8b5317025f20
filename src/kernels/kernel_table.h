// Per-algorithm entry points, implemented one algorithm per .cu file and tied together by
// launch.cu. Internal to src/kernels.
#ifndef TPAR_KERNELS_KERNEL_TABLE_H_
#define TPAR_KERNELS_KERNEL_TABLE_H_

#include <vector>

#include "kernels/launch.h"

namespace tpar {
namespace kernels {

// The kernel for (datatype, rank-count variant); `wide` selects the 16-rank variant.
const void* oneShotKernel(tparDataType_t dtype, bool wide);
const void* twoShotKernel(tparDataType_t dtype, bool wide);
const void* stagedKernel(tparDataType_t dtype, bool wide);
const void* hierKernel(tparDataType_t dtype, bool wide);
const void* oneShotPullKernel(tparDataType_t dtype, bool wide);
const void* twoShotPullKernel(tparDataType_t dtype, bool wide);
const void* pipelinedKernel(tparDataType_t dtype, bool wide);
const void* twoShotLLKernel(tparDataType_t dtype, bool wide);

// Defines `table_fn(dtype, wide)`, returning the instantiation of kernel template `kernel` for
// that datatype and rank-count variant (8 or 16 ranks at most). One per algorithm file.
#define TPAR_DEFINE_KERNEL_TABLE(table_fn, kernel)                                \
  const void* table_fn(tparDataType_t dtype, bool wide) {                         \
    switch (dtype) {                                                              \
      case tparFloat32:                                                           \
        return wide ? reinterpret_cast<const void*>(&kernel<float, 16>)           \
                    : reinterpret_cast<const void*>(&kernel<float, 8>);           \
      case tparFloat16:                                                           \
        return wide ? reinterpret_cast<const void*>(&kernel<F16Tag, 16>)          \
                    : reinterpret_cast<const void*>(&kernel<F16Tag, 8>);          \
      case tparBfloat16:                                                          \
        return wide ? reinterpret_cast<const void*>(&kernel<Bf16Tag, 16>)         \
                    : reinterpret_cast<const void*>(&kernel<Bf16Tag, 8>);         \
      default:                                                                    \
        return nullptr;                                                           \
    }                                                                             \
  }

// Every kernel of the table (preload, occupancy).
template <typename F>
void forEachKernel(F&& f) {
  for (tparDataType_t d : {tparFloat32, tparFloat16, tparBfloat16}) {
    for (bool wide : {false, true}) {
      f(oneShotKernel(d, wide));
      f(twoShotKernel(d, wide));
      f(stagedKernel(d, wide));
      f(hierKernel(d, wide));
      f(oneShotPullKernel(d, wide));
      f(twoShotPullKernel(d, wide));
      f(pipelinedKernel(d, wide));
      f(twoShotLLKernel(d, wide));
    }
  }
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_KERNEL_TABLE_H_
