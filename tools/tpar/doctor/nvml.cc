#include "tools/tpar/doctor/nvml.h"

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "topology/nvml_api.h"
#include "topology/pcie_tree.h"

namespace tpar_cli {
namespace {

using tpar::kNvmlSuccess;
using tpar::NvmlApi;
using tpar::NvmlDevice;
constexpr int kNvmlP2pCapsWrite = 1;  // NVML_P2P_CAPS_INDEX_WRITE

// The shared loader (topology/nvml_api.h), initialized once for the CLI's whole run.
const NvmlApi* lib(std::string* why) {
  static std::once_flag once;
  static const NvmlApi* nvml = nullptr;
  static std::string error;
  std::call_once(once, [] {
    const NvmlApi* api = tpar::nvmlApi(&error);
    if (api == nullptr) return;
    const int rc = api->init();
    if (rc != kNvmlSuccess) {
      error = std::string("nvmlInit: ") + api->errorString(rc);
      return;
    }
    nvml = api;
  });
  if (nvml == nullptr && why) *why = error;
  return nvml;
}

bool handleOf(const NvmlApi* nvml, const std::string& bus_id, NvmlDevice* dev, std::string* why) {
  const int rc = nvml->handleByBusId(bus_id.c_str(), dev);
  if (rc != kNvmlSuccess) {
    if (why) *why = "NVML has no GPU at " + bus_id + " (" + nvml->errorString(rc) + ")";
    return false;
  }
  return true;
}

}  // namespace

bool nvmlAvailable(std::string* why) { return lib(why) != nullptr; }

bool nvmlPcieLink(const std::string& bus_id, PcieLink* out, std::string* why) {
  const NvmlApi* nvml = lib(why);
  NvmlDevice dev = nullptr;
  if (nvml == nullptr || !handleOf(nvml, bus_id, &dev, why)) return false;
  auto get = [&](int (*fn)(NvmlDevice, unsigned*), int* field) {
    unsigned v = 0;
    if (fn && fn(dev, &v) == kNvmlSuccess) *field = static_cast<int>(v);
  };
  *out = PcieLink{};
  get(nvml->currPcieGen, &out->gen);
  get(nvml->currPcieWidth, &out->width);
  get(nvml->maxPcieGen, &out->gen_max);
  get(nvml->maxPcieWidth, &out->width_max);
  return true;
}

int nvmlTopologyLevel(const std::string& bus_a, const std::string& bus_b) {
  const NvmlApi* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  if (nvml == nullptr || !nvml->commonAncestor || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr))
    return kNvmlTopologyUnknown;
  int level = kNvmlTopologyUnknown;
  if (nvml->commonAncestor(a, b, &level) != kNvmlSuccess) return kNvmlTopologyUnknown;
  return level;
}

int nvmlNvLinkCount(const std::string& bus_a, const std::string& bus_b) {
  const NvmlApi* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  tpar::PciAddress pa, pb;
  if (nvml == nullptr || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr) || !tpar::parseBusId(bus_a, &pa) ||
      !tpar::parseBusId(bus_b, &pb))
    return 0;
  const tpar::NvLinkEnds ends_a = tpar::nvLinkEnds(*nvml, a);
  const tpar::NvLinkEnds ends_b = tpar::nvLinkEnds(*nvml, b);
  const int direct = static_cast<int>(
      std::count_if(ends_a.gpus.begin(), ends_a.gpus.end(),
                    [&](const tpar::PciAddress& p) { return tpar::sameSlot(p, pb); }));
  if (direct > 0) return direct;
  // Through a switch fabric the pair gets the narrower of the two GPUs' switch links.
  if (ends_a.to_switch > 0 && ends_b.to_switch > 0) return std::min(ends_a.to_switch, ends_b.to_switch);
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
  const NvmlApi* nvml = lib(nullptr);
  NvmlDevice a = nullptr, b = nullptr;
  if (nvml == nullptr || !nvml->p2pStatus || !handleOf(nvml, bus_a, &a, nullptr) ||
      !handleOf(nvml, bus_b, &b, nullptr))
    return "";
  int status = 0;
  if (nvml->p2pStatus(a, b, kNvmlP2pCapsWrite, &status) != kNvmlSuccess) return "";
  return nvmlP2pStatusText(status);
}

}  // namespace tpar_cli
