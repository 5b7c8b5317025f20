#include "topology/nvml_api.h"

#include <dlfcn.h>

#include <mutex>

namespace tpar {
namespace {

template <typename F>
void bindSymbol(void* lib, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

const NvmlApi* nvmlApi(std::string* why) {
  static std::once_flag once;
  static NvmlApi api;
  static std::string error;
  static bool ok = false;
  std::call_once(once, [] {
    // The versioned name only: the toolkit also ships an unversioned libnvidia-ml.so for
    // linking, which loads and then reports "driver not loaded" on a working machine.
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
    bindSymbol(lib, "nvmlDeviceGetCurrPcieLinkGeneration", &api.currPcieGen);
    bindSymbol(lib, "nvmlDeviceGetCurrPcieLinkWidth", &api.currPcieWidth);
    bindSymbol(lib, "nvmlDeviceGetMaxPcieLinkGeneration", &api.maxPcieGen);
    bindSymbol(lib, "nvmlDeviceGetMaxPcieLinkWidth", &api.maxPcieWidth);
    bindSymbol(lib, "nvmlDeviceGetTopologyCommonAncestor", &api.commonAncestor);
    bindSymbol(lib, "nvmlDeviceGetNvLinkState", &api.nvLinkState);
    bindSymbol(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api.nvLinkRemotePci);
    bindSymbol(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &api.nvLinkRemoteType);
    bindSymbol(lib, "nvmlDeviceGetP2PStatus", &api.p2pStatus);
    if (!api.init || !api.shutdown || !api.errorString || !api.handleByBusId) {
      error =
          "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlShutdown, nvmlErrorString or "
          "nvmlDeviceGetHandleByPciBusId_v2";
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

NvLinkEnds nvLinkEnds(const NvmlApi& nvml, NvmlDevice dev) {
  NvLinkEnds out;
  if (!nvml.nvLinkState || !nvml.nvLinkRemotePci) return out;
  for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
    int state = 0;
    // GPUs without NVLink answer "not supported"; links past the GPU's count, "invalid".
    if (nvml.nvLinkState(dev, link, &state) != kNvmlSuccess || state != kNvmlFeatureEnabled)
      continue;
    int type = -1;
    if (nvml.nvLinkRemoteType && nvml.nvLinkRemoteType(dev, link, &type) == kNvmlSuccess &&
        type == kNvmlNvLinkDeviceSwitch) {
      ++out.to_switch;
      continue;
    }
    NvmlPciInfo remote{};
    if (nvml.nvLinkRemotePci(dev, link, &remote) != kNvmlSuccess) continue;
    PciAddress a;
    a.domain = remote.domain;
    a.bus = remote.bus;
    a.device = remote.device;
    out.gpus.push_back(a);
  }
  return out;
}

bool sameSlot(const PciAddress& x, const PciAddress& y) {
  return x.domain == y.domain && x.bus == y.bus && x.device == y.device;
}

}  // namespace tpar
