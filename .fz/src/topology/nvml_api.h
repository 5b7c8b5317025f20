// NVML, loaded at run time (dlopen of libnvidia-ml.so.1): the one loader that the library's
// NVLink discovery and `tpar doctor` share. Nothing links against NVML and its headers are not
// needed: the declarations below follow NVML's stable C ABI (handles are opaque pointers, enums
// are int-sized). Where the driver's management library is missing (containers that mount only
// the CUDA driver) callers get nullptr and a reason, and carry on without NVML's answers.
#ifndef TPAR_TOPOLOGY_NVML_API_H_
#define TPAR_TOPOLOGY_NVML_API_H_

#include <string>
#include <vector>

#include "topology/pcie_tree.h"

namespace tpar {

using NvmlDevice = struct NvmlDeviceSt*;
struct NvmlPciInfo {  // nvmlPciInfo_t
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
  char reserve[64];  // room should a later NVML grow the struct behind the _v2 entry point
};
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNvmlMaxNvLinks = 18;    // NVML_NVLINK_MAX_LINKS of current drivers
constexpr int kNvmlFeatureEnabled = 1;      // NVML_FEATURE_ENABLED
constexpr int kNvmlNvLinkDeviceSwitch = 2;  // NVML_NVLINK_DEVICE_TYPE_SWITCH

// Entry points. init, shutdown, errorString and handleByBusId are always there; the others are
// null where the driver's NVML lacks them, and callers check.
struct NvmlApi {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  const char* (*errorString)(int) = nullptr;
  int (*handleByBusId)(const char*, NvmlDevice*) = nullptr;
  int (*currPcieGen)(NvmlDevice, unsigned*) = nullptr;
  int (*currPcieWidth)(NvmlDevice, unsigned*) = nullptr;
  int (*maxPcieGen)(NvmlDevice, unsigned*) = nullptr;
  int (*maxPcieWidth)(NvmlDevice, unsigned*) = nullptr;
  int (*commonAncestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
  int (*nvLinkState)(NvmlDevice, unsigned, int*) = nullptr;
  int (*nvLinkRemotePci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  int (*nvLinkRemoteType)(NvmlDevice, unsigned, int*) = nullptr;  // absent from old drivers
  int (*p2pStatus)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
};

// Loaded once per process and never unloaded (other threads may be inside NVML). It does not
// call nvmlInit: callers do, and NVML counts the calls. nullptr, with `why`, when the library
// cannot be loaded or lacks the four base entry points.
const NvmlApi* nvmlApi(std::string* why);

// The active NVLinks of one GPU: for each link that ends at a GPU, that GPU's PCI address
// (NVML leaves the function out: 0); and how many end at an NVSwitch.
struct NvLinkEnds {
  std::vector<PciAddress> gpus;
  int to_switch = 0;
};
NvLinkEnds nvLinkEnds(const NvmlApi& nvml, NvmlDevice dev);

// Same GPU slot (domain, bus, device): NVML's remote link info carries no function.
bool sameSlot(const PciAddress& x, const PciAddress& y);

}  // namespace tpar

#endif  // TPAR_TOPOLOGY_NVML_API_H_
