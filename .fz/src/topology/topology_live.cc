// Topology of the running machine: CUDA names the GPUs and says whether they reach each other,
// hwloc places them in the PCIe tree, NVML (when present) says which pairs have NVLink.
// Only bad arguments fail: a machine whose PCIe tree is hidden (containers, VMs) or that lacks
// NVML gets conservative link classes and says so in `source`.
#include <cuda_runtime_api.h>
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "base/error.h"
#include "topology/nvml_links.h"
#include "topology/pcie_tree.h"
#include "topology/topology.h"

namespace tpar {
namespace {

// The machine's hwloc topology with its PCI devices and bridges, loaded once per process:
// loading takes tens of milliseconds and every communicator asks. Never destroyed, since a
// thread may still read it during exit; hwloc topologies are safe to read concurrently.
struct SystemTree {
  hwloc_topology_t topo = nullptr;
  std::string why;  // why topo is null
};

const SystemTree& systemTree() {
  static const SystemTree tree = [] {
    SystemTree t;
    hwloc_topology_t raw = nullptr;
    if (hwloc_topology_init(&raw) != 0) {
      t.why = std::string("hwloc_topology_init failed: ") + std::strerror(errno);
      return t;
    }
    // IMPORTANT keeps GPUs and the bridges above them and skips the rest of the PCI bus.
    hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    disableGpuPlugins(raw);
    if (hwloc_topology_load(raw) != 0) {
      t.why = std::string("hwloc_topology_load failed: ") + std::strerror(errno);
      hwloc_topology_destroy(raw);
      return t;
    }
    t.topo = raw;
    return t;
  }();
  return tree;
}

// Linux's own answer, for GPUs hwloc cannot place: -1 when unknown or not NUMA.
int sysfsNumaNode(const std::string& bus_id) {
  std::ifstream f("/sys/bus/pci/devices/" + bus_id + "/numa_node");
  int node = -1;
  return f >> node ? std::max(node, -1) : -1;
}

std::string cudaBusId(int device) {
  char buf[64] = {0};
  if (cudaDeviceGetPCIBusId(buf, sizeof(buf), device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  PciAddress a;
  return parseBusId(buf, &a) ? busIdString(a) : "";
}

// Peer access in both directions: tpar's kernels write into the peer and the peer writes back.
bool peerBothWays(int a, int b) {
  int ab = 0, ba = 0;
  const bool ok = cudaDeviceCanAccessPeer(&ab, a, b) == cudaSuccess &&
                  cudaDeviceCanAccessPeer(&ba, b, a) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  return ok && ab && ba;
}

}  // namespace

tparResult_t discoverTopology(const std::vector<int>& cuda_devices, Topology* out) {
  if (out == nullptr) return setError(tparInvalidArgument, "discoverTopology: out is null");
  if (cuda_devices.empty())
    return setError(tparInvalidArgument, "discoverTopology: the device list is empty");
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (count_err != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
  }
  for (size_t r = 0; r < cuda_devices.size(); ++r) {
    const int d = cuda_devices[r];
    if (d >= 0 && d < count) continue;
    if (count_err != cudaSuccess) {
      return setError(tparInvalidArgument, "rank %zu: CUDA device %d does not exist (%s)", r, d,
                      cudaGetErrorString(count_err));
    }
    return setError(tparInvalidArgument,
                    "rank %zu: CUDA device %d does not exist (%d device%s visible)", r, d, count,
                    count == 1 ? "" : "s");
  }

  const size_t n = cuda_devices.size();
  Topology t;
  t.gpus.resize(n);
  const SystemTree& tree = systemTree();
  std::vector<hwloc_obj_t> objs(n, nullptr);
  std::vector<std::string> unplaced;
  for (size_t r = 0; r < n; ++r) {
    TopoGpu& g = t.gpus[r];
    g.bus_id = cudaBusId(cuda_devices[r]);
    PciAddress a;
    if (tree.topo != nullptr && parseBusId(g.bus_id, &a)) objs[r] = findPciDevice(tree.topo, a);
    if (objs[r] != nullptr) {
      placeInTree(tree.topo, objs[r], &g);
    } else {
      if (!g.bus_id.empty()) g.numa_node = sysfsNumaNode(g.bus_id);
      const std::string name =
          g.bus_id.empty() ? "device " + std::to_string(cuda_devices[r]) : g.bus_id;
      if (std::find(unplaced.begin(), unplaced.end(), name) == unplaced.end())
        unplaced.push_back(name);
    }
  }

  std::vector<std::string> ids(n);
  for (size_t r = 0; r < n; ++r) ids[r] = t.gpus[r].bus_id;
  bool distinct = false;  // virtual ranks on one GPU need no NVML (its init is slow)
  for (size_t r = 1; r < n; ++r) distinct |= cuda_devices[r] != cuda_devices[0];
  std::vector<std::vector<bool>> nvlink;
  const bool nvml_ok = distinct && queryNvLinks(ids, &nvlink, nullptr);

  t.links.assign(n, std::vector<LinkClass>(n, LinkClass::kSameDevice));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = a + 1; b < n; ++b) {
      LinkClass c;
      if (cuda_devices[a] == cuda_devices[b]) {
        c = LinkClass::kSameDevice;  // virtual ranks
      } else if (!peerBothWays(cuda_devices[a], cuda_devices[b])) {
        c = LinkClass::kNoP2P;  // the PCIe tree does not matter when the driver says no
      } else if (nvml_ok && nvlink[a][b]) {
        c = LinkClass::kNvLink;
      } else if (objs[a] != nullptr && objs[b] != nullptr) {
        c = pcieLinkClass(objs[a], objs[b]);
      } else {
        // Peer access works, but where the GPUs sit is hidden: assume the middle of the
        // range, a host bridge, rather than a switch that would promise too much.
        c = LinkClass::kSameHostBridge;
      }
      t.links[a][b] = t.links[b][a] = c;
    }
  }

  // The essentials first: communicators carry `source` in a 64-byte field.
  t.source = tree.topo != nullptr ? "hwloc" : "cuda";
  if (nvml_ok) t.source += "+nvml";
  if (tree.topo == nullptr) {
    t.source += " (PHB assumed, no hwloc: " + tree.why + ")";
  } else if (!unplaced.empty()) {
    t.source += " (PHB assumed for " + std::to_string(unplaced.size()) + " GPU" +
                (unplaced.size() == 1 ? "" : "s") + " not in the PCIe tree: " + unplaced[0] +
                (unplaced.size() > 1 ? ", ..." : "") + ")";
  }
  deriveIslands(&t);
  *out = std::move(t);
  return tparSuccess;
}

}  // namespace tpar

namespace tpar {

bool bindToGpuNumaNode(void* addr, size_t bytes, int cuda_device, std::string* why) {
  const SystemTree& tree = systemTree();
  if (tree.topo == nullptr) {
    *why = tree.why;
    return false;
  }
  const std::string bus_id = cudaBusId(cuda_device);
  PciAddress a;
  if (bus_id.empty() || !parseBusId(bus_id, &a)) {
    *why = "no PCI address for CUDA device " + std::to_string(cuda_device);
    return false;
  }
  hwloc_obj_t gpu = findPciDevice(tree.topo, a);
  hwloc_obj_t host = gpu != nullptr ? hwloc_get_non_io_ancestor_obj(tree.topo, gpu) : nullptr;
  if (host == nullptr || host->nodeset == nullptr || hwloc_bitmap_iszero(host->nodeset)) {
    *why = "hwloc does not place GPU " + bus_id + " near a NUMA node";
    return false;
  }
  if (hwloc_bitmap_isequal(host->nodeset, hwloc_topology_get_topology_nodeset(tree.topo))) {
    *why = "GPU " + bus_id + " is equally near every NUMA node";
    return false;
  }
  if (hwloc_set_area_membind(tree.topo, addr, bytes, host->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET) != 0) {
    *why = std::string("hwloc_set_area_membind: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace tpar
