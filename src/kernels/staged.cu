// Staged two-shot all-reduce: the reduce-scatter and all-gather of two-shot, with the pushes
// of each position ordered as a rotation. In step s (1..n-1) rank r pushes to rank r+s and
// waits for what rank r-s pushed to it before it takes step s+1, so each position has one
// outbound and one inbound peer per step (stagedTarget / stagedSource in prims/schedule.h,
// which the unit tests check). All-to-all writes collapse at a PCIe root complex; this keeps
// each step's traffic to one stream in and one out per rank, at the cost of n-1 dependent steps
// per phase. Same workspace layout and same results, bit for bit, as two-shot.
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

struct Staged {
  using Box = SentinelBox;
  using Codec = IdentityCodec;

  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const uint64_t chunk = chunkVecs(vecs, n, 1);
    const Box box(a, ctx);
    char* own = box.area(me);
    char* own_gather = own + box.gatherOffset(chunk);
    const int grid = activeBlocks(a);
    const uint64_t stride = uint64_t(grid) * blockDim.x;

    sendHeaders(a, ctx);
    Waiter w(a);
    if (!checkHeaders(a, ctx, w)) return;

    for (uint64_t j = spreadIndex(threadIdx.x, blockIdx.x, grid); j < chunk; j += stride) {
      const uint64_t v_own = uint64_t(me) * chunk + j;
      // Reduce-scatter, one peer per step: push to me+s, then wait for what me-s pushed here.
#pragma unroll
      for (int s = 1; s < kMax; ++s) {
        if (s < n) {
          const int p = stagedTarget(me, s, n);
          const uint64_t v = uint64_t(p) * chunk + j;
          if (v < vecs) {
            box.put(box.area(p), uint64_t(me) * chunk + j,
                    Codec::encode<Box::kReservesWord>(loadUser<T>(a.send, v, a.count, aligned)));
          }
          if (v_own < vecs) {
            const uint64_t i = uint64_t(stagedSource(me, s, n)) * chunk + j;
            Box::Line x = box.fetch(own, i);
            if (!settle(box, own, i, x, w)) return;
          }
        }
      }
      if (v_own >= vecs) continue;  // our chunk is shorter than the others: nothing to reduce
      // Everything has arrived: reduce in rank order (as two-shot does, so the bits match it),
      // reading the slots again rather than keeping step-ordered registers.
      const Vec mine = Codec::encode<Box::kReservesWord>(loadUser<T>(a.send, v_own, a.count, aligned));
      Acc<T> acc;
#pragma unroll
      for (int s = 0; s < kMax; ++s) {
        if (s < n) acc.take(s, s == me ? mine : box.fetch(own, uint64_t(s) * chunk + j), RuntimeOp{a.op});
      }
      const Vec r = Codec::encode<Box::kReservesWord>(acc.round());
      storeUser<T>(a.recv, v_own, a.count, aligned, r);
#pragma unroll
      for (int s = 0; s < kMax; ++s) {
        if (s < n && s != me) box.release(own, uint64_t(s) * chunk + j);
      }
    }

    // All-gather, one peer per step: push our reduced chunk to me+s, take owner me-s's chunk.
    for (uint64_t j = spreadIndex(threadIdx.x, blockIdx.x, grid); j < chunk; j += stride) {
      const uint64_t v_own = uint64_t(me) * chunk + j;
      Vec r{{0, 0, 0, 0}};
      if (v_own < vecs) r = Codec::encode<Box::kReservesWord>(loadUser<T>(a.recv, v_own, a.count, aligned));
#pragma unroll
      for (int s = 1; s < kMax; ++s) {
        if (s < n) {
          if (v_own < vecs) box.put(box.area(stagedTarget(me, s, n)) + box.gatherOffset(chunk), v_own, r);
          const uint64_t v = uint64_t(stagedSource(me, s, n)) * chunk + j;
          if (v < vecs) {
            Box::Line x = box.fetch(own_gather, v);
            if (!settle(box, own_gather, v, x, w)) return;
            storeUser<T>(a.recv, v, a.count, aligned, Codec::decode(x));
            box.release(own_gather, v);
          }
        }
      }
    }
  }
};

}  // namespace

extern const KernelSet stagedKernels = makeKernelSet<Staged>();

}  // namespace kernels
}  // namespace tpar
