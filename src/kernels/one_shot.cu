// One-shot all-reduce: every rank's whole input reaches every peer, and every rank reduces all
// ranks' copies itself: one hand-off, n-1 times the message sent (push) or read (pull) per rank.
// oneshot (SentinelBox, push): each thread pushes its vector to every peer, rank+1 first (every
// rank a different target at each step), then reduces that position; in place, the thread's own
// read precedes its write. oneshot-pull (LineBox, pull): each rank publishes its input once, as
// lines in its own region, which every reader shares (host memory); one round trip per vector.
// In host memory from 3 ranks on it publishes plain data over flag lines instead (FlagBox;
// NOTE [one-shot pull over flag lines in host memory]).
#include <type_traits>

#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"

namespace tpar {
namespace kernels {
namespace {

template <class Box, bool kPull, class Codec = IdentityCodec, class Epi = IdentityEpilogue>
struct OneShot {
  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    constexpr int kPer = ElemTraits<T>::kPerVec;
    const int n = a.nranks;
    const int me = a.rank;
    const bool aligned = a.vec_aligned != 0;
    const uint64_t vecs = (a.count + kPer - 1) / kPer;
    const Box box(a, ctx);
    char* own = box.area(me);
    const int grid = activeBlocks(a);
    // Pull spreads its (fewer, longer) vectors over every block; push keeps a block's vectors
    // together, as measured best for each.
    const uint64_t first = kPull ? spreadIndex(threadIdx.x, blockIdx.x, grid)
                                 : uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const uint64_t stride = uint64_t(grid) * blockDim.x;
    // Flag lines: the published data is plain, so a reader may read it only after the
    // publishing block's flag. Block b of every rank publishes and reads the same vectors (the
    // same spread over the same grid), so each block awaits block b of each peer only.
    constexpr bool kFlags = std::is_same<Box, FlagBox>::value;
    __shared__ uint32_t s_bad;
    if (kFlags && threadIdx.x == 0) s_bad = 0;
    const Group whole{0, static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), &s_bad};
    sendHeaders(a, ctx);
    for (uint64_t v = first; v < vecs; v += stride) {
      const Vec x = Codec::template encode<Box::kReservesWord>(loadUser<T>(a.send, v, a.count, aligned));
      if (ctx.failed) break;
      if (kPull) {
        box.put(own, v, x);
      } else {
#pragma unroll
        for (int i = 1; i < kMax; ++i) {
          if (i < n) box.put(box.area(ahead(me, i, n)), uint64_t(me) * vecs + v, x);
        }
      }
    }

    if (kFlags) box.commit(kScatterPhase, 1, whole);
    Waiter w(a);
    // Over flag lines the peers' headers are checked in the flag poll, not waited for first
    // (awaitLine, kHeaders): one round of reads of what peers just wrote instead of two.
    if constexpr (kFlags) {
      if (!box.awaitChecked(kScatterPhase, 1, whole, w)) return;
    } else {
      if (!checkHeaders(a, ctx, w)) return;
    }

    for (uint64_t v = first; v < vecs; v += stride) {
      // Push: sender s's copy of vector v in slot s * vecs + v (rank-major: each sender writes
      // one contiguous range). Pull: vector v of the owner's own area.
      auto src = [&](int s) {
        return kPull ? At{box.area(s), v} : At{own, uint64_t(s) * vecs + v};
      };
      Acc<T> acc;
      if (!reduceFrom<T, kMax, Codec>(
              box, n, me, src,
              [&] {
                return Codec::template encode<Box::kReservesWord>(
                    loadUser<T>(a.send, v, a.count, aligned));
              },
              RuntimeOp{a.op}, w, &acc))
        return;
      if (!Epi::apply(a, v, acc, w)) return;
      storeUser<T>(a.recv, v, a.count, aligned, acc.round());
      releaseFrom<kMax>(box, n, me, src);
    }
  }
};

// NOTE [one-shot pull over flag lines in host memory]
// Epoch lines carry half a payload each: over the host link, every reader fetches twice the
// input from every peer. Published plainly, with one fenced flag per block, a reader fetches
// the input once, after one more round trip (the flag). With every rank on one GPU's link
// (virtual ranks on one H200, forced one-shot pull, the same run) the flag lines are ahead at
// 4 and 8 ranks from 12 KiB (and at 8 ranks from 4 KiB), behind at 2 ranks up to 32 KiB,
// where the round trip weighs more than the bytes; in GPU memory, where a read crosses no link,
// they are behind or even at every size and group (docs/PERFORMANCE.md, "One-shot pull over
// flag lines, and the small-group defaults run"), fenced at system scope. So host regions get
// them from 3 ranks on (3 ranks, which share the 4-rank kernels, were not timed); 2 ranks keep
// epoch lines, and so does GPU memory, except the groups on one GPU whose flags are fenced at
// GPU scope (NOTE [one-shot pull over flag lines on one GPU] in comm/comm.cc). Flag lines exist
// for the first kLineBlocks blocks: the row's host block limit.
template <typename T>
void hostPullKernels(const void* (&fn)[4]) {
  using Flags = OneShot<FlagBox, true>;
  auto k = [](auto* f) { return reinterpret_cast<const void*>(f); };
  fn[KernelSet::variant(8)] = k(&allReduceKernel<Flags, T, 8>);
  fn[KernelSet::variant(16)] = k(&allReduceKernel<Flags, T, 16>);
  fn[KernelSet::variant(2)] = k(&allReduceKernel<OneShot<LineBox, true>, T, 2>);
  fn[KernelSet::variant(4)] = k(&allReduceKernel<Flags, T, 4>);
}

KernelSet makeHostPullKernels() {
  KernelSet s{};
  hostPullKernels<float>(s.fn[tparFloat32]);
  hostPullKernels<F16Tag>(s.fn[tparFloat16]);
  hostPullKernels<Bf16Tag>(s.fn[tparBfloat16]);
  return s;
}

}  // namespace

extern const KernelSet oneShotKernels = makeKernelSet<OneShot<SentinelBox, false>, true>();
extern const KernelSet oneShotPullKernels = makeKernelSet<OneShot<LineBox, true>, true>();
extern const KernelSet oneShotPullHostKernels = makeHostPullKernels();

}  // namespace kernels
}  // namespace tpar
