// The machine's GPU topology as tpar needs it: a link class per pair of ranks, islands (groups
// of ranks whose mutual links are better than the links between groups), and a stable
// signature that keys tuning results. Built from hwloc (PCIe tree, host bridges, NUMA nodes),
// CUDA (peer access per pair) and NVML loaded at run time (NVLink), or from an hwloc XML file
// (TPAR_TOPO_FILE, test fixtures) so that it can be tested on any machine.
#ifndef TPAR_TOPOLOGY_TOPOLOGY_H_
#define TPAR_TOPOLOGY_TOPOLOGY_H_

#include <string>
#include <vector>

#include "tpar/tpar.h"

namespace tpar {

// Ordered from best to worst.
enum class LinkClass {
  kSameDevice = 0,      // two ranks on one GPU
  kNvLink = 1,          // NVLink (direct or through NVSwitch)
  kSameSwitch = 2,      // below one PCIe switch (nvidia-smi PIX)
  kAcrossSwitches = 3,  // several switches, no host bridge between (PXB)
  kSameHostBridge = 4,  // through one host bridge / root complex (PHB)
  kAcrossNuma = 5,      // between NUMA nodes of one socket or across sockets (NODE / SYS)
  kNoP2P = 6,           // no peer-to-peer access at all
};

const char* linkClassName(LinkClass c);  // "same-device", "nvlink", "switch", ...

struct TopoGpu {
  std::string bus_id;  // "0000:1a:00.0", lower case
  int numa_node = -1;  // -1 unknown
  int package = -1;    // CPU socket (hwloc package) above the GPU, -1 unknown
};

struct Topology {
  std::vector<TopoGpu> gpus;                  // one per rank, in rank order
  std::vector<std::vector<LinkClass>> links;  // [a][b], symmetric, kSameDevice on the diagonal
  // A partition of the ranks, each island listed in ascending rank order, islands ordered by
  // their first rank. One island when every link is equally good.
  std::vector<std::vector<int>> islands;
  std::string signature;  // stable across runs of the same machine and rank mapping
  std::string source;     // "hwloc", "xml:<path>", ...
};

// The most ranks that share one GPU (links of class kSameDevice, the rank itself included);
// 1 for an empty topology.
int maxRanksPerGpu(const Topology& t);

// Builds the topology of the GPUs with these PCI bus ids from an hwloc XML file. Bus ids not in
// the file fail with tparInvalidArgument; an empty list takes every NVIDIA GPU of the file in
// bus order. P2P is taken as available between GPUs of the file unless the XML marks it
// otherwise (see docs/TOPOLOGY.md for the attribute used by the fixtures).
tparResult_t loadTopologyXml(const std::string& path, const std::vector<std::string>& bus_ids,
                             Topology* out);

// Builds the topology of these CUDA devices (one per rank; a device may repeat for virtual
// ranks) from the live machine.
tparResult_t discoverTopology(const std::vector<int>& cuda_devices, Topology* out);

// Binds the pages of [addr, addr + bytes) (not yet touched) to the NUMA node nearest to CUDA
// device `cuda_device`. Best effort: false, with the reason in *why, when the machine does not
// say where the GPU is or refuses the binding; the memory then goes wherever it is first
// touched.
bool bindToGpuNumaNode(void* addr, size_t bytes, int cuda_device, std::string* why);

// Islands and signature from `links` (and gpus); used by both builders and by tests.
void deriveIslands(Topology* topo);

// One line per island and the link matrix, for `tpar doctor`.
std::string describeTopology(const Topology& topo);

}  // namespace tpar

#endif  // TPAR_TOPOLOGY_TOPOLOGY_H_
