// extern "C" entry points: argument checks, error mapping, last-error text. No exception
// crosses this boundary.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "api/api_log.h"
#include "api/call_checks.h"
#include "api/init_internal.h"
#include "bootstrap/bootstrap.h"
#include "core/agreement.h"
#include "core/algorithms.h"
#include "core/comm.h"
#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "tuner/select.h"

using namespace tpar;

namespace {

// Records a failure on the communicator too, so tparGetLastError(comm) finds it.
tparResult_t finish(tparComm* comm, tparResult_t res) {
  if (res != tparSuccess && comm != nullptr) comm->last_error = lastError();
  return res;
}

tparResult_t checkComm(tparComm* comm) {
  if (comm == nullptr) return setError(tparInvalidArgument, "comm is NULL");
  if (!isLiveComm(comm)) {
    return setError(tparInvalidArgument,
                    "comm %p is not a live communicator (destroyed, or never created)",
                    static_cast<void*>(comm));
  }
  return tparSuccess;
}

template <typename F>
tparResult_t guarded(F&& body) {
  clearError();
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return setError(tparSystemError, "out of host memory");
  } catch (const std::exception& e) {
    return setError(tparInternalError, "unexpected exception: %s", e.what());
  } catch (...) {
    return setError(tparInternalError, "unexpected exception");
  }
}

tparResult_t resolve(const tparConfig_t* config, ResolvedConfig* cfg) {
  const Env* env = nullptr;
  TPAR_TRY(processEnv(&env));
  return resolveConfig(config, *env, cfg);
}

tparResult_t commInitRank(tparComm_t* out, int nranks, const tparUniqueId& id, int rank,
                          const tparConfig_t* config) {
  if (out == nullptr) return setError(tparInvalidArgument, "comm (output pointer) is NULL");
  if (nranks < 1 || nranks > TPAR_MAX_RANKS) {
    return setError(tparInvalidArgument, "nranks %d is outside 1..%d", nranks, TPAR_MAX_RANKS);
  }
  if (rank < 0 || rank >= nranks) {
    return setError(tparInvalidArgument, "rank %d is outside 0..%d", rank, nranks - 1);
  }
  ResolvedConfig cfg;
  TPAR_TRY(resolve(config, &cfg));

  std::unique_ptr<Bootstrap> boot;
  BootstrapPeers peers;
  peers.allow_other_users = cfg.bootstrap_allow_other_users;
  TPAR_TRY(connectBootstrap(id, rank, nranks, cfg.bootstrap_timeout_ms, &boot, peers));

  // Round 1: where is everyone? (needed before the local half: co-residency of virtual ranks)
  struct Where {
    ProcessIdentity process;  // NOTE [identity]
    char bus_id[32];
  };
  std::vector<Where> where(nranks);
  std::memset(where.data(), 0, sizeof(Where) * nranks);
  int device = 0;
  TPAR_CUDA_TRY(cudaGetDevice(&device));
  TPAR_TRY(processIdentity(&where[rank].process));
  TPAR_TRY(busIdOf(device, where[rank].bus_id, sizeof(where[rank].bus_id)));
  TPAR_TRY(boot->allGather(where.data(), sizeof(Where)));
  int same_device_same_process = 0;
  bool shared = false;
  for (int r = 0; r < nranks; ++r) {
    if (!sameHost(where[r].process, where[rank].process)) {
      return setError(tparInvalidUsage,
                      "rank %d runs on another host; tpar connects the GPUs of one machine", r);
    }
    if (std::strcmp(where[r].bus_id, where[rank].bus_id) == 0) {
      if (r != rank) shared = true;
      if (sameProcess(where[r].process, where[rank].process)) ++same_device_same_process;
    }
  }
  if (shared && !cfg.allow_shared_device) {
    return setError(tparInvalidUsage,
                    "several ranks use GPU %s; set config->allowSharedDevice = 1 or "
                    "TPAR_ALLOW_SHARED_DEVICE=1 to allow virtual ranks",
                    where[rank].bus_id);
  }

  // Round 1b: where receive regions live. GPU memory needs every pair of GPUs to reach each
  // other peer-to-peer; pinned host memory works everywhere (NOTE [host regions]). Every rank
  // decides from the same gathered votes, so all decide alike.
  struct TransportVote {
    int32_t wanted;  // cfg.transport
    int32_t p2p_ok;  // this rank's GPU reaches every other visible GPU of the group
  };
  std::vector<TransportVote> votes(nranks);
  std::memset(votes.data(), 0, sizeof(TransportVote) * nranks);
  votes[rank].wanted = cfg.transport;
  votes[rank].p2p_ok = 1;
  int unreachable = -1;
  for (int r = 0; r < nranks; ++r) {
    if (std::strcmp(where[r].bus_id, where[rank].bus_id) == 0) continue;
    int peer_device = -1;
    if (cudaDeviceGetByPCIBusId(&peer_device, where[r].bus_id) != cudaSuccess) {
      // Hidden from this process: CUDA IPC will tell (its failure names TPAR_TRANSPORT).
      (void)cudaGetLastError();
      continue;
    }
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, peer_device) != cudaSuccess) {
      (void)cudaGetLastError();
      can = 0;
    }
    if (!can) {
      votes[rank].p2p_ok = 0;
      unreachable = r;
    }
  }
  TPAR_TRY(boot->allGather(votes.data(), sizeof(TransportVote)));
  bool all_p2p = true;
  int blocked_rank = -1;
  for (int r = 0; r < nranks; ++r) {
    if (votes[r].wanted != cfg.transport) {
      return setError(tparInvalidUsage,
                      "rank %d was configured with transport %d, rank %d with %d (0 auto, 1 "
                      "host, 2 p2p): all ranks must agree",
                      r, votes[r].wanted, rank, cfg.transport);
    }
    if (!votes[r].p2p_ok) {
      all_p2p = false;
      if (blocked_rank < 0) blocked_rank = r;
    }
  }
  const RegionPlace place = chooseRegionPlace(cfg.transport, all_p2p);
  if (place == RegionPlace::kImpossible) {
    return setError(tparInvalidUsage,
                    "TPAR_TRANSPORT=p2p, but the GPU of rank %d cannot reach another GPU of the "
                    "group peer-to-peer%s; use auto or host",
                    blocked_rank,
                    unreachable >= 0 && blocked_rank == rank ? " (cudaDeviceCanAccessPeer = 0)" : "");
  }
  const bool host_transport = place == RegionPlace::kHostMemory;

  tparComm* comm = nullptr;
  TPAR_TRY(createLocal(rank, nranks, cfg, same_device_same_process, host_transport, &comm));
  auto cleanup = [&](tparResult_t res) {
    destroyComm(comm);
    return res;
  };

  // Round 2: workspaces.
  std::vector<PeerInfo> infos(nranks);
  std::memset(infos.data(), 0, sizeof(PeerInfo) * nranks);
  tparResult_t res = describeSelf(*comm, &infos[rank]);
  if (res != tparSuccess) return cleanup(res);
  res = boot->allGather(infos.data(), sizeof(PeerInfo));
  if (res != tparSuccess) return cleanup(res);
  for (int r = 0; r < nranks; ++r) {
    if (infos[r].max_bytes_per_call != cfg.max_bytes_per_call ||
        infos[r].epoch_start != cfg.epoch_start) {
      return cleanup(setError(tparInvalidUsage,
                              "rank %d was configured with maxBytesPerCall %llu / epoch start "
                              "%u, rank %d with %llu / %u: all ranks must agree",
                              r, (unsigned long long)infos[r].max_bytes_per_call,
                              infos[r].epoch_start, rank,
                              (unsigned long long)cfg.max_bytes_per_call, cfg.epoch_start));
    }
  }
  bool mixed = false;
  bool first = true;
  for (int r = 0; r < nranks; ++r) {
    if (r == rank) continue;
    PeerMapping m;
    res = mapPeer(infos[rank], infos[r], r, &m);
    if (res != tparSuccess) break;
    comm->mappings.push_back(m);
    comm->peer_ws[r] = m.ptr;
    if (first) {
      comm->transport = m.kind;
      first = false;
    } else if (m.kind != comm->transport) {
      mixed = true;
    }
  }
  if (mixed) comm->transport = tparTransportMixed;
  if (res != tparSuccess && !host_transport) {
    const std::string why = lastError();
    res = setError(res, "%s (GPUs without peer-to-peer work with TPAR_TRANSPORT=host)",
                   why.c_str());
  }

  // Round 3: the topology, as rank 0 sees it, for every rank (the tuner's inputs must be
  // identical on all ranks). Every rank takes part even after a local failure, so that the
  // rounds stay matched; the failure is reported in round 4.
  struct TopoWire {
    char signature[96];
    char source[64];
    uint8_t links[TPAR_MAX_RANKS][TPAR_MAX_RANKS];
    uint8_t island_of[TPAR_MAX_RANKS];
  };
  std::vector<TopoWire> wires(nranks);
  std::memset(wires.data(), 0, sizeof(TopoWire) * nranks);
  const std::string saved_error = lastError();
  if (res == tparSuccess) {
    bool one_process = true;
    for (int r = 0; r < nranks; ++r) one_process &= sameProcess(infos[r].process, infos[rank].process);
    std::vector<int> devices(nranks, -1);
    bool all_visible = true;
    for (int r = 0; r < nranks; ++r) {
      if (one_process) {
        devices[r] = infos[r].cuda_device;
      } else if (cudaDeviceGetByPCIBusId(&devices[r], infos[r].bus_id) != cudaSuccess) {
        (void)cudaGetLastError();
        all_visible = false;
      }
    }
    Topology mine;
    if (!cfg.topo_file.empty() || all_visible) {
      res = buildTopology(cfg, devices, &mine);
    } else {
      // Other processes' GPUs are hidden from this one: assume PCIe through a host bridge.
      mine = flatTopology(nranks, LinkClass::kSameHostBridge);
    }
    if (res == tparSuccess) {
      TopoWire& w = wires[rank];
      std::snprintf(w.signature, sizeof(w.signature), "%s", mine.signature.c_str());
      std::snprintf(w.source, sizeof(w.source), "%s", mine.source.c_str());
      for (int a = 0; a < nranks; ++a)
        for (int b = 0; b < nranks; ++b) w.links[a][b] = static_cast<uint8_t>(mine.links[a][b]);
      for (size_t i = 0; i < mine.islands.size(); ++i)
        for (int r : mine.islands[i]) w.island_of[r] = static_cast<uint8_t>(i);
    }
  }
  const std::string topo_error = res == tparSuccess ? std::string() : lastError();
  tparResult_t gathered = boot->allGather(wires.data(), sizeof(TopoWire));
  if (res == tparSuccess && gathered != tparSuccess) res = gathered;
  if (res == tparSuccess) {
    const TopoWire& root = wires[0];
    Topology agreed;
    agreed.gpus.resize(nranks);
    for (int r = 0; r < nranks; ++r) agreed.gpus[r].bus_id = where[r].bus_id;
    agreed.links.assign(nranks, std::vector<LinkClass>(nranks, LinkClass::kSameDevice));
    int nislands = 0;
    for (int a = 0; a < nranks; ++a) {
      nislands = std::max(nislands, root.island_of[a] + 1);
      for (int b = 0; b < nranks; ++b) agreed.links[a][b] = static_cast<LinkClass>(root.links[a][b]);
    }
    agreed.islands.assign(nislands, {});
    for (int r = 0; r < nranks; ++r) agreed.islands[root.island_of[r]].push_back(r);
    agreed.signature = root.signature;
    agreed.source = root.source;
    res = applyTopology(comm, agreed);
  }
  if (res == tparSuccess) setError(tparSuccess, "%s", saved_error.c_str());
  else if (!topo_error.empty()) setError(res, "%s", topo_error.c_str());

  // Round 4: did every rank map every peer, and will all ranks shape every call alike
  // (NOTE [agreement])? A rank that failed must not leave the others believing the group is
  // ready.
  res = checkGroupReady(*boot, comm, res);
  if (res != tparSuccess) return cleanup(res);
  prepareCalls(comm);  // NOTE [call template]
  registerComm(comm);
  *out = comm;
  return tparSuccess;
}

// topo_file: non-empty replaces TPAR_TOPO_FILE (commInitAllWithTopologyFile).
tparResult_t commInitAll(tparComm_t* comms, int ndev, const int* devlist,
                         const tparConfig_t* config, const std::string& topo_file = "") {
  if (comms == nullptr) return setError(tparInvalidArgument, "comms is NULL");
  if (ndev < 1 || ndev > TPAR_MAX_RANKS) {
    return setError(tparInvalidArgument, "ndev %d is outside 1..%d", ndev, TPAR_MAX_RANKS);
  }
  ResolvedConfig cfg;
  TPAR_TRY(resolve(config, &cfg));
  if (!topo_file.empty()) cfg.topo_file = topo_file;
  int count = 0;
  TPAR_CUDA_TRY(cudaGetDeviceCount(&count));
  std::vector<int> devs(ndev);
  for (int i = 0; i < ndev; ++i) {
    devs[i] = devlist != nullptr ? devlist[i] : i;
    if (devs[i] < 0 || devs[i] >= count) {
      return setError(tparInvalidArgument, "devlist[%d] = %d is not a CUDA device (0..%d)", i,
                      devs[i], count - 1);
    }
  }
  for (int i = 0; i < ndev; ++i) {
    for (int j = i + 1; j < ndev; ++j) {
      if (devs[i] == devs[j] && !cfg.allow_shared_device) {
        return setError(tparInvalidArgument,
                        "devlist[%d] and devlist[%d] are both GPU %d; set "
                        "config->allowSharedDevice = 1 or TPAR_ALLOW_SHARED_DEVICE=1 for "
                        "virtual ranks",
                        i, j, devs[i]);
      }
    }
  }
  // GPU memory needs peer access between every pair of distinct GPUs (both ways); otherwise the
  // receive regions go to pinned host memory (NOTE [host regions]).
  bool all_p2p = true;
  int blocked_a = -1, blocked_b = -1;
  for (int i = 0; i < ndev; ++i) {
    for (int j = 0; j < ndev; ++j) {
      if (devs[i] == devs[j]) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, devs[i], devs[j]) != cudaSuccess) {
        (void)cudaGetLastError();
        can = 0;
      }
      if (!can && all_p2p) {
        all_p2p = false;
        blocked_a = devs[i];
        blocked_b = devs[j];
      }
    }
  }
  const RegionPlace place = chooseRegionPlace(cfg.transport, all_p2p);
  if (place == RegionPlace::kImpossible) {
    return setError(tparInvalidUsage,
                    "TPAR_TRANSPORT=p2p, but GPU %d cannot access GPU %d peer-to-peer "
                    "(cudaDeviceCanAccessPeer = 0); use auto or host",
                    blocked_a, blocked_b);
  }
  const bool host_transport = place == RegionPlace::kHostMemory;
  int prev = 0;
  TPAR_CUDA_TRY(cudaGetDevice(&prev));
  std::vector<tparComm*> made;
  auto cleanup = [&](tparResult_t res) {
    for (tparComm* c : made) destroyComm(c);
    cudaSetDevice(prev);
    return res;
  };
  for (int i = 0; i < ndev; ++i) {
    const int sharing = static_cast<int>(std::count(devs.begin(), devs.end(), devs[i]));
    cudaError_t err = cudaSetDevice(devs[i]);
    if (err != cudaSuccess) return cleanup(cudaFailure(err, "cudaSetDevice", __FILE__, __LINE__));
    tparComm* c = nullptr;
    tparResult_t res = createLocal(i, ndev, cfg, sharing, host_transport, &c);
    if (res != tparSuccess) return cleanup(res);
    made.push_back(c);
  }
  bool any_peer = false;
  for (int i = 0; i < ndev; ++i) {
    cudaSetDevice(devs[i]);
    for (int j = 0; j < ndev; ++j) {
      if (i == j) continue;
      if (host_transport) {
        // Registered as portable by its owner: valid on every GPU of this process.
        made[i]->peer_ws[j] = made[j]->host_region.device;
        continue;
      }
      if (devs[i] != devs[j]) {
        tparResult_t res = enablePeerAccess(devs[i], devs[j]);
        if (res != tparSuccess) return cleanup(res);
        any_peer = true;
      }
      made[i]->peer_ws[j] = made[j]->workspace;
    }
  }
  bool any_shared = false;
  for (int i = 0; i < ndev; ++i) {
    for (int j = i + 1; j < ndev; ++j) any_shared |= devs[i] == devs[j];
  }
  const tparTransport_t kind = host_transport         ? tparTransportHost
                               : any_peer && any_shared ? tparTransportMixed
                               : any_peer            ? tparTransportPeerAccess
                                                     : tparTransportSameDevice;
  Topology topo;
  tparResult_t tres = buildTopology(cfg, devs, &topo);
  if (tres != tparSuccess) return cleanup(tres);
  for (tparComm* c : made) {
    tres = applyTopology(c, topo);
    if (tres != tparSuccess) return cleanup(tres);
  }
  // NOTE [agreement]: one config, but GPUs of different sizes host different grids.
  std::vector<CallShape> shapes;
  for (tparComm* c : made) shapes.push_back(describeCallShape(*c));
  int grid = 0;
  tres = agreeOnCallShapes(shapes, &grid);
  if (tres != tparSuccess) return cleanup(tres);
  for (tparComm* c : made) c->max_blocks = grid;
  for (tparComm* c : made) {
    c->transport = kind;
    prepareCalls(c);  // NOTE [call template]
    registerComm(c);
  }
  for (int i = 0; i < ndev; ++i) comms[i] = made[i];
  cudaSetDevice(prev);
  return tparSuccess;
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The init entry points, logged (api_log.h): start, then completion or the failure.
tparResult_t initRankLogged(const char* call, tparComm_t* comm, int nranks,
                            const tparUniqueId& id, int rank, const tparConfig_t* config) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  LogScope scope(rank, device);
  logInitStart(call, rank, nranks);
  const auto t0 = std::chrono::steady_clock::now();
  const tparResult_t res = guarded([&] { return commInitRank(comm, nranks, id, rank, config); });
  if (res == tparSuccess) logInitDone(*comm, msSince(t0));
  else logInitFailed(call, res, rank, nranks);
  return res;
}

tparResult_t initAllLogged(const char* call, tparComm_t* comms, int ndev, const int* devlist,
                           const tparConfig_t* config, const std::string& topo_file = "") {
  logInitStart(call, -1, ndev);
  const auto t0 = std::chrono::steady_clock::now();
  const tparResult_t res =
      guarded([&] { return commInitAll(comms, ndev, devlist, config, topo_file); });
  if (res == tparSuccess) {
    const double ms = msSince(t0);
    for (int i = 0; i < ndev; ++i) logInitDone(comms[i], ms);
  } else {
    logInitFailed(call, res, -1, ndev);
  }
  return res;
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a);
  const uintptr_t y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

tparResult_t tpar::checkAllReduceArgs(tparComm* comm, const void* sendbuff, void* recvbuff,
                                      size_t count, tparDataType_t datatype, tparRedOp_t op) {
  if (static_cast<int>(datatype) < 0 || datatype >= tparNumDataTypes) {
    return setError(tparInvalidArgument, "datatype %d is not a tparDataType_t",
                    static_cast<int>(datatype));
  }
  if (static_cast<int>(op) < 0 || op >= tparNumOps) {
    return setError(tparInvalidArgument, "op %d is not a tparRedOp_t", static_cast<int>(op));
  }
  const uint32_t async = reinterpret_cast<volatile uint32_t*>(&comm->host_state->error)[0];
  if (async != 0) {
    logAsyncError(comm, async);
    return setError(static_cast<tparResult_t>(async),
                    "the communicator failed earlier (%s); destroy or abort it",
                    tparGetErrorString(static_cast<tparResult_t>(async)));
  }
  if (count == 0) return tparSuccess;
  const size_t esize = elementBytes(datatype);
  if (count > SIZE_MAX / esize) {
    return setError(tparInvalidArgument, "count %zu overflows the byte size", count);
  }
  if (sendbuff == nullptr) return setError(tparInvalidArgument, "sendbuff is NULL");
  if (recvbuff == nullptr) return setError(tparInvalidArgument, "recvbuff is NULL");
  if (reinterpret_cast<uintptr_t>(sendbuff) % esize != 0) {
    return setError(tparInvalidArgument, "sendbuff %p is not aligned to its %zu-byte elements",
                    sendbuff, esize);
  }
  if (reinterpret_cast<uintptr_t>(recvbuff) % esize != 0) {
    return setError(tparInvalidArgument, "recvbuff %p is not aligned to its %zu-byte elements",
                    recvbuff, esize);
  }
  const size_t bytes = count * esize;
  if (sendbuff != recvbuff && overlaps(sendbuff, recvbuff, bytes)) {
    return setError(tparInvalidArgument,
                    "sendbuff and recvbuff overlap without being equal (in place needs "
                    "sendbuff == recvbuff)");
  }
  return tparSuccess;
}

tparResult_t tpar::commInitAllWithTopologyFile(tparComm_t* comms, int ndev, const int* devlist,
                                               const tparConfig_t* config,
                                               const std::string& topo_file) {
  return initAllLogged("tparCommInitAllConfig", comms, ndev, devlist, config, topo_file);
}

extern "C" {

const char* tparGetErrorString(tparResult_t result) {
  switch (result) {
    case tparSuccess: return "no error";
    case tparUnhandledCudaError: return "unhandled CUDA error";
    case tparSystemError: return "system error";
    case tparInternalError: return "internal error";
    case tparInvalidArgument: return "invalid argument";
    case tparInvalidUsage: return "invalid usage";
    case tparRemoteError: return "remote process or rank failed";
    case tparInProgress: return "operation in progress";
    case tparTimeout: return "timed out waiting for peers";
    default: return "unknown result code";
  }
}

const char* tparGetLastError(tparComm_t comm) {
  if (comm != nullptr && isLiveComm(comm)) return comm->last_error.c_str();
  return lastError().c_str();
}

tparResult_t tparGetVersion(int* version) {
  return guarded([&] {
    if (version == nullptr) return setError(tparInvalidArgument, "version is NULL");
    *version = TPAR_VERSION_CODE;
    return tparSuccess;
  });
}

tparResult_t tparGetUniqueId(tparUniqueId* uniqueId) {
  return guarded([&] {
    if (uniqueId == nullptr) return setError(tparInvalidArgument, "uniqueId is NULL");
    const Env* env = nullptr;
    TPAR_TRY(processEnv(&env));
    BootstrapPeers peers;
    peers.allow_other_users = env->bootstrap_allow_other_users;
    return createUniqueId(uniqueId, env->bootstrap_timeout_ms, peers);
  });
}

tparResult_t tparCommInitRank(tparComm_t* comm, int nranks, tparUniqueId uniqueId, int rank) {
  return initRankLogged("tparCommInitRank", comm, nranks, uniqueId, rank, nullptr);
}

tparResult_t tparCommInitRankConfig(tparComm_t* comm, int nranks, tparUniqueId uniqueId, int rank,
                                    const tparConfig_t* config) {
  return initRankLogged("tparCommInitRankConfig", comm, nranks, uniqueId, rank, config);
}

tparResult_t tparCommInitAll(tparComm_t* comms, int ndev, const int* devlist) {
  return initAllLogged("tparCommInitAll", comms, ndev, devlist, nullptr);
}

tparResult_t tparCommInitAllConfig(tparComm_t* comms, int ndev, const int* devlist,
                                   const tparConfig_t* config) {
  return initAllLogged("tparCommInitAllConfig", comms, ndev, devlist, config);
}

tparResult_t tparCommDestroy(tparComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return tparSuccess;
    TPAR_TRY(checkComm(comm));
    logCommEnd(comm, /*abort=*/false);
    unregisterComm(comm);
    destroyComm(comm);
    return tparSuccess;
  });
}

tparResult_t tparCommAbort(tparComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return tparSuccess;
    TPAR_TRY(checkComm(comm));
    logCommEnd(comm, /*abort=*/true);
    unregisterComm(comm);
    return abortComm(comm);  // NOTE [bounded abort]
  });
}

tparResult_t tparCommGetAsyncError(tparComm_t comm, tparResult_t* asyncError) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (asyncError == nullptr) return finish(comm, setError(tparInvalidArgument, "asyncError is NULL"));
    const uint32_t code = reinterpret_cast<volatile uint32_t*>(&comm->host_state->error)[0];
    logAsyncError(comm, code);
    *asyncError = static_cast<tparResult_t>(code);
    return tparSuccess;
  });
}

tparResult_t tparCommCount(tparComm_t comm, int* count) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (count == nullptr) return finish(comm, setError(tparInvalidArgument, "count is NULL"));
    *count = comm->nranks;
    return tparSuccess;
  });
}

tparResult_t tparCommUserRank(tparComm_t comm, int* rank) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (rank == nullptr) return finish(comm, setError(tparInvalidArgument, "rank is NULL"));
    *rank = comm->rank;
    return tparSuccess;
  });
}

tparResult_t tparCommCuDevice(tparComm_t comm, int* device) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (device == nullptr) return finish(comm, setError(tparInvalidArgument, "device is NULL"));
    *device = comm->device;
    return tparSuccess;
  });
}

tparResult_t tparAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           tparDataType_t datatype, tparRedOp_t op, tparComm_t comm,
                           cudaStream_t stream) {
  return guarded([&]() -> tparResult_t {
    TPAR_TRY(checkComm(comm));
    auto bad = [&](tparResult_t code) { return finish(comm, code); };
    const tparResult_t checked = checkAllReduceArgs(comm, sendbuff, recvbuff, count, datatype, op);
    if (checked != tparSuccess) return bad(checked);
    if (count == 0) return tparSuccess;
    // cudaStreamGetDevice is not allowed while a stream captures (it would invalidate the
    // capture); the check runs on eager calls, and a graph inherits the stream it captured on.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaError_t err = cudaStreamIsCapturing(stream, &capture);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return bad(setError(tparInvalidArgument, "stream is not a valid CUDA stream (%s)",
                          cudaGetErrorString(err)));
    }
    if (capture == cudaStreamCaptureStatusNone) {
      int stream_device = -1;
      err = cudaStreamGetDevice(stream, &stream_device);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return bad(setError(tparInvalidArgument, "stream is not a valid CUDA stream (%s)",
                            cudaGetErrorString(err)));
      }
      if (stream_device != comm->device) {
        return bad(setError(tparInvalidArgument,
                            "stream belongs to GPU %d but the communicator to GPU %d",
                            stream_device, comm->device));
      }
    }
    logAllReduce(comm, sendbuff, recvbuff, count, datatype, op, stream);
    return bad(allReduce(comm, sendbuff, recvbuff, count, datatype, op, stream));
  });
}

tparResult_t tparCommQuery(tparComm_t comm, tparCommInfo_t* info) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (info == nullptr) return finish(comm, setError(tparInvalidArgument, "info is NULL"));
    tparCommInfo_t out;
    std::memset(&out, 0, sizeof(out));
    out.rank = comm->rank;
    out.nranks = comm->nranks;
    out.cudaDevice = comm->device;
    out.transport = comm->transport;
    out.maxBytesPerCall = comm->cfg.max_bytes_per_call;
    out.deviceMemoryBytes = comm->host_transport ? kernels::WorkspaceLayout::kDataOffset
                                                 : comm->layout.totalBytes();
    out.hostMemoryBytes = sizeof(kernels::HostState) + comm->host_region.bytes;
    out.timeoutMs = comm->cfg.timeout_ms;
    out.forcedAlgorithm = comm->cfg.forced_algo;
    // From the plan the calls follow (transport, tuning table, forced algorithm), never a
    // constant: a report repeating it says what runs.
    const uint64_t one_shot =
        oneShotLimit(tparBfloat16, comm->tuner_ctx, comm->has_tuning ? &comm->tuning : nullptr,
                     comm->cfg.forced_algo, comm->cfg.one_shot_max_bytes);
    out.oneShotMaxBytes = one_shot >= SIZE_MAX ? SIZE_MAX : static_cast<size_t>(one_shot);
    out.blocksPerRank = comm->max_blocks;
    out.threadsPerBlock = comm->threads;
    out.islands = static_cast<int>(comm->topology.islands.size());
    for (size_t i = 0; i < comm->topology.islands.size(); ++i)
      for (int r : comm->topology.islands[i]) out.islandOfRank[r] = static_cast<int>(i);
    std::snprintf(out.topologySignature, sizeof(out.topologySignature), "%s",
                  comm->topology.signature.c_str());
    out.tuningTableLoaded = comm->has_tuning ? 1 : 0;
    out.ncclAttached = comm->nccl.comm != nullptr ? 1 : 0;
    *info = out;
    return tparSuccess;
  });
}

tparResult_t tparCommSetNcclComm(tparComm_t comm, void* ncclComm) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    return finish(comm, attachNcclComm(comm, ncclComm));
  });
}

tparResult_t tparCommSelectAlgorithm(tparComm_t comm, size_t bytes, tparAlgo_t* algo) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (algo == nullptr) return finish(comm, setError(tparInvalidArgument, "algo is NULL"));
    Plan plan = planFor(comm, bytes, tparBfloat16);
    if (plan.nccl) {
      *algo = tparAlgoNccl;
      return tparSuccess;
    }
    if (algorithm(plan.algo).needs_islands && !comm->hier_ok) plan.algo = kernels::Algo::kTwoShot;
    *algo = publicAlgoOf(plan.algo);
    return tparSuccess;
  });
}

const char* tparAlgoName(tparAlgo_t algo) { return tpar::publicAlgoName(algo); }

const char* tparTransportName(tparTransport_t transport) {
  switch (transport) {
    case tparTransportSameDevice: return "same-device";
    case tparTransportPeerAccess: return "peer-access";
    case tparTransportCudaIpc: return "cuda-ipc";
    case tparTransportMixed: return "mixed";
    case tparTransportHost: return "host";
    default: return "unknown";
  }
}

const char* tparDataTypeName(tparDataType_t datatype) {
  switch (datatype) {
    case tparFloat32: return "float32";
    case tparFloat16: return "float16";
    case tparBfloat16: return "bfloat16";
    default: return "unknown";
  }
}

const char* tparRedOpName(tparRedOp_t op) {
  switch (op) {
    case tparSum: return "sum";
    case tparMax: return "max";
    case tparMin: return "min";
    default: return "unknown";
  }
}

}  // extern "C"
