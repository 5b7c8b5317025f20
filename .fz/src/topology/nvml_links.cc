#include "topology/nvml_links.h"

#include <map>
#include <mutex>

#include "topology/nvml_api.h"
#include "topology/pcie_tree.h"

namespace tpar {
namespace {

struct CachedAnswer {
  bool ok = false;
  std::vector<std::vector<bool>> nvlink;
  std::string why;
};

}  // namespace

bool queryNvLinks(const std::vector<std::string>& bus_ids, std::vector<std::vector<bool>>* nvlink,
                  std::string* why) {
  const size_t n = bus_ids.size();
  nvlink->assign(n, std::vector<bool>(n, false));
  static std::mutex mu;
  static std::map<std::vector<std::string>, CachedAnswer> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto hit = cache.find(bus_ids);
  if (hit == cache.end()) {
    CachedAnswer answer;
    const NvmlApi* nvml = nvmlApi(&answer.why);
    if (nvml != nullptr && (!nvml->nvLinkState || !nvml->nvLinkRemotePci)) {
      answer.why = "libnvidia-ml.so.1 lacks the NVLink queries";
      nvml = nullptr;
    }
    const int rc = nvml ? nvml->init() : kNvmlSuccess;
    if (nvml && rc != kNvmlSuccess) {
      answer.why = std::string("nvmlInit_v2 failed: ") + nvml->errorString(rc);
    } else if (nvml) {
      std::vector<NvLinkEnds> links(n);
      std::vector<PciAddress> addr(n);
      std::vector<bool> known(n, false);
      for (size_t i = 0; i < n; ++i) {
        known[i] = parseBusId(bus_ids[i], &addr[i]);
        NvmlDevice dev = nullptr;
        if (known[i] && nvml->handleByBusId(bus_ids[i].c_str(), &dev) == kNvmlSuccess)
          links[i] = nvLinkEnds(*nvml, dev);
      }
      nvml->shutdown();
      answer.nvlink.assign(n, std::vector<bool>(n, false));
      for (size_t a = 0; a < n; ++a) {
        for (size_t b = 0; b < n; ++b) {
          if (a == b || !known[a] || !known[b]) continue;
          bool direct = false;
          for (const PciAddress& p : links[a].gpus) direct |= sameSlot(p, addr[b]);
          for (const PciAddress& p : links[b].gpus) direct |= sameSlot(p, addr[a]);
          answer.nvlink[a][b] = direct || (links[a].to_switch > 0 && links[b].to_switch > 0);
        }
      }
      answer.ok = true;
    }
    hit = cache.emplace(bus_ids, answer).first;
  }
  if (!hit->second.ok) {
    if (why) *why = hit->second.why;
    return false;
  }
  *nvlink = hit->second.nvlink;
  return true;
}

}  // namespace tpar
