// Device-side protocol primitives shared by every all-reduce algorithm.
#ifndef TPAR_KERNELS_PROTOCOL_CUH_
#define TPAR_KERNELS_PROTOCOL_CUH_

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/launch.h"

namespace tpar {
namespace kernels {

// NOTE [sentinel protocol]
// Data moves as 16-byte vectors that the sender stores straight into the receiver's workspace
// (stores cross links; loads stay local). There is no separate flag: a workspace word holds
// kSentinel until the sender's data lands, so a receiver knows a vector has arrived when none of
// its four 32-bit words is kSentinel. Each word is checked on its own, so a 16-byte store that
// lands in pieces (PCIe gives no 16-byte atomicity) is simply polled again; only the atomicity
// of aligned 4-byte stores is relied on.
//  * Real data must never equal kSentinel. Senders pass every word through escapeWord(), which
//    replaces 0xFFFFFFFF by kEscaped. Both are NaN as fp32, as two bf16 and as two fp16, so
//    only the payload bits of a NaN can change; a rank applies the same escape to its own
//    contribution, so every rank reduces identical inputs and gets identical bits.
//  * After reading a slot, the receiver writes kSentinel back (a local store). The next store
//    into that slot comes from a call two epochs later (NOTE [epochs and parity]), which the
//    sender can only reach after this rank finished the current kernel, so the clearing store
//    is ordered before it by the kernel boundary.
//  * After a kernel fails (timeout, mismatch) slots may hold stale data; the communicator is
//    then unusable (its error is sticky) and must be destroyed.
//
// NOTE [epochs and parity]
// The epoch counts kernels of this rank; every rank runs the same sequence of kernels, so all
// ranks agree on it. The workspace has two halves selected by epoch parity. A rank in epoch
// e+1 writes half (e+1)&1 of a peer; the peer may still be in epoch e, working in the other
// half. A rank cannot reach epoch e+2 (same half as e) before every peer finished epoch e:
// its epoch-(e+1) kernel waits for the call header every peer sends at the start of its own
// epoch-(e+1) kernel, which starts only after the peer's epoch-e kernel completed (stream
// order). Hence two halves suffice.
// Each block keeps its own copy of the epoch (block_epochs[blockIdx.x]): it reads it at its
// start and writes epoch+1 at its end. Every launch of a communicator uses the same grid, so
// all copies advance together, and no atomics or fences are needed: the next kernel in stream
// order sees the new values.
//
// NOTE [call header]
// Every block of each rank stores a 16-byte header into every peer's header slot of the
// current parity: {epoch, count, epoch, meta}, with meta = datatype, op, algorithm, whether an
// NCCL communicator is attached (NOTE [agreement] in core/agreement.h) and a hash of the whole
// call's count. Each 8-byte half carries the epoch, so a torn 16-byte store is
// detected (only 8-byte atomicity is relied on). Every block sends it, not block 0 alone: a
// block that starts after a sibling already recorded a mismatch sees `failed` and sends
// nothing, and if only block 0 sent headers, a late block 0 would leave the peer waiting for a
// header until its timeout instead of reporting the mismatch (seen on an H200: 2 ranks in host
// memory, one-shot, counts 1000 and 1001). The first block to start always sends it. Every
// block waits for the headers of all peers before it reduces; a header whose count or meta
// differs from ours records tparInvalidUsage, and the block gives up instead of reducing
// mismatched data. Headers are compared on equality of 32-bit epochs, which is correct across
// the wrap of the counter. A slot is initialized to epoch_start - 2 (same parity, never equal to
// a live epoch in it).

constexpr uint32_t kSentinel = 0xFFFFFFFFu;
constexpr uint32_t kEscaped = 0xFFBFFFFFu;

struct Vec {
  uint32_t w[4];
};

__device__ __forceinline__ uint32_t escapeWord(uint32_t x) { return x == kSentinel ? kEscaped : x; }

__device__ __forceinline__ Vec escapeVec(Vec v) {
#pragma unroll
  for (int i = 0; i < 4; ++i) v.w[i] = escapeWord(v.w[i]);
  return v;
}

__device__ __forceinline__ bool arrived(const Vec& v) {
  return v.w[0] != kSentinel && v.w[1] != kSentinel && v.w[2] != kSentinel &&
         v.w[3] != kSentinel;
}

// Volatile accesses: never cached in L1, never merged or elided by the compiler.
__device__ __forceinline__ Vec loadVolatile(const void* p) {
  Vec v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void storeVolatile(void* p, const Vec& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]),
               "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
               : "memory");
}

__device__ __forceinline__ Vec sentinelVec() { return Vec{{kSentinel, kSentinel, kSentinel, kSentinel}}; }

__device__ __forceinline__ uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Records the first error of this rank: device word for later kernels, host mirror for
// tparCommGetAsyncError.
__device__ __forceinline__ void recordError(const AllReduceArgs& a, uint32_t code) {
  if (atomicCAS(&a.state->error, 0u, code) == 0u) {
    *reinterpret_cast<volatile uint32_t*>(&a.host_state->error) = code;
    __threadfence_system();
  }
}

// Bounds every spin (docs/DESIGN.md principle 7). Polls cost a few hundred cycles; the clock,
// the abort word in host memory and the error word are read only every kCheckEvery
// unsuccessful polls.
class Waiter {
 public:
  __device__ explicit Waiter(const AllReduceArgs& a) : a_(a) {}

  // Returns false when the caller must give up (error already recorded).
  __device__ __forceinline__ bool keepWaiting() {
    if ((++spins_ & (kCheckEvery - 1)) != 0) return true;
    if (*reinterpret_cast<volatile uint32_t*>(&a_.state->error) != 0) return false;
    if (*reinterpret_cast<volatile uint32_t*>(&a_.host_state->abort) != 0) {
      recordError(a_, tparRemoteError);
      return false;
    }
    // The clock starts at the first check: a wait that ends within kCheckEvery polls (nearly
    // all of them) never reads it.
    const uint64_t now = globalTimerNs();
    if (start_ == 0) start_ = now;
    if (now - start_ > a_.timeout_ns) {
      recordError(a_, tparTimeout);
      return false;
    }
    if (spins_ > 4 * kCheckEvery) __nanosleep(64);
    return true;
  }

 private:
  static constexpr uint32_t kCheckEvery = 256;
  const AllReduceArgs& a_;
  uint64_t start_ = 0;
  uint32_t spins_ = 0;
};

// Loads the vector of every peer s < n but `me` from slot(s) (local workspace) into in[s], all
// loads issued before any is tested so that the waits overlap, then polls each until it has
// arrived (NOTE [sentinel protocol]). False on give-up.
template <int kMax, typename Slot>
__device__ __forceinline__ bool loadArrived(int n, int me, Vec* in, Slot slot, Waiter& w) {
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n && s != me) in[s] = loadVolatile(slot(s));
  }
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n && s != me) {
      while (!arrived(in[s])) {
        if (!w.keepWaiting()) return false;
        in[s] = loadVolatile(slot(s));
      }
    }
  }
  return true;
}

// Waits until the vector at `p` (local workspace) has arrived; false on give-up.
__device__ __forceinline__ bool pollVec(const void* p, Vec* out, Waiter& w) {
  Vec v = loadVolatile(p);
  while (!arrived(v)) {
    if (!w.keepWaiting()) return false;
    v = loadVolatile(p);
  }
  *out = v;
  return true;
}

// NOTE [pull protocol]
// The pull algorithms publish each rank's data once, in the pull area of its own receive region,
// and peers read it there (NOTE [sentinel protocol] is for pushes into the receiver's region).
// Only the owner writes a pull area, so no reader could restore sentinels for the next call;
// every published word is tied to its call's epoch instead:
//  * Lines (one-shot pull): 16 bytes {d0, epoch, d1, epoch}. A reader accepts each 8-byte half
//    once its epoch word equals the call's epoch, so only 8-byte store atomicity is relied on.
//    Half the bytes are payload; a reader needs a single round trip per vector.
//  * Flags (two-shot pull): data is stored plainly; once a block's stores are done
//    (__syncthreads), its thread 0 fences at system scope and stores the epoch into the block's
//    flag word. Readers load the flag with acquire semantics at system scope, then the data.
//    Full payload efficiency, one extra round trip per phase.
// The pull area of parity p is rewritten in epoch e+2, which its owner reaches only after every
// peer finished epoch e (NOTE [epochs and parity]). Every word starts at epoch_start - 2, which
// no live epoch of the area equals (as for call headers). Nothing is escaped: the data never
// has to differ from a marker, so NaN payloads pass unchanged.

__device__ __forceinline__ uint32_t loadAcquireSys(const void* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void storeVolatileU32(void* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Lines (NOTE [pull protocol]) of one-shot pull and two-shot LL: vector i as two 16-byte lines,
// laid out per group of 32 vectors as the 32 first halves, then the 32 second halves, so that
// each of a warp's two load or store instructions covers 512 contiguous bytes.
__device__ __forceinline__ char* loLine(char* base, uint64_t i) {
  return base + ((i / 32) * 64 + i % 32) * kVecBytes;
}
__device__ __forceinline__ char* hiLine(char* base, uint64_t i) {
  return loLine(base, i) + 32 * kVecBytes;
}
__device__ __forceinline__ void storeLines(char* base, uint64_t i, const Vec& x, uint32_t e) {
  storeVolatile(loLine(base, i), Vec{{x.w[0], e, x.w[1], e}});
  storeVolatile(hiLine(base, i), Vec{{x.w[2], e, x.w[3], e}});
}
// Both 8-byte halves of a line carry epoch e.
__device__ __forceinline__ bool lineArrived(const Vec& l, uint32_t e) {
  return l.w[1] == e && l.w[3] == e;
}
// The 16 payload bytes of a vector's two lines.
__device__ __forceinline__ Vec linePayload(const Vec& lo, const Vec& hi) {
  return Vec{{lo.w[0], lo.w[2], hi.w[0], hi.w[2]}};
}

// Base of the pull area of this call's parity in a region.
__device__ __forceinline__ char* pullArea(const AllReduceArgs& a, char* region, uint32_t parity) {
  return region + a.pull_base + parity * a.pull_bytes;
}
__device__ __forceinline__ uint32_t* pullFlag(char* area, int phase, int block) {
  return reinterpret_cast<uint32_t*>(area) + phase * kMaxBlocks + block;
}
__device__ __forceinline__ char* pullPayload(char* area) {
  return area + WorkspaceLayout::kPullFlagBytes;
}

// After every thread of the block stored its part of a phase: publish the phase's flag. Every
// thread of the block must call it (a barrier); thread 0's `failed` decides (CallContext).
__device__ __forceinline__ void publishFlag(char* area, int phase, uint32_t epoch, bool failed) {
  __syncthreads();
  if (threadIdx.x == 0 && !failed) {
    __threadfence_system();
    storeVolatileU32(pullFlag(area, phase, blockIdx.x), epoch);
  }
}

// Threads 0..nranks-1 wait for the flag of `phase` and this block in every peer's pull area.
// Returns the same answer on every thread of the block: false after an error was recorded.
template <int kMax>
__device__ __forceinline__ bool waitPeerFlags(const AllReduceArgs& a, uint32_t parity,
                                              int phase, uint32_t epoch, Waiter& w) {
  __shared__ uint32_t s_bad;
  if (threadIdx.x == 0) s_bad = 0;
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank) {
    const uint32_t* flag = pullFlag(pullArea(a, a.peer_ws[p], parity), phase, blockIdx.x);
    while (loadAcquireSys(flag) != epoch) {
      if (!w.keepWaiting()) {
        atomicOr(&s_bad, 1u);
        break;
      }
    }
  }
  __syncthreads();
  return s_bad == 0;
}

// NOTE [flag lines]
// The pipelined two-shot announces its data with flags that live in the receiver's region: for
// each (phase, block) the receiver owns one line of 16-byte slots, one per sender, and one warp
// of the receiver polls that line (two-shot LL rings the same slots as doorbells). Measured on
// an H200 with 8 virtual ranks and regions in host memory (bench/experiments/host_sync.cu,
// bench/results/2026-11-29-h200-host-sync-*.txt): an all-to-all hand-off took 2.3-2.5 us when
// each rank polled one such line, 11 us when each rank polled one word in each of its 7 peers'
// regions (the pull protocol's flags), and 12 us with eight polling blocks per rank: every poll
// is a read across the link, and reads queue behind each other. So: one polling warp per group,
// one request per poll, and nothing but the receiver's own region polled.
//  * A slot is {epoch, steps done, epoch, check}: the sender stores it after its data, behind a
//    system-scope fence, once per step; the receiver accepts it when both epoch words equal the
//    call's epoch (a torn 16-byte store is polled again; only 8-byte atomicity is relied on) and
//    the step count has reached the one it waits for. `check` hashes the call header (datatype,
//    op, algorithm, count) and the plan's blocks, steps and mode: a peer that disagrees is
//    reported as tparInvalidUsage instead of read.
//  * The receiver's acquire is a 4-byte ld.acquire.sys of the slot once its poll saw it. A
//    fence.acq_rel.sys there instead added about 2 us to each hand-off (same experiment: 3.9 us
//    with the sender's fence alone, 6.0 with a reader fence too, 4.0 with the acquire load).
//  * Each fenced hand-off is expensive: on the H200 with virtual ranks every further step of
//    the pipelined kernel (two fenced hand-offs per rank) cost 4.4-4.6 us with 2 ranks, 6.4-7.3
//    with 4 and 11.5-12.8 with 8, which is why plans use few steps.
//  * Slots sit in the pull area of the call's parity, which starts at epoch_start - 2 in every
//    word (NOTE [pull protocol]); a slot of parity p is rewritten in epoch e+2 only after every
//    peer finished epoch e (NOTE [epochs and parity]). Steps only grow within an epoch, so a
//    slot that already shows a later step satisfies an earlier wait.
//  * The data areas are per parity too; a sender writes a position once per call.

__device__ __forceinline__ char* lineSlot(char* area, int phase, int block, int sender) {
  return area + WorkspaceLayout::kLineFlagOffset +
         ((uint64_t(phase) * WorkspaceLayout::kLineBlocks + block) * kMaxRanks + sender) *
             kVecBytes;
}

// A named barrier over the `threads` threads of one group of whole warps (barrier 0 is
// __syncthreads).
__device__ __forceinline__ void groupBarrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// After every thread of a group (warps [first_warp, ...), `threads` threads, barrier `bar`)
// stored its data for `phase` up to step `done`: lanes p < n of the group's first warp fence at
// system scope and store our slot into peer p's line. Every thread of the group calls it.
__device__ __forceinline__ void announceStep(const AllReduceArgs& a, uint32_t parity, int bar,
                                             int threads, int lane_in_group, int phase,
                                             uint32_t epoch, uint32_t done, uint32_t check) {
  groupBarrier(bar, threads);
  const int p = lane_in_group;
  if (p < a.nranks && p != a.rank) {
    __threadfence_system();
    storeVolatile(lineSlot(pullArea(a, a.peer_ws[p], parity), phase, blockIdx.x, a.rank),
                  Vec{{epoch, done, epoch, check}});
  }
}

// Lanes p < n of the group's first warp poll peer p's slot in our own line of `phase` until it
// reaches step `want` (NOTE [flag lines]); `bad` is the group's shared failure word (0 at
// entry). The same answer on every thread of the group: false once an error is recorded.
// The acquire is a 4-byte acquire load of the slot once the poll saw it, not a standalone
// fence.acq_rel.sys (NOTE [flag lines]).
__device__ __forceinline__ bool awaitStep(const AllReduceArgs& a, uint32_t parity, int bar,
                                          int threads, int lane_in_group, int phase,
                                          uint32_t epoch, uint32_t want, uint32_t check,
                                          volatile uint32_t* bad, Waiter& w) {
  const int p = lane_in_group;
  if (p < a.nranks && p != a.rank) {
    const char* slot = lineSlot(pullArea(a, a.peer_ws[a.rank], parity), phase, blockIdx.x, p);
    for (;;) {
      const Vec f = loadVolatile(slot);
      if (f.w[0] == epoch && f.w[2] == epoch) {
        if (f.w[3] != check) {
          recordError(a, tparInvalidUsage);
          *bad = 1u;
          break;
        }
        if (f.w[1] >= want) {
          (void)loadAcquireSys(slot);
          break;
        }
      }
      if (!w.keepWaiting()) {
        *bad = 1u;
        break;
      }
    }
  }
  groupBarrier(bar, threads);
  return *bad == 0;
}

// ---- element conversion and reduction --------------------------------------------------------

template <typename T>
struct ElemTraits;

struct Bf16Tag {};
struct F16Tag {};

template <>
struct ElemTraits<float> {
  static constexpr int kPerVec = 4;
  static constexpr int kBytes = 4;
  __device__ static float toFloat(const Vec& v, int i) { return __uint_as_float(v.w[i]); }
  __device__ static void fromFloat(Vec& v, int i, float x) { v.w[i] = __float_as_uint(x); }
};

template <>
struct ElemTraits<Bf16Tag> {
  static constexpr int kPerVec = 8;
  static constexpr int kBytes = 2;
  __device__ static float toFloat(const Vec& v, int i) {
    uint32_t bits = (v.w[i >> 1] >> ((i & 1) * 16)) & 0xFFFFu;
    return __uint_as_float(bits << 16);
  }
  __device__ static void fromFloat(Vec& v, int i, float x) {
    const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    const int shift = (i & 1) * 16;
    v.w[i >> 1] = (v.w[i >> 1] & ~(0xFFFFu << shift)) | (h << shift);
  }
};

template <>
struct ElemTraits<F16Tag> {
  static constexpr int kPerVec = 8;
  static constexpr int kBytes = 2;
  __device__ static float toFloat(const Vec& v, int i) {
    const uint16_t bits = static_cast<uint16_t>((v.w[i >> 1] >> ((i & 1) * 16)) & 0xFFFFu);
    return __half2float(__ushort_as_half(bits));
  }
  __device__ static void fromFloat(Vec& v, int i, float x) {
    const uint16_t bits = __half_as_ushort(__float2half_rn(x));
    const int shift = (i & 1) * 16;
    v.w[i >> 1] = (v.w[i >> 1] & ~(0xFFFFu << shift)) | (uint32_t(bits) << shift);
  }
};

// fp32 accumulator of one vector. Accumulation order is fixed (rank 0 first) on every rank, and
// the result is rounded once at the end (docs/DESIGN.md principle 6).
template <typename T>
struct Acc {
  static constexpr int kN = ElemTraits<T>::kPerVec;
  float x[kN];

  __device__ __forceinline__ void init(const Vec& v) {
#pragma unroll
    for (int i = 0; i < kN; ++i) x[i] = ElemTraits<T>::toFloat(v, i);
  }
  __device__ __forceinline__ void add(const Vec& v, int op) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const float y = ElemTraits<T>::toFloat(v, i);
      x[i] = op == tparSum ? x[i] + y : (op == tparMax ? fmaxf(x[i], y) : fminf(x[i], y));
    }
  }
  __device__ __forceinline__ Vec round() const {
    Vec v{{0, 0, 0, 0}};
#pragma unroll
    for (int i = 0; i < kN; ++i) ElemTraits<T>::fromFloat(v, i, x[i]);
    return v;
  }
};

// ---- the caller's buffers: any element-aligned pointer, any count -------------------------

// Loads vector `v` of the caller's buffer; elements past `count` read as zero (never a sentinel
// word, since a zero half makes the word differ from 0xFFFFFFFF).
template <typename T>
__device__ __forceinline__ Vec loadUser(const void* base, uint64_t v, uint64_t count,
                                        bool aligned) {
  constexpr int kN = ElemTraits<T>::kPerVec;
  constexpr int kB = ElemTraits<T>::kBytes;
  const uint64_t e0 = v * kN;
  if (aligned && e0 + kN <= count) {
    return *reinterpret_cast<const Vec*>(static_cast<const char*>(base) + v * kVecBytes);
  }
  Vec out{{0, 0, 0, 0}};
  for (int i = 0; i < kN; ++i) {
    if (e0 + i < count) {
      const char* p = static_cast<const char*>(base) + (e0 + i) * kB;
      uint32_t bits = kB == 4 ? *reinterpret_cast<const uint32_t*>(p)
                              : uint32_t(*reinterpret_cast<const uint16_t*>(p));
      if (kB == 4) {
        out.w[i] = bits;
      } else {
        out.w[i >> 1] |= bits << ((i & 1) * 16);
      }
    }
  }
  return out;
}

template <typename T>
__device__ __forceinline__ void storeUser(void* base, uint64_t v, uint64_t count, bool aligned,
                                          const Vec& val) {
  constexpr int kN = ElemTraits<T>::kPerVec;
  constexpr int kB = ElemTraits<T>::kBytes;
  const uint64_t e0 = v * kN;
  if (aligned && e0 + kN <= count) {
    *reinterpret_cast<Vec*>(static_cast<char*>(base) + v * kVecBytes) = val;
    return;
  }
  for (int i = 0; i < kN; ++i) {
    if (e0 + i < count) {
      char* p = static_cast<char*>(base) + (e0 + i) * kB;
      if (kB == 4) {
        *reinterpret_cast<uint32_t*>(p) = val.w[i];
      } else {
        *reinterpret_cast<uint16_t*>(p) =
            static_cast<uint16_t>((val.w[i >> 1] >> ((i & 1) * 16)) & 0xFFFFu);
      }
    }
  }
}

// A thread index over the whole grid in which consecutive warps lie in different blocks:
// a loop over fewer items than the grid has threads then spreads them over every
// multiprocessor instead of filling the first blocks, and each warp still covers 32
// consecutive items (coalesced).
__device__ __forceinline__ uint64_t spreadThreadIndex(int grid) {
  const uint32_t warp = threadIdx.x / 32;
  const uint32_t lane = threadIdx.x % 32;
  return (uint64_t(warp) * grid + blockIdx.x) * 32 + lane;
}

// Blocks that take work this launch (the grid is fixed per communicator, NOTE [epochs and
// parity]; a plan may use fewer). Block 0 is always active: it sends the call headers.
__device__ __forceinline__ int activeBlocks(const AllReduceArgs& a) {
  return a.active_blocks > 0 && a.active_blocks < static_cast<int>(gridDim.x)
             ? a.active_blocks
             : static_cast<int>(gridDim.x);
}

// Block-sliced two-shot kernels (pull, pipelined, LL): the message as `vecs` 16-byte vectors in
// n chunks of `chunk`, and this block's slice [j0, j1) of positions within every chunk.
struct BlockSlice {
  uint64_t vecs, chunk, j0, j1;
  __device__ uint64_t width() const { return j1 > j0 ? j1 - j0 : 0; }
};

template <typename T>
__device__ __forceinline__ BlockSlice blockSlice(const AllReduceArgs& a) {
  constexpr int kPer = ElemTraits<T>::kPerVec;
  BlockSlice s;
  s.vecs = (a.count + kPer - 1) / kPer;
  s.chunk = (s.vecs + a.nranks - 1) / a.nranks;
  const int grid = activeBlocks(a);
  const uint64_t slice = (s.chunk + grid - 1) / grid;
  s.j0 = uint64_t(blockIdx.x) * slice;
  s.j1 = s.j0 + slice < s.chunk ? s.j0 + slice : s.chunk;
  return s;
}

// The sum (or max, min) of every rank's vector in rank order, rounded once: `mine` at our own
// rank, in[s] for every other s < n (docs/DESIGN.md principle 6).
template <typename T, int kMax>
__device__ __forceinline__ Vec reduceInRankOrder(int n, int me, const Vec& mine, const Vec* in,
                                                 int op) {
  Acc<T> acc;
#pragma unroll
  for (int s = 0; s < kMax; ++s) {
    if (s < n) {
      const Vec& x = s == me ? mine : in[s];
      if (s == 0) {
        acc.init(x);
      } else {
        acc.add(x, op);
      }
    }
  }
  return acc.round();
}

// Copies the other ranks' positions [s0, s0 + sn) of their chunks into the output, (rank,
// position) pairs spread over `threads` threads from `t` (rotation order from our rank), with
// up to kDepth loads in flight per thread before their stores: each load is a round trip when
// the source is in host memory. src(o, j) is where position j of owner o's chunk is read.
template <typename T, int kDepth, typename Src>
__device__ __forceinline__ void copyOthersChunks(const AllReduceArgs& a, const BlockSlice& bs,
                                                 uint64_t s0, uint32_t sn, uint32_t t,
                                                 uint32_t threads, Src src) {
  const int n = a.nranks;
  const uint32_t pairs = static_cast<uint32_t>(n - 1) * sn;
  const bool aligned = a.vec_aligned != 0;
  for (uint32_t t0 = t; t0 < pairs; t0 += kDepth * threads) {
    Vec x[kDepth];
    uint64_t dst[kDepth];
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      const uint32_t u = t0 + d * threads;
      dst[d] = bs.vecs;  // nothing to store
      if (u < pairs) {
        const uint32_t q = u / sn;
        int o = a.rank + 1 + static_cast<int>(q);
        if (o >= n) o -= n;
        const uint64_t j = s0 + (u - q * sn);
        const uint64_t v = uint64_t(o) * bs.chunk + j;
        if (v < bs.vecs) {
          dst[d] = v;
          x[d] = loadVolatile(src(o, j));
        }
      }
    }
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (dst[d] < bs.vecs) storeUser<T>(a.recv, dst[d], a.count, aligned, x[d]);
    }
  }
}

// ---- kernel prologue / epilogue ---------------------------------------------------------------

// NOTE [launch overlap]
// On GPUs with programmatic dependent launch (sm_90+), the host launches with
// cudaLaunchAttributeProgrammaticStreamSerialization, so a kernel may be scheduled before the
// previous kernel in its stream has finished. Every kernel therefore waits (griddepcontrol.wait:
// the previous grid complete and its memory visible) before its first access to global memory,
// and each block allows the next kernel's launch only as its very last act, after all its
// waits are over: the next kernel's blocks then never hold multiprocessors that ranks still
// waiting for each other need (virtual ranks must all stay resident). Without the attribute,
// or on older GPUs, both instructions do nothing.
__device__ __forceinline__ void waitForPrerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allowDependentLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

struct CallContext {
  uint32_t epoch;
  uint32_t parity;
  bool failed;  // an earlier kernel recorded an error: send nothing, wait for nothing
};

// Reads the epoch (NOTE [epochs and parity]) and whether an earlier kernel failed. Every
// thread reads the words itself (one broadcast load, no barrier), and nothing branches on them
// here: a kernel issues its first loads of the caller's input before it needs these values, so
// the two memory latencies overlap. Callers check `failed` before their first store.
__device__ __forceinline__ void beginCall(const AllReduceArgs& a, CallContext* ctx) {
  waitForPrerequisites();
  const uint32_t epoch =
      *reinterpret_cast<volatile uint32_t*>(&a.block_epochs[blockIdx.x]);
  const uint32_t failed = *reinterpret_cast<volatile uint32_t*>(&a.state->error);
  ctx->epoch = epoch;
  ctx->parity = epoch & 1u;
  ctx->failed = failed != 0;
}

// Threads p < n store our call header {epoch, count, epoch, meta} at slot(p), a place in peer
// p's region (nothing after an earlier failure).
template <typename Slot>
__device__ __forceinline__ void sendHeadersAt(const AllReduceArgs& a, const CallContext& ctx,
                                              Slot slot) {
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank && !ctx.failed) {
    storeVolatile(slot(p), Vec{{ctx.epoch, static_cast<uint32_t>(a.count), ctx.epoch, a.meta}});
  }
}

// Sends our call header to every peer (NOTE [call header]); every block does.
__device__ __forceinline__ void sendHeaders(const AllReduceArgs& a, const CallContext& ctx) {
  sendHeadersAt(a, ctx, [&](int p) {
    return a.peer_ws[p] + WorkspaceLayout::headerOffset(ctx.parity, a.rank);
  });
}

// Every block waits for the header each peer p stored at slot(p) in our own region and
// compares it with ours. Returns false (after recording the error) on a mismatch or give-up,
// or at once after an earlier failure; the result is the same for every thread.
template <typename Slot>
__device__ __forceinline__ bool checkHeadersAt(const AllReduceArgs& a, const CallContext& ctx,
                                               Slot slot, Waiter& w) {
  // Thread 0's view of `failed` decides for the whole block, so that every thread takes the
  // same path through the barriers.
  __shared__ uint32_t s_bad;
  if (threadIdx.x == 0) s_bad = ctx.failed ? 1u : 0u;
  __syncthreads();
  const int p = threadIdx.x;
  if (s_bad == 0 && p < a.nranks && p != a.rank) {
    const char* src = slot(p);
    Vec h = loadVolatile(src);
    bool ok = true;
    while (h.w[0] != ctx.epoch || h.w[2] != ctx.epoch) {
      if (!w.keepWaiting()) {
        ok = false;
        break;
      }
      h = loadVolatile(src);
    }
    if (ok && (h.w[1] != static_cast<uint32_t>(a.count) || h.w[3] != a.meta)) {
      recordError(a, tparInvalidUsage);
      ok = false;
    }
    if (!ok) atomicOr(&s_bad, 1u);
  }
  __syncthreads();
  return s_bad == 0;
}

// The call headers (NOTE [call header]).
__device__ __forceinline__ bool checkHeaders(const AllReduceArgs& a, const CallContext& ctx,
                                             Waiter& w) {
  return checkHeadersAt(
      a, ctx,
      [&](int p) -> const char* {
        return a.peer_ws[a.rank] + WorkspaceLayout::headerOffset(ctx.parity, p);
      },
      w);
}

// checkHeaders and waitPeerFlags in one wait: thread p polls peer p's call header and the flag
// of `phase` and this block in p's pull area together, so the two round trips overlap. A
// mismatched header is reported even when the flag never comes (the peer sliced differently).
template <int kMax>
__device__ __forceinline__ bool checkHeadersAndFlags(const AllReduceArgs& a,
                                                     const CallContext& ctx, int phase,
                                                     Waiter& w) {
  __shared__ uint32_t s_bad;
  if (threadIdx.x == 0) s_bad = ctx.failed ? 1u : 0u;
  __syncthreads();
  const int p = threadIdx.x;
  if (s_bad == 0 && p < a.nranks && p != a.rank) {
    const char* header = a.peer_ws[a.rank] + WorkspaceLayout::headerOffset(ctx.parity, p);
    const uint32_t* flag = pullFlag(pullArea(a, a.peer_ws[p], ctx.parity), phase, blockIdx.x);
    bool ok = true;
    bool header_seen = false;
    for (;;) {
      const Vec h = header_seen ? Vec{} : loadVolatile(header);
      const uint32_t f = loadAcquireSys(flag);
      if (!header_seen && h.w[0] == ctx.epoch && h.w[2] == ctx.epoch) {
        if (h.w[1] != static_cast<uint32_t>(a.count) || h.w[3] != a.meta) {
          recordError(a, tparInvalidUsage);
          ok = false;
          break;
        }
        header_seen = true;
      }
      if (header_seen && f == ctx.epoch) break;
      if (!w.keepWaiting()) {
        ok = false;
        break;
      }
    }
    if (!ok) atomicOr(&s_bad, 1u);
  }
  __syncthreads();
  return s_bad == 0;
}

// Advances this block's epoch (NOTE [epochs and parity]); every thread has read it.
__device__ __forceinline__ void endCall(const AllReduceArgs& a, const CallContext& ctx) {
  __syncthreads();
  if (threadIdx.x == 0) {
    a.block_epochs[blockIdx.x] = ctx.epoch + 1;
    allowDependentLaunch();
  }
}

// Defines the __global__ kernel template `name`<T, kMax> of an algorithm: the call prologue,
// `body`<T, kMax>(args, ctx) on the blocks this launch uses, and the epilogue, which every block
// runs (NOTE [epochs and parity]: inactive blocks keep their epoch in step).
#define TPAR_ALLREDUCE_KERNEL(name, body)                                                  \
  template <typename T, int kMax>                                                          \
  __global__ void __launch_bounds__(kMaxThreads) name(const __grid_constant__ AllReduceArgs a) { \
    CallContext ctx;                                                                       \
    beginCall(a, &ctx);                                                                    \
    if (static_cast<int>(blockIdx.x) < activeBlocks(a)) body<T, kMax>(a, ctx);             \
    endCall(a, ctx);                                                                       \
  }

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PROTOCOL_CUH_
