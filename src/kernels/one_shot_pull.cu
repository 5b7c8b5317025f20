// One-shot pull all-reduce: every rank publishes its input once, as epoch-tagged lines in its own
// pull area (NOTE [pull protocol]), and reduces all ranks' inputs by reading its peers' areas.
// One write per rank instead of n-1: where the regions live in host memory every reader shares
// that one copy, and on links where remote reads cost less than remote writes it trades the
// writes for reads. One round trip per vector, at half the payload efficiency of plain data.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

template <typename T, int kMax>
__device__ __forceinline__ void oneShotPullBody(const AllReduceArgs& a, const CallContext& ctx) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint32_t e = ctx.epoch;
  const int grid = activeBlocks(a);
  const uint64_t first = spreadThreadIndex(grid);
  const uint64_t stride = uint64_t(grid) * blockDim.x;

  sendHeaders(a, ctx);
  // Publish: vector v becomes its two lines in our own area.
  char* own = pullPayload(pullArea(a, a.peer_ws[me], ctx.parity));
  for (uint64_t v = first; v < vecs; v += stride) {
    const Vec x = loadUser<T>(a.send, v, a.count, aligned);
    if (ctx.failed) break;
    storeLines(own, v, x, e);
  }

  Waiter w(a);
  if (!checkHeaders(a, ctx, w)) return;

  for (uint64_t v = first; v < vecs; v += stride) {
    // Issue every peer's loads before testing any, so the round trips overlap.
    Vec lo[kMax], hi[kMax];
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) {
        char* peer = pullPayload(pullArea(a, a.peer_ws[s], ctx.parity));
        lo[s] = loadVolatile(loLine(peer, v));
        hi[s] = loadVolatile(hiLine(peer, v));
      }
    }
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) {
        char* peer = pullPayload(pullArea(a, a.peer_ws[s], ctx.parity));
        while (!lineArrived(lo[s], e)) {
          if (!w.keepWaiting()) return;
          lo[s] = loadVolatile(loLine(peer, v));
        }
        while (!lineArrived(hi[s], e)) {
          if (!w.keepWaiting()) return;
          hi[s] = loadVolatile(hiLine(peer, v));
        }
      }
    }
    const Vec mine = loadUser<T>(a.send, v, a.count, aligned);
    Acc<T> acc;
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n) {
        const Vec x = s == me ? mine : linePayload(lo[s], hi[s]);
        if (s == 0) {
          acc.init(x);
        } else {
          acc.add(x, a.op);
        }
      }
    }
    storeUser<T>(a.recv, v, a.count, aligned, acc.round());
  }
}

TPAR_ALLREDUCE_KERNEL(oneShotPull, oneShotPullBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(oneShotPullKernel, oneShotPull)

}  // namespace kernels
}  // namespace tpar
