// Host side of the kernels: the call header word, launch shapes, launching, preloading.
// Launchers return cudaError_t.
#ifndef TPAR_REGISTRY_LAUNCHER_H_
#define TPAR_REGISTRY_LAUNCHER_H_

#include <utility>
#include <vector>

#include "kernels/launch.h"

namespace tpar {

// NOTE [driver launch]
// An eager call's host time is mostly the launch (docs/PERFORMANCE.md, "Host cost of one
// call"). Through the runtime (cudaLaunchKernelExC with the kernel's host entry address) every
// launch looks that address up again; the driver's cuLaunchKernelEx with the kernel's handle
// for this context, resolved once at init (cudaGetFuncBySymbol after the preload), skips that,
// and the launch is otherwise the same (grid, block, parameters, attribute, stream; graph capture
// records it alike). The entry point comes from cudaGetDriverEntryPointByVersion, so the
// library still links the runtime only. A kernel without a handle, a driver without the entry
// point, or a driver launch that fails goes through the runtime, whose error (if any) is the
// one reported.
class KernelHandles {
 public:
  // Resolves every kernel of `sets` for the current device's context; kernels it cannot
  // resolve are left to the runtime (never an error).
  void resolve(const kernels::KernelSet* const* sets, int nsets);
  // The driver handle (a CUfunction) of the kernel whose host entry address is `fn`, or nullptr.
  void* find(const void* fn) const;
  // Kernels resolved.
  size_t size() const { return by_entry_.size(); }

 private:
  // Sorted by entry address; written once at init, only read by calls (no state per call, so a
  // lookup is as safe as the call itself wherever it runs).
  std::vector<std::pair<const void*, void*>> by_entry_;
};

// The fields of the call header word (NOTE [call header]): datatype, reduction op, the kernel
// key (NOTE [algorithm descriptor]), whether NCCL is attached, and a hash of the call's count
// in the bits left.
struct CallMetaBits {
  static constexpr int kDtypeShift = 0, kDtypeBits = 2;
  static constexpr int kOpShift = kDtypeShift + kDtypeBits, kOpBits = 2;
  static constexpr int kAlgoShift = kOpShift + kOpBits;
  static constexpr int kNcclShift = kAlgoShift + kCallHeaderAlgoBits;
  static constexpr int kHashShift = kNcclShift + 1;
  static constexpr int kHashBits = 32 - kHashShift;
};
static_assert(tparNumDataTypes <= (1 << CallMetaBits::kDtypeBits), "datatype field too narrow");
static_assert(tparNumOps <= (1 << CallMetaBits::kOpBits), "op field too narrow");
static_assert(CallMetaBits::kHashBits >= 20, "too few bits left for the count hash");

// The header word every rank puts into its first packet of a call (NOTE [call header]).
// `nccl_attached`: the communicator has an NCCL communicator attached (NOTE [agreement]).
uint32_t makeCallMeta(tparDataType_t dtype, tparRedOp_t op, kernels::Algo algo, uint64_t total_count,
                      bool nccl_attached = false);

// Whether a GPU of compute capability `cc_major` launches with programmatic stream
// serialization when TPAR_LAUNCH_OVERLAP (or the config) asks for it: the attribute exists from
// 9.0 on (NOTE [launch overlap]). The one rule for the communicator and the tools that mimic
// its launches.
inline bool launchOverlapOn(bool wanted, int cc_major) { return wanted && cc_major >= 9; }

// Enqueues one launch of kernel `fn`, through the driver where `handles` has it (NOTE [driver
// launch]; nullptr: the runtime). `overlap`: launch with programmatic stream serialization
// (NOTE [launch overlap]).
cudaError_t launchAllReduce(const KernelHandles* handles, const void* fn,
                            const kernels::AllReduceArgs& args, int blocks, int threads,
                            bool overlap, cudaStream_t stream);

// The same for a fused kernel (call.cuh's normKernel), whose second parameter is `norm`.
cudaError_t launchAllReduceNorm(const KernelHandles* handles, const void* fn,
                                const kernels::AllReduceArgs& args, const kernels::NormArgs& norm,
                                int blocks, int threads, bool overlap, cudaStream_t stream);

// The norm alone (kernels::addRmsNormKernels) over `norm.rows` rows whose reduced values are in
// `sum`; launched without programmatic serialization: it starts after the all-reduce before it.
cudaError_t launchAddRmsNorm(const KernelHandles* handles, const void* fn,
                             const kernels::NormArgs& norm, const void* sum, int blocks,
                             int threads, cudaStream_t stream);

// How a fused launch of `rows` rows of `row_vecs` vectors spreads over a grid of `grid` blocks
// (NOTE [row groups] in kernels/norm_epilogue.cuh): with at least twice as many blocks as rows
// (and slots for them), `group` blocks share a row, each an even `slice` of at least
// kMinNormSliceVecs vectors; else one block per row. `threads`: one per vector of a block's
// share, 64 to max_threads.
struct NormShape {
  uint32_t group = 1;
  uint32_t slice = 0;  // vectors per block of a row group (0: whole rows)
  int threads = 64;
};
constexpr uint64_t kMinNormSliceVecs = 64;
NormShape normShapeFor(uint64_t rows, uint64_t row_vecs, int grid, int max_threads);

// Loads every kernel of `sets` into the current device's context now (NOTE [preload]).
cudaError_t preloadKernels(const kernels::KernelSet* const* sets, int nsets);

// Resident blocks per SM of the largest-footprint kernel of `sets` at `threads` threads.
cudaError_t maxActiveBlocksPerSm(const kernels::KernelSet* const* sets, int nsets, int threads,
                                 int* blocks);

// Threads per block for a launch of `blocks` blocks over `work` vectors: the work is spread
// over every block (more multiprocessors issue stores and polls), with at least 64 and at most
// `max_threads` threads per block. Every launch of a communicator uses the same block count
// (NOTE [epochs and parity]).
int threadsFor(uint64_t work, int blocks, int max_threads);

}  // namespace tpar

#endif  // TPAR_REGISTRY_LAUNCHER_H_
