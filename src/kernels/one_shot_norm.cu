// One-shot all-reduce + residual add + RMSNorm (docs/FUSED.md): every rank pushes (or
// publishes) its input as one-shot does, then reduces whole rows, one block per row in turn, and
// normalizes them itself, so no extra byte crosses a link. The arithmetic is the unfused
// sequence's: the sum rounded to the datatype, z = residual + sum in fp32 and rounded into r
// (residual_out, or the residual in place), the mean of z^2 from the fp32 values, and y = round(round(r * inv) * w) from the
// rounded r (docs/FUSED.md, "What a call computes").
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

// The block's sum of one value per thread, in a fixed order (warps by shuffle, then warp 0 over
// the warps' sums), so every rank, with the same block size, gets the same bits. Every thread
// of the block calls it; every thread gets the sum.
__device__ __forceinline__ float blockSum(float v) {
  __shared__ float s_warp[kMaxThreads / 32];
  __shared__ float s_total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_warp[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x + 31) / 32; ++i) t += s_warp[i];
    s_total = t;
  }
  __syncthreads();
  const float t = s_total;
  __syncthreads();  // s_warp and s_total are reused by the next row
  return t;
}

template <class Box, bool kPull>
struct OneShotNorm {
  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const NormArgs& e, const CallContext& ctx) {
    using E = ElemTraits<T>;
    constexpr int kPer = E::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const bool e_aligned = e.aligned != 0;
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const uint64_t row_vecs = e.hidden / kPer;
    const Box box(a, ctx);
    char* own = box.area(me);
    const int grid = activeBlocks(a);
    // The push (or publish) of one-shot, with the vectors given out as the rows are below: the
    // thread that sends a vector is the one that later writes its outputs, so that the input
    // may be the output or the residual (its read precedes its write).
    sendHeaders(a, ctx);
    for (uint64_t row = blockIdx.x; row < e.rows && !ctx.failed; row += grid) {
      for (uint64_t c = threadIdx.x; c < row_vecs; c += blockDim.x) {
        const uint64_t v = row * row_vecs + c;
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

    // Rows in turn over the blocks; a row's vectors over the block's threads. A thread that
    // gives up keeps taking part in the block's barriers (bad), and the block leaves together.
    // Where r is kept (and waits for its norm): residual_out, else the residual in place, else
    // the output, which the norm then overwrites.
    void* keep = e.residual_out != nullptr ? e.residual_out
                 : e.residual != nullptr   ? e.residual
                                           : e.out;
    bool bad = false;
    for (uint64_t row = blockIdx.x; row < e.rows; row += grid) {
      float squares = 0;
      for (uint64_t c = threadIdx.x; c < row_vecs && !bad; c += blockDim.x) {
        const uint64_t v = row * row_vecs + c;
        auto src = [&](int s) {
          return kPull ? At{box.area(s), v} : At{own, uint64_t(s) * vecs + v};
        };
        Acc<T> acc;
        if (!reduceFrom<T, kMax, IdentityCodec>(
                box, n, me, src,
                [&] {
                  return IdentityCodec::template encode<Box::kReservesWord>(
                      loadUser<T>(a.send, v, a.count, aligned));
                },
                RuntimeOp{tparSum}, w, &acc)) {
          bad = true;
          break;
        }
        releaseFrom<kMax>(box, n, me, src);
        const Vec sum = acc.round();  // what the unfused all-reduce would have written
        Vec r = sum;
        const Vec res = e.residual != nullptr ? loadUser<T>(e.residual, v, a.count, e_aligned) : sum;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const float z = e.residual != nullptr ? E::toFloat(res, i) + E::toFloat(sum, i)
                                                : E::toFloat(sum, i);
          squares += z * z;
          E::fromFloat(r, i, z);
        }
        storeUser<T>(keep, v, a.count, e_aligned, r);
      }
      if (__syncthreads_or(bad)) return;
      const float inv = rsqrtf(blockSum(squares) / static_cast<float>(e.hidden) + e.eps);
      for (uint64_t c = threadIdx.x; c < row_vecs; c += blockDim.x) {
        const uint64_t v = row * row_vecs + c;
        const Vec r = loadUser<T>(keep, v, a.count, e_aligned);  // this thread's own store
        const Vec wt = loadUser<T>(e.weight, c, e.hidden, e_aligned);
        Vec y = r;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          Vec t = r;
          E::fromFloat(t, i, E::toFloat(r, i) * inv);  // rounded to the datatype first
          E::fromFloat(y, i, E::toFloat(t, i) * E::toFloat(wt, i));
        }
        storeUser<T>(e.out, v, a.count, e_aligned, y);
      }
    }
  }
};

}  // namespace

extern const KernelSet oneShotNormKernels = makeNormKernelSet<OneShotNorm<SentinelBox, false>>();
extern const KernelSet oneShotPullNormKernels = makeNormKernelSet<OneShotNorm<LineBox, true>>();

}  // namespace kernels
}  // namespace tpar
