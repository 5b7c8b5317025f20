#include "topology/pcie_tree.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <type_traits>

namespace tpar {
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;
constexpr unsigned kClassVga = 0x0300;
constexpr unsigned kClass3d = 0x0302;

bool isBridge(hwloc_obj_t o) { return o->type == HWLOC_OBJ_BRIDGE; }

bool isHostBridge(hwloc_obj_t o) {
  if (!isBridge(o)) return false;
  // hwloc 2.9 stores whatever number an XML file gives (bridge_type="3-1") in this enum field;
  // reading it as the enum is then undefined (found by fuzzing under UBSan). Read its bytes.
  std::underlying_type_t<hwloc_obj_bridge_type_t> type;
  static_assert(sizeof(type) == sizeof(o->attr->bridge.upstream_type), "enum size");
  std::memcpy(&type, &o->attr->bridge.upstream_type, sizeof(type));
  return type == static_cast<decltype(type)>(HWLOC_OBJ_BRIDGE_HOST);
}

PciAddress addressOf(hwloc_obj_t o) {
  PciAddress a;
  a.domain = o->attr->pcidev.domain;
  a.bus = o->attr->pcidev.bus;
  a.device = o->attr->pcidev.dev;
  a.function = o->attr->pcidev.func;
  return a;
}

}  // namespace

bool parseBusId(const std::string& text, PciAddress* out) {
  unsigned d = 0, b = 0, v = 0, f = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%x:%x:%x.%x%c", &d, &b, &v, &f, &tail) != 4) return false;
  // sscanf's %x also takes signs and "0x"; a bus id has neither.
  for (char c : text)
    if (!(std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.')) return false;
  if (b > 0xff || v > 0x1f || f > 0x7) return false;
  out->domain = d;
  out->bus = b;
  out->device = v;
  out->function = f;
  return true;
}

std::string busIdString(const PciAddress& a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%04x:%02x:%02x.%x", a.domain, a.bus, a.device, a.function);
  return buf;
}

bool isNvidiaGpu(hwloc_obj_t obj) {
  if (obj == nullptr || obj->type != HWLOC_OBJ_PCI_DEVICE) return false;
  const unsigned cls = obj->attr->pcidev.class_id;
  return obj->attr->pcidev.vendor_id == kNvidiaVendor && (cls == kClassVga || cls == kClass3d);
}

std::vector<hwloc_obj_t> nvidiaGpus(hwloc_topology_t topo) {
  std::vector<hwloc_obj_t> gpus;
  for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, nullptr); o != nullptr;
       o = hwloc_get_next_pcidev(topo, o)) {
    if (isNvidiaGpu(o)) gpus.push_back(o);
  }
  auto key = [](hwloc_obj_t o) {
    const PciAddress a = addressOf(o);
    return std::make_tuple(a.domain, a.bus, a.device, a.function);
  };
  std::sort(gpus.begin(), gpus.end(),
            [&](hwloc_obj_t x, hwloc_obj_t y) { return key(x) < key(y); });
  return gpus;
}

hwloc_obj_t findPciDevice(hwloc_topology_t topo, const PciAddress& a) {
  return hwloc_get_pcidev_by_busid(topo, a.domain, a.bus, a.device, a.function);
}

// NOTE [PCIe link classes]
// Two GPUs are classed by their nearest common ancestor C in hwloc's tree and by the bridges
// strictly between each GPU and C:
//   C above the host bridges (a Package, Group or the Machine)  -> kAcrossNuma (NODE or SYS)
//   C a host bridge (one root complex)                          -> kSameHostBridge (PHB)
//   C a PCI bridge, at most one bridge below C on each side     -> kSameSwitch (PIX)
//   C a PCI bridge, more bridges on some side                   -> kAcrossSwitches (PXB)
// A PCIe switch shows up as an upstream-port bridge C with one downstream-port bridge per
// slot, so GPUs of one switch have exactly one bridge (their downstream port) below C; a
// cascade adds the lower switch's ports and upstream port, hence the count. This is what
// nvidia-smi's PIX ("at most a single PCIe bridge") and PXB mean.
LinkClass pcieLinkClass(hwloc_obj_t a, hwloc_obj_t b) {
  std::vector<hwloc_obj_t> above_a;
  for (hwloc_obj_t o = a->parent; o != nullptr; o = o->parent) above_a.push_back(o);
  hwloc_obj_t common = nullptr;
  int bridges_b = 0;
  for (hwloc_obj_t o = b->parent; o != nullptr; o = o->parent) {
    if (std::find(above_a.begin(), above_a.end(), o) != above_a.end()) {
      common = o;
      break;
    }
    if (isBridge(o)) ++bridges_b;
  }
  // Different roots cannot happen in one hwloc topology; be conservative if it does.
  if (common == nullptr || !isBridge(common)) return LinkClass::kAcrossNuma;
  if (isHostBridge(common)) return LinkClass::kSameHostBridge;
  int bridges_a = 0;
  for (hwloc_obj_t o = a->parent; o != common; o = o->parent)
    if (isBridge(o)) ++bridges_a;
  return bridges_a <= 1 && bridges_b <= 1 ? LinkClass::kSameSwitch : LinkClass::kAcrossSwitches;
}

void placeInTree(hwloc_topology_t topo, hwloc_obj_t obj, TopoGpu* gpu) {
  gpu->numa_node = -1;
  gpu->package = -1;
  // I/O objects hang below the CPU-side object whose cpuset is local to them.
  hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (local == nullptr) return;
  if (local->nodeset != nullptr && hwloc_bitmap_weight(local->nodeset) == 1)
    gpu->numa_node = hwloc_bitmap_first(local->nodeset);
  for (hwloc_obj_t o = local; o != nullptr; o = o->parent) {
    if (o->type == HWLOC_OBJ_PACKAGE && o->os_index != HWLOC_UNKNOWN_INDEX) {
      gpu->package = static_cast<int>(o->os_index);
      return;
    }
  }
  // Attached above the packages (the Machine): the socket is known only on a one-socket box.
  if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE) == 1) {
    hwloc_obj_t p = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PACKAGE, 0);
    if (p->os_index != HWLOC_UNKNOWN_INDEX) gpu->package = static_cast<int>(p->os_index);
  }
}

void disableGpuPlugins(hwloc_topology_t topo) {
  // Unknown names are accepted and ignored, so the list can name plugins a build lacks.
  for (const char* name : {"cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"})
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
}

}  // namespace tpar
