// Two-shot pull all-reduce: reduce-scatter then all-gather, both by reading. Rank r owns chunk r
// of the message. Each rank publishes its input (all but its own chunk) once in its own pull
// area; rank r reads chunk r from every peer, reduces it, and publishes the result; every rank
// then reads the other ranks' results. Per rank, (n-1)/n of the message is written once and
// 2(n-1)/n of it read: with receive regions in host memory this is the bandwidth-optimal way
// across PCIe, since one published copy serves every reader.
//
// Flags, not lines (NOTE [pull protocol]): block b of every rank handles the same slice of
// positions in every chunk, publishes its slice and raises its flag for the phase; readers of
// that slice wait for block b's flag of each peer. Blocks never wait for one another.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

constexpr int kInputPhase = 0;
constexpr int kResultPhase = 1;

template <typename T, int kMax>
__device__ __forceinline__ void twoShotPullBody(const AllReduceArgs& a, const CallContext& ctx) {
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const BlockSlice bs = blockSlice<T>(a);
  const uint64_t vecs = bs.vecs, chunk = bs.chunk, j0 = bs.j0, j1 = bs.j1;
  const uint64_t width = bs.width();
  const uint64_t half = WorkspaceLayout::pullHalf(a.pull_bytes);
  // Published input: vector v at v * 16 of the payload; reduced chunk: position j at half + j * 16.
  char* own_area = pullArea(a, a.peer_ws[me], ctx.parity);
  char* own = pullPayload(own_area);

  sendHeaders(a, ctx);
  // Publish our slice of every other rank's chunk, peers in rotation order.
  // 32-bit arithmetic: a piece has fewer than 2^27 vectors (TPAR_MAX_BYTES_PER_CALL <= 1G).
  const uint32_t pairs = static_cast<uint32_t>(n - 1) * static_cast<uint32_t>(width);
  const uint32_t w32 = static_cast<uint32_t>(width);
  for (uint32_t t = threadIdx.x; t < pairs && !ctx.failed; t += blockDim.x) {
    const uint32_t q = t / w32;
    int c = me + 1 + static_cast<int>(q);
    if (c >= n) c -= n;
    const uint64_t v = uint64_t(c) * chunk + j0 + (t - q * w32);
    if (v < vecs) storeVolatile(own + v * kVecBytes, loadUser<T>(a.send, v, a.count, aligned));
  }
  if (width > 0) publishFlag(own_area, kInputPhase, ctx.epoch, ctx.failed);

  Waiter w(a);
  // Nothing to read: the same on every rank that agrees on the call, and block 0, which always
  // has a slice, catches ranks that do not.
  if (width == 0) return;
  if (!checkHeadersAndFlags<kMax>(a, ctx, kInputPhase, w)) return;

  // Reduce our chunk's slice in rank order and publish it.
  for (uint64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const uint64_t v = uint64_t(me) * chunk + j;
    if (v >= vecs) break;
    Vec in[kMax];
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) {
        in[s] = loadVolatile(pullPayload(pullArea(a, a.peer_ws[s], ctx.parity)) + v * kVecBytes);
      }
    }
    const Vec mine = loadUser<T>(a.send, v, a.count, aligned);
    const Vec r = reduceInRankOrder<T, kMax>(n, me, mine, in, a.op);
    storeVolatile(own + half + j * kVecBytes, r);
    storeUser<T>(a.recv, v, a.count, aligned, r);
  }
  publishFlag(own_area, kResultPhase, ctx.epoch, false);
  if (!waitPeerFlags<kMax>(a, ctx.parity, kResultPhase, ctx.epoch, w)) return;

  // Gather the other ranks' reduced slices. In place, the output positions written here were
  // read by this block's publish loop, which ended at the first flag's barrier.
  copyOthersChunks<T, 4>(a, bs, j0, static_cast<uint32_t>(width), threadIdx.x, blockDim.x,
                         [&](int o, uint64_t j) {
                           return pullPayload(pullArea(a, a.peer_ws[o], ctx.parity)) + half +
                                  j * kVecBytes;
                         });
}

TPAR_ALLREDUCE_KERNEL(twoShotPull, twoShotPullBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(twoShotPullKernel, twoShotPull)

}  // namespace kernels
}  // namespace tpar
