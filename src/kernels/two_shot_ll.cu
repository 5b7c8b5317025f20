// Two-shot all-reduce whose pushes carry the call's epoch in every 8 bytes ("LL" lines, NOTE
// [pull protocol]): reduce-scatter then all-gather, both pushed into the receivers' regions as
// 16-byte lines {d0, epoch, d1, epoch}. A receiver polls the lines it needs in its own region
// and uses each half once its epoch word is the call's: no flags, no fences, one hand-off per
// phase, at twice the bytes. Made for small messages with receive regions in host memory,
// where each flag costs a system-scope fence and a polled round trip on top of the data's own
// (NOTE [flag lines]); the pipelined two-shot carries the large ones.
//
// Block b of every rank handles the same slice of positions in every chunk. Lines of index i
// (sender s's position j of our chunk: i = s * chunk + j; owner o's reduced position j: the same
// in the gather half) are laid out as in one-shot pull, 32 first halves then 32 second halves,
// so that a warp's loads and stores cover contiguous 512-byte runs.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

constexpr int kScatterPhase = 0;
constexpr int kGatherPhase = 1;

// After every thread of the block stored its lines of `phase`: ring every peer's doorbell, our
// slot in its flag line of (phase, block) (NOTE [flag lines]), with the call header. No fence:
// the doorbell only says when to start reading; the lines themselves say whether they arrived.
__device__ __forceinline__ void ringDoorbells(const AllReduceArgs& a, const CallContext& ctx,
                                              int phase) {
  __syncthreads();
  sendHeadersAt(a, ctx, [&](int p) {
    return lineSlot(pullArea(a, a.peer_ws[p], ctx.parity), phase, blockIdx.x, a.rank);
  });
}

// Waits for every peer's doorbell of `phase` in our own flag line, one read of the line per poll
// for the whole block, and compares its header with ours (checkHeadersAt).
__device__ __forceinline__ bool awaitDoorbells(const AllReduceArgs& a, const CallContext& ctx,
                                               int phase, Waiter& w) {
  return checkHeadersAt(
      a, ctx,
      [&](int p) -> const char* {
        return lineSlot(pullArea(a, a.peer_ws[a.rank], ctx.parity), phase, blockIdx.x, p);
      },
      w);
}

template <typename T, int kMax>
__device__ __forceinline__ void twoShotLLBody(const AllReduceArgs& a, const CallContext& ctx) {
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint32_t e = ctx.epoch;
  const BlockSlice bs = blockSlice<T>(a);
  const uint64_t vecs = bs.vecs, chunk = bs.chunk, j0 = bs.j0, j1 = bs.j1;
  const uint32_t width = static_cast<uint32_t>(bs.width());
  const uint64_t half = WorkspaceLayout::pullHalf(a.pull_bytes);
  char* scatter = pullPayload(pullArea(a, a.peer_ws[me], ctx.parity));
  char* gather = scatter + half;

  // Scatter: our input's slice of every other chunk, as lines in its owner's region. 32-bit
  // arithmetic: a piece has fewer than 2^27 vectors (TPAR_MAX_BYTES_PER_CALL <= 1G).
  const uint32_t pairs = static_cast<uint32_t>(n - 1) * width;
  for (uint32_t t = threadIdx.x; t < pairs; t += blockDim.x) {
    const uint32_t q = t / width;
    int c = me + 1 + static_cast<int>(q);
    if (c >= n) c -= n;
    const uint64_t j = j0 + (t - q * width);
    const uint64_t v = uint64_t(c) * chunk + j;
    if (v < vecs) {
      const Vec x = loadUser<T>(a.send, v, a.count, aligned);
      if (ctx.failed) break;
      storeLines(pullPayload(pullArea(a, a.peer_ws[c], ctx.parity)), uint64_t(me) * chunk + j,
                 x, e);
    }
  }

  // Nothing to read: the same on every rank that agrees on the call, and block 0, which always
  // has a slice, catches ranks that do not (their header differs).
  if (width == 0) return;
  ringDoorbells(a, ctx, kScatterPhase);
  Waiter w(a);
  __shared__ uint32_t s_gave_up;  // set after the reduce loop; reset before the next barrier
  if (threadIdx.x == 0) s_gave_up = 0;
  if (!awaitDoorbells(a, ctx, kScatterPhase, w)) return;

  // Reduce our chunk's slice in rank order; keep it and push it to every peer. A thread that
  // gives up stops working but still reaches the barrier below, where the block gives up as one.
  bool ok = true;
  for (uint64_t j = j0 + threadIdx.x; ok && j < j1; j += blockDim.x) {
    const uint64_t v = uint64_t(me) * chunk + j;
    if (v >= vecs) break;
    Vec lo[kMax], hi[kMax];
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (s < n && s != me) {
        lo[s] = loadVolatile(loLine(scatter, uint64_t(s) * chunk + j));
        hi[s] = loadVolatile(hiLine(scatter, uint64_t(s) * chunk + j));
      }
    }
    const Vec mine = loadUser<T>(a.send, v, a.count, aligned);
    // Rank order: wait for each peer's lines as its turn comes (their loads are in flight).
    Acc<T> acc;
#pragma unroll
    for (int s = 0; s < kMax; ++s) {
      if (ok && s < n && s != me) {
        const uint64_t i = uint64_t(s) * chunk + j;
        while (ok && !lineArrived(lo[s], e)) {
          ok = w.keepWaiting();
          lo[s] = loadVolatile(loLine(scatter, i));
        }
        while (ok && !lineArrived(hi[s], e)) {
          ok = w.keepWaiting();
          hi[s] = loadVolatile(hiLine(scatter, i));
        }
      }
      if (ok && s < n) {
        const Vec x = s == me ? mine : linePayload(lo[s], hi[s]);
        if (s == 0) {
          acc.init(x);
        } else {
          acc.add(x, a.op);
        }
      }
    }
    if (!ok) break;
    const Vec r = acc.round();
    storeUser<T>(a.recv, v, a.count, aligned, r);
    for (int i = 1; i < n; ++i) {
      int o = me + i;
      if (o >= n) o -= n;
      storeLines(pullPayload(pullArea(a, a.peer_ws[o], ctx.parity)) + half, v, r, e);
    }
  }
  if (!ok) s_gave_up = 1u;
  __syncthreads();
  if (s_gave_up != 0) return;

  ringDoorbells(a, ctx, kGatherPhase);
  if (!awaitDoorbells(a, ctx, kGatherPhase, w)) return;

  // Gather the other ranks' reduced slices. In place, an output position written here was
  // read by the scatter loop before its line left for the owner, whose reduced line this
  // thread has seen.
  constexpr int kDepth = 2;
  for (uint32_t t0 = threadIdx.x; t0 < pairs; t0 += kDepth * blockDim.x) {
    Vec lo[kDepth], hi[kDepth];
    uint64_t idx[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const uint32_t t = t0 + d * blockDim.x;
      idx[d] = vecs;  // nothing to read
      if (t < pairs) {
        const uint32_t q = t / width;
        int o = me + 1 + static_cast<int>(q);
        if (o >= n) o -= n;
        const uint64_t v = uint64_t(o) * chunk + j0 + (t - q * width);
        if (v < vecs) {
          idx[d] = v;
          lo[d] = loadVolatile(loLine(gather, v));
          hi[d] = loadVolatile(hiLine(gather, v));
        }
      }
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (idx[d] < vecs) {
        while (!lineArrived(lo[d], e)) {
          if (!w.keepWaiting()) return;
          lo[d] = loadVolatile(loLine(gather, idx[d]));
        }
        while (!lineArrived(hi[d], e)) {
          if (!w.keepWaiting()) return;
          hi[d] = loadVolatile(hiLine(gather, idx[d]));
        }
        storeUser<T>(a.recv, idx[d], a.count, aligned, linePayload(lo[d], hi[d]));
      }
    }
  }
}

TPAR_ALLREDUCE_KERNEL(twoShotLL, twoShotLLBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(twoShotLLKernel, twoShotLL)

}  // namespace kernels
}  // namespace tpar
