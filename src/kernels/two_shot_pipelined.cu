// Pipelined two-shot all-reduce: reduce-scatter then all-gather in steps, each step announced
// by a flag line the receiver polls in its own region (NOTE [flag lines]). Made for receive
// regions in pinned host memory, where every poll and every load crosses the GPU's link and a
// poll of data words would cost far more than one poll of a line per step.
//
// Block b of every rank handles the same slice of positions in every chunk, in `steps` steps.
// Its warps split into three groups that run at once, each with its own named barrier, so that
// writes (one direction of the link) overlap reads (the other):
//   push:   for each step, store our input's slices of every other chunk; announce
//           (scatter, step + 1) to every peer.
//   reduce: for each step, wait for (scatter, step + 1) from every peer, reduce our chunk's
//           slice in rank order, store it to the output and publish it; announce (gather,
//           step + 1).
//   gather: for each step, wait for (gather, step + 1) from every peer and copy the other
//           ranks' reduced slices to the output.
// Where the data goes (a.pull):
//   push (0): into the receivers' regions, each reduced slice n-1 times; every load is from our
//             own region. Per rank, 2(n-1)/n of the message written and 2(n-1)/n read.
//   pull (1): into our own region, each reduced slice once; peers read it there. Per rank, the
//             message written once and 2(n-1)/n read: fewer bytes on the link, which won from
//             48 KiB up with 4 and 8 virtual ranks on an H200 (docs/PERFORMANCE.md).
// Either way a position is written once per call, in the area of the call's parity.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

constexpr int kScatterPhase = 0;
constexpr int kGatherPhase = 1;
constexpr int kPushRole = 0;
constexpr int kReduceRole = 1;
constexpr int kGatherRole = 2;

template <typename T, int kMax>
__device__ __forceinline__ void pipelinedBody(const AllReduceArgs& a, const CallContext& ctx) {
  const int n = a.nranks;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const int grid = activeBlocks(a);
  const uint32_t e = ctx.epoch;
  // This block's slice [j0, j1) of positions within every chunk, in `steps` steps of `sw`.
  const BlockSlice bs = blockSlice<T>(a);
  const uint64_t vecs = bs.vecs, chunk = bs.chunk, j0 = bs.j0, j1 = bs.j1;
  const uint64_t width = bs.width();
  const bool pull = a.pull != 0;
  const int steps = a.steps > 1 ? a.steps : 1;
  const uint64_t sw = (width + steps - 1) / steps;
  // What every peer must agree on (NOTE [flag lines]).
  const uint32_t check = a.meta ^ (static_cast<uint32_t>(a.count) * 0x9E3779B1u) ^
                         ((static_cast<uint32_t>(steps) << 16 | static_cast<uint32_t>(grid) |
                           (pull ? 0x80000000u : 0u)) *
                          0x85EBCA77u);
  const uint64_t half = WorkspaceLayout::pullHalf(a.pull_bytes);
  // Scatter half, position j of slot s: push: sender s's part of the receiver's chunk; pull:
  // our input's part of chunk s. Gather half, slot o: owner o's reduced position j (push: in
  // the receiver's region; pull: in o's own).
  auto scatterSlot = [&](char* area, int s, uint64_t j) {
    return pullPayload(area) + (uint64_t(s) * chunk + j) * kVecBytes;
  };
  auto gatherSlot = [&](char* area, int o, uint64_t j) {
    return pullPayload(area) + half + (uint64_t(o) * chunk + j) * kVecBytes;
  };
  char* own_area = pullArea(a, a.peer_ws[me], ctx.parity);
  auto stepRange = [&](int k, uint64_t* s0, uint64_t* s1) {
    *s0 = j0 + uint64_t(k) * sw;
    *s1 = *s0 + sw < j1 ? *s0 + sw : j1;
    if (*s0 > *s1) *s0 = *s1;
  };

  // The groups, in whole warps: a quarter push, a quarter gather, the rest reduce (the launch
  // gives at least 4 warps).
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int push_warps = warps / 4;
  const int gather_warps = warps / 4;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  int role, first_warp, role_warps;
  if (warp < push_warps) {
    role = kPushRole, first_warp = 0, role_warps = push_warps;
  } else if (warp < warps - gather_warps) {
    role = kReduceRole, first_warp = push_warps, role_warps = warps - push_warps - gather_warps;
  } else {
    role = kGatherRole, first_warp = warps - gather_warps, role_warps = gather_warps;
  }
  const int rt = static_cast<int>(threadIdx.x) - first_warp * 32;  // thread within the group
  const int rn = role_warps * 32;
  const int bar = 1 + role;  // named barrier of the group

  // Thread 0's view of `failed` decides for the block (every thread must take the same path
  // through the barriers). Blocks without a slice have nothing to send or wait for; block 0
  // always has one and catches peers that slice differently (their check differs).
  __shared__ uint32_t s_skip;
  __shared__ uint32_t s_bad[3];
  if (threadIdx.x == 0) {
    s_skip = ctx.failed ? 1u : 0u;
    s_bad[0] = s_bad[1] = s_bad[2] = 0;
  }
  __syncthreads();
  if (s_skip != 0 || width == 0) return;

  Waiter w(a);
  if (role == kPushRole) {
    for (int k = 0; k < steps; ++k) {
      uint64_t s0, s1;
      stepRange(k, &s0, &s1);
      const uint32_t sn = static_cast<uint32_t>(s1 - s0);
      // 32-bit arithmetic: a piece has fewer than 2^27 vectors (TPAR_MAX_BYTES_PER_CALL <= 1G).
      const uint32_t pairs = static_cast<uint32_t>(n - 1) * sn;
      for (uint32_t t = rt; t < pairs; t += rn) {
        const uint32_t q = t / sn;
        int c = me + 1 + static_cast<int>(q);
        if (c >= n) c -= n;
        const uint64_t j = s0 + (t - q * sn);
        const uint64_t v = uint64_t(c) * chunk + j;
        if (v < vecs) {
          const Vec x = loadUser<T>(a.send, v, a.count, aligned);
          if (pull) {
            storeVolatile(scatterSlot(own_area, c, j), x);
          } else {
            storeVolatile(scatterSlot(pullArea(a, a.peer_ws[c], ctx.parity), me, j), x);
          }
        }
      }
      announceStep(a, ctx.parity, bar, rn, rt, kScatterPhase, e, static_cast<uint32_t>(k + 1),
                   check);
    }
  } else if (role == kReduceRole) {
    for (int k = 0; k < steps; ++k) {
      if (!awaitStep(a, ctx.parity, bar, rn, rt, kScatterPhase, e, static_cast<uint32_t>(k + 1),
                     check, &s_bad[role], w)) {
        return;
      }
      uint64_t s0, s1;
      stepRange(k, &s0, &s1);
      for (uint64_t j = s0 + rt; j < s1; j += rn) {
        const uint64_t v = uint64_t(me) * chunk + j;
        if (v >= vecs) break;
        Vec in[kMax];
#pragma unroll
        for (int s = 0; s < kMax; ++s) {
          if (s < n && s != me) {
            in[s] = pull ? loadVolatile(scatterSlot(pullArea(a, a.peer_ws[s], ctx.parity), me, j))
                         : loadVolatile(scatterSlot(own_area, s, j));
          }
        }
        const Vec mine = loadUser<T>(a.send, v, a.count, aligned);
        const Vec r = reduceInRankOrder<T, kMax>(n, me, mine, in, a.op);
        storeUser<T>(a.recv, v, a.count, aligned, r);
        if (pull) {
          storeVolatile(gatherSlot(own_area, me, j), r);
        } else {
          for (int i = 1; i < n; ++i) {
            int o = me + i;
            if (o >= n) o -= n;
            storeVolatile(gatherSlot(pullArea(a, a.peer_ws[o], ctx.parity), me, j), r);
          }
        }
      }
      announceStep(a, ctx.parity, bar, rn, rt, kGatherPhase, e, static_cast<uint32_t>(k + 1),
                   check);
    }
  } else {
    // In place, the positions written here were read by the push group before it announced
    // this step, which every peer saw before announcing its gather step.
    for (int k = 0; k < steps; ++k) {
      if (!awaitStep(a, ctx.parity, bar, rn, rt, kGatherPhase, e, static_cast<uint32_t>(k + 1),
                     check, &s_bad[role], w)) {
        return;
      }
      uint64_t s0, s1;
      stepRange(k, &s0, &s1);
      copyOthersChunks<T, 4>(a, bs, s0, static_cast<uint32_t>(s1 - s0), rt, rn,
                             [&](int o, uint64_t j) {
                               return pull ? gatherSlot(pullArea(a, a.peer_ws[o], ctx.parity), o, j)
                                           : gatherSlot(own_area, o, j);
                             });
    }
  }
}

TPAR_ALLREDUCE_KERNEL(pipelined, pipelinedBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(pipelinedKernel, pipelined)

}  // namespace kernels
}  // namespace tpar
