#include "api/api_log.h"

#include <mutex>
#include <string>
#include <unordered_set>

#include "registry/algorithms.h"
#include "comm/comm.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace tpar {
namespace {

std::mutex g_mu;
std::unordered_set<const tparComm*> g_async_logged;  // comms whose async error was logged

std::string sizeText(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return std::to_string(bytes) + " " + kUnits[u];
}

void logProcessOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    TPAR_LOG_AT(LogLevel::kVersion, kLogAll,
                "tpar version %d.%d.%d (commit %s), CUDA runtime %d.%d, driver %d.%d",
                TPAR_MAJOR, TPAR_MINOR, TPAR_PATCH, TPAR_GIT_COMMIT, runtime / 1000,
                runtime % 1000 / 10, driver / 1000, driver % 1000 / 10);
    const Env* env = nullptr;
    const std::string saved = lastError();
    if (processEnv(&env) == tparSuccess) {
      for (const std::string& kv : env->set_vars)
        TPAR_INFO(kLogEnv, "%s set by environment", kv.c_str());
    }
    setError(tparSuccess, "%s", saved.c_str());
  });
}

// Why the receive regions are where they are.
std::string transportText(const tparComm* c) {
  std::string s = tparTransportName(c->transport);
  if (c->host_transport)
    s += c->cfg.transport == 1 ? " (pinned host memory: asked for by TPAR_TRANSPORT or the config)"
                               : " (pinned host memory: some pair of the group's GPUs lacks "
                                 "peer-to-peer access)";
  else if (c->cfg.transport == 2)
    s += " (GPU memory, as TPAR_TRANSPORT=p2p or the config asks)";
  return s;
}

}  // namespace

std::string algorithmTable(tparComm_t comm) {
  const std::string saved = lastError();  // the API call below clears it
  std::string s;
  std::string run_algo;
  uint64_t run_start = 0, prev = 0;
  auto close_run = [&] {
    if (run_algo.empty()) return;
    s += (s.empty() ? "" : ", ") + sizeText(run_start) +
         (prev != run_start ? "-" + sizeText(prev) : "") + " " + run_algo;
  };
  for (uint64_t bytes = 256; bytes <= (64u << 20); bytes *= 2) {
    tparAlgo_t a = tparAlgoAuto;
    if (tparCommSelectAlgorithm(comm, bytes, &a) != tparSuccess) break;
    const std::string name = tparAlgoName(a);
    if (name != run_algo) {
      close_run();
      run_algo = name;
      run_start = bytes;
    }
    prev = bytes;
  }
  close_run();
  setError(tparSuccess, "%s", saved.c_str());
  return s;
}

void logInitStart(const char* call, int rank, int nranks) {
  logProcessOnce();
  if (rank >= 0)
    TPAR_INFO(kLogInit, "%s START: rank %d of %d", call, rank, nranks);
  else
    TPAR_INFO(kLogInit, "%s START: %d ranks in this process", call, nranks);
}

void logInitDone(tparComm_t comm, double ms) {
  const tparComm* c = comm;
  LogScope scope(c->rank, c->device);
  if (logEnabled(LogLevel::kInfo, kLogInit)) {
    char bus[32] = "?";
    const std::string saved = lastError();
    busIdOf(c->device, bus, sizeof(bus));
    setError(tparSuccess, "%s", saved.c_str());
    TPAR_INFO(kLogInit,
              "init COMPLETE: comm %p rank %d of %d, GPU %s, %d blocks x %d threads, timeout %lld "
              "ms, in %.1f ms",
              static_cast<const void*>(c), c->rank, c->nranks, bus, c->max_blocks, c->threads,
              static_cast<long long>(c->cfg.timeout_ms), ms);
  }
  TPAR_INFO(kLogTopo, "topology %s (%s), %zu island(s)", c->topology.signature.c_str(),
            c->topology.source.c_str(), c->topology.islands.size());
  TPAR_INFO(kLogTransport, "transport %s", transportText(c).c_str());
  // Every rank holds the same table (the tuner's inputs are agreed at init): rank 0 says it.
  if (c->rank == 0 && logEnabled(LogLevel::kInfo, kLogTuning)) {
    const char* source = c->cfg.forced_algo != tparAlgoAuto ? "forced by TPAR_ALGO or the config"
                         : c->has_tuning                    ? "from the tuning table"
                                                            : "built-in defaults";
    TPAR_INFO(kLogTuning, "algorithm table for %d ranks, bfloat16, %s: %s", c->nranks, source,
              algorithmTable(comm).c_str());
  }
  if (c->rank == 0 && c->cfg.wire > tparWireNone && c->cfg.wire < tparNumWires) {
    const WireAlgorithm* w = wireAlgorithmOf(kernels::Algo::kPipelined,
                                             static_cast<tparWire_t>(c->cfg.wire));
    TPAR_INFO(kLogTuning, "wire format %s: %s", w != nullptr ? w->name : "?",
              wireThresholdText(c->cfg.wire_min_bytes, c->has_tuning ? &c->tuning : nullptr,
                                c->cfg.wire, c->nranks)
                  .c_str());
  }
  // Every communicator, once: a forced algorithm its group cannot run is not what runs.
  const Fallback f = forcedFallback(c);
  if (f.why != nullptr) {
    TPAR_INFO(kLogTuning, "forced algorithm %s cannot run on this group (%s): %s runs instead",
              algoName(f.requested), f.why, algoName(f.runs));
  }
}

void logInitFailed(const char* call, tparResult_t result, int rank, int nranks) {
  if (rank >= 0)
    TPAR_WARN("%s failed on rank %d of %d: %s: %s", call, rank, nranks, tparGetErrorString(result),
              lastError().c_str());
  else
    TPAR_WARN("%s failed (%d ranks): %s: %s", call, nranks, tparGetErrorString(result),
              lastError().c_str());
}

void logAsyncError(tparComm_t comm, uint32_t code) {
  if (code == 0) return;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_async_logged.insert(comm).second) return;
  }
  const tparComm* c = comm;
  LogScope scope(c->rank, c->device);
  switch (static_cast<tparResult_t>(code)) {
    case tparTimeout:
      TPAR_WARN("a collective timed out: a peer did not arrive within %lld ms (TPAR_TIMEOUT_MS); "
                "the communicator now only accepts destroy or abort",
                static_cast<long long>(c->cfg.timeout_ms));
      if (c->ranks_on_device > 1) {
        // docs/DESIGN.md, "Virtual ranks and other work".
        TPAR_WARN("%d ranks of this process share this GPU (virtual ranks): the likely cause is "
                  "not a slow peer but work of a rank that cannot run while the others' "
                  "all-reduces wait on the same GPU: a kernel launched in clusters (cuBLAS "
                  "GEMMs) needs SMs that their blocks hold; gate each all-reduce that follows "
                  "compute as tpar verify does, or lower TPAR_MAX_BLOCKS. A host call between "
                  "two ranks' all-reduces that waits for the GPU (cudaFree, a synchronize, a "
                  "kernel loaded lazily) deadlocks them too",
                  c->ranks_on_device);
      }
      break;
    case tparInvalidUsage:
      TPAR_WARN("ranks issued mismatched calls (count, datatype, op or algorithm differ); the "
                "communicator now only accepts destroy or abort");
      break;
    case tparRemoteError:
      TPAR_WARN("a collective gave up: the communicator of a peer was aborted");
      break;
    default:
      TPAR_WARN("a collective failed: %s", tparGetErrorString(static_cast<tparResult_t>(code)));
  }
}

void logCommEnd(tparComm_t comm, bool abort) {
  const tparComm* c = comm;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_async_logged.erase(comm);
  }
  LogScope scope(c->rank, c->device);
  if (abort)
    TPAR_WARN("comm %p rank %d of %d aborted: waiting kernels give up, peers see tparRemoteError",
              static_cast<const void*>(c), c->rank, c->nranks);
  else
    TPAR_INFO(kLogInit, "destroy COMPLETE: comm %p rank %d of %d", static_cast<const void*>(c),
              c->rank, c->nranks);
}

void logAllReduceCall(tparComm_t comm, const void* send, void* recv, size_t count,
                      tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream) {
  const tparComm* c = comm;
  LogScope scope(c->rank, c->device);
  const size_t bytes = count * elementBytes(dtype);
  const Plan plan = planFor(c, bytes, dtype);
  TPAR_TRACE(kLogColl,
             "AllReduce: sendbuff %p recvbuff %p count %zu datatype %s op %s comm %p stream %p "
             "algo %s",
             send, static_cast<void*>(recv), count, tparDataTypeName(dtype), tparRedOpName(op),
             static_cast<const void*>(c), static_cast<void*>(stream), planAlgoName(plan));
}

}  // namespace tpar
