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

// Every kernel of the table (preload, occupancy).
template <typename F>
void forEachKernel(F&& f) {
  for (tparDataType_t d : {tparFloat32, tparFloat16, tparBfloat16}) {
    for (bool wide : {false, true}) {
      f(oneShotKernel(d, wide));
      f(twoShotKernel(d, wide));
      f(stagedKernel(d, wide));
      f(hierKernel(d, wide));
    }
  }
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_KERNEL_TABLE_H_
