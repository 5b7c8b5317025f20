// Topology from an hwloc XML file: the test fixtures, TPAR_TOPO_FILE, and a way to reproduce a
// user's machine from the file `lstopo --whole-io` or hwloc-gather-topology saved there.
#include <hwloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "topology/pcie_tree.h"
#include "topology/topology.h"

namespace tpar {
namespace {

// Info attributes a fixture uses for what a PCIe tree cannot express (docs/TOPOLOGY.md).
constexpr const char* kNvLinkGroupInfo = "TparNvLinkGroup";
constexpr const char* kP2pInfo = "TparP2P";

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

}  // namespace

namespace {

// Loads `path` with hwloc in a forked child. The parent only waits; the child calls hwloc and
// _exit, nothing else.
tparResult_t probeLoad(const std::string& path) {
  const pid_t pid = fork();
  if (pid < 0) return setError(tparSystemError, "fork failed: %s", std::strerror(errno));
  if (pid == 0) {
    // Die of the signal itself: the caller's crash handlers (a sanitizer's, a fuzzer's, an
    // interpreter's) have nothing to report about this child.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, SIG_DFL);
    hwloc_topology_t t = nullptr;
    int rc = 2;
    if (hwloc_topology_init(&t) == 0) {
      hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_ALL);
      rc = hwloc_topology_set_xml(t, path.c_str()) == 0 && hwloc_topology_load(t) == 0 ? 0 : 1;
      hwloc_topology_destroy(t);
    }
    _exit(rc);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return setError(tparSystemError, "waitpid failed: %s", std::strerror(errno));
  }
  if (WIFSIGNALED(status)) {
    return setError(tparInvalidArgument,
                    "topology XML %s crashes hwloc (signal %d while loading it): not a valid "
                    "hwloc XML topology",
                    path.c_str(), WTERMSIG(status));
  }
  return tparSuccess;  // a load error is reported by the real load, with its message
}

}  // namespace

tparResult_t loadTopologyXml(const std::string& path, const std::vector<std::string>& bus_ids,
                             Topology* out) {
  if (out == nullptr) return setError(tparInvalidArgument, "loadTopologyXml: out is null");
  if (path.empty()) return setError(tparInvalidArgument, "topology XML path is empty");
  // hwloc's own failure says little ("Invalid argument"); check readability first to name it.
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
  } else {
    return setError(tparInvalidArgument, "cannot read topology XML %s: %s", path.c_str(),
                    std::strerror(errno));
  }

  // hwloc 2.9 crashes on some malformed files (an object without complete_cpuset: SEGV in
  // hwloc_bitmap_set, found by fuzzing). Load it once in a child process first, so that a file
  // that crashes hwloc is an error here and not the end of the caller's process.
  TPAR_TRY(probeLoad(path));

  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0)
    return setError(tparSystemError, "hwloc_topology_init failed: %s", std::strerror(errno));
  TopologyPtr topo(raw);
  // Bridges and every PCI device are needed: the default filter drops bridges, which carry
  // the switch structure the link classes come from.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_ALL);
  disableGpuPlugins(raw);
  if (hwloc_topology_set_xml(raw, path.c_str()) != 0 || hwloc_topology_load(raw) != 0) {
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
      } else if (group[a] && group[b] && std::strcmp(group[a], group[b]) == 0) {
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
