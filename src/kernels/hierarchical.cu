// Island-hierarchical all-reduce over k islands of m ranks (2 x 4, 4 x 2, 2 x 2, ...), for machines
// where the links between islands (CPU sockets) are the bottleneck: the two-shot schedule
// (two_shot.cuh) over the ranks of our island (the rank at island position p owns chunk p, 1/m of
// the message), with the exchange across islands as the epilogue of each reduced position: the
// ranks at position p of every island send each other their island's partial sum and add the k
// partials in island order. Only 1/m of the message per rank crosses between islands, where flat
// two-shot sends half of everything it sends to the other island. Partials cross in fp32, so the
// result is still rounded once (docs/DESIGN.md principle 6), at twice the bytes for 16-bit types.
// The order of additions (islands in order, ranks in island order within each) is the same on every
// rank, but not the flat rank order of the other algorithms: the bits may differ from theirs in the
// last place.
#include "kernels/two_shot.cuh"

namespace tpar {
namespace kernels {
namespace {

// Step 2 as an epilogue: the k partials of each position of chunk p sit between the two
// phases' areas, slot (island i, position j) of the owner at position p of every island.
struct CrossIslands {
  static constexpr uint64_t kRowVecs = 1;
  // fp32 partial sums of one position: kPer floats in kPer/4 vectors.
  template <typename T>
  __device__ static constexpr int crossVecs() { return ElemTraits<T>::kPerVec / 4; }
  template <typename T>
  __device__ static uint64_t scratchBytes(const AllReduceArgs& a, uint64_t chunk) {
    return uint64_t(a.hier_k) * chunk * crossVecs<T>() * kVecBytes;
  }
  template <typename T, class Call>
  __device__ __forceinline__ static bool apply(const Call& c, uint64_t j, Acc<T>& acc, Waiter& w) {
    constexpr int kVecs = crossVecs<T>();
    const AllReduceArgs& a = c.a;
    const int k = a.hier_k;
    const int isl = a.hier_island;
    const uint64_t off = c.box.gatherOffset(c.chunk, c.n);
    // Our island's partial, escaped like any data of the sentinel protocol.
    Vec mine[kVecs];
#pragma unroll
    for (int e = 0; e < ElemTraits<T>::kPerVec; ++e)
      mine[e / 4].w[e % 4] = escapeWord(__float_as_uint(acc.x[e]));
    for (int i = 1; i < k; ++i) {
      char* dst = c.box.area(a.hier_rank[ahead(isl, i, k) * a.hier_m + a.hier_pos]) + off;
#pragma unroll
      for (int h = 0; h < kVecs; ++h) c.box.put(dst, (uint64_t(isl) * c.chunk + j) * kVecs + h, mine[h]);
    }
    // Sum the islands' partials in island order.
    char* own = c.own + off;
    for (int i = 0; i < k; ++i) {
      Vec p[kVecs];
#pragma unroll
      for (int h = 0; h < kVecs; ++h) {
        p[h] = mine[h];
        if (i != isl) {
          const uint64_t ci = (uint64_t(i) * c.chunk + j) * kVecs + h;
          Vec l = c.box.fetch(own, ci);  // settled in a copy: see reduceFrom in prims/mailbox.cuh
          if (!settle(c.box, own, ci, l, w)) return false;
          p[h] = l;
          c.box.release(own, ci);
        }
      }
#pragma unroll
      for (int e = 0; e < ElemTraits<T>::kPerVec; ++e) {
        const float y = __uint_as_float(p[e / 4].w[e % 4]);
        acc.x[e] = i == 0 ? y : RuntimeOp{a.op}(acc.x[e], y);
      }
    }
    return true;
  }
};

}  // namespace

extern const KernelSet hierKernels =
    makeKernelSet<TwoShot<SentinelBox, kPush, IdentityCodec, CrossIslands, IslandRanks>>();

}  // namespace kernels
}  // namespace tpar
