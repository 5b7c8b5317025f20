// The copy-engine path (NOTE [copy-engine path]): the kernels around the copies. The copies
// themselves are issued by the host (comm/copy_engine.cc).
#include "kernels/prims/call.cuh"
#include "kernels/prims/elements.cuh"

namespace tpar {
namespace kernels {

// NOTE [copy-engine path]
// An SM pair of loads and stores can fill a GPU's PCIe link in one direction, but with both
// directions at once SM traffic reaches little more than one direction's rate, while the copy
// engines, one per direction, move nearly twice as much (docs/PERFORMANCE.md, "Copy engines for
// the host transport"). An all-reduce through host memory is both directions at once: every rank
// publishes its input and reads its peers'. So, per launch piece of a call, on the caller's
// stream M and the communicator's side stream U (forked from M and joined back, so CUDA graphs
// capture it like any call):
//   M: the first kernel advances every block's epoch (the call takes one, NOTE [epochs and
//      parity]) and writes {epoch, check, epoch, check} into the flag source in GPU memory.
//   U: for each piece k of every chunk: the input's piece k of every other rank's chunk into our
//      copy-engine input area (device to host), then a copy of the flag source into our flag
//      slot k: the flag follows its data in stream order.
//   M: for each piece k: a one-block kernel waits for every peer's slot k; copies of chunk `rank`
//      piece k from each peer's input area into GPU scratch (host to device, while U still
//      publishes later pieces: both directions at once); a kernel adds the parts in rank order
//      (fp32, one rounding: the bits of every other algorithm), stores the sum into the output
//      and into our copy-engine output area. After the last piece a copy of the flag source into
//      our output flag slot; a kernel waits for every peer's; copies of their reduced chunks into
//      GPU scratch; the join with U; the last kernel moves the gathered chunks into the output.
// Why it is safe:
//  * Our input area is rewritten only by our next call's U, forked after this call ended on M,
//    which waited for every peer's output flag; a peer sets it after its copies from our input
//    area completed (stream order on the peer). Our output area is rewritten only after the next
//    call's first wait saw every peer's slot 0 of that call, which a peer's U writes after the
//    peer's previous call ended on its M, including its copies from our output area.
//  * A flag slot holds the epoch of the call that wrote it, and a reader accepts only its own
//    call's epoch, so an old flag never releases a wait; `check` (the call header's datatype,
//    op, algorithm and count, and the pieces) tells a peer that disagrees (tparInvalidUsage).
//    Slots start at epoch_start - 2, like call headers.
//  * The caller's output is written only by our kernels, each of which does nothing once an
//    error is recorded; the copies, which cannot check, write our scratch and our own areas.
//  * Waits go through Waiter (timeouts, abort); U never waits for a peer, so nothing on it can
//    hang, and the join waits only for our own copies.
//  * In place: U reads the other chunks of the input, which only the last kernel overwrites,
//    after the join; the reduction writes our chunk's piece k after reading it.

namespace {

// Waiter and recordError take the plain kernels' arguments; these are the fields they read.
__device__ __forceinline__ AllReduceArgs waitArgs(const CeArgs& c) {
  AllReduceArgs a{};
  a.state = c.state;
  a.host_state = c.host_state;
  a.timeout_ns = c.timeout_ns;
  return a;
}

__device__ __forceinline__ bool failed(const CeArgs& c) {
  return *reinterpret_cast<volatile uint32_t*>(&c.state->error) != 0;
}

}  // namespace

// The call's first kernel, one warp: the call takes the epoch every block holds now.
__global__ void ceBeginKernel(const __grid_constant__ CeArgs c) {
  const uint32_t epoch = *reinterpret_cast<volatile uint32_t*>(&c.block_epochs[0]);
  __syncwarp();
  for (int b = threadIdx.x; b < c.grid; b += blockDim.x) c.block_epochs[b] = epoch + 1;
  if (threadIdx.x == 0)
    *reinterpret_cast<Vec*>(c.source) = Vec{{epoch, c.check, epoch, c.check}};
}

// One warp: lanes p < n poll peer p's flag slot `c.slot` until it holds this call's epoch.
// Nothing after an earlier failure.
__global__ void ceWaitKernel(const __grid_constant__ CeArgs c) {
  const AllReduceArgs a = waitArgs(c);
  const uint32_t epoch = *reinterpret_cast<volatile uint32_t*>(c.source);
  const int p = threadIdx.x;
  if (failed(c) || p >= c.nranks || p == c.rank) return;
  const char* slot = c.peer_ws[p] + WorkspaceLayout::kCeFlagsOffset + uint64_t(c.slot) * kVecBytes;
  Waiter w(a);
  for (;;) {
    const Vec f = loadVolatile(slot);
    if (f.w[0] == epoch && f.w[2] == epoch) {
      if (f.w[1] != c.check || f.w[3] != c.check) recordError(a, tparInvalidUsage);
      return;
    }
    if (!w.keepWaiting()) return;
  }
}

// One piece of our chunk: every rank's part in rank order, into the output and our output area.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) ceReduceKernel(const __grid_constant__ CeArgs c) {
  if (failed(c)) return;
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const uint64_t vecs = (c.count + kPer - 1) / kPer;
  const RuntimeOp op{c.op};
  for (uint64_t v = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; v < vecs;
       v += uint64_t(gridDim.x) * blockDim.x) {
    Acc<T> acc;
    for (int s = 0; s < c.nranks; ++s) {
      const Vec x = s == c.rank ? loadUser<T>(c.mine, v, c.count, c.aligned != 0)
                                : loadUser<T>(c.part[s], v, c.count, true);
      acc.take(s, x, op);
    }
    const Vec r = acc.round();
    storeUser<T>(c.out, v, c.count, c.aligned != 0, r);
    if (c.host_out != nullptr) reinterpret_cast<Vec*>(c.host_out)[v] = r;
  }
  // Our output area is read by peers once the flag that a copy after this kernel writes is
  // seen: the stores reach the system before the kernel ends.
  __threadfence_system();
}

// The last kernel: every chunk but ours from the gathered copies into the output.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) ceFinishKernel(const __grid_constant__ CeArgs c) {
  if (failed(c)) return;
  constexpr int kPer = ElemTraits<T>::kPerVec;
  const uint64_t vecs = (c.count + kPer - 1) / kPer;
  for (uint64_t v = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; v < vecs;
       v += uint64_t(gridDim.x) * blockDim.x) {
    if (v >= c.skip0 && v < c.skip1) continue;
    storeUser<T>(c.out, v, c.count, c.aligned != 0, loadUser<T>(c.gathered, v, c.count, true));
  }
}

extern const KernelSet ceDataKernels = KernelSet{
    {{reinterpret_cast<const void*>(&ceReduceKernel<float>),
      reinterpret_cast<const void*>(&ceFinishKernel<float>)},
     {reinterpret_cast<const void*>(&ceReduceKernel<F16Tag>),
      reinterpret_cast<const void*>(&ceFinishKernel<F16Tag>)},
     {reinterpret_cast<const void*>(&ceReduceKernel<Bf16Tag>),
      reinterpret_cast<const void*>(&ceFinishKernel<Bf16Tag>)}}};

// The same two kernels in every datatype's row, so that preloading and the occupancy query,
// which walk every entry, see them.
extern const KernelSet ceControlKernels = KernelSet{
    {{reinterpret_cast<const void*>(&ceBeginKernel), reinterpret_cast<const void*>(&ceWaitKernel)},
     {reinterpret_cast<const void*>(&ceBeginKernel), reinterpret_cast<const void*>(&ceWaitKernel)},
     {reinterpret_cast<const void*>(&ceBeginKernel), reinterpret_cast<const void*>(&ceWaitKernel)}}};

}  // namespace kernels
}  // namespace tpar
