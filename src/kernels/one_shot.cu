// One-shot push all-reduce: every rank pushes its whole input into every peer's workspace, then
// reduces all ranks' copies locally. One link crossing; nranks-1 times the message leaves each
// rank, so it wins for small messages where latency dominates.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

// Slot of sender s for vector v: rank-major, so each sender writes one contiguous range.
__device__ __forceinline__ char* slot(char* data, int s, uint64_t vecs, uint64_t v) {
  return data + (static_cast<uint64_t>(s) * vecs + v) * kVecBytes;
}

template <typename T, int kMax>
__device__ __forceinline__ void oneShotBody(const AllReduceArgs& a, const CallContext& ctx) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint64_t data_off = WorkspaceLayout::kDataOffset + ctx.parity * a.data_bytes;
  char* local = a.peer_ws[me] + data_off;
  const int grid = activeBlocks(a);
  const uint64_t first = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t(grid) * blockDim.x;

  sendHeaders(a, ctx);
  // Push: peers in rotation order (rank+1 first), so that at each step every rank has one
  // outbound target that differs from every other rank's.
  for (uint64_t v = first; v < vecs; v += stride) {
    const Vec x = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
    if (ctx.failed) break;
#pragma unroll
    for (int i = 1; i < kMax; ++i) {
      if (i < n) {
        int p = me + i;
        if (p >= n) p -= n;
        storeVolatile(slot(a.peer_ws[p] + data_off, me, vecs, v), x);
      }
    }
  }

  Waiter w(a);
  if (!checkHeaders(a, ctx, w)) return;

  for (uint64_t v = first; v < vecs; v += stride) {
    Vec in[kMax];
    if (!loadArrived<kMax>(n, me, in, [&](int s) { return slot(local, s, vecs, v); }, w)) return;
    const Vec own = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
    storeUser<T>(a.recv, v, a.count, aligned, reduceInRankOrder<T, kMax>(n, me, own, in, a.op));
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) storeVolatile(slot(local, s, vecs, v), sentinelVec());
    }
  }
}

TPAR_ALLREDUCE_KERNEL(oneShot, oneShotBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(oneShotKernel, oneShot)

}  // namespace kernels
}  // namespace tpar
