// Mailboxes: how a 16-byte vector travels to a slot another rank reads, and how the reader knows
// it arrived. Three protocols behind one interface, so a schedule is written once: put(area, i,
// x), fetch(area, i) (a Line: what one poll returns), refetch (what has not arrived), arrived,
// payload, release (make the slot reusable), area(rank), gatherOffset(chunk, n), and the
// hand-offs a block-sliced schedule calls between phases: begin, commit, await.
#ifndef TPAR_KERNELS_PRIMS_MAILBOX_CUH_
#define TPAR_KERNELS_PRIMS_MAILBOX_CUH_

#include "kernels/prims/call.cuh"
#include "kernels/prims/elements.cuh"
#include "kernels/prims/line_tags.h"

namespace tpar {
namespace kernels {

constexpr int kScatterPhase = 0;
constexpr int kGatherPhase = 1;

// The threads that run one phase of a block-sliced schedule: the whole block (bar 0), or one
// group of whole warps with its own named barrier. `bad` is the group's shared failure word.
struct Group {
  int bar;      // named barrier; 0 = __syncthreads
  int threads;  // threads in the group
  int t;        // this thread within the group
  volatile uint32_t* bad;
  __device__ __forceinline__ void sync() const {
    if (bar == 0) __syncthreads();
    else groupBarrier(bar, threads);
  }
  // The same answer on every thread of the group: true when no thread of it set `bad`.
  __device__ __forceinline__ bool agree() const {
    sync();
    return *bad == 0;
  }
};

// Slots that hold the 16-byte vector itself (SentinelBox, FlagBox).
struct PlainSlots {
  using Line = Vec;
  __device__ __forceinline__ static void put(char* area, uint64_t i, const Vec& x) {
    storeVolatile(area + i * kVecBytes, x);
  }
  __device__ __forceinline__ static Line fetch(const char* area, uint64_t i) {
    return loadVolatile(area + i * kVecBytes);
  }
  __device__ __forceinline__ static Vec payload(const Line& l) { return l; }
};

// NOTE [sentinel protocol]
// Data moves as 16-byte vectors that the sender stores straight into the receiver's workspace
// (stores cross links; loads stay local). There is no separate flag: a workspace word holds
// kSentinel until the sender's data lands, so a receiver knows a vector has arrived when none of
// its four 32-bit words is kSentinel. Each word is checked on its own, so a 16-byte store that
// lands in pieces (PCIe gives no 16-byte atomicity) is simply polled again; only the atomicity
// of aligned 4-byte stores is relied on.
//  * Real data must never equal kSentinel. Senders pass every word through the codec's escape
//    (IdentityCodec::encode), which replaces 0xFFFFFFFF by kEscaped. Both are NaN as fp32, as
//    two bf16 and as two fp16, so only the payload bits of a NaN can change; a rank applies the
//    same escape to its own contribution, so every rank reduces identical inputs and gets
//    identical bits.
//  * After reading a slot, the receiver writes kSentinel back (a local store). The next store
//    into that slot comes from a call two epochs later (NOTE [epochs and parity]), which the
//    sender can only reach after this rank finished the current kernel, so the clearing store
//    is ordered before it by the kernel boundary.
//  * After a kernel fails (timeout, mismatch) slots may hold stale data; the communicator is
//    then unusable (its error is sticky) and must be destroyed.
struct SentinelBox : PlainSlots {
  static constexpr bool kReservesWord = true;
  // Every vector carries its own flag: schedules spread pairs over the whole grid and need no
  // hand-off between phases (only the call header before the first read).
  static constexpr bool kPerVector = true;
  static constexpr bool kOverlapPhases = false;
  static constexpr int kGatherDepth = 1;

  const AllReduceArgs& a;
  const CallContext& ctx;
  __device__ SentinelBox(const AllReduceArgs& args, const CallContext& c, int = 0, int = 0, bool = false)
      : a(args), ctx(c) {}

  __device__ __forceinline__ char* area(int r) const {
    return a.peer_ws[r] + WorkspaceLayout::kDataOffset + ctx.parity * a.data_bytes;
  }
  __device__ __forceinline__ uint64_t gatherOffset(uint64_t chunk, int n) const {
    return uint64_t(n) * chunk * kVecBytes;
  }
  __device__ __forceinline__ void refetch(const char* area, uint64_t i, Line& l) const {
    l = fetch(area, i);
  }
  __device__ __forceinline__ static bool arrived(const Line& v) {
    return v.w[0] != kSentinel && v.w[1] != kSentinel && v.w[2] != kSentinel &&
           v.w[3] != kSentinel;
  }
  __device__ __forceinline__ void release(char* area, uint64_t i) const {
    put(area, i, Vec{{kSentinel, kSentinel, kSentinel, kSentinel}});
  }
  __device__ __forceinline__ void begin() const { sendHeaders(a, ctx); }
  __device__ __forceinline__ void commit(int, uint32_t, const Group&) const {}
  __device__ __forceinline__ bool await(int phase, uint32_t, const Group&, Waiter& w) const {
    return phase != kScatterPhase || checkHeaders(a, ctx, w);
  }
};

// NOTE [pull protocol]
// Epoch-tagged data, for areas that no reader may reset: the pull variants publish each rank's
// data once, in the pull area of its own receive region, and peers read it there (NOTE
// [sentinel protocol] is for pushes into the receiver's region, which the receiver resets).
// Only the owner writes a pull area, so no reader could restore sentinels for the next call;
// every published word is tied to its call's epoch instead:
//  * Lines (LineBox: one-shot pull, two-shot LL): 16 bytes {d0, tag, d1, tag'}, each tag the
//    call's epoch mixed with the tag's place in the vector (NOTE [line tags]). A reader accepts
//    each 8-byte half once its tag is the one of the call's epoch, so only 8-byte store
//    atomicity is relied on. Half the bytes are payload; a reader needs a single round trip per
//    vector. Vector i travels as two lines, laid out per group of 32 vectors as the 32 first
//    halves, then the 32 second halves, so that each of a warp's two load or store
//    instructions covers 512 contiguous bytes.
//  * Flag lines (FlagBox: the pipelined two-shot and two-shot pull): data is stored plainly
//    and announced per step (NOTE [flag lines]). Full payload efficiency, a fenced hand-off
//    per step.
// The pull area of parity p is rewritten in epoch e+2, which its owner reaches only after every
// peer finished epoch e (NOTE [epochs and parity]). Every word starts at epoch_start - 2, which
// no live epoch of the area equals (as for call headers). Nothing is escaped: the data never
// has to differ from a marker, so NaN payloads pass unchanged.
// Pull areas (LineBox, FlagBox), and `check`: what a peer must agree on before it reads them (the
// call header, and the plan's blocks, steps and direction), carried in the flag lines.
struct PullAreas {
  const AllReduceArgs& a;
  const CallContext& ctx;
  uint32_t check;
  __device__ PullAreas(const AllReduceArgs& args, const CallContext& c, int grid = 0,
                       int steps = 0, bool pull = false)
      : a(args), ctx(c) {
    check = a.meta ^ (static_cast<uint32_t>(a.count) * 0x9E3779B1u) ^
            ((static_cast<uint32_t>(steps) << 16 | static_cast<uint32_t>(grid) |
              (pull ? 0x80000000u : 0u)) *
             0x85EBCA77u);
  }
  // Rank r's pull area of this call's parity: its flag lines, then the payload.
  __device__ __forceinline__ char* lines(int r) const {
    return a.peer_ws[r] + a.pull_base + ctx.parity * a.pull_bytes;
  }
  __device__ __forceinline__ char* area(int r) const {
    return lines(r) + WorkspaceLayout::kPullFlagBytes;
  }
  __device__ __forceinline__ uint64_t gatherOffset(uint64_t, int) const {
    return WorkspaceLayout::pullHalf(a.pull_bytes);
  }
  __device__ __forceinline__ void release(char*, uint64_t) const {}
  __device__ __forceinline__ void begin() const {}
};

// NOTE [flag lines]
// Flags that live in the receiver's region: for each (phase, block) the receiver owns one line
// of 16-byte slots, one per sender, and one warp of the receiver polls that line (two-shot LL
// rings the same slots as doorbells). With regions in host memory every poll is a read across
// the link, and reads queue behind each other: an all-to-all hand-off is several times slower
// when each rank polls a word in each peer's region, or polls from several blocks, than when
// one warp polls one line (bench/experiments/host_sync.cu; the times are in docs/PERFORMANCE.md,
// "Host-staged transport"). So: one polling warp per group, one request per poll, and nothing
// but the receiver's own region polled.
//  * A slot is {epoch, steps done, epoch, check}: the sender stores it after its data, behind a
//    system-scope fence, once per step; the receiver accepts it when both epoch words equal the
//    call's epoch (a torn 16-byte store is polled again; only 8-byte atomicity is relied on) and
//    the step count has reached the one it waits for. `check` (PullAreas) hashes the call
//    header (datatype, op, algorithm, count) and the plan's blocks, steps and direction: a peer
//    that disagrees is reported as tparInvalidUsage instead of read. The slots carry the call
//    header this way, so these schedules send no separate one (NOTE [call header]); the
//    one-shot pull over flag lines, which shares its kernels' prologue with the sentinel
//    one-shot, sends one still and reads it in the flag poll (awaitLine).
//  * The receiver's acquire is a 4-byte ld.acquire.sys of the slot once its poll saw it: a
//    fence.acq_rel.sys there instead costs about as much again as the hand-off itself, the
//    acquire load next to nothing (same experiment, same section).
//  * Each fenced hand-off is expensive, and more so the more ranks share a GPU: every further
//    step of the pipelined kernel costs two of them per rank, which is why plans use few steps.
//  * Slots sit in the pull area of the call's parity, which starts at epoch_start - 2 in every
//    word (NOTE [pull protocol]); a slot of parity p is rewritten in epoch e+2 only after every
//    peer finished epoch e (NOTE [epochs and parity]). Steps only grow within an epoch, so a
//    slot that already shows a later step satisfies an earlier wait.
//  * The data areas are per parity too; a sender writes a position once per call.
//  * A flag written after its data is what docs/DESIGN.md principle 2 warns against;
//    docs/PROTOCOL.md ("Fenced flags in host memory") says why these kernels do it, and what backs
//    it.
// NOTE [hand-offs at GPU scope]
// The fence and the acquire of a flag line need only reach the threads that read the data. When
// every rank of the communicator is in this process on this GPU and the regions are in its
// memory (AllReduceArgs::gpu_scope), every reader runs on this GPU: fence.sc.gpu and
// ld.acquire.gpu order the data before the flag for all of them, as the PTX memory model
// defines scopes, and they need not wait for the system's ordering point. Virtual ranks on one
// H200 ran the two-shot pull so in 4 to 28 % less time, and the one-shot pull over flag lines
// ahead of epoch lines from 8 ranks (docs/PERFORMANCE.md, "Hand-offs at GPU scope for ranks on
// one GPU"). Ranks on other GPUs, in other processes or with regions in host memory keep the
// system scope.
__device__ __forceinline__ char* lineSlot(char* area, int phase, int block, int sender) {
  return area + ((uint64_t(phase) * WorkspaceLayout::kLineBlocks + block) * kMaxRanks + sender) *
             kVecBytes;
}

// After every thread of the group stored its data for `phase` up to step `done`: lanes p < n
// of the group's first warp store our slot into peer p's line (behind a fence when kFenced: at
// system scope, or GPU scope per NOTE [hand-offs at GPU scope]). Nothing after an earlier
// failure.
template <bool kFenced>
__device__ __forceinline__ void commitLine(const PullAreas& b, int phase, uint32_t done,
                                           const Group& g) {
  g.sync();
  const AllReduceArgs& a = b.a;
  const int p = g.t;
  if (p < a.nranks && p != a.rank && !b.ctx.failed) {
    if (kFenced) {
      if (a.gpu_scope) __threadfence();
      else __threadfence_system();
    }
    storeVolatile(lineSlot(b.lines(p), phase, blockIdx.x, a.rank),
                  Vec{{b.ctx.epoch, done, b.ctx.epoch, b.check}});
  }
}

// Lanes p < n of the group's first warp poll peer p's slot in our own line of `phase` until it
// reaches step `want` (then, when kFenced, acquire it). The same answer on every thread of the
// group: false once an error is recorded, or at once after an earlier failure (thread 0's view
// of it decides, so that every thread takes the same path through the barriers).
// kHeaders: a schedule that also sent call headers (one-shot pull over flag lines) checks a
// peer's header in the same poll, in place of a wait for the headers before this one: a flag
// that arrived carries the call's check, and a peer that runs a kernel without this flag line
// (another algorithm, when the ranks disagree) sent a header, whose mismatch ends the wait as
// it would have ended the header wait, instead of a timeout. The header is read on every eighth
// poll only, so that a wait puts few more reads on the link. One round of reads of freshly
// written lines instead of two: a little faster with 8 virtual ranks in GPU memory up to
// 112 KiB, even on the host (docs/PERFORMANCE.md, "The fenced hand-off in GPU memory, and
// headers read in the flag poll").
template <bool kFenced, bool kHeaders = false>
__device__ __forceinline__ bool awaitLine(const PullAreas& b, int phase, uint32_t want,
                                          const Group& g, Waiter& w) {
  const AllReduceArgs& a = b.a;
  const int p = g.t;
  if (p == 0 && b.ctx.failed) *g.bad = 1u;
  if (p < a.nranks && p != a.rank && !b.ctx.failed) {
    const char* slot = lineSlot(b.lines(a.rank), phase, blockIdx.x, p);
    const char* header = a.peer_ws[a.rank] + WorkspaceLayout::headerOffset(b.ctx.parity, p);
    for (uint32_t poll = 0;; ++poll) {
      const Vec f = loadVolatile(slot);
      if (f.w[0] == b.ctx.epoch && f.w[2] == b.ctx.epoch) {
        if (f.w[3] != b.check) {
          recordError(a, tparInvalidUsage);
          *g.bad = 1u;
          break;
        }
        if (f.w[1] >= want) {
          if (kFenced) (void)(a.gpu_scope ? loadAcquireGpu(slot) : loadAcquireSys(slot));
          break;
        }
      }
      if (kHeaders && poll % 8 == 7) {
        const Vec h = loadVolatile(header);
        if (!headerPending(h, b.ctx) && headerDisagrees(h, a)) {
          recordError(a, tparInvalidUsage);
          *g.bad = 1u;
          break;
        }
      }
      if (!w.keepWaiting()) {
        *g.bad = 1u;
        break;
      }
    }
  }
  return g.agree();
}

// NOTE [line tags]
// A pull area is shared by every schedule of the communicator: the flag-line ones (FlagBox, and
// the wire formats' kernel) leave plain data in it, the user's values or codes as they are. A
// line reader that runs ahead of its writer reads what the area held two epochs ago; if that
// was plain data whose words at a line's tag positions happened to equal the call's epoch (a
// zero and a small denormal in a bf16 pair, four INT8 codes such as 5, 0, 0, 0, or 1.0 and 0.0
// in fp16 once the epoch reaches 0x3C00), a bare epoch tag would accept stale data. So each
// 8-byte half of a line carries the epoch XORed with a constant of its place in the vector
// (lineTagMix in line_tags.h): the four tags of a vector differ from each other, so neither a
// constant word, nor the initial fill, nor a line of two epochs ago passes as a line of this
// epoch, and other plain data passes only if two of its words equal two unrelated 32-bit values
// at once. The constants do not depend on the vector's position: a slot holds one vector per
// epoch (as with the bare epoch, which the tags replace), so a position mix would guard against
// nothing more, and it cost the two-shot LL, whose peers' lines sit at different positions, a
// tag computation per peer and vector; with constants a reader's four expected tags are
// computed once per call (docs/PERFORMANCE.md, "Line tags without the position").
struct LineBox : PullAreas {
  static constexpr bool kReservesWord = false;
  static constexpr bool kPerVector = false;  // block-sliced, with doorbells (below)
  static constexpr bool kOverlapPhases = false;
  static constexpr int kGatherDepth = 2;
  struct Line {
    Vec lo, hi;
  };
  using PullAreas::PullAreas;

  __device__ __forceinline__ static char* lo(const char* base, uint64_t i) {
    return const_cast<char*>(base) + ((i / 32) * 64 + i % 32) * kVecBytes;
  }
  __device__ __forceinline__ void put(char* area, uint64_t i, const Vec& x) const {
    const uint32_t e = ctx.epoch;
    storeVolatile(lo(area, i), Vec{{x.w[0], lineTag(e, 0), x.w[1], lineTag(e, 1)}});
    storeVolatile(lo(area, i) + 32 * kVecBytes,
                  Vec{{x.w[2], lineTag(e, 2), x.w[3], lineTag(e, 3)}});
  }
  __device__ __forceinline__ static Line fetch(const char* area, uint64_t i) {
    return Line{loadVolatile(lo(area, i)), loadVolatile(lo(area, i) + 32 * kVecBytes)};
  }
  // Line h (0, 1) of a vector, as loaded, carries the call's epoch in both 8-byte halves.
  __device__ __forceinline__ bool half(const Vec& l, uint32_t h) const {
    return lineCarries(l.w[1], l.w[3], ctx.epoch, h);
  }
  __device__ __forceinline__ void refetch(const char* area, uint64_t i, Line& l) const {
    if (!half(l.lo, 0)) l.lo = loadVolatile(lo(area, i));
    if (!half(l.hi, 1)) l.hi = loadVolatile(lo(area, i) + 32 * kVecBytes);
  }
  __device__ __forceinline__ bool arrived(const Line& l) const {
    return half(l.lo, 0) && half(l.hi, 1);
  }
  __device__ __forceinline__ static Vec payload(const Line& l) {
    return Vec{{l.lo.w[0], l.lo.w[2], l.hi.w[0], l.hi.w[2]}};
  }
  // Doorbells: after a phase's lines a block rings every peer's flag line of (phase, block)
  // without a fence: the doorbell only says when to start reading, the lines themselves say
  // whether they arrived. The receiving block polls its one line before its threads read.
  __device__ __forceinline__ void commit(int phase, uint32_t done, const Group& g) const {
    commitLine<false>(*this, phase, done, g);
  }
  __device__ __forceinline__ bool await(int phase, uint32_t want, const Group& g, Waiter& w) const {
    return awaitLine<false>(*this, phase, want, g, w);
  }
};

struct FlagBox : PullAreas, PlainSlots {
  static constexpr bool kReservesWord = false;
  static constexpr bool kPerVector = false;
  // Fenced hand-offs are dear: with more than one step the schedule overlaps its phases in
  // groups of warps, writes in one direction of the link with reads in the other.
  static constexpr bool kOverlapPhases = true;
  static constexpr int kGatherDepth = 4;  // each load is a round trip when the source is host memory
  using PullAreas::PullAreas;

  __device__ __forceinline__ void refetch(const char*, uint64_t, Line&) const {}
  // After await: the flag said the block's data is there.
  __device__ __forceinline__ static bool arrived(const Line&) { return true; }
  __device__ __forceinline__ void commit(int phase, uint32_t done, const Group& g) const {
    commitLine<true>(*this, phase, done, g);
  }
  __device__ __forceinline__ bool await(int phase, uint32_t want, const Group& g, Waiter& w) const {
    return awaitLine<true>(*this, phase, want, g, w);
  }
  // The await of a schedule that sent call headers too: their check in the same poll.
  __device__ __forceinline__ bool awaitChecked(int phase, uint32_t want, const Group& g,
                                               Waiter& w) const {
    return awaitLine<true, true>(*this, phase, want, g, w);
  }
};

// A slot: the area of one rank's region and an index in it.
struct At {
  char* area;
  uint64_t i;
};

// Polls slot i of `area` again until the line `l` fetched from it has arrived. False on give-up.
template <class Box>
__device__ __forceinline__ bool settle(const Box& box, const char* area, uint64_t i,
                                       typename Box::Line& l, Waiter& w) {
  while (!box.arrived(l)) {
    if (!w.keepWaiting()) return false;
    box.refetch(area, i, l);
  }
  return true;
}

// The sum (or max, min) of every rank's vector in rank order, into *acc: mine() at our own
// rank, slot src(s) = {area, index} of every other s < n once it has arrived. Every peer's load
// is issued first (and our own input's after them), so the waits overlap; each is taken as its
// turn in rank order comes (docs/DESIGN.md principle 6). False on give-up. kSettled: every slot
// has arrived.
template <typename T, int kMax, class Codec, bool kSettled = false, class Box, typename Src, typename Mine>
__device__ __forceinline__ bool reduceFrom(const Box& box, int n, int me, Src src, Mine mine,
                                           RuntimeOp op, Waiter& w, Acc<T>* acc) {
  typename Box::Line in[kMax];
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n && s != me) in[s] = box.fetch(src(s).area, src(s).i);
  }
  const Vec own = mine();
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n) {
      // Up to 8 ranks settle a copy of the slot's line, not the array element: with a
      // reference into `in`, the two-shot kernels stored words of the first peer's line to an
      // unused stack slot between the peers' loads, which waited for that load before the
      // remaining peers' were issued. The 16-rank kernels keep the reference, with which the
      // one-shot pull spills less. At our own rank the copy is of a slot never loaded, and
      // nothing reads it; taken for peers only, the stores come back (docs/PERFORMANCE.md,
      // "Our own rank's term apart").
      typename Box::Line l = in[s];
      typename Box::Line& x = kMax <= 8 ? l : in[s];
      if (!kSettled && s != me && !settle(box, src(s).area, src(s).i, x, w)) return false;
      acc->take(s, s == me ? own : Codec::decode(Box::payload(x)), op);
    }
  }
  return true;
}

// Makes the slots src(s) of every peer s < n reusable (Box::release).
template <int kMax, class Box, typename Src>
__device__ __forceinline__ void releaseFrom(const Box& box, int n, int me, Src src) {
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n && s != me) box.release(src(s).area, src(s).i);
  }
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_MAILBOX_CUH_
