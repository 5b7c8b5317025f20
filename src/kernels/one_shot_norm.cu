// One-shot all-reduce + residual add + RMSNorm (docs/FUSED.md): every rank pushes (or
// publishes) its input as one-shot does, then reduces whole rows, one block per row in turn, and
// normalizes them itself, so no extra byte crosses a link. The arithmetic is the unfused
// sequence's: the sum rounded to the datatype, z = residual + sum in fp32 and rounded into r
// (residual_out, or the residual in place), the mean of z^2 from the fp32 values, and
// y = round(round(r * inv) * w) from the rounded r, then y's quantized copy if one is asked for
// (docs/FUSED.md, "What a call computes").
#include "kernels/norm_epilogue.cuh"
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

using norm::normSlice;

template <class Box, bool kPull>
struct OneShotNorm {
  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const NormArgs& e, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const uint32_t row_vecs = e.hidden / kPer;
    const Box box(a, ctx);
    char* own = box.area(me);
    const int grid = activeBlocks(a);
    // Units of work: a whole row, or one slice of a row group (NOTE [row groups]); rows times
    // group fits the grid when group > 1, and rows fit 32 bits (NormArgs).
    const uint32_t group = e.group > 1 ? e.group : 1;
    const uint32_t slice = group > 1 ? e.slice : row_vecs;
    const uint32_t units = e.rows * group;
    // The push (or publish) of one-shot, with the vectors given out as the rows are below: the
    // thread that sends a vector is the one that later writes its outputs, so that the input
    // may be the output or the residual (its read precedes its write).
    sendHeaders(a, ctx);
    for (uint32_t u = blockIdx.x; u < units && !ctx.failed; u += grid) {
      const uint32_t row = u / group, c0 = (u % group) * slice;
      const uint32_t c1 = c0 + slice < row_vecs ? c0 + slice : row_vecs;
      for (uint32_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
        const uint64_t v = uint64_t(row) * row_vecs + c;
        const Vec x = IdentityCodec::template encode<Box::kReservesWord>(
            loadUser<T>(a.send, v, a.count, aligned));
        if (kPull) {
          box.put(own, v, x);
        } else {
#pragma unroll
          for (int i = 1; i < kMax; ++i) {
            if (i < n) box.put(box.area(ahead(me, i, n)), uint64_t(me) * vecs + v, x);
          }
        }
      }
    }

    Waiter w(a);
    if (!checkHeaders(a, ctx, w)) return;

    for (uint32_t u = blockIdx.x; u < units; u += grid) {
      const uint32_t row = u / group, c0 = (u % group) * slice;
      const uint32_t c1 = c0 + slice < row_vecs ? c0 + slice : row_vecs;
      auto sumOf = [&](uint32_t, uint64_t v, Vec* sum) {
        auto src = [&](int s) {
          return kPull ? At{box.area(s), v} : At{own, uint64_t(s) * vecs + v};
        };
        return norm::sumInRankOrder<T, kMax>(box, n, me, src, a, v, aligned, w, sum);
      };
      const norm::GroupAcross across{a, ctx, w, u, group};
      if (!normSlice<T>(e, row, c0, c1, u % group == 0, sumOf, across)) return;
    }
  }
};

// The norm after a separate all-reduce (the composite path of docs/FUSED.md, "Where the norm
// happens"): the reduced rows are in `sum`, one block per row in turn, the arithmetic of the
// fused kernel (normSlice), so both give the same bits for the same block size.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads, 1)
    addRmsNormKernel(const __grid_constant__ NormArgs e, const void* sum) {
  const uint32_t row_vecs = e.hidden / ElemTraits<T>::kPerVec;
  const uint64_t count = uint64_t(e.rows) * e.hidden;
  for (uint32_t row = blockIdx.x; row < e.rows; row += gridDim.x) {
    auto sumOf = [&](uint32_t, uint64_t v, Vec* s) {
      *s = loadUser<T>(sum, v, count, e.aligned != 0);
      return true;
    };
    auto whole = [](int, float mine, auto, float* total) {
      *total = mine;
      return true;
    };
    normSlice<T>(e, row, 0, row_vecs, true, sumOf, whole);
  }
}

}  // namespace

extern const KernelSet oneShotNormKernels = makeNormKernelSet<OneShotNorm<SentinelBox, false>>();
extern const KernelSet oneShotPullNormKernels = makeNormKernelSet<OneShotNorm<LineBox, true>>();
// One kernel per datatype for every group size: nothing here depends on the rank count.
extern const KernelSet addRmsNormKernels =
    KernelSet::uniform(reinterpret_cast<const void*>(&addRmsNormKernel<float>),
                       reinterpret_cast<const void*>(&addRmsNormKernel<F16Tag>),
                       reinterpret_cast<const void*>(&addRmsNormKernel<Bf16Tag>));

}  // namespace kernels
}  // namespace tpar
