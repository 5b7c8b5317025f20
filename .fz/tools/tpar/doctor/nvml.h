// What `tpar doctor` asks of NVML (loaded at run time by the library: api/internal.h):
// PCIe links and the GPU topology where the driver's management library is present; where it
// is not (containers that mount only the CUDA driver) the doctor still runs, with those fields
// unknown.
#ifndef TPAR_TOOLS_NVML_H_
#define TPAR_TOOLS_NVML_H_

#include <string>

namespace tpar_cli {

// NVML's common-ancestor levels (nvmlGpuTopologyLevel_t), with NVML's stable ABI values.
constexpr int kNvmlTopologyInternal = 0;     // the same board
constexpr int kNvmlTopologySingle = 10;      // one PCIe switch
constexpr int kNvmlTopologyMultiple = 20;    // several PCIe switches, no host bridge
constexpr int kNvmlTopologyHostBridge = 30;  // one PCIe host bridge
constexpr int kNvmlTopologyNode = 40;        // host bridges of one NUMA node
constexpr int kNvmlTopologySystem = 50;      // across NUMA nodes (the CPU interconnect)
constexpr int kNvmlTopologyUnknown = -1;     // NVML missing or it did not answer

struct PcieLink {
  int gen = 0, width = 0;          // now (an idle GPU lowers its generation to save power)
  int gen_max = 0, width_max = 0;  // what the GPU and slot can do; 0 = unknown
};

// True when libnvidia-ml.so.1 loaded and nvmlInit succeeded (once per process); otherwise
// false with `why`.
bool nvmlAvailable(std::string* why);

// The GPU's PCIe link, found by PCI bus id as CUDA prints it ("0000:3B:00.0").
bool nvmlPcieLink(const std::string& bus_id, PcieLink* out, std::string* why);

// The common-ancestor level of two GPUs (kNvmlTopology*).
int nvmlTopologyLevel(const std::string& bus_a, const std::string& bus_b);

// Active NVLinks joining two GPUs, directly or through NVSwitches; 0 when none or unknown.
int nvmlNvLinkCount(const std::string& bus_a, const std::string& bus_b);

// "" when NVML reports peer writes from a to b as supported (or cannot say); otherwise its
// reason in words.
std::string nvmlP2pWriteProblem(const std::string& bus_a, const std::string& bus_b);

// NVML's nvmlGpuP2PStatus_t in words ("" for OK).
std::string nvmlP2pStatusText(int status);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_NVML_H_
