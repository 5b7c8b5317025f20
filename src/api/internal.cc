// The functions of api/internal.h: what the `tpar` command and the NCCL drop-in reach beyond
// the C API, each over the internals it names, so that those can change without the tools.
#include "api/internal.h"

#include <algorithm>
#include <mutex>

#include <cuda_runtime_api.h>

#include "api/api_log.h"
#include "api/init_internal.h"
#include "base/error.h"
#include "base/identity.h"
#include "comm/comm_access.h"
#include "registry/launcher.h"
#include "topology/nvml_api.h"
#include "topology/pcie_tree.h"

namespace tpar {

tparResult_t commInitAllWithTopology(tparComm_t* comms, int ndev, const int* devlist,
                                     const tparConfig_t* config, const std::string& topo_file) {
  return commInitAllWithTopologyFile(comms, ndev, devlist, config, topo_file);
}

const TunerContext& commTunerContext(tparComm_t comm) { return tunerContextOf(comm); }

Plan commDefaultPlan(tparComm_t comm, uint64_t bytes, tparDataType_t dtype) {
  return selectPlan(bytes, dtype, tunerContextOf(comm), /*table=*/nullptr, tparAlgoAuto,
                    oneShotMaxBytesOf(comm));
}

Plan commForcedPlan(tparComm_t comm, uint64_t bytes, tparDataType_t dtype, tparAlgo_t algo) {
  return selectPlan(bytes, dtype, tunerContextOf(comm), /*table=*/nullptr, algo,
                    oneShotMaxBytesOf(comm));
}

void commUsePlan(tparComm_t comm, const Plan& plan) { usePlan(comm, plan); }

void commSetWireMinBytes(tparComm_t comm, int64_t bytes) { setWireMinBytes(comm, bytes); }

Fallback commForcedFallback(tparComm_t comm) { return forcedFallback(comm); }

std::string commAlgorithmTable(tparComm_t comm) { return algorithmTable(comm); }

const char* commWireVariant(tparComm_t comm, uint64_t bytes, tparDataType_t dtype) {
  return wireVariantName(comm, bytes, dtype);
}

bool launchOverlapOnDevice(int device) {
  KeepLastError keep;  // a malformed environment is reported by every init, not here
  const Env* env = nullptr;
  if (processEnv(&env) != tparSuccess || env == nullptr) return false;
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         launchOverlapOn(env->launch_overlap, major);
}

tparResult_t thisHostIdentity(uint64_t* out) { return hostIdentity(out); }

KeepLastError::KeepLastError() : saved_(lastError()) {}

KeepLastError::~KeepLastError() { setError(tparSuccess, "%s", saved_.c_str()); }

std::string canonicalBusId(const std::string& bus_id) {
  PciAddress a;
  return parseBusId(bus_id, &a) ? busIdString(a) : "";
}

namespace {

constexpr int kNvmlP2pCapsWrite = 1;  // NVML_P2P_CAPS_INDEX_WRITE

// The shared loader (topology/nvml_api.h), initialized once for the process.
const NvmlApi* nvml(std::string* why) {
  static std::once_flag once;
  static const NvmlApi* ready = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const NvmlApi* api = nvmlApi(&error);
    if (api == nullptr) return;
    const int rc = api->init();
    if (rc != kNvmlSuccess) {
      error = std::string("nvmlInit: ") + api->errorString(rc);
      return;
    }
    ready = api;
  });
  if (ready == nullptr && why != nullptr) *why = error;
  return ready;
}

bool handleOf(const NvmlApi& api, const std::string& bus_id, NvmlDevice* dev, std::string* why) {
  const int rc = api.handleByBusId(bus_id.c_str(), dev);
  if (rc == kNvmlSuccess) return true;
  if (why != nullptr)
    *why = "NVML has no GPU at " + bus_id + " (" + api.errorString(rc) + ")";
  return false;
}

// Both GPUs' handles, or nullptr.
const NvmlApi* pairOf(const std::string& bus_a, const std::string& bus_b, NvmlDevice* a,
                      NvmlDevice* b) {
  const NvmlApi* api = nvml(nullptr);
  if (api == nullptr || !handleOf(*api, bus_a, a, nullptr) || !handleOf(*api, bus_b, b, nullptr))
    return nullptr;
  return api;
}

}  // namespace

bool nvmlReady(std::string* why) { return nvml(why) != nullptr; }

bool nvmlPcieLinkOf(const std::string& bus_id, NvmlPcieLink* out, std::string* why) {
  const NvmlApi* api = nvml(why);
  NvmlDevice dev = nullptr;
  if (api == nullptr || !handleOf(*api, bus_id, &dev, why)) return false;
  auto get = [&](int (*fn)(NvmlDevice, unsigned*), int* field) {
    unsigned v = 0;
    if (fn != nullptr && fn(dev, &v) == kNvmlSuccess) *field = static_cast<int>(v);
  };
  *out = NvmlPcieLink{};
  get(api->currPcieGen, &out->gen);
  get(api->currPcieWidth, &out->width);
  get(api->maxPcieGen, &out->gen_max);
  get(api->maxPcieWidth, &out->width_max);
  return true;
}

int nvmlCommonAncestorOf(const std::string& bus_a, const std::string& bus_b) {
  NvmlDevice a = nullptr, b = nullptr;
  const NvmlApi* api = pairOf(bus_a, bus_b, &a, &b);
  int level = -1;
  if (api == nullptr || api->commonAncestor == nullptr ||
      api->commonAncestor(a, b, &level) != kNvmlSuccess)
    return -1;
  return level;
}

int nvmlNvLinksBetween(const std::string& bus_a, const std::string& bus_b) {
  NvmlDevice a = nullptr, b = nullptr;
  PciAddress pb;
  const NvmlApi* api = pairOf(bus_a, bus_b, &a, &b);
  if (api == nullptr || !parseBusId(bus_b, &pb)) return 0;
  const NvLinkEnds ends_a = nvLinkEnds(*api, a);
  const NvLinkEnds ends_b = nvLinkEnds(*api, b);
  const int direct = static_cast<int>(std::count_if(
      ends_a.gpus.begin(), ends_a.gpus.end(), [&](const PciAddress& p) { return sameSlot(p, pb); }));
  if (direct > 0) return direct;
  // Through a switch fabric the pair gets the narrower of the two GPUs' switch links.
  if (ends_a.to_switch > 0 && ends_b.to_switch > 0) return std::min(ends_a.to_switch, ends_b.to_switch);
  return 0;
}

int nvmlP2pWriteStatus(const std::string& bus_a, const std::string& bus_b) {
  NvmlDevice a = nullptr, b = nullptr;
  const NvmlApi* api = pairOf(bus_a, bus_b, &a, &b);
  int status = 0;
  if (api == nullptr || api->p2pStatus == nullptr ||
      api->p2pStatus(a, b, kNvmlP2pCapsWrite, &status) != kNvmlSuccess)
    return -1;
  return status;
}

}  // namespace tpar
