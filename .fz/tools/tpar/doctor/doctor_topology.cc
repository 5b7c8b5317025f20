// `tpar doctor`'s topology section: what tpar itself makes of this machine (src/topology), as
// opposed to NVML's nvidia-smi-style matrix next to it. The islands and the signature are what
// the tuner and the hierarchical algorithm will see, so a user can check them here.
#include <nlohmann/json.hpp>

#include "api/internal.h"
#include "tools/tpar/doctor/doctor.h"
#include "tpar/tpar.h"

namespace tpar_cli {

void gatherTopology(DoctorResults* r) {
  std::vector<int> devices;
  for (const GpuProbe& g : r->gpus) devices.push_back(g.index);
  if (devices.empty()) return;
  tpar::Topology topo;
  if (tpar::discoverTopology(devices, &topo) != tparSuccess) {
    r->topology_error = tparGetLastError(nullptr);
    return;
  }
  r->topology = std::move(topo);
}

nlohmann::json topologyJson(const DoctorResults& r) {
  const tpar::Topology& t = r.topology;
  if (t.links.empty() && r.topology_error.empty()) return nlohmann::json();
  nlohmann::json links = nlohmann::json::array();
  for (const std::vector<tpar::LinkClass>& row : t.links) {
    nlohmann::json names = nlohmann::json::array();
    for (tpar::LinkClass c : row) names.push_back(tpar::linkClassName(c));
    links.push_back(names);
  }
  nlohmann::json bus_ids = nlohmann::json::array();
  for (const tpar::TopoGpu& g : t.gpus) bus_ids.push_back(g.bus_id);
  return {{"source", t.source}, {"signature", t.signature}, {"islands", t.islands},
          {"links", links},     {"bus_ids", bus_ids},       {"error", r.topology_error}};
}

std::string renderTopology(const DoctorResults& r) {
  if (!r.topology_error.empty())
    return "\nTopology (tpar's view): unknown: " + r.topology_error + "\n";
  if (r.topology.links.empty()) return "";
  std::string s = "\nTopology (tpar's view: islands and link classes, ranks = GPUs above)\n  ";
  const std::string text = tpar::describeTopology(r.topology);
  for (size_t i = 0; i < text.size(); ++i) {
    s += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) s += "  ";
  }
  return s;
}

}  // namespace tpar_cli
