// What a Topology means once built, wherever it came from (hwloc, CUDA and NVML, an XML
// fixture, a hand-made matrix): link class names, islands, the signature and the text form.
#include "topology/topology.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "base/hash.h"

namespace tpar {
namespace {

// NOTE [island distance]
// Islands are cut along a distance between two ranks: the link class, except that kAcrossNuma
// is split by the CPU socket. The enum keeps NODE (host bridges of one socket) and SYS (the
// socket interconnect) in one class, but on current two-socket servers every GPU has a host
// bridge of its own, so NODE is the normal link inside a socket and the socket crossing is the
// expensive one (docs/DESIGN.md section 1: ~24 GB/s against ~50 GB/s). Two GPUs count as
// being on one socket when both packages are known and equal, or, with no package known, both NUMA
// nodes are known and equal; anything unknown counts as across, which is the conservative
// side (it can only make islands smaller).
bool sameSocket(const Topology& t, int a, int b) {
  if (static_cast<int>(t.gpus.size()) != static_cast<int>(t.links.size())) return false;
  const TopoGpu& x = t.gpus[a];
  const TopoGpu& y = t.gpus[b];
  if (x.package >= 0 && y.package >= 0) return x.package == y.package;
  if (x.package < 0 && y.package < 0 && x.numa_node >= 0 && y.numa_node >= 0)
    return x.numa_node == y.numa_node;
  return false;
}

LinkClass linkAt(const Topology& t, int a, int b) {
  // A ragged matrix is treated as missing links: no peer access, the safe assumption.
  if (b >= static_cast<int>(t.links[a].size())) return LinkClass::kNoP2P;
  return t.links[a][b];
}

// See NOTE [island distance]. Symmetric even when `links` is not: the worse direction counts.
int distance(const Topology& t, int a, int b) {
  const LinkClass c = std::max(linkAt(t, a, b), linkAt(t, b, a));
  const int d = 2 * static_cast<int>(c);
  return c == LinkClass::kAcrossNuma && !sameSocket(t, a, b) ? d + 1 : d;
}

// Connected components of the graph whose edges are the pairs at distance <= limit, each in
// ascending rank order, ordered by their first rank. Returns false when some component holds
// a pair farther apart than `limit` (the components are not cliques).
bool componentsWithin(const std::vector<std::vector<int>>& dist, int limit,
                      std::vector<std::vector<int>>* out) {
  const int n = static_cast<int>(dist.size());
  std::vector<int> comp(n, -1);
  out->clear();
  for (int start = 0; start < n; ++start) {
    if (comp[start] >= 0) continue;
    const int id = static_cast<int>(out->size());
    std::vector<int> members{start};
    comp[start] = id;
    for (size_t i = 0; i < members.size(); ++i) {
      for (int r = 0; r < n; ++r) {
        if (comp[r] < 0 && dist[members[i]][r] <= limit) {
          comp[r] = id;
          members.push_back(r);
        }
      }
    }
    std::sort(members.begin(), members.end());
    out->push_back(members);
  }
  for (const std::vector<int>& island : *out)
    for (int a : island)
      for (int b : island)
        if (a != b && dist[a][b] > limit) return false;
  return true;
}

std::string shortName(const Topology& t, int a, int b) {
  switch (std::max(linkAt(t, a, b), linkAt(t, b, a))) {
    case LinkClass::kSameDevice:
      return "X";
    case LinkClass::kNvLink:
      return "NV";
    case LinkClass::kSameSwitch:
      return "PIX";
    case LinkClass::kAcrossSwitches:
      return "PXB";
    case LinkClass::kSameHostBridge:
      return "PHB";
    case LinkClass::kAcrossNuma:
      return sameSocket(t, a, b) ? "NODE" : "SYS";
    case LinkClass::kNoP2P:
      return "NOP2P";
  }
  return "?";
}

}  // namespace

int maxRanksPerGpu(const Topology& t) {
  int most = 1;
  for (size_t a = 0; a < t.links.size(); ++a) {
    int same = 0;
    for (size_t b = 0; b < t.links[a].size(); ++b)
      same += a == b || t.links[a][b] == LinkClass::kSameDevice;
    most = std::max(most, same);
  }
  return most;
}

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kSameDevice:
      return "same-device";
    case LinkClass::kNvLink:
      return "nvlink";
    case LinkClass::kSameSwitch:
      return "switch";
    case LinkClass::kAcrossSwitches:
      return "across-switches";
    case LinkClass::kSameHostBridge:
      return "host-bridge";
    case LinkClass::kAcrossNuma:
      return "across-numa";
    case LinkClass::kNoP2P:
      return "no-p2p";
  }
  return "unknown";
}

// NOTE [islands]
// Islands are the coarsest partition of the ranks into more than one group such that every
// link inside a group is strictly better (a smaller distance, NOTE [island distance]) than
// every link between groups; one island when no such partition exists, in particular when all
// links are equally good. Computed as: for each distance t that occurs between two ranks,
// from the second worst down to the best, take the connected components of "distance <= t";
// the first t whose components are cliques (no pair inside farther than t) gives the islands.
// Components at t are cliques exactly when every inside link is <= t and every crossing link
// is > t, and a larger t merges more, so the first hit is the coarsest; t below the worst
// distance guarantees more than one island. PCIe trees always give a hit (distances from a
// tree are ultrametric); mixed NVLink/P2P patterns may not, and then the ranks stay one island
// rather than being split along links that are not uniformly better.
void deriveIslands(Topology* topo) {
  const int n = static_cast<int>(topo->links.size());
  std::vector<std::vector<int>> dist(n, std::vector<int>(n, 0));
  std::set<int> seen;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      dist[a][b] = distance(*topo, a, b);
      seen.insert(dist[a][b]);
    }
  }
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  topo->islands.clear();
  if (n > 0) topo->islands.push_back(all);
  if (seen.size() > 1) {
    std::vector<int> limits(seen.begin(), seen.end());
    limits.pop_back();  // the worst distance would put everyone in one island
    for (auto it = limits.rbegin(); it != limits.rend(); ++it) {
      std::vector<std::vector<int>> islands;
      if (componentsWithin(dist, *it, &islands)) {
        topo->islands = islands;
        break;
      }
    }
  }

  // The signature covers everything the islands and a tuner can see: the rank count, every
  // pair's distance (its link class, and the socket split of kAcrossNuma) and the islands.
  // Bus ids are left out on purpose, so that two machines of one model share tuning results.
  uint64_t h = fnv1aU64(kFnvOffset, static_cast<uint64_t>(n));
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) h = fnv1aU64(h, static_cast<uint64_t>(dist[a][b]));
  for (const std::vector<int>& island : topo->islands) {
    h = fnv1aU64(h, island.size());
    for (int r : island) h = fnv1aU64(h, static_cast<uint64_t>(r));
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "v1-%016" PRIx64, h);
  topo->signature = buf;
}

std::string describeTopology(const Topology& topo) {
  const int n = static_cast<int>(topo.links.size());
  std::string s;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%d rank%s, %zu island%s, signature %s, from %s\n", n,
                n == 1 ? "" : "s", topo.islands.size(), topo.islands.size() == 1 ? "" : "s",
                topo.signature.c_str(), topo.source.empty() ? "?" : topo.source.c_str());
  s += buf;
  for (size_t i = 0; i < topo.islands.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "  island %zu: ranks", i);
    s += buf;
    for (int r : topo.islands[i]) s += " " + std::to_string(r);
    s += "\n";
  }
  if (static_cast<int>(topo.gpus.size()) == n) {
    for (int r = 0; r < n; ++r) {
      const TopoGpu& g = topo.gpus[r];
      std::snprintf(buf, sizeof(buf), "  rank %-2d %-13s NUMA %-3s socket %s\n", r,
                    g.bus_id.empty() ? "?" : g.bus_id.c_str(),
                    g.numa_node >= 0 ? std::to_string(g.numa_node).c_str() : "-",
                    g.package >= 0 ? std::to_string(g.package).c_str() : "-");
      s += buf;
    }
  }
  if (n == 0) return s;
  // Cells padded to one width, without trailing blanks at the ends of lines.
  auto row = [&](const std::string& head, const std::vector<std::string>& cells) {
    std::string line = head;
    for (const std::string& c : cells)
      line += " " + c + std::string(6 - std::min<size_t>(6, c.size()), ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    s += line + "\n";
  };
  std::vector<std::string> cells;
  for (int b = 0; b < n; ++b) cells.push_back("R" + std::to_string(b));
  row("       ", cells);
  for (int a = 0; a < n; ++a) {
    cells.clear();
    for (int b = 0; b < n; ++b) cells.push_back(shortName(topo, a, b));
    std::snprintf(buf, sizeof(buf), "  R%-4d", a);
    row(buf, cells);
  }
  s += "  X = same GPU, NV = NVLink, PIX = one PCIe switch, PXB = several switches, PHB = one "
       "host bridge,\n  NODE = host bridges of one socket, SYS = across sockets, NOP2P = no "
       "peer access\n";
  return s;
}

}  // namespace tpar
