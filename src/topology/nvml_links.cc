#include "topology/nvml_links.h"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "topology/pcie_tree.h"

namespace tpar {
namespace {

// The few NVML declarations used here, written against NVML's stable C ABI (nvml.h is not
// needed to build tpar): handles are opaque pointers, enums are int-sized.
using NvmlDevice = struct NvmlDeviceSt*;
struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
  char reserve[64];  // room should a later NVML grow the struct behind the _v2 entry point
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;      // NVML_FEATURE_ENABLED
constexpr int kNvmlNvLinkDeviceSwitch = 2;  // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr unsigned kNvmlMaxNvLinks = 18;    // NVML_NVLINK_MAX_LINKS of current drivers

struct NvmlApi {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*errorString)(int) = nullptr;
  int (*handleByBusId)(const char*, NvmlDevice*) = nullptr;
  int (*linkState)(NvmlDevice, unsigned, int*) = nullptr;
  int (*remotePci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  int (*remoteType)(NvmlDevice, unsigned, int*) = nullptr;  // absent from old drivers
};

template <typename F>
void bindSymbol(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
}

// Loaded once per process and never unloaded: other threads may be inside NVML.
const NvmlApi* nvmlApi(std::string* why) {
  static std::once_flag once;
  static NvmlApi api;
  static std::string error;
  static bool ok = false;
  std::call_once(once, [] {
    // Only the versioned name: an unversioned libnvidia-ml.so is often the toolkit's stub,
    // which loads and then reports "driver not loaded" on a working machine.
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = std::string("cannot load libnvidia-ml.so.1: ") + (e ? e : "not found");
      return;
    }
    bindSymbol(lib, "nvmlInit_v2", &api.init);
    bindSymbol(lib, "nvmlShutdown", &api.shutdown);
    bindSymbol(lib, "nvmlErrorString", &api.errorString);
    bindSymbol(lib, "nvmlDeviceGetHandleByPciBusId_v2", &api.handleByBusId);
    bindSymbol(lib, "nvmlDeviceGetNvLinkState", &api.linkState);
    bindSymbol(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api.remotePci);
    bindSymbol(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &api.remoteType);
    if (!api.init || !api.shutdown || !api.handleByBusId || !api.linkState || !api.remotePci) {
      error =
          "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlShutdown, "
          "nvmlDeviceGetHandleByPciBusId_v2 or the NVLink queries";
      return;
    }
    ok = true;
  });
  if (!ok) {
    if (why) *why = error;
    return nullptr;
  }
  return &api;
}

// One GPU's active NVLinks: the PCI addresses at their far ends, and whether any ends at an
// NVSwitch (through which every GPU of the fabric is reachable).
struct GpuLinks {
  std::vector<PciAddress> peers;
  bool to_switch = false;
};

GpuLinks linksOf(const NvmlApi& nvml, const std::string& bus_id) {
  GpuLinks out;
  NvmlDevice dev = nullptr;
  if (nvml.handleByBusId(bus_id.c_str(), &dev) != kNvmlSuccess) return out;
  for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
    int state = 0;
    // GPUs without NVLink answer "not supported"; links past the GPU's count, "invalid".
    if (nvml.linkState(dev, link, &state) != kNvmlSuccess || state != kNvmlFeatureEnabled) continue;
    int type = -1;
    if (nvml.remoteType && nvml.remoteType(dev, link, &type) == kNvmlSuccess &&
        type == kNvmlNvLinkDeviceSwitch) {
      out.to_switch = true;
      continue;
    }
    NvmlPciInfo remote{};
    if (nvml.remotePci(dev, link, &remote) != kNvmlSuccess) continue;
    PciAddress a;
    a.domain = remote.domain;
    a.bus = remote.bus;
    a.device = remote.device;
    out.peers.push_back(a);
  }
  return out;
}

bool sameSlot(const PciAddress& x, const PciAddress& y) {
  // NVML's remote info leaves the function out; GPUs are function 0.
  return x.domain == y.domain && x.bus == y.bus && x.device == y.device;
}

struct CachedAnswer {
  bool ok = false;
  std::vector<std::vector<bool>> nvlink;
  std::string why;
};

}  // namespace

bool queryNvLinks(const std::vector<std::string>& bus_ids, std::vector<std::vector<bool>>* nvlink,
                  std::string* why) {
  const size_t n = bus_ids.size();
  nvlink->assign(n, std::vector<bool>(n, false));
  static std::mutex mu;
  static std::map<std::vector<std::string>, CachedAnswer> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto hit = cache.find(bus_ids);
  if (hit == cache.end()) {
    CachedAnswer answer;
    const NvmlApi* nvml = nvmlApi(&answer.why);
    int rc = nvml ? nvml->init() : kNvmlSuccess;
    if (nvml && rc != kNvmlSuccess) {
      answer.why = std::string("nvmlInit_v2 failed: ") +
                   (nvml->errorString ? nvml->errorString(rc) : std::to_string(rc).c_str());
    } else if (nvml) {
      std::vector<GpuLinks> links(n);
      std::vector<PciAddress> addr(n);
      std::vector<bool> known(n, false);
      for (size_t i = 0; i < n; ++i) {
        known[i] = parseBusId(bus_ids[i], &addr[i]);
        if (known[i]) links[i] = linksOf(*nvml, bus_ids[i]);
      }
      nvml->shutdown();
      answer.nvlink.assign(n, std::vector<bool>(n, false));
      for (size_t a = 0; a < n; ++a) {
        for (size_t b = 0; b < n; ++b) {
          if (a == b || !known[a] || !known[b]) continue;
          bool direct = false;
          for (const PciAddress& p : links[a].peers) direct |= sameSlot(p, addr[b]);
          for (const PciAddress& p : links[b].peers) direct |= sameSlot(p, addr[a]);
          answer.nvlink[a][b] = direct || (links[a].to_switch && links[b].to_switch);
        }
      }
      answer.ok = true;
    }
    hit = cache.emplace(bus_ids, answer).first;
  }
  if (!hit->second.ok) {
    if (why) *why = hit->second.why;
    return false;
  }
  *nvlink = hit->second.nvlink;
  return true;
}

}  // namespace tpar
