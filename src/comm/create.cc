// Communicator creation behind tparCommInitRank(Config) and tparCommInitAll(Config): the
// configuration resolved against the environment, the rendezvous, transports, topology,
// agreement (NOTE [agreement]) and the call template (NOTE [call template]).
#include "comm/create.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/env.h"
#include "base/error.h"
#include "base/identity.h"
#include "bootstrap/bootstrap.h"
#include "comm/agreement.h"
#include "comm/comm.h"

namespace tpar {
namespace {

tparResult_t resolve(const tparConfig_t* config, ResolvedConfig* cfg) {
  const Env* env = nullptr;
  TPAR_TRY(processEnv(&env));
  return resolveConfig(config, *env, cfg);
}

}  // namespace

tparResult_t createComm(tparComm_t* out, int nranks, const tparUniqueId& id, int rank,
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
  // The workspace settings decide the size of every region a peer maps: checked before mapping.
  std::vector<WorkspaceTerms> terms(nranks);
  for (int r = 0; r < nranks; ++r)
    terms[r] = {infos[r].max_bytes_per_call, infos[r].epoch_start, infos[r].workspace_bytes};
  res = agreeOnWorkspaces(terms);
  if (res != tparSuccess) return cleanup(res);
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

tparResult_t createComms(tparComm_t* comms, int ndev, const int* devlist,
                         const tparConfig_t* config, const std::string& topo_file) {
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

}  // namespace tpar
