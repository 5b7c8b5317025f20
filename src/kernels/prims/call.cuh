// One call of one block: bounded waits (docs/DESIGN.md principle 7: every spin of every kernel goes
// through Waiter), its epoch, the call header every peer must agree on, and the kernel wrapper
// every algorithm runs in.
#ifndef TPAR_KERNELS_PRIMS_CALL_CUH_
#define TPAR_KERNELS_PRIMS_CALL_CUH_

#include "kernels/launch.h"
#include "kernels/prims/elements.cuh"
#include "kernels/prims/ptx.cuh"

namespace tpar {
namespace kernels {

// Records the first error of this rank: device word for later kernels, host mirror for
// tparCommGetAsyncError.
__device__ __forceinline__ void recordError(const AllReduceArgs& a, uint32_t code) {
  if (atomicCAS(&a.state->error, 0u, code) == 0u) {
    *reinterpret_cast<volatile uint32_t*>(&a.host_state->error) = code;
    __threadfence_system();
  }
}

// Bounds every spin. Polls cost a few hundred cycles; the clock, the abort word in host memory
// and the error word are read only every kCheckEvery unsuccessful polls.
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
struct CallContext {
  uint32_t epoch;
  uint32_t parity;
  bool failed;  // an earlier kernel recorded an error: send nothing, wait for nothing
};

// Reads the epoch and whether an earlier kernel failed. Every thread reads the words itself
// (one broadcast load, no barrier), and nothing branches on them here. The kernels built for
// sm_90 use them (the parity, the failed test) before their first load of the caller's input,
// which so waits for these loads (docs/PERFORMANCE.md, "The prologue's words before the
// input"). Callers check `failed` before their first store.
__device__ __forceinline__ void beginCall(const AllReduceArgs& a, CallContext* ctx) {
  waitForPrerequisites();
  const uint32_t epoch = *reinterpret_cast<volatile uint32_t*>(&a.block_epochs[blockIdx.x]);
  const uint32_t failed = *reinterpret_cast<volatile uint32_t*>(&a.state->error);
  ctx->epoch = epoch;
  ctx->parity = epoch & 1u;
  ctx->failed = failed != 0;
}

// Advances this block's epoch; every thread has read it.
__device__ __forceinline__ void endCall(const AllReduceArgs& a, const CallContext& ctx) {
  __syncthreads();
  if (threadIdx.x == 0) {
    a.block_epochs[blockIdx.x] = ctx.epoch + 1;
    allowDependentLaunch();
  }
}

// Blocks that take work this launch (the grid is fixed per communicator, NOTE [epochs and
// parity]; a plan may use fewer). Block 0 is always active: it sends the call headers.
__device__ __forceinline__ int activeBlocks(const AllReduceArgs& a) {
  return a.active_blocks > 0 && a.active_blocks < static_cast<int>(gridDim.x)
             ? a.active_blocks
             : static_cast<int>(gridDim.x);
}

// NOTE [call header]
// Every block of each rank stores a 16-byte header into every peer's header slot of the
// current parity: {epoch, count, epoch, meta}, with meta = datatype, op, algorithm, whether an
// NCCL communicator is attached (NOTE [agreement] in comm/agreement.h) and a hash of the whole
// call's count. Each 8-byte half carries the epoch, so a torn 16-byte store is
// detected (only 8-byte atomicity is relied on). Every block sends it, not block 0 alone: a
// block that starts after a sibling already recorded a mismatch sees `failed` and sends
// nothing, and if only block 0 sent headers, a late block 0 would leave the peer waiting for a
// header until its timeout instead of reporting the mismatch (it happened with 2 ranks in host
// memory, one-shot, counts 1000 and 1001). The first block to start always sends it. Every
// block waits for the headers of all peers before it reduces (the one-shot pull over flag
// lines reads them in its flag poll instead, whose flags carry the call's check: awaitLine in
// mailbox.cuh); a header whose count or meta differs from ours records tparInvalidUsage, and
// the block gives up instead of reducing mismatched data. Headers are compared on equality of
// 32-bit epochs, which is correct across the wrap of the counter. A slot is initialized to
// epoch_start - 2 (same parity, never equal to a live epoch in it).

// Whether a peer's header `h` is not yet this call's (an epoch word differs from ours), and
// whether this call's header says another call (count or meta differs from ours: the mismatch
// that records tparInvalidUsage). checkHeaders and the flag poll (awaitLine) read headers so.
__device__ __forceinline__ bool headerPending(const Vec& h, const CallContext& ctx) {
  return h.w[0] != ctx.epoch || h.w[2] != ctx.epoch;
}
__device__ __forceinline__ bool headerDisagrees(const Vec& h, const AllReduceArgs& a) {
  return h.w[1] != static_cast<uint32_t>(a.count) || h.w[3] != a.meta;
}

// Threads p < n store our call header {epoch, count, epoch, meta} into peer p's region
// (nothing after an earlier failure).
__device__ __forceinline__ void sendHeaders(const AllReduceArgs& a, const CallContext& ctx) {
  const int p = threadIdx.x;
  if (p < a.nranks && p != a.rank && !ctx.failed) {
    storeVolatile(a.peer_ws[p] + WorkspaceLayout::headerOffset(ctx.parity, a.rank),
                  Vec{{ctx.epoch, static_cast<uint32_t>(a.count), ctx.epoch, a.meta}});
  }
}

// Every block waits for the header of each peer in our own region and compares it with ours.
// Returns false (after recording the error) on a mismatch or give-up, or at once after an
// earlier failure; the result is the same for every thread.
__device__ __forceinline__ bool checkHeaders(const AllReduceArgs& a, const CallContext& ctx,
                                             Waiter& w) {
  // Thread 0's view of `failed` decides for the whole block, so that every thread takes the
  // same path through the barriers.
  __shared__ uint32_t s_bad;
  if (threadIdx.x == 0) s_bad = ctx.failed ? 1u : 0u;
  __syncthreads();
  const int p = threadIdx.x;
  if (s_bad == 0 && p < a.nranks && p != a.rank) {
    const char* src = a.peer_ws[a.rank] + WorkspaceLayout::headerOffset(ctx.parity, p);
    Vec h = loadVolatile(src);
    bool ok = true;
    while (headerPending(h, ctx)) {
      if (!w.keepWaiting()) {
        ok = false;
        break;
      }
      h = loadVolatile(src);
    }
    if (ok && headerDisagrees(h, a)) {
      recordError(a, tparInvalidUsage);
      ok = false;
    }
    if (!ok) atomicOr(&s_bad, 1u);
  }
  __syncthreads();
  return s_bad == 0;
}

// NOTE [spills]
// Where the kernels spill registers, and why that is accepted (the sizes per kernel, and the
// timed compare that found them harmless so far, are in docs/PERFORMANCE.md, "Spills of the
// flag-line kernels"; scripts/kernel-report.py lists them for a build). The 8-rank variants,
// which run every group of up to 8 ranks, spill nothing, except the pipelined kernel (FlagBox,
// planned direction): its one-step path runs the roles on the whole block, beside the groups of
// warps of the several-step path, so one kernel holds two copies of the roles; the flag-line
// 16-rank variants likewise. bench/experiments/variants/spills.patch compiles the roles once.
// The other 16-rank variants, LineBox schedules: a peer's two lines are 8 registers and all 15
// peers' loads stay in flight (120 registers), so their round trips overlap; a spilled line
// comes back from L1 in tens of cycles, where two batches of 8 peers would add a link round
// trip per vector. The rest: per-peer values of the 16-way unrolled loops, reloaded from L1 in
// loops whose every iteration waits for a peer. __launch_bounds__(kMaxThreads, 1) lets one
// 512-thread block use all 128 registers; without it ptxas gave the 16-rank LL kernels 32
// registers and several times the spills.

// The kernel of every algorithm: the call prologue, Schedule::run<T, kMax>(args, ctx) on the
// blocks this launch uses, and the epilogue, which every block runs (NOTE [epochs and parity]:
// inactive blocks keep their epoch in step).
template <class Schedule, typename T, int kMax>
__global__ void __launch_bounds__(kMaxThreads, 1) allReduceKernel(const __grid_constant__ AllReduceArgs a) {
  CallContext ctx;
  beginCall(a, &ctx);
  if (static_cast<int>(blockIdx.x) < activeBlocks(a)) Schedule::template run<T, kMax>(a, ctx);
  endCall(a, ctx);
}

// The kernels of one schedule: per datatype, the 8- and 16-rank variants (kMax sizes the per-peer
// arrays and bounds the unrolled peer loops), and with kSmallGroups also variants for exactly 2
// ranks and for 3 or 4. A kernel sized for 8 peers keeps registers for 8 whatever the group, and
// its loops test the rank count on every unrolled iteration; one sized for the group does not
// (fewer registers, no idle iterations). Only the schedules that small groups run on their
// latency-bound path get them (one-shot, one-shot pull, two-shot, two-shot LL): each variant adds
// a kernel per datatype to the binary.
template <class Schedule, bool kSmallGroups = false>
KernelSet makeKernelSet() {
  auto k = [](auto* fn) { return reinterpret_cast<const void*>(fn); };
  constexpr int kTwo = kSmallGroups ? 2 : 8;
  constexpr int kFour = kSmallGroups ? 4 : 8;
  return KernelSet{{{k(&allReduceKernel<Schedule, float, 8>), k(&allReduceKernel<Schedule, float, 16>),
                     k(&allReduceKernel<Schedule, float, kTwo>), k(&allReduceKernel<Schedule, float, kFour>)},
                    {k(&allReduceKernel<Schedule, F16Tag, 8>), k(&allReduceKernel<Schedule, F16Tag, 16>),
                     k(&allReduceKernel<Schedule, F16Tag, kTwo>), k(&allReduceKernel<Schedule, F16Tag, kFour>)},
                    {k(&allReduceKernel<Schedule, Bf16Tag, 8>), k(&allReduceKernel<Schedule, Bf16Tag, 16>),
                     k(&allReduceKernel<Schedule, Bf16Tag, kTwo>), k(&allReduceKernel<Schedule, Bf16Tag, kFour>)}}};
}

// The kernel of every fused variant: as allReduceKernel, with the work after the all-reduce in
// its second parameter (Schedule::run<T, kMax>(args, norm, ctx)).
template <class Schedule, typename T, int kMax>
__global__ void __launch_bounds__(kMaxThreads, 1)
    normKernel(const __grid_constant__ AllReduceArgs a, const __grid_constant__ NormArgs e) {
  CallContext ctx;
  beginCall(a, &ctx);
  if (static_cast<int>(blockIdx.x) < activeBlocks(a)) Schedule::template run<T, kMax>(a, e, ctx);
  endCall(a, ctx);
}

template <class Schedule>
KernelSet makeNormKernelSet() {
  auto k = [](auto* fn) { return reinterpret_cast<const void*>(fn); };
  return KernelSet{{{k(&normKernel<Schedule, float, 8>), k(&normKernel<Schedule, float, 16>),
                     k(&normKernel<Schedule, float, 8>), k(&normKernel<Schedule, float, 8>)},
                    {k(&normKernel<Schedule, F16Tag, 8>), k(&normKernel<Schedule, F16Tag, 16>),
                     k(&normKernel<Schedule, F16Tag, 8>), k(&normKernel<Schedule, F16Tag, 8>)},
                    {k(&normKernel<Schedule, Bf16Tag, 8>), k(&normKernel<Schedule, Bf16Tag, 16>),
                     k(&normKernel<Schedule, Bf16Tag, 8>), k(&normKernel<Schedule, Bf16Tag, 8>)}}};
}

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_CALL_CUH_
