// One-shot all-reduce: every rank's whole input reaches every peer, and every rank reduces all
// ranks' copies itself: one hand-off, n-1 times the message sent (push) or read (pull) per rank.
// oneshot (SentinelBox, push): each thread pushes its vector to every peer, rank+1 first (every
// rank a different target at each step), then reduces that position; in place, the thread's own
// read precedes its write. oneshot-pull (LineBox, pull): each rank publishes its input once, as
// lines in its own region, which every reader shares (host memory); one round trip per vector.
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

template <class Box, bool kPull, class Codec = IdentityCodec, class Epi = IdentityEpilogue>
struct OneShot {
  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const Box box(a, ctx);
    char* own = box.area(me);
    const int grid = activeBlocks(a);
    // Pull spreads its (fewer, longer) vectors over every block; push keeps a block's vectors
    // together, as measured best for each.
    const uint64_t first = kPull ? spreadIndex(threadIdx.x, blockIdx.x, grid)
                                 : uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const uint64_t stride = uint64_t(grid) * blockDim.x;
    sendHeaders(a, ctx);
    for (uint64_t v = first; v < vecs; v += stride) {
      const Vec x = Codec::template encode<Box::kReservesWord>(loadUser<T>(a.send, v, a.count, aligned));
      if (ctx.failed) break;
      if (kPull) {
        box.put(own, v, x);
      } else {
#pragma unroll
        for (int i = 1; i < kMax; ++i) {
          if (i < n) box.put(box.area(ahead(me, i, n)), uint64_t(me) * vecs + v, x);
        }
      }
    }

    Waiter w(a);
    if (!checkHeaders(a, ctx, w)) return;

    for (uint64_t v = first; v < vecs; v += stride) {
      // Push: sender s's copy of vector v in slot s * vecs + v (rank-major: each sender writes
      // one contiguous range). Pull: vector v of the owner's own area.
      auto src = [&](int s) {
        return kPull ? At{box.area(s), v} : At{own, uint64_t(s) * vecs + v};
      };
      Acc<T> acc;
      if (!reduceFrom<T, kMax, Codec>(
              box, n, me, src,
              [&] {
                return Codec::template encode<Box::kReservesWord>(
                    loadUser<T>(a.send, v, a.count, aligned));
              },
              RuntimeOp{a.op}, w, &acc))
        return;
      if (!Epi::apply(a, v, acc, w)) return;
      storeUser<T>(a.recv, v, a.count, aligned, acc.round());
      releaseFrom<kMax>(box, n, me, src);
    }
  }
};

}  // namespace

extern const KernelSet oneShotKernels = makeKernelSet<OneShot<SentinelBox, false>, true>();
extern const KernelSet oneShotPullKernels = makeKernelSet<OneShot<LineBox, true>, true>();

}  // namespace kernels
}  // namespace tpar
