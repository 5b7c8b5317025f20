#include "tools/tpar/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace tpar_cli {
namespace {

// The few NVML types used here, with NVML's stable ABI (all enums are int-sized).
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
  char spare[64];  // room in case a later NVML grows the struct behind the _v2 name
};
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxNvLinks = 18;  // NVML_NVLINK_MAX_LINKS of current NVMLs
constexpr int kNvmlFeatureEnabled = 1;
constexpr int kNvmlNvLinkDeviceSwitch = 2;
constexpr int kNvmlP2pCapsWrite = 1;

struct NvmlLib {
  int (*init)() = nullptr;
  const char* (*errorString)(int) = nullptr;
  int (*handleByBusId)(const char*, NvmlDevice*) = nullptr;
  int (*currGen)(NvmlDevice, unsigned*) = nullptr;
  int (*currWidth)(NvmlDevice, unsigned*) = nullptr;
  int (*maxGen)(NvmlDevice, unsigned*) = nullptr;
  int (*maxWidth)(NvmlDevice, unsigned*) = nullptr;
  int (*commonAncestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
  int (*nvLinkState)(NvmlDevice, unsigned, int*) = nullptr;
  int (*nvLinkRemotePci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  int (*nvLinkRemoteType)(NvmlDevice, unsigned, int*) = nullptr;
  int (*p2pStatus)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
};

template <typename F>
void bind(void* h, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(h, name));
}

const NvmlLib* lib(std::string* why) {
  static std::once_flag once;
  static NvmlLib nvml;
  static std::string error;
  static bool ok = false;
  std::call_once(once, [] {
    // The versioned name only: an unversioned libnvidia-ml.so is a development stub on many
    // machines, and loading it would report "driver not loaded" on a working GPU box.
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      error = std::string("cannot load libnvidia-ml.so.1 (") + (e ? e : "not found") + ")";
      return;
    }
    bind(h, "nvmlInit_v2", &nvml.init);
    bind(h, "nvmlErrorString", &nvml.errorString);
    bind(h, "nvmlDeviceGetHandleByPciBusId_v2", &nvml.handleByBusId);
    bind(h, "nvmlDeviceGetCurrPcieLinkGeneration", &nvml.currGen);
    bind(h, "nvmlDeviceGetCurrPcieLinkWidth", &nvml.currWidth);
    bind(h, "nvmlDeviceGetMaxPcieLinkGeneration", &nvml.maxGen);
    bind(h, "nvmlDeviceGetMaxPcieLinkWidth", &nvml.maxWidth);
    bind(h, "nvmlDeviceGetTopologyCommonAncestor", &nvml.commonAncestor);
    bind(h, "nvmlDeviceGetNvLinkState", &nvml.nvLinkState);
    bind(h, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &nvml.nvLinkRemotePci);
    bind(h, "nvmlDeviceGetNvLinkRemoteDeviceType", &nvml.nvLinkRemoteType);
    bind(h, "nvmlDeviceGetP2PStatus", &nvml.p2pStatus);
    if (!nvml.init || !nvml.errorString || !nvml.handleByBusId) {
      error = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2";
      return;
    }
    const int rc = nvml.init();
    if (rc != kNvmlSuccess) {
      error = std::string("nvmlInit: ") + nvml.errorString(rc);
      return;
    }
    ok = true;
  });
  if (!ok) {
    if (why) *why = error;
    return nullptr;
  }
  return &nvml;
}

bool handleOf(const NvmlLib* nvml, const std::string& bus_id, NvmlDevice* dev, std::string* why) {
  const int rc = nvml->handleByBusId(bus_id.c_str(), dev);
  if (rc != kNvmlSuccess) {
    if (why) *why = "NVML has no GPU at " + bus_id + " (" + nvml->errorString(rc) + ")";
    return false;
  }
  return true;
}

// Active NVLinks of `dev`: those whose far end is the GPU at `peer`, and those that end at an
// NVSwitch (through which every GPU of the switch fabric is reachable).
void countLinks(const NvmlLib* nvml, NvmlDevice dev, unsigned domain, unsigned bus, unsigned device,
                int* direct, int* to_switch) {
  *direct = *to_switch = 0;
  if (!nvml->nvLinkState) return;
  for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
    int active = 0;
    if (nvml->nvLinkState(dev, link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled)
      continue;
    int type = -1;
    if (nvml->nvLinkRemoteType && nvml->nvLinkRemoteType(dev, link, &type) == kNvmlSuccess &&
        type == kNvmlNvLinkDeviceSwitch) {
      ++*to_switch;
      continue;
    }
    NvmlPciInfo remote{};
    if (nvml->nvLinkRemotePci && nvml->nvLinkRemotePci(dev, link, &remote) == kNvmlSuccess &&
        remote.domain == domain && remote.bus == bus && remote.device == device)
      ++*direct;
  }
}

}  // namespace

bool parsePciBusId(const std::string& bus_id, unsigned* domain, unsigned* bus, unsigned* device,
                   unsigned* function) {
  unsigned d = 0, b = 0, v = 0, f = 0;
  char tail = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &d, &b, &v, &f, &tail) != 4) return false;
  if (b > 0xff || v > 0x1f || f > 0x7) return false;
  *domain = d;
  *bus = b;
  *device = v;
  *function = f;
  return true;
}

bool nvmlAvailable(std::string* why) { return lib(why) != nullptr; }

bool nvmlPcieLink(const std::string& bus_id, PcieLink* out, std::string* why) {
  const NvmlLib* nvml = lib(why);
  NvmlDevice dev = nullptr;
  if (nvml == nullptr || !handleOf(nvml, bus_id, &dev, why)) return false;
  auto get = [&](int (*fn)(NvmlDevice, unsigned*), int* field) {
    unsigned v = 0;
    if (fn && fn(dev, &v) == kNvmlSuccess) *field = static_cast<int>(v);
  };
  *out = PcieLink{};
  get(nvml->currGen, &out->gen);
  get(nvml->currWidth, &out->width);
  get(nvml->maxGen, &out->gen_max);
  get(nvml->maxWidth, &out->width_max);
  return true;
}

int nvmlTopologyLevel(const std::string& bus_a, const std::string& bus_b) {
  const NvmlLib* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  if (nvml == nullptr || !nvml->commonAncestor || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr))
    return kNvmlTopologyUnknown;
  int level = kNvmlTopologyUnknown;
  if (nvml->commonAncestor(a, b, &level) != kNvmlSuccess) return kNvmlTopologyUnknown;
  return level;
}

int nvmlNvLinkCount(const std::string& bus_a, const std::string& bus_b) {
  const NvmlLib* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  unsigned ad, ab, av, af, bd, bb, bv, bf;
  if (nvml == nullptr || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr) || !parsePciBusId(bus_a, &ad, &ab, &av, &af) ||
      !parsePciBusId(bus_b, &bd, &bb, &bv, &bf))
    return 0;
  int a_direct = 0, a_switch = 0, b_direct = 0, b_switch = 0;
  countLinks(nvml, a, bd, bb, bv, &a_direct, &a_switch);
  countLinks(nvml, b, ad, ab, av, &b_direct, &b_switch);
  if (a_direct > 0) return a_direct;
  // Through a switch fabric the pair gets the narrower of the two GPUs' switch links.
  if (a_switch > 0 && b_switch > 0) return std::min(a_switch, b_switch);
  return 0;
}

std::string nvmlP2pStatusText(int status) {
  switch (status) {
    case 0:
      return "";
    case 1:
      return "the chipset does not support peer-to-peer";
    case 2:
      return "the GPU does not support peer-to-peer";
    case 3:
      return "the PCIe topology (IOH) does not support peer-to-peer";
    case 4:
      return "peer-to-peer is disabled by a driver registry key";
    case 5:
      return "peer-to-peer is not supported";
    default:
      return "peer-to-peer status unknown";
  }
}

std::string nvmlP2pWriteProblem(const std::string& bus_a, const std::string& bus_b) {
  const NvmlLib* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  if (nvml == nullptr || !nvml->p2pStatus || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr))
    return "";
  int status = 0;
  if (nvml->p2pStatus(a, b, kNvmlP2pCapsWrite, &status) != kNvmlSuccess) return "";
  return nvmlP2pStatusText(status);
}

}  // namespace tpar_cli
