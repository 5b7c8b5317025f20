#include "tools/tpar/doctor/nvml.h"

#include "api/internal.h"

namespace tpar_cli {

bool nvmlAvailable(std::string* why) { return tpar::nvmlReady(why); }

bool nvmlPcieLink(const std::string& bus_id, PcieLink* out, std::string* why) {
  tpar::NvmlPcieLink link;
  if (!tpar::nvmlPcieLinkOf(bus_id, &link, why)) return false;
  *out = PcieLink{};
  out->gen = link.gen;
  out->width = link.width;
  out->gen_max = link.gen_max;
  out->width_max = link.width_max;
  return true;
}

int nvmlTopologyLevel(const std::string& bus_a, const std::string& bus_b) {
  const int level = tpar::nvmlCommonAncestorOf(bus_a, bus_b);
  return level < 0 ? kNvmlTopologyUnknown : level;
}

int nvmlNvLinkCount(const std::string& bus_a, const std::string& bus_b) {
  return tpar::nvmlNvLinksBetween(bus_a, bus_b);
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
  const int status = tpar::nvmlP2pWriteStatus(bus_a, bus_b);
  return status < 0 ? "" : nvmlP2pStatusText(status);
}

}  // namespace tpar_cli
