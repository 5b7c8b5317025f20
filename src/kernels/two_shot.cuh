// The two-shot schedule: rank r owns chunk r; every rank sends its part of chunk c to rank c,
// rank r reduces chunk r in rank order and sends the result to every peer (2(n-1)/n of the
// message per rank, two hand-offs). With a per-vector mailbox its (peer, position) pairs spread
// over the whole grid; otherwise block b of every rank owns the same slice of every chunk, in
// `steps` steps, and hands off to the peers' block b per phase and step (the flag-line mailbox
// runs the phases in three groups of warps at once). Pull writes the message once and reads
// 2(n-1)/n of it: fewer bytes on a host link (docs/PERFORMANCE.md). A position is written once
// per call. In place, an output position the gather writes was read by some thread's scatter
// before the value it receives could exist (the owner reduced it from that read).
#ifndef TPAR_KERNELS_TWO_SHOT_CUH_
#define TPAR_KERNELS_TWO_SHOT_CUH_

#include <type_traits>

#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {

// Push: into the readers' regions; pull: once into our own, the readers fetch it; planned:
// as the plan says (a.pull).
enum Direction { kPush, kPull, kPlanned };

// The peers of the schedule: every rank, or the ranks of our island (hierarchical).
struct AllRanks {
  __device__ static int count(const AllReduceArgs& a) { return a.nranks; }
  __device__ static int self(const AllReduceArgs& a) { return a.rank; }
  __device__ static int rank(const AllReduceArgs&, int p) { return p; }
};
struct IslandRanks {
  __device__ static int count(const AllReduceArgs& a) { return a.hier_m; }
  __device__ static int self(const AllReduceArgs& a) { return a.hier_pos; }
  __device__ static int rank(const AllReduceArgs& a, int p) {
    return a.hier_rank[a.hier_island * a.hier_m + p];
  }
};

enum Role { kPushRole, kReduceRole, kGatherRole };

// kRotation (staged): each position's pushes in n-1 steps, to stagedTarget, each waiting for the
// vector from stagedSource before the next: one stream in and one out per rank and step (all-to-
// all writes collapse at a PCIe root complex), at n-1 dependent steps per phase. Same bits.
template <class Box, Direction kDir, class Codec = IdentityCodec, class Epi = IdentityEpilogue,
          class Ranks = AllRanks, bool kRotation = false>
struct TwoShot {
  // Two-shot LL (LineBox) moves the caller's vectors as four 32-bit words: with one 128-bit
  // access its 8-rank rows ran slower, on the host transport and in GPU memory alike, while the
  // other boxes are faster with it (docs/PERFORMANCE.md, "Two-shot LL with 32-bit user access").
  static constexpr bool kWide = !std::is_same<Box, LineBox>::value;
  // NOTE [positions in flight in the per-vector two-shot]
  // The per-vector two-shot (sentinel mailbox, no epilogue, no rotation) gives each thread
  // its (peer, position) pairs one after another, and each pair's load waits out a full memory
  // latency before its store: with the grid's one block of 512 threads per multiprocessor that
  // is too few loads in flight for large calls. When every thread has at least
  // kDeepPairsPerThread pairs to scatter, the scatter and the gather keep kDeep loads in
  // flight per thread and the reduce (up to 4 ranks: at 8 its 7 peer loads are already in
  // flight, and two positions' worth spills) takes kDeep positions at once. The 16-rank
  // kernels keep one pair at a time: the deeper path spills there. With virtual ranks
  // in one H200's memory that made calls from 4 MiB faster at 2, 3, 4 and 8 ranks, and was no
  // faster with fewer pairs per thread (docs/PERFORMANCE.md, "Positions in flight in the
  // two-shot"). The gate is work per thread, not bytes, so a narrower grid (one rank per
  // GPU: 32 blocks) takes it at smaller calls; that was not measured.
  static constexpr int kDeep =
      Box::kPerVector && !kRotation && std::is_same<Epi, IdentityEpilogue>::value ? 2 : 1;
  static constexpr uint64_t kDeepPairsPerThread = 4;
  struct Call {
    const AllReduceArgs& a;
    const Box& box;
    int n, me;  // peers of the schedule (Ranks) and our position among them
    bool pull, aligned, overlap;  // overlap: phases in groups of warps side by side
    uint64_t vecs, chunk, goff;
    char* own;
    __device__ char* area(int p) const { return box.area(Ranks::rank(a, p)); }
  };

  // Our input's part of every other chunk at the positions of `pp`, kDepth loads in flight per
  // thread before their stores.
  template <typename T, int kDepth = 1>
  __device__ static void scatter(const Call& c, const CallContext& ctx, const PeerPositions& pp,
                                 uint32_t t, uint32_t nt) {
    if constexpr (kDepth == 1) {
      // One pair at a time, as every mailbox but the deep per-vector path runs it: a loop of
      // its own, since the deep loop below with one pair compiles to other code for them.
      for (uint32_t u = t; u < pp.pairs(); u += nt) {
        uint64_t j;
        const int o = pp.peer(u, &j);
        const uint64_t v = uint64_t(o) * c.chunk + j;
        if (v < c.vecs) {
          const Vec x = Codec::template encode<Box::kReservesWord>(
              loadUser<T, kWide>(c.a.send, v, c.a.count, c.aligned));
          if (ctx.failed) break;
          if (c.pull) {
            c.box.put(c.own, v, x);
          } else {
            c.box.put(c.area(o), uint64_t(c.me) * c.chunk + j, x);
          }
        }
      }
    } else {
      const uint32_t pairs = pp.pairs();
      for (uint32_t u0 = t; u0 < pairs; u0 += kDepth * nt) {
        Vec x[kDepth];
        uint64_t v[kDepth], slot[kDepth];
        int o[kDepth];
#pragma unroll
        for (int d = 0; d < kDepth; ++d) {
          const uint32_t u = u0 + d * nt;
          v[d] = c.vecs;  // nothing to send
          if (u < pairs) {
            uint64_t j;
            o[d] = pp.peer(u, &j);
            const uint64_t vd = uint64_t(o[d]) * c.chunk + j;
            if (vd < c.vecs) {
              v[d] = vd;
              slot[d] = uint64_t(c.me) * c.chunk + j;
              x[d] = loadUser<T, kWide>(c.a.send, vd, c.a.count, c.aligned);
            }
          }
        }
        if (ctx.failed) break;
#pragma unroll
        for (int d = 0; d < kDepth; ++d) {
          if (v[d] < c.vecs) {
            const Vec e = Codec::template encode<Box::kReservesWord>(x[d]);
            if (c.pull) {
              c.box.put(c.own, v[d], e);
            } else {
              c.box.put(c.area(o[d]), slot[d], e);
            }
          }
        }
      }
    }
  }

  // Our chunk's positions [j0 + t, j1) in steps of nt: reduce in rank order, run the
  // epilogue, send to every peer, store. False on give-up.
  template <typename T, int kMax>
  __device__ static bool reduce(const Call& c, uint64_t j0, uint64_t j1, uint32_t nt, Waiter& w) {
    const int n = c.n, me = c.me;
    for (uint64_t j = j0; j < j1; j += nt) {
      const uint64_t v = uint64_t(me) * c.chunk + j;
#pragma unroll
      for (int s = 1; s < (kRotation ? kMax : 1); ++s) {
        if (s < n) {
          const int p = stagedTarget(me, s, n);
          const uint64_t vs = uint64_t(p) * c.chunk + j;
          if (vs < c.vecs) {
            const Vec x = loadUser<T, kWide>(c.a.send, vs, c.a.count, c.aligned);
            c.box.put(c.area(p), v, Codec::template encode<Box::kReservesWord>(x));
          }
          if (v < c.vecs) {
            const uint64_t i = uint64_t(stagedSource(me, s, n)) * c.chunk + j;
            typename Box::Line x = c.box.fetch(c.own, i);
            if (!settle(c.box, c.own, i, x, w)) return false;
          }
        }
      }
      if (v >= c.vecs) {
        if (kRotation) continue;  // our chunk is shorter: still push the other chunks' parts
        break;
      }
      auto src = [&](int s) {
        return c.pull ? At{c.area(s), v} : At{c.own, uint64_t(s) * c.chunk + j};
      };
      Acc<T> acc;
      auto mine = [&] {
        return Codec::template encode<Box::kReservesWord>(
            loadUser<T, kWide>(c.a.send, v, c.a.count, c.aligned));
      };
      if (!reduceFrom<T, kMax, Codec, kRotation>(c.box, n, me, src, mine, RuntimeOp{c.a.op}, w, &acc))
        return false;
      if (!Epi::apply(c, j, acc, w)) return false;
      // Peers receive the encoded bits; keep the same bits here so all ranks agree.
      const Vec r = Codec::template encode<Box::kReservesWord>(acc.round());
      if (c.pull) {
        c.box.put(c.own + c.goff, v, r);
      } else if (!kRotation) {
        // Unrolled as in the sentinel two-shot: the flag-line ones (a loop over n before) gain ~80
        // SASS instructions per kernel at 8 ranks; code, not work (no loop branch per vector).
#pragma unroll
        for (int i = 1; i < kMax; ++i) {
          if (i < n) c.box.put(c.area(ahead(me, i, n)) + c.goff, v, r);
        }
      }
      storeUser<T, kWide>(c.a.recv, v, c.a.count, c.aligned, r);
      releaseFrom<kMax>(c.box, n, me, src);
    }
    return true;
  }

  // reduce() with kDeep positions per thread at once (NOTE [positions in flight in the
  // per-vector two-shot]): every peer's slot and our own input of each position are loaded
  // first, then each position is settled, reduced in rank order, sent and stored as reduce()
  // does. False on give-up.
  template <typename T, int kMax>
  __device__ static bool reduceDeep(const Call& c, uint64_t j0, uint64_t j1, uint32_t nt,
                                    Waiter& w) {
    const int n = c.n, me = c.me;
    for (uint64_t jb = j0; jb < j1; jb += kDeep * nt) {
      typename Box::Line in[kDeep][kMax];
      Vec own[kDeep];
      uint64_t v[kDeep];
#pragma unroll
      for (int d = 0; d < kDeep; ++d) {
        const uint64_t j = jb + d * nt;
        const uint64_t vd = uint64_t(me) * c.chunk + j;
        v[d] = j < j1 && vd < c.vecs ? vd : c.vecs;  // c.vecs: past our chunk or the message
        if (v[d] < c.vecs) {
#pragma unroll
          for (int s = 0; s < kMax; ++s)
            if (s < n && s != me) in[d][s] = c.box.fetch(c.own, uint64_t(s) * c.chunk + j);
        }
      }
#pragma unroll
      for (int d = 0; d < kDeep; ++d)
        if (v[d] < c.vecs)
          own[d] = Codec::template encode<Box::kReservesWord>(
              loadUser<T, kWide>(c.a.send, v[d], c.a.count, c.aligned));
#pragma unroll
      for (int d = 0; d < kDeep; ++d) {
        if (v[d] >= c.vecs) continue;
        const uint64_t j = jb + d * nt;
        Acc<T> acc;
#pragma unroll
        for (int s = 0; s < kMax; ++s) {
          if (s < n) {
            typename Box::Line l = in[d][s];  // a copy: see reduceFrom in prims/mailbox.cuh
            if (s != me && !settle(c.box, c.own, uint64_t(s) * c.chunk + j, l, w)) return false;
            acc.take(s, s == me ? own[d] : Codec::decode(Box::payload(l)), RuntimeOp{c.a.op});
          }
        }
        const Vec r = Codec::template encode<Box::kReservesWord>(acc.round());
#pragma unroll
        for (int i = 1; i < kMax; ++i) {
          if (i < n) c.box.put(c.area(ahead(me, i, n)) + c.goff, v[d], r);
        }
        storeUser<T, kWide>(c.a.recv, v[d], c.a.count, c.aligned, r);
        releaseFrom<kMax>(c.box, n, me,
                          [&](int s) { return At{c.own, uint64_t(s) * c.chunk + j}; });
      }
    }
    return true;
  }

  // The other ranks' reduced positions of `pp` into the output, kDepth loads in flight per
  // thread before their stores. False on give-up.
  template <typename T, int kDepth = Box::kGatherDepth>
  __device__ static bool gather(const Call& c, const PeerPositions& pp, uint32_t t, uint32_t nt,
                                Waiter& w) {
    const uint32_t pairs = pp.pairs();
    for (uint32_t u0 = t; u0 < pairs; u0 += kDepth * nt) {
      typename Box::Line x[kDepth];
      uint64_t vv[kDepth];
      char* at[kDepth];
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const uint32_t u = u0 + d * nt;
        vv[d] = c.vecs;  // nothing to read
        if (u < pairs) {
          uint64_t j;
          const int o = pp.peer(u, &j);
          const uint64_t v = uint64_t(o) * c.chunk + j;
          if (v < c.vecs) {
            vv[d] = v;
            at[d] = (c.pull ? c.area(o) : c.own) + c.goff;
            x[d] = c.box.fetch(at[d], v);
          }
        }
      }
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (vv[d] < c.vecs) {
          typename Box::Line l = x[d];  // a copy: see reduceFrom in prims/mailbox.cuh
          if (!settle(c.box, at[d], vv[d], l, w)) return false;
          storeUser<T, kWide>(c.a.recv, vv[d], c.a.count, c.aligned,
                              Codec::decode(Box::payload(l)));
          c.box.release(at[d], vv[d]);
        }
      }
    }
    return true;
  }

  // The gather in rotation: push our reduced position to stagedTarget, take stagedSource's.
  template <typename T, int kMax>
  __device__ static bool gatherInSteps(const Call& c, uint64_t j0, uint32_t nt, Waiter& w) {
    const int n = c.n, me = c.me;
    for (uint64_t j = j0; j < c.chunk; j += nt) {
      const uint64_t v_own = uint64_t(me) * c.chunk + j;
      Vec r{{0, 0, 0, 0}};
      if (v_own < c.vecs)
        r = Codec::template encode<Box::kReservesWord>(
            loadUser<T, kWide>(c.a.recv, v_own, c.a.count, c.aligned));
#pragma unroll
      for (int s = 1; s < kMax; ++s) {
        if (s < n) {
          if (v_own < c.vecs) c.box.put(c.area(stagedTarget(me, s, n)) + c.goff, v_own, r);
          const uint64_t v = uint64_t(stagedSource(me, s, n)) * c.chunk + j;
          if (v < c.vecs) {
            typename Box::Line x = c.box.fetch(c.own + c.goff, v);
            if (!settle(c.box, c.own + c.goff, v, x, w)) return false;
            storeUser<T, kWide>(c.a.recv, v, c.a.count, c.aligned, Codec::decode(Box::payload(x)));
            c.box.release(c.own + c.goff, v);
          }
        }
      }
    }
    return true;
  }

  // One role of the block-sliced schedule for step k of `steps`, run by group g.
  template <typename T, int kMax>
  __device__ static bool role(const Call& c, const CallContext& ctx, const Slice& s, int steps,
                              int r, int k, const Group& g, Waiter& w) {
    uint64_t s0, s1;
    stepRange(s, steps, k, &s0, &s1);
    const PeerPositions pp{c.n, c.me, s0, static_cast<uint32_t>(s1 - s0)};
    const uint32_t done = static_cast<uint32_t>(k + 1);
    if (r == kPushRole) {
      scatter<T>(c, ctx, pp, g.t, g.threads);
      c.box.commit(kScatterPhase, done, g);
      return true;
    }
    if (r == kReduceRole) {
      if (!c.box.await(kScatterPhase, done, g, w)) return false;
      // A thread that gives up stops working but still reaches the group's barrier, where the
      // group gives up as one.
      if (!reduce<T, kMax>(c, s0 + g.t, s1, g.threads, w)) *g.bad = 1u;
      if (!c.overlap && !g.agree()) return false;
      c.box.commit(kGatherPhase, done, g);
      return true;
    }
    if (!c.box.await(kGatherPhase, done, g, w)) return false;
    return gather<T>(c, pp, g.t, g.threads, w);
  }

  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int grid = activeBlocks(a);
    const int steps = a.steps > 1 ? a.steps : 1;
    const bool pull = kDir == kPlanned ? a.pull != 0 : kDir == kPull;
    const Box box(a, ctx, grid, steps, pull);
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    // One step: nothing to overlap, every warp runs each phase (docs/PERFORMANCE.md, "Device
    // primitives and the algorithm registry"; the spills this costs: NOTE [spills]).
    const bool overlap = Box::kOverlapPhases && steps > 1;
    Call c{a, box, Ranks::count(a), Ranks::self(a), pull, a.vec_aligned != 0, overlap, vecs, 0, 0,
           box.area(a.rank)};
    Waiter w(a);
    if (Box::kPerVector) {
      c.chunk = chunkVecs(vecs, c.n, Epi::kRowVecs);
      c.goff = box.gatherOffset(c.chunk, c.n) + Epi::template scratchBytes<T>(a, c.chunk);
      // One thread per (peer, position) pair: a thread's chain of dependent memory operations
      // stays short even for small messages. The reduction has 1/(n-1) of the pairs: spread
      // it over every block.
      const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
      const uint32_t nt = uint32_t(grid) * blockDim.x;
      const PeerPositions pp{c.n, c.me, 0, static_cast<uint32_t>(c.chunk)};
      const Group whole{0, static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), nullptr};
      const uint64_t spread = spreadIndex(threadIdx.x, blockIdx.x, grid);
      box.begin();
      if constexpr (kDeep > 1 && kMax <= 8) {
        if (pp.pairs() >= kDeepPairsPerThread * nt) {
          scatter<T, kDeep>(c, ctx, pp, t, nt);
          if (!box.await(kScatterPhase, 1, whole, w)) return;
          if constexpr (kMax <= 4) {
            if (!reduceDeep<T, kMax>(c, spread, c.chunk, nt, w)) return;
          } else {
            if (!reduce<T, kMax>(c, spread, c.chunk, nt, w)) return;
          }
          gather<T, kDeep>(c, pp, t, nt, w);
          return;
        }
      }
      if (!kRotation) scatter<T>(c, ctx, pp, t, nt);
      if (!box.await(kScatterPhase, 1, whole, w)) return;
      if (!reduce<T, kMax>(c, spread, c.chunk, nt, w)) return;
      if (kRotation) {
        gatherInSteps<T, kMax>(c, spread, nt, w);
      } else {
        gather<T>(c, pp, t, nt, w);
      }
      return;
    }
    const Slice s = blockSlice(vecs, c.n, grid, blockIdx.x, Epi::kRowVecs);
    c.chunk = s.chunk;
    c.goff = box.gatherOffset(c.chunk, c.n);
    // Nothing to send or read: the same on every rank that agrees on the call, and block 0,
    // which always has a slice, catches ranks that do not (their header or check differs).
    __shared__ uint32_t s_bad[3];
    if (!overlap) {
      if (s.width() == 0) return;
      if (threadIdx.x == 0) s_bad[0] = 0;
      const Group whole{0, static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), s_bad};
      for (int k = 0; k < steps; ++k) role<T, kMax>(c, ctx, s, steps, kPushRole, k, whole, w);
      for (int k = 0; k < steps; ++k)
        if (!role<T, kMax>(c, ctx, s, steps, kReduceRole, k, whole, w)) return;
      for (int k = 0; k < steps; ++k)
        if (!role<T, kMax>(c, ctx, s, steps, kGatherRole, k, whole, w)) return;
      return;
    }
    // Groups of whole warps: a quarter push, a quarter gather, the rest reduce (the launch
    // gives at least 4 warps). Each group's failure word is set before any group can use it.
    if (threadIdx.x == 0) s_bad[0] = s_bad[1] = s_bad[2] = 0;
    __syncthreads();
    if (s.width() == 0) return;
    const int warps = static_cast<int>(blockDim.x) / 32;
    const int quarter = warps / 4;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int r = warp < quarter ? kPushRole : warp < warps - quarter ? kReduceRole : kGatherRole;
    const int first_warp = r == kPushRole ? 0 : r == kReduceRole ? quarter : warps - quarter;
    const int group_warps = r == kReduceRole ? warps - 2 * quarter : quarter;
    const Group g{1 + r, group_warps * 32, static_cast<int>(threadIdx.x) - first_warp * 32,
                  &s_bad[r]};
    for (int k = 0; k < steps; ++k)
      if (!role<T, kMax>(c, ctx, s, steps, r, k, g, w)) return;
  }
};

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_TWO_SHOT_CUH_
