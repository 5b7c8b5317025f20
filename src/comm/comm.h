// The communicator: one rank's view of the group, its workspace, peers and settings.
#ifndef TPAR_COMM_COMM_H_
#define TPAR_COMM_COMM_H_

#include <array>
#include <string>
#include <vector>

#include "registry/algorithms.h"
#include "registry/launcher.h"
#include "comm/comm_access.h"
#include "base/config.h"
#include "comm/nccl_route.h"
#include "topology/topology.h"
#include "tuner/tuner.h"
#include "kernels/launch.h"
#include "transport/transport.h"
#include "tpar/tpar.h"

struct tparComm {
  int rank = 0;
  int nranks = 0;
  int device = 0;
  tpar::ResolvedConfig cfg;
  tpar::kernels::WorkspaceLayout layout{0, 0};
  char* workspace = nullptr;
  // The fused call's composite path, when the caller gives no buffer the sum can go through
  // (quantized output only, residual in place): kFusedScratchBytes of device memory.
  char* fused_scratch = nullptr;
  tpar::kernels::DeviceState* device_state = nullptr;
  uint32_t* block_epochs = nullptr;
  tpar::kernels::HostState* host_state = nullptr;      // host pointer
  tpar::kernels::HostState* host_state_dev = nullptr;  // the same, as the GPU sees it
  std::array<char*, tpar::kernels::kMaxRanks> peer_ws{};
  std::vector<tpar::PeerMapping> mappings;
  tparTransport_t transport = tparTransportSameDevice;
  // Host transport (NOTE [host regions]): this rank's receive region; `workspace` then holds
  // only the control pages.
  bool host_transport = false;
  tpar::HostRegion host_region;
  int max_blocks = 1;
  // Ranks of this process on this GPU, this one included (NOTE [virtual-rank residency]).
  int ranks_on_device = 1;
  // The pull area in GPU memory takes a whole piece (NOTE [a whole pull area for ranks on one
  // GPU] in comm.cc).
  bool whole_pull = false;
  // Topology as every rank of the group sees it (rank 0's view), and what the tuner uses.
  tpar::Topology topology;
  tpar::TunerContext tuner_ctx;
  tpar::TuningTable tuning;
  bool has_tuning = false;
  // Per datatype, fusedOneShotLimit of the current plans (NOTE [fused limits cached]).
  uint64_t fused_one_kernel_limit[tparNumDataTypes] = {};
  // Hierarchical algorithm: k islands of m ranks, set when the islands are all the same size
  // (whether it runs is the tuner's decision: TunerContext::hierarchical_ok, fallbackReason).
  int hier_k = 1, hier_m = 1, hier_island = 0, hier_pos = 0;
  uint8_t hier_rank[tpar::kernels::kMaxRanks] = {};
  bool launch_overlap = false;  // NOTE [launch overlap]
  tpar::KernelHandles kernel_handles;  // NOTE [driver launch]
  cudaStream_t checked_stream = nullptr;  // NOTE [checked stream]
  int threads = 512;
  // The launch arguments every call shares (NOTE [call template] in comm/comm.h).
  tpar::kernels::AllReduceArgs call_template{};
  std::string last_error;
  tpar::NcclRoute nccl;  // tparCommSetNcclComm (comm/nccl_route.h)
};

namespace tpar {

// Groups of this many ranks or more, every one in this process on this GPU with the regions
// in its memory, run the one-shot pull over flag lines (NOTE [one-shot pull over flag lines on
// one GPU] in comm.cc).
constexpr int kOneGpuFlagPullMinRanks = 8;

// Every rank of the communicator is in this process on this GPU, with the receive regions in
// its memory: the condition of the whole pull area (NOTE [a whole pull area for ranks on one
// GPU] in comm.cc), of hand-offs at GPU scope and of the one-shot pull over flag lines there.
inline bool everyRankHereInGpuMemory(const tparComm* comm) {
  return !comm->host_transport && comm->ranks_on_device >= comm->nranks;
}

// Builds a communicator's local half (workspace, host state, launch shape) on the current
// device. `ranks_on_device` counts the ranks of this process sharing the device (their kernels
// must be co-resident). On failure nothing is left allocated.
// `host_transport`: receive region in pinned host memory instead of GPU memory.
tparResult_t createLocal(int rank, int nranks, const ResolvedConfig& cfg, int ranks_on_device,
                         bool host_transport, tparComm** out);

// Adopts `topo` (the same on every rank): islands for the hierarchical algorithm, the tuner's
// context, and the tuning table for this topology when one is found (a bad table is reported
// once on stderr and ignored).
tparResult_t applyTopology(tparComm* comm, const Topology& topo);

// Topology of ranks on these CUDA devices of this process: the fixture file when the config
// names one (its first nranks GPUs), else the live machine.
tparResult_t buildTopology(const ResolvedConfig& cfg, const std::vector<int>& devices,
                           Topology* out);

// A topology that knows nothing: every pair `link`, one island.
Topology flatTopology(int nranks, LinkClass link);

// Frees what createLocal and peer mapping made. Waits for the device first.
void destroyComm(tparComm* comm);

// NOTE [bounded abort]
// tparCommAbort sets the abort word, which every waiting kernel of the communicator reads
// between polls and gives up on (Waiter::keepWaiting); it then waits for the device to become
// idle before freeing anything, because kernels of this communicator may still be queued
// behind other work and would otherwise run on freed memory. Abort cannot end other work: a
// kernel that never finishes (an NCCL call whose peers never join it, a kernel of the
// application that spins) keeps the device busy for good. So the wait is bounded by the
// communicator's timeout; past it, abort returns tparTimeout and a thread of its own keeps
// waiting and frees the communicator once the device is idle (when the process ends first,
// the driver takes everything back).
//
// Frees `comm` (unregistered already) within its timeout, or hands it to that thread and
// fails with tparTimeout.
tparResult_t abortComm(tparComm* comm);

// Registry of live communicators, so that a destroyed or foreign handle is reported instead of
// dereferenced.
void registerComm(tparComm* comm);
void unregisterComm(tparComm* comm);
bool isLiveComm(tparComm* comm);

// PeerInfo describing this rank (current device).
tparResult_t describeSelf(const tparComm& comm, PeerInfo* out);

// The plan a call of `bytes` gets on this communicator.
Plan planFor(const tparComm* comm, uint64_t bytes, tparDataType_t dtype);

// The wire variant (registry/algorithms.h) a plain call of `bytes` of `dtype` runs after its
// plan `*plan` (tuner.h, wirePlan, which may reshape `*plan`), or null: lossless.
const WireAlgorithm* wireVariantOf(const tparComm* comm, uint64_t bytes, tparDataType_t dtype,
                                   Plan* plan);

// NOTE [call template]
// A call's launch arguments are mostly the communicator's: peer workspaces, control words,
// timeout, layout, rank and islands. prepareCalls builds that part once into call_template;
// each call copies it and fills in its own fields (buffers, count, header word, op, plan
// shape), so a call does not rebuild what only init changes. Everything the template reads is
// written during init only (createLocal, peer mapping, applyTopology), and both init paths
// call prepareCalls after the last of it, before the communicator is registered;
// applyTopology calls it too. Code that changes one of those fields later must call it again.
// The call header's NCCL bit, the plan and the grid are read per call, never from the
// template, so attaching NCCL or replacing the tuning table needs nothing here.
void prepareCalls(tparComm* comm);

// One call's launches, worked out without the GPU: the plan, the kernel, the pieces and the
// first piece's arguments (setPiece moves them to a piece). plan.nccl: the call goes to NCCL and
// nothing else is set.
struct CallLaunch {
  Plan plan;
  const Algorithm* algo = nullptr;
  AlgoShape shape;
  size_t esize = 0;
  uint64_t piece_elems = 0;  // elements per launch
  const void* fn = nullptr;
  kernels::AllReduceArgs args;
};
// `shape_hash` goes into the call header's count hash (0 for a plain call): the fused call's
// composite path passes its row shape, so that ranks disagreeing on it are told apart.
void prepareAllReduce(const tparComm* comm, size_t count, tparDataType_t dtype, tparRedOp_t op,
                      CallLaunch* out, uint64_t shape_hash = 0);
// Points call->args at the piece that starts at element `done` of the call; returns the
// piece's threads per block.
int setPiece(const tparComm* comm, CallLaunch* call, const void* send, void* recv, size_t count,
             uint64_t done);

// The whole all-reduce path after argument checks.
tparResult_t allReduce(tparComm* comm, const void* send, void* recv, size_t count,
                       tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream,
                       uint64_t shape_hash = 0);

// The fused call's scratch for the sum on its composite path (tparComm::fused_scratch).
constexpr uint64_t kFusedScratchBytes = 2u << 20;

// Bytes of a fused call up to which it runs as one kernel (TPAR_FUSED_ONESHOT_MAX_BYTES; auto:
// in GPU memory the measured crossover per group size, at least the plain call's one-shot
// limit; with a forced algorithm or in host memory the plain call's limit).
uint64_t fusedOneShotLimit(const tparComm* comm, tparDataType_t dtype);

// NOTE [fused limits cached]
// fusedOneShotLimit walks the tuner's boundaries (oneShotLimit: a plan per boundary), too much
// for every fused call; the limits only change with what decides the plans: the tuner's
// context, the tuning table, the configuration. So each communicator keeps them per datatype
// (tparComm::fused_one_kernel_limit), computed by refreshCallLimits wherever those change: at
// the end of applyTopology (both init paths run it after the configuration is resolved, and it
// reads the table), usePlan, and attaching or detaching NCCL. Code that changes one of them
// later must call it again.
void refreshCallLimits(tparComm* comm);

// TPAR_FUSED_TWOSHOT, in the order of its choices.
enum class FusedTwoShot : int { kAuto = 0, kOff = 1, kOn = 2 };

// Whether a fused call of `bytes` above `one_kernel_limit` that two-shot with the owner's norm
// can take (GPU memory, no quantized output, the residual not the input) takes it rather than
// the all-reduce and the norm kernel: TPAR_FUSED_TWOSHOT, auto from the measured window.
bool fusedTwoShotWanted(const tparComm* comm, uint64_t bytes, uint64_t one_kernel_limit);

// The fused all-reduce + residual add + RMSNorm after argument checks (docs/FUSED.md): up to
// the fused one-shot limit (fusedOneShotLimit), the one-shot of the communicator's transport
// with the norm in its kernel, split by whole rows; above it, two-shot with the row owner's
// norm where it applies and is wanted (fusedTwoShotWanted), else the planned all-reduce into
// out (or residual_out) and the norm kernel after it. `a.hidden` elements per row; fails with
// tparInvalidArgument when one row does not fit a launch.
tparResult_t allReduceAddRmsNorm(tparComm* comm, const void* input,
                                 const tparAddRmsNormArgs_t& a, tparDataType_t dtype,
                                 cudaStream_t stream);

}  // namespace tpar

#endif  // TPAR_COMM_COMM_H_
