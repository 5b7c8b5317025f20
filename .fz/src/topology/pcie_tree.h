// The PCIe side of topology discovery, shared by the XML loader and the live machine: PCI bus
// ids, finding NVIDIA GPUs in an hwloc tree, the link class of two GPUs from their places in
// that tree, and the NUMA node and socket above a GPU.
#ifndef TPAR_TOPOLOGY_PCIE_TREE_H_
#define TPAR_TOPOLOGY_PCIE_TREE_H_

#include <hwloc.h>

#include <string>
#include <vector>

#include "topology/topology.h"

namespace tpar {

struct PciAddress {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
};

// Accepts CUDA's "0000:1A:00.0", NVML's "00000000:1a:00.0" and hwloc's form; false when
// malformed (a missing domain too: it is never omitted by CUDA, NVML or hwloc).
bool parseBusId(const std::string& text, PciAddress* out);

// "0000:1a:00.0": the form tpar stores and prints (lower case, as sysfs and hwloc do).
std::string busIdString(const PciAddress& a);

// PCI vendor 0x10de with a display class (VGA 0x0300 or 3D controller 0x0302). NVSwitches
// (class 0x0680) and GPU audio functions (0x0403) share the vendor and are not GPUs.
bool isNvidiaGpu(hwloc_obj_t obj);

// Every NVIDIA GPU of the topology, in bus order.
std::vector<hwloc_obj_t> nvidiaGpus(hwloc_topology_t topo);

// The PCI device (not bridge) at this address, or nullptr.
hwloc_obj_t findPciDevice(hwloc_topology_t topo, const PciAddress& a);

// The link class of two distinct GPU objects from the PCIe tree alone (no NVLink, no P2P
// verdict): kSameSwitch, kAcrossSwitches, kSameHostBridge or kAcrossNuma.
LinkClass pcieLinkClass(hwloc_obj_t a, hwloc_obj_t b);

// The NUMA node and CPU package above a PCI object (-1 where hwloc does not say).
void placeInTree(hwloc_topology_t topo, hwloc_obj_t obj, TopoGpu* gpu);

// Asks hwloc not to run its GPU and display plugins while loading: tpar only needs the PCIe
// tree, and those plugins would initialize CUDA, NVML, OpenCL or talk to an X server.
void disableGpuPlugins(hwloc_topology_t topo);

}  // namespace tpar

#endif  // TPAR_TOPOLOGY_PCIE_TREE_H_
