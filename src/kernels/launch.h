// The one header between host code and the all-reduce kernels: the workspace layout, the
// arguments of every kernel, and the kernel sets the registry names (the host side that
// launches them: src/registry/launcher.h).
//
// Kernels know nothing of transports, environment variables or policy: the host passes every
// pointer and number in AllReduceArgs.
#ifndef TPAR_KERNELS_LAUNCH_H_
#define TPAR_KERNELS_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "base/algorithm_list.h"
#include "tpar/tpar.h"

#ifdef __CUDACC__
#define TPAR_HOST_DEVICE __host__ __device__
#else
#define TPAR_HOST_DEVICE
#endif

namespace tpar {
namespace kernels {

constexpr int kMaxRanks = TPAR_MAX_RANKS;
constexpr int kVecBytes = 16;  // the wire unit: one 16-byte vector per thread and step
// Launch bound of every kernel: leaves 128 registers per thread for the per-peer vectors.
constexpr int kMaxThreads = 512;
// FlagBox schedules split a block into groups of whole warps: at least 4 warps.
constexpr int kMinPipelinedThreads = 128;

// The largest grid of one launch (TPAR_MAX_BLOCKS is bounded by it).
constexpr int kMaxBlocks = 1024;

// Per-rank control words in device memory (written by this rank's kernels only).
struct DeviceState {
  uint32_t error;  // first tparResult_t recorded by a kernel, 0 = none
  uint32_t pad[3];
};

// Per-rank words in pinned host memory mapped into the GPU.
struct HostState {
  uint32_t error;  // mirror of DeviceState::error, for tparCommGetAsyncError without a sync
  uint32_t abort;  // set by tparCommAbort: waiting kernels give up
};

// NOTE [workspace layout]
// A rank's receive region has the same layout on every rank, so that an offset means the same
// thing in every peer's region. It starts with one control page (kDataOffset bytes):
//   [0, kHeaderRegion)               call headers, one 16-byte slot per (parity, sender)
//                                    (NOTE [call header]); filled with epoch_start - 2
//   [kStateOffset, ...)              DeviceState: the error word every kernel checks
//   [kRowPartialsOffset, ...)        the fused kernels' row-group slots (NOTE [row groups])
//   [kEpochsOffset, kDataOffset)     one epoch word per block index (NOTE [epochs and parity])
// then two areas, each in two halves selected by the call's epoch parity, so that a rank in
// epoch e+1 writes one half while a peer still reads epoch e's:
//   [kDataOffset, pullBase())        the push algorithms' area, 2 x data_bytes, filled with 0xFF
//                                    (the sentinel no epoch-tagged store leaves behind)
//   [pullBase(), totalBytes())       the pull area, 2 x pull_bytes: flag lines, then payload
//                                    (NOTE [pull protocol], NOTE [flag lines])
// data_bytes and pull_bytes follow from the largest call one launch takes (forMaxBytes). With
// receive regions in pinned host memory (NOTE [host regions]) both areas live in the rank's
// host region, laid out alike from offset 0, and the workspace in GPU memory keeps only the
// control page.
struct WorkspaceLayout {
  static constexpr uint64_t kHeaderBytes = 16;  // one call header per (parity, sender)
  static constexpr uint64_t kHeaderRegion = 2 * kMaxRanks * kHeaderBytes;
  static constexpr uint64_t kStateOffset = 2048;   // DeviceState
  // The fused kernels' row groups (NOTE [row groups] in kernels/norm_epilogue.cuh): two sets of
  // 8-byte slots {block total, epoch}, one slot per block of a launch; the tag words start at
  // epoch_start - 2.
  static constexpr uint64_t kRowPartialsOffset = 2560;
  static constexpr uint32_t kRowPartialSlots = 96;
  static constexpr uint64_t kEpochsOffset = 4096;  // uint32_t epoch per block index
  static constexpr uint64_t kDataOffset = kEpochsOffset + 4 * kMaxBlocks;
  // Pull area (NOTE [pull protocol]): the flag lines of two phases (NOTE [flag lines]), then
  // the payload, which every LineBox and FlagBox schedule uses.
  static constexpr int kLineBlocks = 64;  // blocks of a launch with flag lines, at most
  static constexpr uint64_t kPullFlagBytes = 2 * kLineBlocks * kMaxRanks * kVecBytes;
  // Largest pull message with receive regions in GPU memory, where the pull variants serve
  // small messages only (in host memory they carry everything), unless the area is whole.
  static constexpr uint64_t kDevicePullMaxBytes = 256u << 10;
  uint64_t data_bytes;  // sentinel area, per parity
  uint64_t pull_bytes;  // pull area, per parity

  // `host`: receive regions in pinned host memory, where the pull variants carry messages up
  // to the piece size. `whole_pull`: regions in GPU memory whose pull area takes a whole piece
  // too (NOTE [a whole pull area for ranks on one GPU]); every rank of a communicator must
  // pass the same values.
  static WorkspaceLayout forMaxBytes(uint64_t max_bytes_per_call, bool host = false,
                                     bool whole_pull = false) {
    // Two-shot needs two areas of one message plus rounding, one-shot n messages (smaller pieces
    // at high rank counts); the pull areas need twice the largest pull message. A whole area
    // (host memory, or whole_pull) also holds the n chunks' rounding (flagLinesMax), so that a
    // piece of the full size is one launch of the flag-line schedules: without it, from 3 ranks
    // on, every call of a multiple of the piece size ended in a launch of a few bytes.
    const uint64_t pull_max =
        whole_pull || host ? max_bytes_per_call + uint64_t(kMaxRanks) * kVecBytes
        : max_bytes_per_call < kDevicePullMaxBytes ? max_bytes_per_call
                                                   : kDevicePullMaxBytes;
    return WorkspaceLayout{2 * max_bytes_per_call + 4096, kPullFlagBytes + 2 * pull_max + 64};
  }
  uint64_t totalBytes() const { return kDataOffset + 2 * data_bytes + 2 * pull_bytes; }
  uint64_t pullBase() const { return kDataOffset + 2 * data_bytes; }
  // Pull payload: one-shot pull's lines fill all of it; the two-shots put the scatter phase's
  // data in the first half and the gather phase's in the second. Each algorithm's largest
  // piece is in its registry row (src/registry/algorithms.cc).
  TPAR_HOST_DEVICE static uint64_t pullHalf(uint64_t pull_bytes) {
    return ((pull_bytes - kPullFlagBytes) / 2) / kVecBytes * kVecBytes;
  }
  TPAR_HOST_DEVICE static uint64_t headerOffset(uint32_t parity, int sender) {
    return (static_cast<uint64_t>(parity) * kMaxRanks + sender) * kHeaderBytes;
  }
};

// The registry's key for an algorithm, generated from its line in the one list
// (NOTE [algorithm descriptor] in base/algorithm_list.h); the call header carries it.
using Algo = AlgoKey;

struct AllReduceArgs {
  const void* send;
  void* recv;
  uint64_t count;                 // elements in this launch
  char* peer_ws[kMaxRanks];       // every rank's workspace, mapped here; [rank] is our own
  DeviceState* state;             // ours
  uint32_t* block_epochs;         // ours: the epoch of the next launch, one word per block
  HostState* host_state;          // ours, device-mapped pointer
  uint64_t timeout_ns;
  uint64_t data_bytes;            // WorkspaceLayout::data_bytes
  uint64_t pull_base;             // WorkspaceLayout::pullBase()
  uint64_t pull_bytes;            // WorkspaceLayout::pull_bytes
  uint32_t meta;                  // call header word (datatype, op, algorithm, total count hash)
  int rank;
  int nranks;
  int op;                         // tparRedOp_t
  int vec_aligned;                // send and recv are 16-byte aligned
  int active_blocks;              // blocks that work (0: all); the others only keep the epoch
  int steps;                      // pipelined: steps per block (0 or 1: one)
  int pull;                       // pipelined: publish in our own region, peers read it there
  int gpu_scope;                  // every rank on this GPU, regions in its memory: flag lines
                                  // fence at GPU scope (NOTE [hand-offs at GPU scope])
  // Hierarchical: k islands of m ranks. hier_rank[i * m + p] is the rank at position p of
  // island i; this rank is at (hier_island, hier_pos).
  int hier_k, hier_m, hier_island, hier_pos;
  uint8_t hier_rank[kMaxRanks];
};

// The second parameter of the fused kernels (docs/FUSED.md): what follows the all-reduce of a
// launch's `rows` rows of `hidden` elements (the input's datatype). A CUDA graph captures it by
// value with the launch, like AllReduceArgs.
struct NormArgs {
  void* residual;        // [rows, hidden]: read; r = residual + reduced; null: none (r = reduced)
  void* residual_out;    // [rows, hidden]: receives r; null: r goes into residual (or nowhere)
  const void* weight;    // [hidden]
  void* out;             // [rows, hidden]: the normalized rows
  uint32_t hidden;       // elements per row, a multiple of the elements of a vector
  uint32_t rows;         // rows of this launch (count = rows * hidden)
  float eps;
  int aligned;           // residual, weight and out are 16-byte aligned
  // A quantized copy of out (tparNormQuant_t, tpar.h): values of this launch's rows in
  // quant_out (FP8: a byte per element; NVFP4: a nibble), scale the per-token scales of these
  // rows (written) or the given scale (read), block_scale the whole NVFP4 scale tensor, whose
  // layout needs the call's row index: row0 + the row of this launch.
  int quant;
  int quant_aligned;     // quant_out holds a vector's bytes (8 FP8, 4 NVFP4) at aligned offsets
  void* quant_out;
  float* scale;
  uint8_t* block_scale;
  uint32_t row0;
  // Row groups (NOTE [row groups]): `group` blocks share a row, each `slice` vectors of it (even,
  // for NVFP4's pairs of lanes); group <= 1: one block per row.
  uint32_t group;
  uint32_t slice;
};

// The kernels of one schedule: fn[dtype][variant], by group size (get). Each schedule file
// defines one (makeKernelSet in prims/call.cuh); the algorithm registry names them.
struct KernelSet {
  // Per datatype: the 8-rank variant, the 16-rank one, one for exactly 2 ranks and one for 3 or
  // 4 (the 8-rank variant again where a schedule has none).
  const void* fn[tparNumDataTypes][4];
  static constexpr int variant(int nranks) {
    return nranks > 8 ? 1 : nranks == 2 ? 2 : nranks <= 4 ? 3 : 0;
  }
  const void* get(tparDataType_t dtype, int nranks) const {
    return dtype >= 0 && dtype < tparNumDataTypes ? fn[dtype][variant(nranks)] : nullptr;
  }
  // One kernel per datatype for every group size.
  static constexpr KernelSet uniform(const void* f32, const void* f16, const void* bf16) {
    return KernelSet{{{f32, f32, f32, f32}, {f16, f16, f16, f16}, {bf16, bf16, bf16, bf16}}};
  }
};

// The residual add + RMSNorm alone, after a separate all-reduce into a buffer (the fused call's
// composite path, docs/FUSED.md): addRmsNormKernel(NormArgs, const void* sum), one block per
// row, the fused kernels' arithmetic.
extern const KernelSet addRmsNormKernels;

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_LAUNCH_H_
