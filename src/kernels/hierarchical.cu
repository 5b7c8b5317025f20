// Island-hierarchical all-reduce over k islands of m ranks (2 x 4, 4 x 2, 2 x 2, ...), for
// machines where the links between islands (CPU sockets) are the bottleneck.
//   1. Reduce-scatter inside the island: the rank at island position p owns chunk p (1/m of
//      the message) and sums it over its island, in island-position order.
//   2. Exchange across islands: the ranks at position p of every island (one per island) send
//      each other their island's partial sum of chunk p and add the k partials in island
//      order. Only 1/m of the message per rank crosses between islands, where flat two-shot
//      sends half of everything it sends to the other island.
//   3. All-gather inside the island.
// Partial sums cross in fp32, so the result is still rounded once (principle 6); that doubles
// the bytes of step 2 for 16-bit types. The order of additions is fixed and the same on every
// rank (islands in order, ranks in island order within each), so every rank gets the same
// bits; it differs from the flat rank order of the other algorithms, so the bits may differ
// from theirs in the last place.
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

// fp32 partial sums of one vector position: kPer floats in kPer/4 16-byte vectors, escaped like
// any data of the sentinel protocol.
template <typename T>
struct Partial {
  static constexpr int kVecs = ElemTraits<T>::kPerVec / 4;
  Vec v[kVecs];

  __device__ __forceinline__ static Partial of(const Acc<T>& acc) {
    Partial p;
#pragma unroll
    for (int i = 0; i < ElemTraits<T>::kPerVec; ++i)
      p.v[i / 4].w[i % 4] = escapeWord(__float_as_uint(acc.x[i]));
    return p;
  }
  __device__ __forceinline__ void addTo(Acc<T>* acc, RuntimeOp op, bool first) const {
#pragma unroll
    for (int i = 0; i < ElemTraits<T>::kPerVec; ++i) {
      const float y = __uint_as_float(v[i / 4].w[i % 4]);
      acc->x[i] = first ? y : op(acc->x[i], y);
    }
  }
};

struct Hierarchical {
  using Box = SentinelBox;
  using Codec = IdentityCodec;

  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    constexpr int kCrossVecs = Partial<T>::kVecs;
    const int m = a.hier_m;
    const int k = a.hier_k;
    const int isl = a.hier_island;
    const int pos = a.hier_pos;
    const bool aligned = a.vec_aligned != 0;
    const RuntimeOp op{a.op};
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const uint64_t chunk = chunkVecs(vecs, m, 1);  // vectors per island position
    const Box box(a, ctx);
    // Areas of a region: reduce-scatter slots (position p, j) at p * chunk + j, then the k
    // partials of each position, then the all-gather slots.
    const uint64_t cross_off = uint64_t(m) * chunk * kVecBytes;
    const uint64_t ag_off = cross_off + uint64_t(k) * chunk * kCrossVecs * kVecBytes;
    auto region = [&](int i, int p) { return box.area(a.hier_rank[i * m + p]); };
    char* own = box.area(a.rank);
    const int grid = activeBlocks(a);
    const uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t nt = uint32_t(grid) * blockDim.x;
    const PeerPositions pp{m, pos, 0, static_cast<uint32_t>(chunk)};

    sendHeaders(a, ctx);
    // 1. Reduce-scatter push inside the island, one thread per (island peer, position).
    for (uint32_t u = t; u < pp.pairs(); u += nt) {
      uint64_t j;
      const int p = pp.peer(u, &j);
      const uint64_t v = uint64_t(p) * chunk + j;
      if (v < vecs) {
        const Vec x = Codec::encode<Box::kReservesWord>(loadUser<T>(a.send, v, a.count, aligned));
        if (ctx.failed) break;
        box.put(region(isl, p), uint64_t(pos) * chunk + j, x);
      }
    }

    Waiter w(a);
    if (!checkHeaders(a, ctx, w)) return;

    // 2. Our chunk: island partial, exchange with the other islands, global sum, broadcast.
    for (uint64_t j = spreadIndex(threadIdx.x, blockIdx.x, grid); j < chunk; j += nt) {
      const uint64_t v = uint64_t(pos) * chunk + j;
      if (v >= vecs) break;
      auto src = [&](int p) { return At{own, uint64_t(p) * chunk + j}; };
      Box::Line in[kMax];
#pragma unroll
      for (int p = 0; p < kMax; ++p) {
        if (p < m && p != pos) in[p] = box.fetch(own, src(p).i);
      }
      const Vec mine = Codec::encode<Box::kReservesWord>(loadUser<T>(a.send, v, a.count, aligned));
      Acc<T> island;
      if (!reduceArrived<T, kMax, Codec>(box, m, pos, mine, in, src, op, w, &island)) return;
      const Partial<T> partial = Partial<T>::of(island);
      for (int i = 1; i < k; ++i) {
        char* dst = region(ahead(isl, i, k), pos) + cross_off;
#pragma unroll
        for (int h = 0; h < kCrossVecs; ++h) box.put(dst, (uint64_t(isl) * chunk + j) * kCrossVecs + h, partial.v[h]);
      }
      // Sum the islands' partials in island order.
      Acc<T> total;
      for (int i = 0; i < k; ++i) {
        Partial<T> p;
        if (i == isl) {
          p = partial;
        } else {
#pragma unroll
          for (int h = 0; h < kCrossVecs; ++h) {
            const uint64_t ci = (uint64_t(i) * chunk + j) * kCrossVecs + h;
            p.v[h] = box.fetch(own + cross_off, ci);
            if (!settle(box, own + cross_off, ci, p.v[h], w)) return;
            box.release(own + cross_off, ci);
          }
        }
        p.addTo(&total, op, i == 0);
      }
      const Vec r = Codec::encode<Box::kReservesWord>(total.round());
      for (int i = 1; i < m; ++i) box.put(region(isl, ahead(pos, i, m)) + ag_off, v, r);
      storeUser<T>(a.recv, v, a.count, aligned, r);
#pragma unroll
      for (int p = 0; p < kMax; ++p) {
        if (p < m && p != pos) box.release(own, src(p).i);
      }
    }

    // 3. All-gather inside the island, one thread per (owner, position). In place, the
    // position written here was read by the push of step 1 in another thread; the owner's
    // result depends on that read, so the read came first.
    for (uint32_t u = t; u < pp.pairs(); u += nt) {
      uint64_t j;
      const int o = pp.peer(u, &j);
      const uint64_t v = uint64_t(o) * chunk + j;
      if (v < vecs) {
        Box::Line x = box.fetch(own + ag_off, v);
        if (!settle(box, own + ag_off, v, x, w)) return;
        storeUser<T>(a.recv, v, a.count, aligned, Codec::decode(x));
        box.release(own + ag_off, v);
      }
    }
  }
};

}  // namespace

extern const KernelSet hierKernels = makeKernelSet<Hierarchical>();

}  // namespace kernels
}  // namespace tpar
