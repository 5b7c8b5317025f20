// Communicator creation through the shim: every way NCCL makes a communicator is forwarded
// with the caller's arguments, and the communicator it made gets a tpar communicator when every
// rank can have one (NOTE [shim setup]), or is registered as passing through.
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "api/internal.h"
#include "comm_table.h"
#include "nccl_channel.h"
#include "real_nccl.h"
#include "settings.h"
#include "setup.h"
#include "shim_common.h"

namespace tpar {
namespace shim {
namespace {

// Restores the caller's CUDA device on every way out.
class DeviceGuard {
 public:
  DeviceGuard() {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

TparOps productionOps(ncclComm_t comm) {
  TparOps ops;
  ops.getUniqueId = [](tparUniqueId* id) { return tparGetUniqueId(id); };
  ops.initRank = [](tparComm_t* c, int nranks, const tparUniqueId& id, int rank) {
    return tparCommInitRank(c, nranks, id, rank);
  };
  ops.attachNccl = [comm](tparComm_t c) { return tparCommSetNcclComm(c, comm); };
  ops.destroy = [](tparComm_t c) { tparCommDestroy(c); };
  ops.lastError = [] { return std::string(tparGetLastError(nullptr)); };
  return ops;
}

void logAdopted(const char* api, ncclComm_t comm, const ShimComm& c) {
  const std::string rank = rankText(c);
  if (c.tpar != nullptr) {
    tparCommInfo_t info;
    const bool known = tparCommQuery(c.tpar, &info) == tparSuccess;
    TPAR_INFO(kLogNccl, "libtpar_nccl.so: %s: comm %p rank %s: tpar communicator made (transport %s, "
              "tuning table %s); all-reduces up to TPAR_SHIM_MAX_BYTES go to tpar",
              api, static_cast<void*>(comm), rank.c_str(),
              known ? tparTransportName(info.transport) : "?",
              known && info.tuningTableLoaded ? "loaded" : "none");
  } else {
    TPAR_INFO(kLogNccl, "libtpar_nccl.so: %s: comm %p rank %s: every call goes to NCCL: %s", api,
              static_cast<void*>(comm), rank.c_str(), c.why.c_str());
  }
}

// Why a just-made communicator passes through whatever its ranks could do; empty when the
// setup runs. Every rank of it sees the same: its config, the program's group structure.
std::string withoutSetupHere(bool blocking) {
  if (!blocking) return "non-blocking communicator (config->blocking = 0)";
  if (groupDepth() > 0) return "created inside ncclGroupStart/ncclGroupEnd";
  return "";
}

// This rank cannot follow the setup that the other ranks run, and they would wait for it:
// abort the communicator and fail, as the other ranks will when their wait runs out.
ncclResult_t abandon(ncclComm_t comm, const ShimComm& c, ncclResult_t code, const std::string& why) {
  if (auto abort = TPAR_REAL(ncclCommAbort)) abort(comm);
  TPAR_WARN("libtpar_nccl.so: rank %s: setting up tpar failed, NCCL communicator aborted: %s",
            rankText(c).c_str(), why.c_str());
  return shimFail(code, "libtpar_nccl.so: rank " + rankText(c) +
                            ": setting up tpar on the new communicator failed, and the "
                            "communicator was aborted: " + why);
}

// Runs the setup on the communicator's GPU and fills the entry; a failure that leaves the NCCL
// communicator unusable aborts it and returns the error.
ncclResult_t setUp(ncclComm_t comm, ShimComm* c) {
  auto count = TPAR_REAL(ncclCommCount);
  auto rank = TPAR_REAL(ncclCommUserRank);
  auto async = TPAR_REAL(ncclCommGetAsyncError);
  auto device_of = TPAR_REAL(ncclCommCuDevice);
  ncclResult_t state = ncclSuccess;
  int device = -1;
  if (count == nullptr || rank == nullptr || async == nullptr || device_of == nullptr ||
      count(comm, &c->nranks) != ncclSuccess || rank(comm, &c->rank) != ncclSuccess ||
      device_of(comm, &device) != ncclSuccess || async(comm, &state) != ncclSuccess) {
    return abandon(comm, *c, ncclInternalError, "the NCCL communicator cannot be queried");
  }
  // NCCL_COMM_BLOCKING=0 makes a communicator without a config non-blocking too.
  if (state == ncclInProgress) {
    c->why = "non-blocking communicator, still initializing";
    return ncclSuccess;
  }
  if (state != ncclSuccess) {
    return abandon(comm, *c, state, "the NCCL communicator reports an error");
  }
  c->why = withoutSetup(c->nranks);
  if (!c->why.empty()) return ncclSuccess;
  DeviceGuard guard;
  std::string why;
  std::unique_ptr<NcclSetupChannel> channel;
  const cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    why = std::string("cudaSetDevice: ") + cudaGetErrorString(err);
  } else {
    channel = NcclSetupChannel::create(comm, c->rank, shimSettings().setup_timeout_ms, &why);
  }
  if (channel == nullptr) return abandon(comm, *c, ncclUnhandledCudaError, why);
  SetupInput in;
  in.rank = c->rank;
  in.nranks = c->nranks;
  in.host_id = hostIdentity(&in.why_not);
  if (in.host_id == 0) in.can_join = false;
  const SetupResult r = runSetup(*channel, productionOps(comm), in);
  if (r.fatal) {
    // Abort before freeing the channel: freeing waits for the device, where the collective
    // may still wait.
    const ncclResult_t rc = abandon(comm, *c, ncclRemoteError, r.why);
    channel.reset();
    return rc;
  }
  c->tpar = r.comm;
  c->why = r.why;
  return ncclSuccess;
}

// After NCCL made `comm` (returned through `*slot`) for the caller's `api`: registers it, with
// a tpar communicator when possible. On failure `*slot` is cleared.
ncclResult_t adopt(const char* api, ncclComm_t comm, ncclComm_t* slot, bool blocking) {
  auto c = std::make_unique<ShimComm>();
  c->blocking = blocking;
  c->why = withoutSetupHere(blocking);
  if (c->why.empty()) {
    const ncclResult_t rc = setUp(comm, c.get());
    if (rc != ncclSuccess) {
      *slot = nullptr;
      return rc;
    }
  }
  if (shimSettings().log_info) logAdopted(api, comm, *c);
  commTable().add(comm, std::move(c));
  return ncclSuccess;
}

// The communicator made by a non-blocking init (ncclInProgress): it passes through.
void registerInProgress(const char* api, ncclComm_t comm) {
  auto c = std::make_unique<ShimComm>();
  c->blocking = false;
  c->why = "non-blocking communicator, still initializing";
  if (shimSettings().log_info) logAdopted(api, comm, *c);
  commTable().add(comm, std::move(c));
}

// The common tail of every creating call: `rc` is what NCCL returned for `*slot`.
ncclResult_t afterCreate(const char* api, ncclResult_t rc, ncclComm_t* slot, bool blocking) {
  if (shimSettings().policy.disabled || slot == nullptr || *slot == nullptr) return rc;
  if (rc == ncclInProgress) {
    registerInProgress(api, *slot);
    return rc;
  }
  if (rc != ncclSuccess) return rc;
  return adopt(api, *slot, slot, blocking);
}

#if TPAR_NCCL_HAS_CONFIG
// NCCL's default (NCCL_CONFIG_UNDEF_INT) is blocking unless NCCL_COMM_BLOCKING says otherwise,
// which setUp sees as a communicator still in progress.
bool blockingOf(const ncclConfig_t* config, bool inherited) {
  if (config == nullptr) return inherited;
  return config->blocking != 0;
}

bool parentBlocking(ncclComm_t parent) {
  return commTable().withComm(parent, [](ShimComm* c) { return c == nullptr || c->blocking; });
}
#endif

// ncclCommInitAll: every rank in this process, so tpar's own all-in-one init needs no exchange.
ncclResult_t adoptAll(ncclComm_t* comms, int ndev, const int* devlist) {
  std::string why;
  std::vector<tparComm_t> tpar(ndev > 0 ? ndev : 0, nullptr);
  if (groupDepth() > 0) {
    why = "created inside ncclGroupStart/ncclGroupEnd";
  } else if (ndev < 2 || ndev > TPAR_MAX_RANKS) {
    why = std::to_string(ndev) + " ranks; tpar connects 2.." + std::to_string(TPAR_MAX_RANKS);
  } else if (tparCommInitAll(tpar.data(), ndev, devlist) != tparSuccess) {
    why = std::string("tparCommInitAll: ") + tparGetLastError(nullptr);
    tpar.assign(ndev, nullptr);
  } else {
    for (int i = 0; i < ndev && why.empty(); ++i) {
      if (tparCommSetNcclComm(tpar[i], comms[i]) != tparSuccess)
        why = std::string("tparCommSetNcclComm: ") + tparGetLastError(tpar[i]);
    }
    if (!why.empty()) {
      for (tparComm_t t : tpar) tparCommDestroy(t);
      tpar.assign(ndev, nullptr);
    }
  }
  for (int i = 0; i < ndev; ++i) {
    auto c = std::make_unique<ShimComm>();
    c->rank = i;
    c->nranks = ndev;
    c->tpar = tpar[i];
    c->why = why;
    if (shimSettings().log_info) logAdopted("ncclCommInitAll", comms[i], *c);
    commTable().add(comms[i], std::move(c));
  }
  return ncclSuccess;
}

}  // namespace
}  // namespace shim
}  // namespace tpar

using namespace tpar::shim;

extern "C" {

TPAR_SHIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
                                               ncclUniqueId commId, int rank) {
  auto real = TPAR_REAL(ncclCommInitRank);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommInitRank");
  const ncclResult_t rc =
      forwardResult<ncclResult_t>([&] { return real(comm, nranks, commId, rank); });
  return afterCreate("ncclCommInitRank", rc, comm, true);
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  auto real = TPAR_REAL(ncclCommInitAll);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommInitAll");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] { return real(comm, ndev, devlist); });
  if (rc != ncclSuccess || comm == nullptr || shimSettings().policy.disabled) return rc;
  return adoptAll(comm, ndev, devlist);
}

#if TPAR_NCCL_HAS_CONFIG
TPAR_SHIM_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config) {
  auto real = TPAR_REAL(ncclCommInitRankConfig);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommInitRankConfig");
  const ncclResult_t rc =
      forwardResult<ncclResult_t>([&] { return real(comm, nranks, commId, rank, config); });
  return afterCreate("ncclCommInitRankConfig", rc, comm, blockingOf(config, true));
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks,
                                                       int myrank, int nId,
                                                       ncclUniqueId* commIds,
                                                       ncclConfig_t* config) {
  auto real = TPAR_REAL(ncclCommInitRankScalable);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommInitRankScalable");
  const ncclResult_t rc = forwardResult<ncclResult_t>(
      [&] { return real(newcomm, nranks, myrank, nId, commIds, config); });
  return afterCreate("ncclCommInitRankScalable", rc, newcomm, blockingOf(config, true));
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config) {
  auto real = TPAR_REAL(ncclCommSplit);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommSplit");
  const ncclResult_t rc =
      forwardResult<ncclResult_t>([&] { return real(comm, color, key, newcomm, config); });
  return afterCreate("ncclCommSplit", rc, newcomm, blockingOf(config, parentBlocking(comm)));
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                             int excludeRanksCount, ncclComm_t* newcomm,
                                             ncclConfig_t* config, int shrinkFlags) {
  auto real = TPAR_REAL(ncclCommShrink);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommShrink");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] {
    return real(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  });
  return afterCreate("ncclCommShrink", rc, newcomm, blockingOf(config, parentBlocking(comm)));
}
#endif

}  // extern "C"
