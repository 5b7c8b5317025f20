// Two-shot push all-reduce: reduce-scatter then all-gather. Rank r owns chunk r of the message.
// Each rank pushes chunk p of its input to rank p; rank r reduces chunk r from all ranks, then
// pushes the result to every peer. Each rank sends 2(n-1)/n of the message instead of n-1
// times it, at the cost of a second link crossing: it wins once bandwidth dominates.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

template <typename T, int kMax>
__device__ __forceinline__ void twoShotBody(const AllReduceArgs& a, const CallContext& ctx) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint64_t chunk = (vecs + n - 1) / n;  // vectors per rank's chunk
  const uint64_t data_off = WorkspaceLayout::kDataOffset + ctx.parity * a.data_bytes;
  char* local = a.peer_ws[me] + data_off;
  // Reduce-scatter slot of sender s and all-gather slot of owner o, for position j in a chunk.
  auto rsSlot = [&](char* data, int s, uint64_t j) {
    return data + (uint64_t(s) * chunk + j) * kVecBytes;
  };
  auto agSlot = [&](char* data, int o, uint64_t j) {
    return data + ((uint64_t(n) + o) * chunk + j) * kVecBytes;
  };
  const int grid = activeBlocks(a);
  const uint64_t first = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t(grid) * blockDim.x;

  sendHeaders(a, ctx);
  // Reduce-scatter push. One thread per (peer, position) pair, peers in rotation order: a
  // thread's chain of dependent memory operations stays short even for small messages.
  const uint64_t pairs = uint64_t(n - 1) * chunk;
  for (uint64_t t = first; t < pairs; t += stride) {
    // 32-bit division: a piece has fewer than 2^27 vectors (TPAR_MAX_BYTES_PER_CALL <= 1G), and
    // a 64-bit division costs several times more on the critical path of every pair.
    const uint32_t q = static_cast<uint32_t>(t) / static_cast<uint32_t>(chunk);
    const int i = static_cast<int>(q) + 1;
    const uint64_t j = t - uint64_t(q) * chunk;
    int p = me + i;
    if (p >= n) p -= n;
    const uint64_t v = uint64_t(p) * chunk + j;
    if (v < vecs) {
      const Vec x = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
      if (ctx.failed) break;
      storeVolatile(rsSlot(a.peer_ws[p] + data_off, me, j), x);
    }
  }

  Waiter w(a);
  if (!checkHeaders(a, ctx, w)) return;

  // Reduce our chunk and push the result to every peer's all-gather slot. A chunk has 1/(n-1)
  // of the pairs above: spread it over every block.
  for (uint64_t j = spreadThreadIndex(grid); j < chunk; j += stride) {
    const uint64_t v = uint64_t(me) * chunk + j;
    if (v >= vecs) break;
    Vec in[kMax];
    if (!loadArrived<kMax>(n, me, in, [&](int s) { return rsSlot(local, s, j); }, w)) return;
    const Vec own = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
    // Peers receive the escaped bits; keep the same bits here so all ranks agree.
    const Vec r = escapeVec(reduceInRankOrder<T, kMax>(n, me, own, in, a.op));
#pragma unroll
    for (int i = 1; i < kMax; ++i) {
      if (i < n) {
        int p = me + i;
        if (p >= n) p -= n;
        storeVolatile(agSlot(a.peer_ws[p] + data_off, me, j), r);
      }
    }
    storeUser<T>(a.recv, v, a.count, aligned, r);
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) storeVolatile(rsSlot(local, s, j), sentinelVec());
    }
  }

  // All-gather: copy every peer's reduced chunk out of our workspace, one thread per (owner,
  // position) pair. In place, the output position written here was read by the push above in
  // another thread; that read happened before the owner could reduce it, so before its
  // all-gather data can arrive here (the pushed value depends on the read).
  for (uint64_t t = first; t < pairs; t += stride) {
    // 32-bit division: a piece has fewer than 2^27 vectors (TPAR_MAX_BYTES_PER_CALL <= 1G), and
    // a 64-bit division costs several times more on the critical path of every pair.
    const uint32_t q = static_cast<uint32_t>(t) / static_cast<uint32_t>(chunk);
    const int i = static_cast<int>(q) + 1;
    const uint64_t j = t - uint64_t(q) * chunk;
    int o = me + i;
    if (o >= n) o -= n;
    const uint64_t v = uint64_t(o) * chunk + j;
    if (v < vecs) {
      Vec x;
      if (!pollVec(agSlot(local, o, j), &x, w)) return;
      storeUser<T>(a.recv, v, a.count, aligned, x);
      storeVolatile(agSlot(local, o, j), sentinelVec());
    }
  }
}

TPAR_ALLREDUCE_KERNEL(twoShot, twoShotBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(twoShotKernel, twoShot)

}  // namespace kernels
}  // namespace tpar
