// Island-hierarchical all-reduce over k islands of m ranks (2 x 4, 4 x 2, 2 x 2, ...), for
// machines where the links between islands (CPU sockets) are the bottleneck.
//   1. Reduce-scatter inside the island: the rank at island position p owns chunk p (1/m of
//      the message) and sums it over its island, in island-position order.
//   2. Exchange across islands: the ranks at position p of every island (one per island) send
//      each other their island's partial sum of chunk p and add the k partials in island
//      order. Only 1/m of the message per rank crosses between islands, where flat two-shot
//      sends half of everything it sends to the other island.
//   3. All-gather inside the island.
// Partial sums cross in fp32, so the result is still rounded once (docs/DESIGN.md principle 6);
// that doubles the bytes of step 2 for 16-bit types. The order of additions is fixed and the
// same on every rank (islands in order, ranks in island order within each), so every rank gets
// the same bits; it differs from the flat rank order of the other algorithms, so the bits may
// differ from theirs in the last place.
#include "kernels/kernel_table.h"
#include "kernels/protocol.cuh"

namespace tpar {
namespace kernels {
namespace {

// fp32 partial sums of one vector position: kPer floats in kPer/4 16-byte vectors.
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
  __device__ __forceinline__ void addTo(Acc<T>* acc, int op, bool first) const {
#pragma unroll
    for (int i = 0; i < ElemTraits<T>::kPerVec; ++i) {
      const float y = __uint_as_float(v[i / 4].w[i % 4]);
      float& x = acc->x[i];
      x = first ? y : (op == tparSum ? x + y : (op == tparMax ? fmaxf(x, y) : fminf(x, y)));
    }
  }
};

template <typename T, int kMax>
__device__ __forceinline__ void hierBody(const AllReduceArgs& a, const CallContext& ctx) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  constexpr int kCrossVecs = Partial<T>::kVecs;
  const int m = a.hier_m;
  const int k = a.hier_k;
  const int isl = a.hier_island;
  const int pos = a.hier_pos;
  const int me = a.rank;
  const bool aligned = a.vec_aligned != 0;
  const uint64_t vecs = (a.count + kPer - 1) / kPer;
  const uint64_t chunk = (vecs + m - 1) / m;  // vectors per island position
  const uint64_t data_off = WorkspaceLayout::kDataOffset + ctx.parity * a.data_bytes;
  char* local = a.peer_ws[me] + data_off;
  const uint64_t cross_off = uint64_t(m) * chunk * kVecBytes;
  const uint64_t ag_off = cross_off + uint64_t(k) * chunk * kCrossVecs * kVecBytes;
  auto rsSlot = [&](char* data, int p, uint64_t j) {
    return data + (uint64_t(p) * chunk + j) * kVecBytes;
  };
  auto crossSlot = [&](char* data, int i, uint64_t j, int h) {
    return data + cross_off + ((uint64_t(i) * chunk + j) * kCrossVecs + h) * kVecBytes;
  };
  auto agSlot = [&](char* data, int p, uint64_t j) {
    return data + ag_off + (uint64_t(p) * chunk + j) * kVecBytes;
  };
  auto rankAt = [&](int i, int p) { return static_cast<int>(a.hier_rank[i * m + p]); };
  const int grid = activeBlocks(a);
  const uint64_t first = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t(grid) * blockDim.x;
  const uint64_t pairs = uint64_t(m - 1) * chunk;

  sendHeaders(a, ctx);
  // 1. Reduce-scatter push inside the island, one thread per (island peer, position).
  for (uint64_t t = first; t < pairs; t += stride) {
    const uint32_t q = static_cast<uint32_t>(t) / static_cast<uint32_t>(chunk);
    const uint64_t j = t - uint64_t(q) * chunk;
    int p = pos + static_cast<int>(q) + 1;
    if (p >= m) p -= m;
    const uint64_t v = uint64_t(p) * chunk + j;
    if (v < vecs) {
      const Vec x = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
      if (ctx.failed) break;
      storeVolatile(rsSlot(a.peer_ws[rankAt(isl, p)] + data_off, pos, j), x);
    }
  }

  Waiter w(a);
  if (!checkHeaders(a, ctx, w)) return;

  // 2. Our chunk: island partial, exchange with the other islands, global sum, broadcast.
  for (uint64_t j = spreadThreadIndex(grid); j < chunk; j += stride) {
    const uint64_t v = uint64_t(pos) * chunk + j;
    if (v >= vecs) break;
    Vec in[kMax];
    if (!loadArrived<kMax>(m, pos, in, [&](int p) { return rsSlot(local, p, j); }, w)) return;
    const Vec own = escapeVec(loadUser<T>(a.send, v, a.count, aligned));
    Acc<T> island;
#pragma unroll
    for (int p = 0; p < kMax; ++p) {
      if (p < m) {
        const Vec& x = p == pos ? own : in[p];
        if (p == 0) {
          island.init(x);
        } else {
          island.add(x, a.op);
        }
      }
    }
    const Partial<T> mine = Partial<T>::of(island);
    for (int i = 1; i < k; ++i) {
      int o = isl + i;
      if (o >= k) o -= k;
      char* dst = a.peer_ws[rankAt(o, pos)] + data_off;
#pragma unroll
      for (int h = 0; h < kCrossVecs; ++h) storeVolatile(crossSlot(dst, isl, j, h), mine.v[h]);
    }
    // Sum the islands' partials in island order.
    Acc<T> total;
    for (int i = 0; i < k; ++i) {
      Partial<T> p;
      if (i == isl) {
        p = mine;
      } else {
#pragma unroll
        for (int h = 0; h < kCrossVecs; ++h) {
          if (!pollVec(crossSlot(local, i, j, h), &p.v[h], w)) return;
          storeVolatile(crossSlot(local, i, j, h), sentinelVec());
        }
      }
      p.addTo(&total, a.op, i == 0);
    }
    const Vec r = escapeVec(total.round());
    for (int i = 1; i < m; ++i) {
      int p = pos + i;
      if (p >= m) p -= m;
      storeVolatile(agSlot(a.peer_ws[rankAt(isl, p)] + data_off, pos, j), r);
    }
    storeUser<T>(a.recv, v, a.count, aligned, r);
#pragma unroll
    for (int p = 0; p < kMax; ++p) {
      if (p < m && p != pos) storeVolatile(rsSlot(local, p, j), sentinelVec());
    }
  }

  // 3. All-gather inside the island, one thread per (owner, position). In place, the
  // position written here was read by the push of step 1 in another thread; the owner's
  // result depends on that read, so the read came first.
  for (uint64_t t = first; t < pairs; t += stride) {
    const uint32_t q = static_cast<uint32_t>(t) / static_cast<uint32_t>(chunk);
    const uint64_t j = t - uint64_t(q) * chunk;
    int o = pos + static_cast<int>(q) + 1;
    if (o >= m) o -= m;
    const uint64_t v = uint64_t(o) * chunk + j;
    if (v < vecs) {
      Vec x;
      if (!pollVec(agSlot(local, o, j), &x, w)) return;
      storeUser<T>(a.recv, v, a.count, aligned, x);
      storeVolatile(agSlot(local, o, j), sentinelVec());
    }
  }
}

TPAR_ALLREDUCE_KERNEL(hier, hierBody)

}  // namespace

TPAR_DEFINE_KERNEL_TABLE(hierKernel, hier)

}  // namespace kernels
}  // namespace tpar
