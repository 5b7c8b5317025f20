// Staged two-shot all-reduce: the reduce-scatter and all-gather of two-shot, with the pushes
// of each position ordered as a rotation. In step s (1..n-1) rank r pushes to rank r+s and
// waits for what rank r-s pushed to it before it takes step s+1, so each position has one
// outbound and one inbound peer per step (tuner/schedule.h gives the schedule that the unit
// tests check). All-to-all writes collapse at a PCIe root complex; this keeps each step's
// traffic to one stream in and one out per rank, at the cost of n-1 dependent steps per
// phase. Same workspace layout and same results, bit for bit, as two-shot.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

template <typename T, int kMax>
__device__ __forceinline__ void stagedBody(const AllReduceArgs& a, const CallContext& ctx) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint64_t chunk = (vecs + n - 1) / n;
  const uint64_t data_off = WorkspaceLayout::kDataOffset + ctx.parity * a.data_bytes;
  char* local = a.peer_ws[me] + data_off;
  auto rsSlot = [&](char* data, int s, uint64_t j) {
    return data + (uint64_t(s) * chunk + j) * kVecBytes;
  };
  auto agSlot = [&](char* data, int o, uint64_t j) {
    return data + ((uint64_t(n) + o) * chunk + j) * kVecBytes;
  };
  const int grid = activeBlocks(a);
  const uint64_t stride = uint64_t(grid) * blockDim.x;

  sendHeaders(a, ctx);
  Waiter w(a);
  if (!checkHeaders(a, ctx, w)) return;

  for (uint64_t j = spreadThreadIndex(grid); j < chunk; j += stride) {
    const uint64_t v_own = uint64_t(me) * chunk + j;
    // Reduce-scatter, one peer per step: push to me+s, then wait for what me-s pushed here.
#pragma unroll
    for (int s = 1; s < kMax; ++s) {
      if (s < n) {
        int p = me + s;
        if (p >= n) p -= n;
        const uint64_t v = uint64_t(p) * chunk + j;
        if (v < vecs) {
          const Vec x = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
          storeVolatile(rsSlot(a.peer_ws[p] + data_off, me, j), x);
        }
        int q = me - s;
        if (q < 0) q += n;
        Vec arrived_vec;
        if (v_own < vecs && !pollVec(rsSlot(local, q, j), &arrived_vec, w)) return;
      }
    }
    if (v_own >= vecs) continue;  // our chunk is shorter than the others: nothing to reduce
    // Everything has arrived: reduce in rank order (as two-shot does, so the bits match it),
    // reading the slots again rather than keeping step-ordered registers.
    const Vec own = escapeVec(loadUser<T>(a.send, v_own, a.count, aligned));
    Acc<T> acc;
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n) {
        const Vec x = s == me ? own : loadVolatile(rsSlot(local, s, j));
        if (s == 0) {
          acc.init(x);
        } else {
          acc.add(x, a.op);
        }
      }
    }
    const Vec r = escapeVec(acc.round());
    storeUser<T>(a.recv, v_own, a.count, aligned, r);
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) storeVolatile(rsSlot(local, s, j), sentinelVec());
    }
  }

  // All-gather, one peer per step: push our reduced chunk to me+s, take owner me-s's chunk.
  for (uint64_t j = spreadThreadIndex(grid); j < chunk; j += stride) {
    const uint64_t v_own = uint64_t(me) * chunk + j;
    Vec r{{0, 0, 0, 0}};
    if (v_own < vecs) r = escapeVec(loadUser<T>(a.recv, v_own, a.count, aligned));
#pragma unroll
    for (int s = 1; s < kMax; ++s) {
      if (s < n) {
        int p = me + s;
        if (p >= n) p -= n;
        if (v_own < vecs) storeVolatile(agSlot(a.peer_ws[p] + data_off, me, j), r);
        int o = me - s;
        if (o < 0) o += n;
        const uint64_t v = uint64_t(o) * chunk + j;
        if (v < vecs) {
          Vec x;
          if (!pollVec(agSlot(local, o, j), &x, w)) return;
          storeUser<T>(a.recv, v, a.count, aligned, x);
          storeVolatile(agSlot(local, o, j), sentinelVec());
        }
      }
    }
  }
}

TPAR_ALLREDUCE_KERNEL(staged, stagedBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(stagedKernel, staged)

}  // namespace kernels
}  // namespace tpar
