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
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint64_t chunk = (vecs + n - 1) / n;
  const int grid = activeBlocks(a);
  // This block's slice [j0, j1) of positions within every chunk.
  const uint64_t slice = (chunk + grid - 1) / grid;
  const uint64_t j0 = uint64_t(blockIdx.x) * slice;
  const uint64_t j1 = j0 + slice < chunk ? j0 + slice : chunk;
  const uint64_t width = j1 > j0 ? j1 - j0 : 0;
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
    Acc<T> acc;
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n) {
        const Vec& x = s == me ? mine : in[s];
        if (s == 0) {
          acc.init(x);
        } else {
          acc.add(x, a.op);
        }
      }
    }
    const Vec r = acc.round();
    storeVolatile(own + half + j * kVecBytes, r);
    storeUser<T>(a.recv, v, a.count, aligned, r);
  }
  publishFlag(own_area, kResultPhase, ctx.epoch, false);
  if (!waitPeerFlags<kMax>(a, ctx.parity, kResultPhase, ctx.epoch, w)) return;

  // Gather the other ranks' reduced slices. In place, the output positions written here were
  // read by this block's publish loop, which ended at the first flag's barrier.
  // Up to kGatherDepth loads in flight per thread before their stores: each is a round trip
  // when the regions are in host memory.
  constexpr int kGatherDepth = 4;
  for (uint32_t t0 = threadIdx.x; t0 < pairs; t0 += kGatherDepth * blockDim.x) {
    Vec x[kGatherDepth];
    uint64_t dst[kGatherDepth];
#pragma unroll
    for (int k = 0; k < kGatherDepth; ++k) {
      const uint32_t t = t0 + k * blockDim.x;
      dst[k] = vecs;  // nothing to store
      if (t < pairs) {
        const uint32_t q = t / w32;
        int o = me + 1 + static_cast<int>(q);
        if (o >= n) o -= n;
        const uint64_t j = j0 + (t - q * w32);
        const uint64_t v = uint64_t(o) * chunk + j;
        if (v < vecs) {
          dst[k] = v;
          x[k] = loadVolatile(pullPayload(pullArea(a, a.peer_ws[o], ctx.parity)) + half +
                              j * kVecBytes);
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kGatherDepth; ++k) {
      if (dst[k] < vecs) storeUser<T>(a.recv, dst[k], a.count, aligned, x[k]);
    }
  }
}

TPAR_ALLREDUCE_KERNEL(twoShotPull, twoShotPullBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(twoShotPullKernel, twoShotPull)

}  // namespace kernels
}  // namespace tpar
