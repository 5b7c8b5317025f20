// Topology from an hwloc XML file: the test fixtures, TPAR_TOPO_FILE, and a way to reproduce a
// user's machine from the file `lstopo --whole-io` or hwloc-gather-topology saved there.
#include <hwloc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "base/error.h"
#include "base/log.h"
#include "topology/pcie_tree.h"
#include "topology/topology.h"
#include "topology/xml_probe.h"

namespace tpar {
namespace {

// Info attributes a fixture uses for what a PCIe tree cannot express (docs/TOPOLOGY.md).
constexpr const char* kNvLinkGroupInfo = "TparNvLinkGroup";
constexpr const char* kP2pInfo = "TparP2P";
constexpr const char* kNvLinkMatrix = "NVLinkBandwidth";

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

// TparP2P on `obj`: true (the default) when absent or "1", false for "0".
tparResult_t p2pAllowed(hwloc_obj_t obj, const std::string& path, const char* what, bool* allowed) {
  const char* v = hwloc_obj_get_info_by_name(obj, kP2pInfo);
  *allowed = true;
  if (v == nullptr || std::strcmp(v, "1") == 0) return tparSuccess;
  if (std::strcmp(v, "0") == 0) {
    *allowed = false;
    return tparSuccess;
  }
  return setError(tparInvalidArgument, "topology XML %s: info %s=\"%s\" on %s must be 0 or 1",
                  path.c_str(), kP2pInfo, v, what);
}

// NOTE [NVLink matrix]
// hwloc's NVML backend records NVLink as a distances matrix named "NVLinkBandwidth" (MB/s of
// one direction): its objects are the GPUs (NVML OS devices, below their PCI devices) and,
// where links end elsewhere, the NVSwitches (NVIDIA PCI devices of class 0x0680) or CPUs. Two
// GPUs are joined by NVLink when the matrix gives them bandwidth to each other, or when both
// have bandwidth to NVSwitches: the NVSwitches of one machine form one fabric (a DGX-2's two
// boards of eight GPUs are joined switch to switch, links NVML does not list per GPU), so every
// GPU on it reaches every other at NVLink speed.
std::vector<std::vector<bool>> nvlinkPairs(hwloc_topology_t topo,
                                           const std::vector<hwloc_obj_t>& gpus) {
  const size_t n = gpus.size();
  std::vector<std::vector<bool>> joined(n, std::vector<bool>(n, false));
  unsigned nr = 0;
  if (hwloc_distances_get_by_name(topo, kNvLinkMatrix, &nr, nullptr, 0) != 0 || nr == 0) {
    return joined;
  }
  std::vector<hwloc_distances_s*> all(nr, nullptr);
  if (hwloc_distances_get_by_name(topo, kNvLinkMatrix, &nr, all.data(), 0) != 0) return joined;
  std::vector<bool> on_switch(n, false);
  for (unsigned d = 0; d < nr; ++d) {
    const hwloc_distances_s* m = all[d];
    // Each matrix object as a GPU index (its PCI device, for an OS device) or -1, and whether
    // it is an NVSwitch.
    std::vector<int> gpu_of(m->nbobjs, -1);
    std::vector<bool> is_switch(m->nbobjs, false);
    for (unsigned i = 0; i < m->nbobjs; ++i) {
      hwloc_obj_t o = m->objs[i];
      if (o != nullptr && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
      if (o == nullptr || o->type != HWLOC_OBJ_PCI_DEVICE) continue;
      for (size_t g = 0; g < n; ++g) {
        if (gpus[g] == o) gpu_of[i] = static_cast<int>(g);
      }
      is_switch[i] =
          o->attr->pcidev.vendor_id == 0x10de && (o->attr->pcidev.class_id >> 8) == 0x06;
    }
    for (unsigned i = 0; i < m->nbobjs; ++i) {
      for (unsigned j = 0; j < m->nbobjs; ++j) {
        if (i == j || m->values[i * m->nbobjs + j] == 0) continue;
        if (gpu_of[i] >= 0 && gpu_of[j] >= 0) joined[gpu_of[i]][gpu_of[j]] = true;
        if (gpu_of[i] >= 0 && is_switch[j]) on_switch[gpu_of[i]] = true;
        if (gpu_of[j] >= 0 && is_switch[i]) on_switch[gpu_of[j]] = true;
      }
    }
  }
  for (unsigned d = 0; d < nr; ++d) hwloc_distances_release(topo, all[d]);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      // A link listed from one side only still joins both.
      joined[a][b] = joined[a][b] || joined[b][a] || (on_switch[a] && on_switch[b]);
    }
  }
  return joined;
}

}  // namespace

tparResult_t loadTopologyXml(const std::string& path, const std::vector<std::string>& bus_ids,
                             Topology* out) {
  if (out == nullptr) return setError(tparInvalidArgument, "loadTopologyXml: out is null");
  if (path.empty()) return setError(tparInvalidArgument, "topology XML path is empty");
  // hwloc's own failure says little ("Invalid argument"): read and check the file first, so
  // that every refusal names what is wrong.
  std::string xml;
  TPAR_TRY(readTopologyXml(path, &xml));
  TPAR_TRY(checkXmlFormatVersion(xml, path));
  // The crash guard (NOTE [topology crash guard] in topology/xml_probe.h).
  const std::string helper = probeHelperPath();
  if (!helper.empty()) {
    TPAR_TRY(probeTopologyXml(xml, path, helper, kProbeTimeoutMs));
  } else {
    static std::once_flag warned;
    std::call_once(warned, [] {
      TPAR_WARN("tpar-hwloc-probe is not installed next to libtpar: topology files are loaded "
                "without the crash guard (a malformed file can crash hwloc, and this process)");
    });
  }
  return parseTopologyXml(xml, path, bus_ids, out);
}

tparResult_t parseTopologyXml(const std::string& xml, const std::string& path,
                              const std::vector<std::string>& bus_ids, Topology* out) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0)
    return setError(tparSystemError, "hwloc_topology_init failed: %s", std::strerror(errno));
  TopologyPtr topo(raw);
  // Bridges and every PCI device are needed: the default filter drops bridges, which carry
  // the switch structure the link classes come from.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  disableGpuPlugins(raw);
  // The size counts the terminating NUL, as hwloc's own export does.
  if (hwloc_topology_set_xmlbuffer(raw, xml.c_str(), static_cast<int>(xml.size() + 1)) != 0 ||
      hwloc_topology_load(raw) != 0) {
    return setError(tparInvalidArgument,
                    "topology XML %s is not an hwloc XML topology (hwloc cannot load it: %s)",
                    path.c_str(), std::strerror(errno));
  }

  const std::vector<hwloc_obj_t> all = nvidiaGpus(raw);
  std::vector<hwloc_obj_t> objs;
  if (bus_ids.empty()) {
    if (all.empty()) {
      return setError(tparInvalidArgument,
                      "topology XML %s has no NVIDIA GPU (it needs the PCI devices: save it "
                      "with lstopo --whole-io or hwloc-gather-topology)",
                      path.c_str());
    }
    objs = all;
  } else {
    for (const std::string& id : bus_ids) {
      PciAddress a;
      if (!parseBusId(id, &a)) {
        return setError(tparInvalidArgument,
                        "bus id '%s' is not a PCI bus id (domain:bus:device.function, e.g. "
                        "0000:1a:00.0)",
                        id.c_str());
      }
      hwloc_obj_t o = findPciDevice(raw, a);
      if (o == nullptr) {
        return setError(tparInvalidArgument, "bus id %s is not in topology XML %s", id.c_str(),
                        path.c_str());
      }
      if (!isNvidiaGpu(o)) {
        return setError(tparInvalidArgument,
                        "bus id %s in topology XML %s is not an NVIDIA GPU (PCI %04x:%04x, "
                        "class %04x)",
                        id.c_str(), path.c_str(), o->attr->pcidev.vendor_id,
                        o->attr->pcidev.device_id, o->attr->pcidev.class_id);
      }
      objs.push_back(o);
    }
  }

  const std::vector<std::vector<bool>> nvlink = nvlinkPairs(raw, objs);
  bool machine_p2p = true;
  TPAR_TRY(p2pAllowed(hwloc_get_root_obj(raw), path, "the root object", &machine_p2p));
  const size_t n = objs.size();
  Topology t;
  t.gpus.resize(n);
  std::vector<bool> p2p(n, true);
  std::vector<const char*> group(n, nullptr);
  for (size_t r = 0; r < n; ++r) {
    PciAddress a;
    a.domain = objs[r]->attr->pcidev.domain;
    a.bus = objs[r]->attr->pcidev.bus;
    a.device = objs[r]->attr->pcidev.dev;
    a.function = objs[r]->attr->pcidev.func;
    t.gpus[r].bus_id = busIdString(a);
    placeInTree(raw, objs[r], &t.gpus[r]);
    bool allowed = true;
    const std::string what = "GPU " + t.gpus[r].bus_id;
    TPAR_TRY(p2pAllowed(objs[r], path, what.c_str(), &allowed));
    p2p[r] = machine_p2p && allowed;
    group[r] = hwloc_obj_get_info_by_name(objs[r], kNvLinkGroupInfo);
  }
  t.links.assign(n, std::vector<LinkClass>(n, LinkClass::kSameDevice));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      LinkClass& c = t.links[a][b];
      if (objs[a] == objs[b]) {
        c = LinkClass::kSameDevice;  // virtual ranks: one GPU listed twice
      } else if (!p2p[a] || !p2p[b]) {
        c = LinkClass::kNoP2P;
      } else if (nvlink[a][b] || (group[a] && group[b] && std::strcmp(group[a], group[b]) == 0)) {
        c = LinkClass::kNvLink;
      } else {
        c = pcieLinkClass(objs[a], objs[b]);
      }
    }
  }
  t.source = "xml:" + path;
  deriveIslands(&t);
  *out = std::move(t);
  return tparSuccess;
}

}  // namespace tpar
