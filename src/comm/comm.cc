#include "comm/comm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "registry/algorithms.h"
#include "registry/launcher.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "tuner/tuner.h"

namespace tpar {

namespace {

std::mutex g_registry_mutex;
std::unordered_set<tparComm*>& registry() {
  static std::unordered_set<tparComm*> live;
  return live;
}

// NOTE [live handle cache]
// Every call checks its handle against the registry; under a global mutex that costs two
// atomic read-modify-writes on one line shared by every thread that calls (one thread per GPU
// in one process). Instead each thread remembers the few handles it found live and the
// registry's generation then. Every register and unregister advances the generation, so while
// it is unchanged the set of live communicators is unchanged, and a remembered handle is still
// live: the check is one shared load that only communicator creation and destruction write. A
// changed generation forgets everything (a freed handle may come back at the same address).
std::atomic<uint64_t> g_registry_generation{1};
constexpr int kLiveCacheSlots = 8;
struct LiveCache {
  uint64_t generation = 0;
  tparComm* comms[kLiveCacheSlots] = {};
  int next = 0;
};
thread_local LiveCache t_live;

}  // namespace

void registerComm(tparComm* comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().insert(comm);
  g_registry_generation.fetch_add(1, std::memory_order_release);
}

void unregisterComm(tparComm* comm) {
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  registry().erase(comm);
  g_registry_generation.fetch_add(1, std::memory_order_release);
}

bool isLiveComm(tparComm* comm) {
  LiveCache& cache = t_live;
  const uint64_t generation = g_registry_generation.load(std::memory_order_acquire);
  if (cache.generation == generation) {
    for (tparComm* c : cache.comms)
      if (c == comm && comm != nullptr) return true;
  } else {
    cache = LiveCache();
    cache.generation = generation;
  }
  std::lock_guard<std::mutex> lock(g_registry_mutex);
  if (registry().count(comm) == 0) return false;
  // Remembered for the generation read before the lookup: a change since then makes the next
  // check look again.
  cache.comms[cache.next] = comm;
  cache.next = (cache.next + 1) % kLiveCacheSlots;
  return true;
}

tparResult_t createLocal(int rank, int nranks, const ResolvedConfig& cfg, int ranks_on_device,
                         bool host_transport, tparComm** out) {
  int device = 0;
  TPAR_CUDA_TRY(cudaGetDevice(&device));
  // NOTE [preload]: before any kernel of this communicator can spin.
  const auto& sets = allKernelSets();
  TPAR_CUDA_TRY(preloadKernels(sets.data(), static_cast<int>(sets.size())));

  auto comm = new tparComm();
  comm->kernel_handles.resolve(sets.data(), static_cast<int>(sets.size()));
  TPAR_INFO(kLogInit, "rank %d: %zu kernels launch through the driver (cuLaunchKernelEx), the rest through the runtime",
            rank, comm->kernel_handles.size());
  comm->rank = rank;
  comm->nranks = nranks;
  comm->device = device;
  comm->cfg = cfg;
  comm->host_transport = host_transport;
  comm->threads = cfg.threads;
  comm->ranks_on_device = std::max(1, ranks_on_device);
  // NOTE [a whole pull area for ranks on one GPU]
  // Three or more ranks, every one of them in this process on this GPU (virtual ranks), with
  // receive regions in its memory: the pull area takes a whole piece, as it does in host
  // memory, rather than kDevicePullMaxBytes, so that the two-shot pull runs a large call in one
  // launch (NOTE [two-shot pull for large calls of ranks on one GPU] in tuner/tuner.cc). That
  // costs four times the piece size more GPU memory per rank (two halves, two parities). The
  // condition is the same on every rank by construction (one process, one device, one
  // configuration), which the layout needs: peers address each other's workspace by it. Every
  // other group keeps the small area.
  comm->whole_pull = nranks >= 3 && everyRankHereInGpuMemory(comm);
  comm->layout = kernels::WorkspaceLayout::forMaxBytes(cfg.max_bytes_per_call, host_transport,
                                                       comm->whole_pull);

  auto fail = [&](tparResult_t res) {
    destroyComm(comm);
    return res;
  };

  int sms = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return fail(cudaFailure(err, "cudaDeviceGetAttribute", __FILE__, __LINE__));
  int per_sm = 0;
  // The pipelined kernel runs with at least kMinPipelinedThreads: size the grid for that too.
  err = maxActiveBlocksPerSm(sets.data(), static_cast<int>(sets.size()),
                                      std::max(comm->threads, kernels::kMinPipelinedThreads),
                                      &per_sm);
  if (err != cudaSuccess) return fail(cudaFailure(err, "occupancy query", __FILE__, __LINE__));
  if (per_sm < 1) {
    return fail(setError(tparInvalidArgument,
                         "the all-reduce kernels cannot run with %d threads per block on this "
                         "GPU (TPAR_THREADS)",
                         comm->threads));
  }
  // NOTE [virtual-rank residency]
  // Ranks sharing a GPU in one process run as concurrent kernels that wait for each other, so
  // two bounds hold for the grid:
  // 1. All ranks' blocks fit at once (per_sm * sms over the ranks).
  // 2. While the all-reduces of all ranks but one wait, holding their blocks, the last rank's
  //    stream must still be able to run what precedes its all-reduce. With at most sms - 1
  //    waiting blocks in all, at least one SM holds none of them wherever the scheduler put
  //    them, so a kernel whose blocks each fit an empty SM always makes progress.
  // That is all a grid bound can promise. A kernel launched in clusters needs several SMs of
  // one GPC free together, and cuBLAS's GEMMs on Hopper are launched so: callers that run
  // compute between the all-reduces of virtual ranks gate them (NOTE [rank gate] in
  // tools/tpar/common/rank_gate.cu; docs/DESIGN.md, "Virtual ranks and other work").
  // Ranks in separate processes on one GPU are time-sliced (no MPS), or share SMs under MPS
  // like virtual ranks; they are not counted here.
  const int rod = std::max(1, ranks_on_device);
  int resident = per_sm * sms / rod;
  if (rod > 1) resident = std::min(resident, (sms - 1) / (rod - 1));
  // NOTE [wide grid for shared GPUs]
  // Ranks that share a GPU and exchange in its memory move every byte through HBM, not through
  // a link, and large calls there go as fast as the blocks issuing loads and stores allow:
  // with 2 virtual ranks on one H200, 64 blocks nearly halved two-shot's time at 4 MiB against
  // 32 (docs/PERFORMANCE.md, "A wider grid for ranks that share a GPU"). Small calls keep 32
  // active blocks (defaultPlan). Ranks on their own GPUs, and host memory, whose links saturate
  // with far fewer blocks, keep 32 until a run on such machines measures otherwise.
  // NOTE [wire grid for two ranks on one GPU]
  // Two ranks sharing a GPU on the host transport with a wire format (tparConfig_t::wire) get
  // the wide grid too. The formats' kernel encodes and decodes on every block of the grid
  // (wirePlan) and the SMs hold it back more than the link does: with 2 virtual ranks on one
  // H200, FP8 and INT4 calls from 1 MiB ran faster with 64 blocks than with 32 in the same run,
  // and the lossless calls of such a communicator, below the format's threshold, no slower
  // (docs/PERFORMANCE.md, "Shorter pipelined steps and a wider wire grid on a shared GPU"). What
  // takes the whole grid on such a communicator (a forced algorithm, the fused call) takes the
  // 64 too. More ranks on one GPU have more blocks between them already (4 ranks ran the
  // formats slower with 64 each than with 32); ranks on their own GPUs keep 32 until a run with
  // one rank per GPU measures them.
  const bool wire_pair = rod == 2 && host_transport && cfg.wire > tparWireNone;
  const int default_grid =
      rod > 1 && (!host_transport || wire_pair) ? kSharedGpuGridBlocks : kDefaultGridBlocks;
  const int wanted =
      std::min(kernels::kMaxBlocks, cfg.max_blocks > 0 ? cfg.max_blocks : default_grid);
  comm->max_blocks = std::max(1, std::min(wanted, resident));
  if (resident < 1) {
    return fail(setError(tparInvalidUsage,
                         "%d ranks cannot share one GPU of %d multiprocessors", ranks_on_device,
                         sms));
  }

  int major = 0;
  err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (err != cudaSuccess) return fail(cudaFailure(err, "cudaDeviceGetAttribute", __FILE__, __LINE__));
  comm->launch_overlap = launchOverlapOn(cfg.launch_overlap, major);

  tparResult_t res =
      allocWorkspace(comm->layout, cfg.epoch_start, host_transport, &comm->workspace);
  if (res != tparSuccess) return fail(res);
  comm->device_state = deviceStateOf(comm->workspace);
  comm->block_epochs = blockEpochsOf(comm->workspace);
  err = cudaMalloc(reinterpret_cast<void**>(&comm->fused_scratch), kFusedScratchBytes);
  if (err != cudaSuccess) {
    comm->fused_scratch = nullptr;
    return fail(cudaFailure(err, "cudaMalloc (the fused call's scratch)", __FILE__, __LINE__));
  }
  comm->peer_ws[rank] = comm->workspace;
  if (host_transport) {
    res = createRankHostRegion(comm->layout, cfg.epoch_start, device, &comm->host_region);
    if (res != tparSuccess) return fail(res);
    comm->peer_ws[rank] = comm->host_region.device;
    comm->transport = tparTransportHost;
  }

  void* host = nullptr;
  err = cudaHostAlloc(&host, sizeof(kernels::HostState), cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) return fail(cudaFailure(err, "cudaHostAlloc", __FILE__, __LINE__));
  std::memset(host, 0, sizeof(kernels::HostState));
  comm->host_state = static_cast<kernels::HostState*>(host);
  void* host_dev = nullptr;
  err = cudaHostGetDevicePointer(&host_dev, host, 0);
  if (err != cudaSuccess) return fail(cudaFailure(err, "cudaHostGetDevicePointer", __FILE__, __LINE__));
  comm->host_state_dev = static_cast<kernels::HostState*>(host_dev);
  *out = comm;
  return tparSuccess;
}

void destroyComm(tparComm* comm) {
  if (comm == nullptr) return;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(comm->device);
  // cudaFree would wait for the device anyway; waiting first keeps unmapping ordered after the
  // kernels that use the mappings.
  cudaDeviceSynchronize();
  for (PeerMapping& m : comm->mappings) unmapPeer(&m);
  freeWorkspace(comm->workspace);
  if (comm->fused_scratch != nullptr) cudaFree(comm->fused_scratch);
  closeHostRegion(&comm->host_region);
  if (comm->host_state != nullptr) cudaFreeHost(comm->host_state);
  (void)cudaGetLastError();
  if (prev >= 0) cudaSetDevice(prev);
  delete comm;
}

tparResult_t abortComm(tparComm* comm) {
  // Waiting kernels read this word between polls and give up (Waiter::keepWaiting).
  reinterpret_cast<volatile uint32_t*>(&comm->host_state->abort)[0] = 1;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    bool idle = false;
    bool abandoned = false;  // abort gave up: the thread frees the communicator
  };
  auto wait = std::make_shared<Wait>();
  const int device = comm->device;
  std::thread waiter;
  try {
    waiter = std::thread([wait, comm, device] {
      cudaSetDevice(device);
      cudaDeviceSynchronize();
      (void)cudaGetLastError();
      std::unique_lock<std::mutex> lock(wait->mu);
      wait->idle = true;
      if (!wait->abandoned) {
        wait->cv.notify_all();
        return;
      }
      lock.unlock();
      destroyComm(comm);
    });
  } catch (const std::system_error&) {
    destroyComm(comm);  // no thread to bound the wait with: wait without a bound
    return tparSuccess;
  }
  const int64_t bound_ms = comm->cfg.timeout_ms;
  std::unique_lock<std::mutex> lock(wait->mu);
  if (wait->cv.wait_for(lock, std::chrono::milliseconds(bound_ms), [&] { return wait->idle; })) {
    lock.unlock();
    waiter.join();  // it has nothing left to do: no thread outlives a normal abort
    destroyComm(comm);
    return tparSuccess;
  }
  waiter.detach();
  wait->abandoned = true;
  return setError(tparTimeout,
                  "tparCommAbort: the GPU did not become idle within the communicator's timeout "
                  "(%lld ms): other work keeps it busy (an NCCL call waiting for a peer, or a "
                  "kernel that never ends). The communicator is gone; its memory is freed once "
                  "the GPU is idle. An NCCL call needs ncclCommAbort on its own communicator.",
                  static_cast<long long>(bound_ms));
}

tparResult_t describeSelf(const tparComm& comm, PeerInfo* out) {
  PeerInfo info;
  std::memset(&info, 0, sizeof(info));
  TPAR_TRY(processIdentity(&info.process));
  info.cuda_device = comm.device;
  TPAR_TRY(busIdOf(comm.device, info.bus_id, sizeof(info.bus_id)));
  info.workspace_ptr = reinterpret_cast<uint64_t>(comm.workspace);
  info.workspace_bytes = comm.layout.totalBytes();
  if (comm.host_transport) {
    info.host_transport = 1;
    info.host_fd = comm.host_region.fd;
    info.host_region_ptr = reinterpret_cast<uint64_t>(comm.host_region.device);
    info.host_region_bytes = comm.host_region.bytes;
  } else {
    TPAR_CUDA_TRY(cudaIpcGetMemHandle(&info.ipc_handle, comm.workspace));
  }
  info.max_bytes_per_call = comm.cfg.max_bytes_per_call;
  info.epoch_start = comm.cfg.epoch_start;
  info.nranks = comm.nranks;
  *out = info;
  return tparSuccess;
}

Topology flatTopology(int nranks, LinkClass link) {
  Topology t;
  t.gpus.resize(nranks);
  t.links.assign(nranks, std::vector<LinkClass>(nranks, link));
  for (int r = 0; r < nranks; ++r) t.links[r][r] = LinkClass::kSameDevice;
  deriveIslands(&t);
  t.source = "flat";
  return t;
}

tparResult_t buildTopology(const ResolvedConfig& cfg, const std::vector<int>& devices,
                           Topology* out) {
  const int n = static_cast<int>(devices.size());
  if (!cfg.topo_file.empty()) {
    Topology file;
    TPAR_TRY(loadTopologyXml(cfg.topo_file, {}, &file));
    if (static_cast<int>(file.gpus.size()) < n) {
      return setError(tparInvalidArgument,
                      "topology file %s has %zu GPUs; the communicator has %d ranks",
                      cfg.topo_file.c_str(), file.gpus.size(), n);
    }
    // Ranks take the file's first n GPUs (virtual ranks then run the fixture's islands).
    std::vector<std::string> ids;
    for (int r = 0; r < n; ++r) ids.push_back(file.gpus[r].bus_id);
    return loadTopologyXml(cfg.topo_file, ids, out);
  }
  return discoverTopology(devices, out);
}

tparResult_t applyTopology(tparComm* comm, const Topology& topo) {
  const int n = comm->nranks;
  if (static_cast<int>(topo.links.size()) != n) {
    return setError(tparInternalError, "topology has %zu ranks, communicator %d",
                    topo.links.size(), n);
  }
  comm->topology = topo;
  TunerContext ctx;
  ctx.nranks = n;
  ctx.signature = topo.signature;
  ctx.islands = static_cast<int>(topo.islands.size());
  ctx.host_transport = comm->host_transport;
  // Host memory changes every crossover: its tables are kept apart.
  if (comm->host_transport) ctx.signature += "+host";
  int worst = 0;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) worst = std::max(worst, static_cast<int>(topo.links[a][b]));
  ctx.worst_link = worst;
  ctx.ranks_per_gpu = maxRanksPerGpu(topo);
  ctx.whole_pull = comm->whole_pull;
  ctx.piece_bytes = std::min<uint64_t>(
      comm->cfg.max_bytes_per_call, maxPieceBytes(kernels::Algo::kPipelined, comm->layout, n));
  const size_t m = topo.islands.empty() ? 0 : topo.islands[0].size();
  bool equal = m > 0;
  for (const auto& island : topo.islands) equal &= island.size() == m;
  ctx.island_size = equal ? static_cast<int>(m) : 0;
  ctx.hierarchical_ok = equal && topo.islands.size() > 1;
  comm->tuner_ctx = ctx;
  // Hierarchical mapping: island i, position p -> rank.
  if (equal) {
    comm->hier_k = static_cast<int>(topo.islands.size());
    comm->hier_m = static_cast<int>(m);
    for (int i = 0; i < comm->hier_k; ++i) {
      for (int p = 0; p < comm->hier_m; ++p) {
        const int r = topo.islands[i][p];
        comm->hier_rank[i * comm->hier_m + p] = static_cast<uint8_t>(r);
        if (r == comm->rank) {
          comm->hier_island = i;
          comm->hier_pos = p;
        }
      }
    }
  } else {
    comm->hier_k = 1;
    comm->hier_m = n;
    for (int r = 0; r < n; ++r) comm->hier_rank[r] = static_cast<uint8_t>(r);
    comm->hier_island = 0;
    comm->hier_pos = comm->rank;
  }
  prepareCalls(comm);
  // A tuning table measured on this machine replaces the defaults.
  const std::string path = tuningFilePath(ctx);
  if (!path.empty() && access(path.c_str(), R_OK) == 0) {
    TuningTable table;
    const std::string saved = lastError();
    if (loadTuningFile(path, ctx, &table) == tparSuccess) {
      comm->tuning = table;
      comm->has_tuning = true;
      TPAR_INFO(kLogTuning, "rank %d: tuning table %s", comm->rank, path.c_str());
    } else {
      // Ignored, not fatal: a table only tunes, and TPAR_TUNING_FILE=/dev/null is a way to run
      // without one. A FIFO or a device is refused without waiting (NOTE [user files]).
      static std::once_flag warned;
      const std::string why = lastError();
      const Env* env = nullptr;
      const bool from_env = processEnv(&env) == tparSuccess && env->tuning_file == path;
      std::call_once(warned, [&] {
        TPAR_WARN("ignoring tuning file%s: %s", from_env ? " (TPAR_TUNING_FILE)" : "",
                  why.c_str());
      });
    }
    setError(tparSuccess, "%s", saved.c_str());
  }
  refreshCallLimits(comm);  // NOTE [fused limits cached]
  return tparSuccess;
}

Plan planFor(const tparComm* comm, uint64_t bytes, tparDataType_t dtype) {
  return selectPlan(bytes, dtype, comm->tuner_ctx, comm->has_tuning ? &comm->tuning : nullptr,
                    comm->cfg.forced_algo, comm->cfg.one_shot_max_bytes);
}

Fallback forcedFallback(const tparComm* comm) {
  return forcedFallback(comm->cfg.forced_algo, comm->tuner_ctx);
}

const TunerContext& tunerContextOf(const tparComm* comm) { return comm->tuner_ctx; }

int64_t oneShotMaxBytesOf(const tparComm* comm) { return comm->cfg.one_shot_max_bytes; }

void usePlan(tparComm* comm, const Plan& plan) {
  comm->tuning = singlePlanTable(comm->tuner_ctx, plan);
  comm->has_tuning = true;
  refreshCallLimits(comm);  // NOTE [fused limits cached]
}

void setWireMinBytes(tparComm* comm, int64_t bytes) { comm->cfg.wire_min_bytes = bytes; }

void prepareCalls(tparComm* comm) {
  kernels::AllReduceArgs& args = comm->call_template;
  std::memset(&args, 0, sizeof(args));
  for (int r = 0; r < comm->nranks; ++r) args.peer_ws[r] = comm->peer_ws[r];
  args.state = comm->device_state;
  args.block_epochs = comm->block_epochs;
  args.host_state = comm->host_state_dev;
  args.timeout_ns = static_cast<uint64_t>(comm->cfg.timeout_ms) * 1000000ull;
  args.data_bytes = comm->layout.data_bytes;
  args.pull_base = comm->layout.pullBase();
  args.pull_bytes = comm->layout.pull_bytes;
  args.rank = comm->rank;
  args.nranks = comm->nranks;
  // NOTE [hand-offs at GPU scope] in kernels/prims/mailbox.cuh.
  args.gpu_scope = everyRankHereInGpuMemory(comm) ? 1 : 0;
  args.hier_k = comm->hier_k;
  args.hier_m = comm->hier_m;
  args.hier_island = comm->hier_island;
  args.hier_pos = comm->hier_pos;
  for (int r = 0; r < comm->nranks; ++r) args.hier_rank[r] = comm->hier_rank[r];
}

void refreshCallLimits(tparComm* comm) {
  for (int d = 0; d < tparNumDataTypes; ++d)
    comm->fused_one_kernel_limit[d] = fusedOneShotLimit(comm, static_cast<tparDataType_t>(d));
}

namespace {

// NOTE [one-shot pull over flag lines on one GPU]
// Epoch lines carry half a payload each, so a one-shot pull over them reads twice the input;
// flag lines read it once, after a fenced flag per block. At system scope that flag cost more
// than the bytes in GPU memory (NOTE [one-shot pull over flag lines in host memory] in
// kernels/one_shot.cu); at GPU scope (NOTE [hand-offs at GPU scope] in
// kernels/prims/mailbox.cuh, the same condition: every rank in this process on this GPU,
// regions in its memory) 8 virtual ranks on one H200 ran the flag lines ahead of the epoch
// lines at every size they pull, 3 and 4 ranks behind at 12 KiB (docs/PERFORMANCE.md,
// "Hand-offs at GPU scope for ranks on one GPU"). So groups from kOneGpuFlagPullMinRanks on
// take them; host memory takes them from 3 ranks (the host kernels' own split).
bool flagPull(const tparComm* comm) {
  return comm->host_transport ||
         (everyRankHereInGpuMemory(comm) && comm->nranks >= kOneGpuFlagPullMinRanks);
}

bool vecAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kernels::kVecBytes == 0; }

// A launch that failed: peers may already wait for this kernel, so the group is out of step for
// good, and every later call must say so.
tparResult_t launchFailed(tparComm* comm, cudaError_t err, const char* what) {
  const tparResult_t result = cudaFailure(err, what, __FILE__, __LINE__);
  if (comm->host_state->error == 0) comm->host_state->error = tparUnhandledCudaError;
  return result;
}

}  // namespace

const WireAlgorithm* wireVariantOf(const tparComm* comm, uint64_t bytes, tparDataType_t dtype,
                                   Plan* plan) {
  bool wire = false;
  *plan = wirePlan(*plan, bytes, dtype, comm->tuner_ctx, comm->cfg.forced_algo, comm->cfg.wire,
                   &wire,
                   wireMinBytes(comm->cfg.wire_min_bytes, comm->has_tuning ? &comm->tuning : nullptr,
                                comm->cfg.wire));
  return wire ? wireAlgorithmOf(plan->algo, static_cast<tparWire_t>(comm->cfg.wire)) : nullptr;
}

const char* wireVariantName(const tparComm* comm, uint64_t bytes, tparDataType_t dtype) {
  Plan plan = planFor(comm, bytes, dtype);
  if (plan.nccl) return nullptr;
  const WireAlgorithm* wa = wireVariantOf(comm, bytes, dtype, &plan);
  return wa != nullptr ? wa->name : nullptr;
}

void prepareAllReduce(const tparComm* comm, size_t count, tparDataType_t dtype, tparRedOp_t op,
                      CallLaunch* out, uint64_t shape_hash) {
  CallLaunch& c = *out;
  c.esize = elementBytes(dtype);
  const uint64_t bytes = uint64_t(count) * c.esize;
  c.plan = planFor(comm, bytes, dtype);
  if (c.plan.nccl) return;
  // A wire format, where it applies, runs its variant of the pipelined schedule: that
  // schedule's row (limits, threads), the variant's kernels and key. Plain calls only: the
  // fused call's composite path (shape_hash != 0) stays lossless, like its one kernel.
  const WireAlgorithm* wa = shape_hash == 0 ? wireVariantOf(comm, bytes, dtype, &c.plan) : nullptr;
  // planFor already gives a plan the group can run (the tuner's fallback, tuner.h).
  c.algo = &algorithm(c.plan.algo);
  const Algorithm& algo = *c.algo;
  c.shape.nranks = comm->nranks;
  c.shape.hier_m = comm->hier_m;
  c.shape.hier_k = comm->hier_k;
  c.shape.elem_bytes = c.esize;
  const uint64_t algo_limit = algo.max_bytes(comm->layout, c.shape);
  const uint64_t piece_limit = std::min<uint64_t>(comm->cfg.max_bytes_per_call, algo_limit);
  c.piece_elems = piece_limit / c.esize;  // piece_limit is a multiple of 16
  // A wire format's pieces are whole blocks, so that every piece encodes the blocks a single
  // launch would (docs/WIRE.md: blocks count from the start of the buffer); a call whose codes
  // and scales fit the bytes of a lossless piece is one launch (NOTE [wire pieces by the bytes
  // that travel] in kernels/prims/wire.h), a longer one pieces of one length but the last, as
  // few as wirePieceBytes allows, the length its plan is shaped for (NOTE [wire shape per piece]
  // in tuner/tuner.cc).
  if (wa != nullptr) {
    const uint64_t limit = wirePieceBytes(bytes, piece_limit, comm->nranks, wa->wire, c.esize);
    c.piece_elems = evenPieceBytes(bytes, limit, uint64_t(wa->block_values) * c.esize) / c.esize;
  }
  const bool flags = flagPull(comm);
  c.fn = (wa != nullptr ? wa->kernels : kernelsFor(algo, flags))->get(dtype, comm->nranks);

  kernels::AllReduceArgs& args = c.args;
  args = comm->call_template;  // NOTE [call template]
  args.meta = makeCallMeta(dtype, op, wa != nullptr ? wa->id : algo.id,
                           uint64_t(count) ^ shape_hash, comm->nccl.comm != nullptr);
  args.op = op;
  args.active_blocks = c.plan.active_blocks;
  const int algo_blocks = maxBlocksFor(algo, flags);
  if (algo_blocks > 0 && (args.active_blocks <= 0 || args.active_blocks > algo_blocks))
    args.active_blocks = std::min(comm->max_blocks, algo_blocks);
  args.steps = c.plan.steps;
  args.pull = c.plan.pull ? 1 : 0;
}

int setPiece(const tparComm* comm, CallLaunch* call, const void* send, void* recv, size_t count,
             uint64_t done) {
  CallLaunch& c = *call;
  kernels::AllReduceArgs& args = c.args;
  const uint64_t n = std::min<uint64_t>(c.piece_elems, count - done);
  args.send = static_cast<const char*>(send) + done * c.esize;
  args.recv = static_cast<char*>(recv) + done * c.esize;
  args.count = n;
  args.vec_aligned = vecAligned(args.send) && vecAligned(args.recv);
  // Always the same grid (NOTE [epochs and parity]); the block size follows the work.
  const int active = args.active_blocks > 0 ? std::min(args.active_blocks, comm->max_blocks)
                                            : comm->max_blocks;
  const uint64_t work = c.algo->work_vectors(
      (n * c.esize + kernels::kVecBytes - 1) / kernels::kVecBytes, c.shape);
  int threads = c.plan.threads > 0 ? std::min(c.plan.threads, comm->threads)
                                   : threadsFor(work, active, comm->threads);
  // Groups of warps that run side by side (the flag-line two-shots with more than one step):
  // every thread they may have. With one step the whole block runs each phase in turn.
  if (c.algo->min_threads > 0) {
    const bool overlapped = c.plan.steps > 1;
    threads = std::max(c.algo->min_threads,
                       c.plan.threads > 0 || !overlapped ? threads : comm->threads);
  }
  return threads;
}

tparResult_t allReduce(tparComm* comm, const void* send, void* recv, size_t count,
                       tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream,
                       uint64_t shape_hash) {
  CallLaunch call;
  prepareAllReduce(comm, count, dtype, op, &call, shape_hash);
  if (call.plan.nccl) return ncclRouteAllReduce(comm, send, recv, count, dtype, op, stream);

  int prev = -1;
  TPAR_CUDA_TRY(cudaGetDevice(&prev));
  if (prev != comm->device) TPAR_CUDA_TRY(cudaSetDevice(comm->device));
  tparResult_t result = tparSuccess;
  for (uint64_t done = 0; done < count; done += call.piece_elems) {
    const int threads = setPiece(comm, &call, send, recv, count, done);
    cudaError_t err = launchAllReduce(&comm->kernel_handles, call.fn, call.args, comm->max_blocks, threads,
                                               comm->launch_overlap, stream);
    if (err != cudaSuccess) {
      result = launchFailed(comm, err, "launching the all-reduce kernel");
      break;
    }
  }
  if (prev != comm->device) cudaSetDevice(prev);
  return result;
}

uint64_t fusedOneShotLimit(const tparComm* comm, tparDataType_t dtype) {
  if (comm->cfg.fused_one_shot_max_bytes >= 0)
    return static_cast<uint64_t>(comm->cfg.fused_one_shot_max_bytes);
  // In host memory the one kernel keeps the limit the plain call had before the small calls
  // of ranks sharing a GPU went to the sentinel push kernels (NOTE [small host calls on a
  // shared GPU], measured for the plain call only): the context of one rank per GPU. Only
  // that case copies the context; every other fused call reads the communicator's.
  const tpar::TunerContext* ctx = &comm->tuner_ctx;
  tpar::TunerContext own_gpu;
  if (comm->host_transport && comm->tuner_ctx.ranks_per_gpu > 1) {
    own_gpu = comm->tuner_ctx;
    own_gpu.ranks_per_gpu = 1;
    ctx = &own_gpu;
  }
  const uint64_t plain =
      oneShotLimit(dtype, *ctx, comm->has_tuning ? &comm->tuning : nullptr,
                   comm->cfg.forced_algo, comm->cfg.one_shot_max_bytes);
  // A forced algorithm, and host memory (no measurement of the one kernel beyond the plain
  // call's one-shot there yet), keep the plain call's limit.
  if (comm->cfg.forced_algo != tparAlgoAuto || comm->host_transport) return plain;
  // In GPU memory the one kernel saves the norm's launch and its pass over the rows, which
  // outweighs one-shot's extra traffic well beyond the plain call's limit. Measured with each
  // path forced on one H200, virtual ranks (docs/FUSED.md, "Where the norm happens"): one
  // kernel ahead up to 512 KiB at 2 and 4 ranks, up to 128 KiB at 8; behind at 896 KiB
  // (2, 4) and 512 KiB (8). Unmeasured group sizes take four times the plain limit. A table or
  // TPAR_ONESHOT_MAX_BYTES may carry the plain one-shot further, and the one kernel follows;
  // the built-in plain limit of two ranks on one GPU (2 MiB, NOTE [small calls of ranks on one
  // GPU]) is the plain kernel's, sized for two ranks, which the fused kernels are not, so
  // without either the measured limit holds.
  const int n = comm->nranks;
  const uint64_t measured = n <= 4 ? 512u << 10 : n <= 8 ? 128u << 10 : plain * 4;
  if (n <= 8 && !comm->has_tuning && comm->cfg.one_shot_max_bytes < 0) return measured;
  return std::max(plain, measured);
}

bool fusedTwoShotWanted(const tparComm* comm, uint64_t bytes, uint64_t one_kernel_limit) {
  if (bytes <= one_kernel_limit) return false;
  const auto mode = static_cast<FusedTwoShot>(comm->cfg.fused_two_shot);
  if (mode != FusedTwoShot::kAuto) return mode == FusedTwoShot::kOn;
  // A forced algorithm (TPAR_ALGO) other than two-shot keeps the composite path, whose
  // all-reduce it then runs.
  if (comm->cfg.forced_algo != tparAlgoAuto && comm->cfg.forced_algo != tparAlgoTwoShot)
    return false;
  // Measured with each path forced on one H200, virtual ranks, 1 to 256 tokens of 4096, 7168
  // and 8192 (docs/FUSED.md, "When two-shot"): two-shot ahead of the all-reduce and the norm
  // kernel above the one-kernel limit at 4 ranks (896 KiB to 4 MiB), above 512 KiB at 8 (the
  // composite path ahead from 224 to 512 KiB), and at 2 ranks at 896 KiB and 1 MiB but not from
  // 2 MiB. Group sizes between take the next measured one's; above 8 ranks, where it was not
  // measured, the composite path.
  const int n = comm->nranks;
  if (n <= 2) return bytes <= (1u << 20);
  if (n <= 4) return true;
  if (n <= 8) return bytes > (512u << 10);
  return false;
}

tparResult_t allReduceAddRmsNorm(tparComm* comm, const void* input,
                                 const tparAddRmsNormArgs_t& a, tparDataType_t dtype,
                                 cudaStream_t stream) {
  const size_t tokens = a.tokens, hidden = a.hidden;
  // One-shot in the mailbox of the transport (push into GPU memory, publish in host memory):
  // every rank reduces whole rows, so the norm needs no extra hand-off (docs/FUSED.md).
  const kernels::Algo plain = comm->host_transport ? kernels::Algo::kOneShotPull
                                                   : kernels::Algo::kOneShot;
  const FusedAlgorithm& fused = *fusedAlgorithmOf(plain);
  const Algorithm& algo = algorithm(plain);
  const size_t esize = elementBytes(dtype);
  AlgoShape shape;
  shape.nranks = comm->nranks;
  shape.elem_bytes = esize;
  const uint64_t piece = std::min<uint64_t>(comm->cfg.max_bytes_per_call,
                                            algo.max_bytes(comm->layout, shape));
  const uint64_t row_bytes = uint64_t(hidden) * esize;
  const uint64_t rows_per_launch = piece / row_bytes;
  if (rows_per_launch == 0) {
    return setError(tparInvalidArgument,
                    "hidden %zu: one row (%llu bytes) is larger than a launch carries (%llu "
                    "bytes; raise maxBytesPerCall)",
                    hidden, (unsigned long long)row_bytes, (unsigned long long)piece);
  }
  // The call header carries the fused shape: ranks with another hidden (same count) differ.
  const uint64_t shape_hash = (uint64_t(hidden) << 40) ^ (uint64_t(a.quant) << 56);
  const uint64_t row_vecs = row_bytes / kernels::kVecBytes;
  kernels::NormArgs norm{};
  norm.weight = a.weight;
  norm.hidden = static_cast<uint32_t>(hidden);
  norm.eps = a.eps;
  norm.quant = a.quant;
  norm.block_scale = static_cast<uint8_t*>(a.block_scale);
  // Bytes of one element of the quantized copy, times two (NVFP4: half a byte).
  const uint64_t q_twice = a.quant == tparNormQuantNvfp4 ? 1 : 2;
  auto rowsAt = [&](uint64_t done, uint64_t rows) {
    const uint64_t off = done * row_bytes;
    auto at = [off](void* p) { return p != nullptr ? static_cast<char*>(p) + off : nullptr; };
    norm.residual = at(a.residual);
    norm.residual_out = at(a.residual_out);
    norm.out = at(a.out);
    norm.rows = static_cast<uint32_t>(rows);
    norm.row0 = static_cast<uint32_t>(done);
    norm.quant_out = a.quant == tparNormQuantNone
                         ? nullptr
                         : static_cast<char*>(a.quant_out) + done * hidden * q_twice / 2;
    norm.scale = a.quant == tparNormQuantFp8PerToken ? a.scale + done : a.scale;
    // A vector of 16-bit elements quantizes to 8 bytes (FP8) or 4 (NVFP4).
    norm.quant_aligned =
        norm.quant_out != nullptr &&
        reinterpret_cast<uintptr_t>(norm.quant_out) % (a.quant == tparNormQuantNvfp4 ? 4 : 8) == 0;
    norm.aligned = (norm.out == nullptr || vecAligned(norm.out)) && vecAligned(a.weight) &&
                   (norm.residual == nullptr || vecAligned(norm.residual)) &&
                   (norm.residual_out == nullptr || vecAligned(norm.residual_out));
  };

  // Above the fused one-shot limit: the planned all-reduce (two-shot, staged, ... as the plain
  // call of that size) into a buffer of the caller's that the norm rewrites anyway, then the
  // norm kernel (docs/FUSED.md, "Where the norm happens"). out never overlaps the residual;
  // residual_out may be the residual, which must keep its values until the norm reads them.
  // Without such a buffer (a quantized output only, the residual in place) the sum goes
  // through the communicator's scratch, kFusedScratchBytes of rows at a time.
  char* sum_at = static_cast<char*>(a.out != nullptr ? a.out
                                    : a.residual_out != nullptr && a.residual_out != a.residual
                                        ? a.residual_out
                                        : nullptr);
  const bool scratch = sum_at == nullptr;
  // Two-shot with the row owner's norm (TPAR_FUSED_TWOSHOT; docs/FUSED.md): GPU memory, no
  // quantized output, above the one-kernel limit. The owner adds its residual for every rank,
  // which is right where the residual is replicated (tensor parallelism), not where it is the
  // input: each rank's residual then differs and each rank adds its own (one-shot or the
  // composite path). A launch holds the scatter's n chunks of whole rows and the gathers of r
  // and y: 3 n chunks in one parity's area.
  const uint64_t bytes = uint64_t(tokens) * row_bytes;
  const uint64_t one_kernel_limit = comm->fused_one_kernel_limit[dtype];  // NOTE [fused limits cached]
  const bool above = bytes > one_kernel_limit;
  const uint64_t n = static_cast<uint64_t>(comm->nranks);
  const uint64_t two_shot_rows = n * (comm->layout.data_bytes / (3 * n * row_bytes));
  const bool two_shot = !comm->host_transport && n > 1 && a.out != nullptr &&
                        a.quant == tparNormQuantNone && two_shot_rows > 0 &&
                        a.residual != input && fusedTwoShotWanted(comm, bytes, one_kernel_limit);
  if (!two_shot && above && (!scratch || row_bytes <= kFusedScratchBytes)) {
    const uint64_t rows_per_pass = scratch ? kFusedScratchBytes / row_bytes : tokens;
    const int threads = normShapeFor(tokens, row_vecs, 1, comm->threads).threads;
    const void* fn = kernels::addRmsNormKernels.get(dtype, 1);
    for (uint64_t done = 0; done < tokens; done += rows_per_pass) {
      const uint64_t rows = std::min<uint64_t>(rows_per_pass, tokens - done);
      char* sum = scratch ? comm->fused_scratch : sum_at + done * row_bytes;
      tparResult_t r = allReduce(comm, static_cast<const char*>(input) + done * row_bytes, sum,
                                 rows * hidden, dtype, tparSum, stream, shape_hash);
      if (r != tparSuccess) return r;
      rowsAt(done, rows);
      norm.group = 1;
      norm.aligned = norm.aligned && (!scratch || vecAligned(sum));
      int prev = -1;
      TPAR_CUDA_TRY(cudaGetDevice(&prev));
      if (prev != comm->device) TPAR_CUDA_TRY(cudaSetDevice(comm->device));
      const cudaError_t err = launchAddRmsNorm(&comm->kernel_handles, fn, norm, sum,
                                               static_cast<int>(std::min<uint64_t>(rows, 1024)),
                                               threads, stream);
      if (prev != comm->device) cudaSetDevice(prev);
      if (err != cudaSuccess) return launchFailed(comm, err, "launching the norm kernel");
    }
    return tparSuccess;
  }

  // One fused kernel per launch of whole rows: the one-shot of the transport, or two-shot with
  // the row owner's norm, whose row groups are over each owner's rows (as many on every rank:
  // the chunk's).
  const FusedAlgorithm& kernel = two_shot ? *fusedAlgorithmOf(kernels::Algo::kTwoShot) : fused;
  const uint64_t launch_rows = two_shot ? two_shot_rows : rows_per_launch;
  kernels::AllReduceArgs args = comm->call_template;  // NOTE [call template]
  args.meta = makeCallMeta(dtype, tparSum, kernel.id, uint64_t(tokens) * hidden ^ shape_hash,
                           comm->nccl.comm != nullptr);
  args.op = tparSum;
  args.active_blocks = 0;
  args.steps = 0;
  args.pull = 0;
  const void* fn = kernel.kernels->get(dtype, comm->nranks);

  int prev = -1;
  TPAR_CUDA_TRY(cudaGetDevice(&prev));
  if (prev != comm->device) TPAR_CUDA_TRY(cudaSetDevice(comm->device));
  tparResult_t result = tparSuccess;
  for (uint64_t done = 0; done < tokens; done += launch_rows) {
    const uint64_t rows = std::min<uint64_t>(launch_rows, tokens - done);
    const uint64_t off = done * row_bytes;
    args.send = static_cast<const char*>(input) + off;
    args.recv = a.out != nullptr ? static_cast<char*>(a.out) + off : nullptr;
    args.count = rows * hidden;
    args.vec_aligned = vecAligned(args.send) && (args.recv == nullptr || vecAligned(args.recv));
    rowsAt(done, rows);
    // Fewer rows than blocks: row groups (NOTE [row groups]).
    const NormShape ns = normShapeFor(two_shot ? (rows + n - 1) / n : rows, row_vecs,
                                      comm->max_blocks, comm->threads);
    norm.group = ns.group;
    norm.slice = ns.slice;
    const cudaError_t err = launchAllReduceNorm(&comm->kernel_handles, fn, args, norm, comm->max_blocks, ns.threads,
                                                comm->launch_overlap, stream);
    if (err != cudaSuccess) {
      result = launchFailed(comm, err, "launching the fused all-reduce kernel");
      break;
    }
  }
  if (prev != comm->device) cudaSetDevice(prev);
  return result;
}

}  // namespace tpar
