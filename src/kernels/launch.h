// The one header between host code and the all-reduce kernels.
//
// Kernels know nothing of transports, environment variables or policy: the host passes every
// pointer and number in AllReduceArgs. Launchers return cudaError_t.
#ifndef TPAR_KERNELS_LAUNCH_H_
#define TPAR_KERNELS_LAUNCH_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

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
// The pipelined two-shot splits a block into groups of whole warps: at least 4 warps.
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

// Workspace layout of one rank (all ranks use the same layout; see NOTE [workspace layout]).
struct WorkspaceLayout {
  static constexpr uint64_t kHeaderBytes = 16;  // one call header per (parity, sender)
  static constexpr uint64_t kHeaderRegion = 2 * kMaxRanks * kHeaderBytes;
  static constexpr uint64_t kStateOffset = 2048;   // DeviceState
  static constexpr uint64_t kEpochsOffset = 4096;  // uint32_t epoch per block index
  static constexpr uint64_t kDataOffset = kEpochsOffset + 4 * kMaxBlocks;
  // Pull area (NOTE [pull protocol]): one flag word per block for each of the two phases of
  // two-shot pull, then the flag lines of the pipelined two-shot (NOTE [flag lines]), then the
  // payload, which the pull variants and the pipelined two-shot share.
  static constexpr int kLineBlocks = 64;  // blocks of a pipelined launch, at most
  static constexpr uint64_t kLineFlagOffset = 2 * 4 * kMaxBlocks;
  static constexpr uint64_t kLineFlagBytes = 2 * kLineBlocks * kMaxRanks * kVecBytes;
  static constexpr uint64_t kPullFlagBytes = kLineFlagOffset + kLineFlagBytes;
  // Largest pull message with receive regions in GPU memory, where the pull variants serve
  // small messages only (in host memory they carry everything).
  static constexpr uint64_t kDevicePullMaxBytes = 256u << 10;
  uint64_t data_bytes;  // sentinel area, per parity
  uint64_t pull_bytes;  // pull area, per parity

  // `host`: receive regions in pinned host memory, where the pull variants carry messages up
  // to the piece size.
  static WorkspaceLayout forMaxBytes(uint64_t max_bytes_per_call, bool host = false) {
    // Two-shot needs a reduce-scatter and an all-gather area, each one message plus per-rank
    // rounding; one-shot needs nranks messages (so its pieces are smaller at high rank counts).
    // Pull: one-shot's lines carry 8 payload bytes in 16, two-shot needs one message plus one
    // chunk; both fit in twice the largest pull message.
    const uint64_t pull_max =
        host || max_bytes_per_call < kDevicePullMaxBytes ? max_bytes_per_call
                                                          : kDevicePullMaxBytes;
    return WorkspaceLayout{2 * max_bytes_per_call + 4096, kPullFlagBytes + 2 * pull_max + 64};
  }
  uint64_t totalBytes() const { return kDataOffset + 2 * data_bytes + 2 * pull_bytes; }
  uint64_t pullBase() const { return kDataOffset + 2 * data_bytes; }
  // Pull payload: one-shot pull's lines fill all of it; two-shot pull puts the published
  // input in the first half and the reduced chunk in the second.
  TPAR_HOST_DEVICE static uint64_t pullHalf(uint64_t pull_bytes) {
    return ((pull_bytes - kPullFlagBytes) / 2) / kVecBytes * kVecBytes;
  }
  uint64_t oneShotPullMaxBytes() const {
    // Two lines per vector, laid out in groups of 32 vectors.
    return (pullHalf(pull_bytes) / kVecBytes / 32 * 32 - 32) * kVecBytes;
  }
  uint64_t twoShotPullMaxBytes(int nranks) const {
    // The result area holds one chunk of ceil(vecs / nranks) vectors.
    return (pullHalf(pull_bytes) / kVecBytes - uint64_t(nranks)) * kVecBytes;
  }
  uint64_t twoShotLLMaxBytes(int nranks) const {
    // Each half holds two 16-byte lines per vector of nranks chunks, in groups of 32 vectors.
    const uint64_t lines = pullHalf(pull_bytes) / kVecBytes / 2;
    return lines > uint64_t(nranks) + 64 ? (lines - nranks - 64) * kVecBytes : 0;
  }
  uint64_t pipelinedMaxBytes(int nranks) const {
    // Each half holds one chunk of ceil(vecs / nranks) vectors per rank.
    return (pullHalf(pull_bytes) / kVecBytes - uint64_t(nranks)) * kVecBytes;
  }
  TPAR_HOST_DEVICE static uint64_t headerOffset(uint32_t parity, int sender) {
    return (static_cast<uint64_t>(parity) * kMaxRanks + sender) * kHeaderBytes;
  }
  uint64_t dataOffset(uint32_t parity) const { return kDataOffset + parity * data_bytes; }
  // Largest message one launch of each algorithm handles, a multiple of 16 bytes.
  uint64_t oneShotMaxBytes(int nranks) const {
    return (data_bytes / nranks / kVecBytes - 1) * kVecBytes;
  }
  uint64_t twoShotMaxBytes(int nranks) const {
    return ((data_bytes / 2 - uint64_t(nranks) * kVecBytes) / kVecBytes) * kVecBytes;
  }
  // Hierarchical over k islands of m ranks: reduce-scatter and all-gather areas of m chunks,
  // plus k fp32 partial-sum slots of one chunk (2x the bytes of 16-bit data).
  uint64_t hierMaxBytes(int m, int k, size_t elem_bytes) const {
    const uint64_t cross = elem_bytes == 4 ? 1 : 2;  // fp32 partial bytes per input byte
    const uint64_t slack = (2 * uint64_t(m) + k * cross) * kVecBytes;
    if (data_bytes <= slack) return 0;
    // 2 m Cv 16 + k Cv 16 cross <= data_bytes with Cv = ceil(V / m) <= V / m + 1.
    const uint64_t vecs = (data_bytes - slack) * m / (2 * uint64_t(m) + k * cross) / kVecBytes;
    return vecs * kVecBytes;
  }
};

enum class Algo {
  kOneShot = 0,
  kTwoShot = 1,
  kStaged = 2,
  kHier = 3,
  kOneShotPull = 4,
  kTwoShotPull = 5,
  kPipelined = 6,
  kTwoShotLL = 7
};

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
  // Hierarchical: k islands of m ranks. hier_rank[i * m + p] is the rank at position p of
  // island i; this rank is at (hier_island, hier_pos).
  int hier_k;
  int hier_m;
  int hier_island;
  int hier_pos;
  uint8_t hier_rank[kMaxRanks];
};

// The header word every rank puts into its first packet of a call (NOTE [call header]).
// `nccl_attached`: the communicator has an NCCL communicator attached (NOTE [agreement]).
uint32_t makeCallMeta(tparDataType_t dtype, tparRedOp_t op, Algo algo, uint64_t total_count,
                      bool nccl_attached = false);

// Enqueues one all-reduce launch. `max_ranks` is 8 or 16 (kernel variant).
// `overlap`: launch with programmatic stream serialization (NOTE [launch overlap]).
cudaError_t launchAllReduce(Algo algo, tparDataType_t dtype, const AllReduceArgs& args,
                            int blocks, int threads, bool overlap, cudaStream_t stream);

// Loads every kernel into the current device's context now (NOTE [preload]).
cudaError_t preloadKernels();

// Resident blocks per SM of the largest-footprint kernel at `threads` threads.
cudaError_t maxActiveBlocksPerSm(int threads, int* blocks);

// Vectors one launch moves per rank: the grid is sized from this.
uint64_t workVectors(Algo algo, uint64_t count, size_t elem_bytes, int nranks);

// Threads per block for a launch of `blocks` blocks over `work` vectors: the work is spread
// over every block (more multiprocessors issue stores and polls), with at least 64 and at most
// `max_threads` threads per block. Every launch of a communicator uses the same block count
// (NOTE [epochs and parity]).
int threadsFor(uint64_t work, int blocks, int max_threads);

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_LAUNCH_H_
