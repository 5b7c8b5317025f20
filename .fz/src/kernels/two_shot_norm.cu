// Two-shot all-reduce + residual add + RMSNorm with the row owner's norm (docs/FUSED.md, "Where
// the norm happens"): the message is cut into n chunks of whole rows, rank o owns chunk o;
// every rank pushes its part of each other chunk to the owner (SentinelBox, GPU memory), the
// owner reduces its rows in rank order and normalizes them (normSlice, row groups where its
// rows are fewer than the blocks), and sends r and y to every peer in place of the reduced
// row: the gather carries twice the bytes of the plain two-shot, and no rank normalizes a row
// another already did. Every rank ends with the owner's bits (encoded as they travel: the
// owner keeps the encoded bits too). No quantized outputs (the host sends those calls to the
// one-shot kernel or the composite path). Not yet run on a GPU: TPAR_FUSED_TWOSHOT turns it on.
#include "kernels/norm_epilogue.cuh"
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

using norm::normSlice;

template <class Box>
struct TwoShotNorm {
  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const NormArgs& e, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const bool e_aligned = e.aligned != 0;
    const uint32_t row_vecs = e.hidden / kPer;
    const uint32_t rpr = (e.rows + n - 1) / n;       // rows per rank's chunk
    const uint32_t chunk = rpr * row_vecs;           // vectors per chunk (the host bounds it)
    const uint64_t vecs = uint64_t(e.rows) * row_vecs;
    const uint64_t count = uint64_t(e.rows) * e.hidden;
    const Box box(a, ctx);
    char* own = box.area(me);
    // The areas of one parity: the scatter's n chunks, then r's and y's gathers (3 n chunks).
    const uint64_t r_off = uint64_t(n) * chunk * kVecBytes;
    const uint64_t y_off = 2 * r_off;
    const bool send_r = e.residual_out != nullptr || e.residual != nullptr;
    void* keep = e.residual_out != nullptr ? e.residual_out : e.residual;
    const int grid = activeBlocks(a);
    const uint32_t others = uint32_t(n - 1) * chunk;  // (peer, position) pairs of a phase
    const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x;
    const uint32_t stride = uint32_t(grid) * blockDim.x;

    // Scatter: our input's part of every other chunk to its owner, slot me * chunk + j; the
    // pair u is peer ahead(me, 1 + u / chunk) (every rank a different target at each step).
    sendHeaders(a, ctx);
    for (uint32_t u = first; u < others && !ctx.failed; u += stride) {
      const uint32_t q = u / chunk, j = u - q * chunk;
      const int o = ahead(me, 1 + static_cast<int>(q), n);
      const uint64_t v = uint64_t(o) * chunk + j;
      if (v >= vecs) continue;  // the last chunk is shorter
      box.put(box.area(o), uint64_t(me) * chunk + j,
              IdentityCodec::template encode<Box::kReservesWord>(
                  loadUser<T>(a.send, v, a.count, aligned)));
    }

    Waiter w(a);
    if (!checkHeaders(a, ctx, w)) return;

    // Our rows: reduced in rank order, normalized, and r and y sent to every peer.
    const uint32_t row0 = uint32_t(me) * rpr;
    const uint32_t mine = row0 < e.rows ? min(rpr, e.rows - row0) : 0;
    const uint32_t group = e.group > 1 ? e.group : 1;
    const uint32_t slice = group > 1 ? e.slice : row_vecs;
    const uint32_t units = mine * group;
    for (uint32_t u = blockIdx.x; u < units; u += grid) {
      const uint32_t local = u / group, c0 = (u % group) * slice;
      const uint32_t c1 = c0 + slice < row_vecs ? c0 + slice : row_vecs;
      auto sumOf = [&](uint32_t c, uint64_t v, Vec* sum) {
        const uint64_t j = uint64_t(local) * row_vecs + c;
        auto src = [&](int s) { return At{own, uint64_t(s) * chunk + j}; };
        return norm::sumInRankOrder<T, kMax>(box, n, me, src, a, v, aligned, w, sum);
      };
      const norm::GroupAcross across{a, ctx, w, u, group};
      // After normSlice stored y (and r before it): both to every peer, encoded; where the
      // escape changed a word, our own copies take the encoded bits too, so that every rank
      // holds the same bits.
      auto emit = [&](uint64_t v, const void*, const Vec& y) {
        const uint64_t slot = uint64_t(me) * chunk + (v - uint64_t(row0) * row_vecs);
        const Vec r = send_r ? loadUser<T>(keep, v, count, e_aligned) : Vec{};
        const Vec re = IdentityCodec::template encode<Box::kReservesWord>(r);
        const Vec ye = IdentityCodec::template encode<Box::kReservesWord>(y);
#pragma unroll
        for (int i = 1; i < kMax; ++i) {
          if (i < n) {
            char* peer = box.area(ahead(me, i, n));
            if (send_r) box.put(peer + r_off, slot, re);
            box.put(peer + y_off, slot, ye);
          }
        }
        auto differs = [](const Vec& x, const Vec& z) {
          return x.w[0] != z.w[0] || x.w[1] != z.w[1] || x.w[2] != z.w[2] || x.w[3] != z.w[3];
        };
        if (send_r && differs(r, re)) storeUser<T>(keep, v, count, e_aligned, re);
        if (differs(y, ye)) storeUser<T>(e.out, v, count, e_aligned, ye);
      };
      if (!normSlice<T>(e, local + row0, c0, c1, u % group == 0, sumOf, across, emit)) return;
    }

    // Gather: the other ranks' rows, r into keep and y into out.
    for (uint32_t u = first; u < others; u += stride) {
      const uint32_t q = u / chunk, j = u - q * chunk;
      const int o = ahead(me, 1 + static_cast<int>(q), n);
      const uint64_t v = uint64_t(o) * chunk + j;
      if (v >= vecs) continue;
      const uint64_t slot = uint64_t(o) * chunk + j;
      typename Box::Line y = box.fetch(own + y_off, slot);
      if (send_r) {
        typename Box::Line r = box.fetch(own + r_off, slot);
        if (!settle(box, own + r_off, slot, r, w)) return;
        storeUser<T>(keep, v, count, e_aligned, IdentityCodec::decode(Box::payload(r)));
        box.release(own + r_off, slot);
      }
      if (!settle(box, own + y_off, slot, y, w)) return;
      storeUser<T>(e.out, v, count, e_aligned, IdentityCodec::decode(Box::payload(y)));
      box.release(own + y_off, slot);
    }
  }
};

}  // namespace

extern const KernelSet twoShotNormKernels = makeNormKernelSet<TwoShotNorm<SentinelBox>>();

}  // namespace kernels
}  // namespace tpar
