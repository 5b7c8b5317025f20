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

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_KERNEL_TABLE_H_
