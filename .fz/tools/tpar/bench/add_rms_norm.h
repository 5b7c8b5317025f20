// The baseline of `tpar bench --fused`: residual add + RMSNorm as a kernel of its own after the
// all-reduce, written as well as the fused epilogue (one block per row, 16-byte vectors, the
// row kept in registers as fp32, one block reduction), with the fused call's arithmetic
// (docs/FUSED.md, "What a call computes"), so that the fused call is compared with the best
// unfused sequence rather than a slow one.
#ifndef TPAR_TOOLS_ADD_RMS_NORM_H_
#define TPAR_TOOLS_ADD_RMS_NORM_H_

#include <cstddef>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace tpar_cli {

// For each of `tokens` rows of `hidden` elements: r = round(float(residual) + float(sum))
// written back into residual (sum alone when residual is null), then
// out = round(round(r * rsqrt(mean(z^2) + eps)) * weight). hidden: a multiple of 8 up to 16384;
// every pointer 16-byte aligned. Returns the launch's error.
cudaError_t launchAddRmsNorm(const void* sum, void* residual, const void* weight, void* out,
                             size_t tokens, size_t hidden, float eps, tparDataType_t dtype,
                             cudaStream_t stream);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_ADD_RMS_NORM_H_
