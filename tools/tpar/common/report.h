// What every JSON record of the CLI carries about the machine and the run, so that a number can
// be traced to the GPU, driver, library versions, commit and command line that produced it.
#ifndef TPAR_TOOLS_REPORT_H_
#define TPAR_TOOLS_REPORT_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tpar_cli {

struct GpuInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sms = 0;
  size_t memory_bytes = 0;
  std::string bus_id;
};

// GPUs visible to CUDA (empty with `why` filled when none).
std::vector<GpuInfo> listGpus(std::string* why);

// The kernel driver's version ("580.159.04"), or "unknown".
std::string nvidiaDriverVersion();

// {"tool", "commit", "command", "host", "gpus": [...], "nvidia_driver", "cuda_driver",
//  "cuda_runtime", "nccl", "peer_access": [[...]], "time"}.
nlohmann::json machineReport(const std::string& tool, const std::string& command_line);

// Bus bandwidth as nccl-tests defines it for all-reduce: algbw * 2(n-1)/n, in GB/s.
double algBandwidth(size_t bytes, double us);
double busBandwidth(size_t bytes, double us, int nranks);

// The physical floor of one all-reduce whose receive regions live in pinned host memory
// (docs/PERFORMANCE.md, "Host-staged transport"): every byte written into or read from a host
// region crosses a GPU's PCIe link, so the busiest link needs
//   max(write bytes / write bandwidth, read bytes / read bandwidth) + rounds x hand-off time.
struct HostLinkFloor {
  double write_bytes = 0;  // GPU -> host over the busiest link, per call
  double read_bytes = 0;   // host -> GPU over the busiest link, per call
  int rounds = 0;          // dependent hand-offs through host memory
  double us = 0;           // the floor
  // The same with the link's two directions sharing the rate measured with both at once
  // (LinkMeasure::both_gbps): max(write / write bw, read / read bw, (write + read) / both bw)
  // + rounds x hand-off; 0 when that rate is unknown. Never below `us`.
  double both_us = 0;
};

// One line per algorithm of the registry: its name (TPAR_ALGO, tpar:<name>), schedule,
// protocol and direction, as NCCL names algorithm and protocol apart.
std::string algorithmTable();

// For a message of `bytes` over `nranks` ranks with algorithm `algo` (a registry name,
// tparAlgoName), of which `ranks_per_link` share one GPU's link (all of them for virtual ranks
// on one GPU, 1 with one rank per GPU), at the measured bandwidths (GB/s) and hand-off time
// `rtt_us`, from the algorithm's byte model; a wire variant ("pipelined+int4", 16-bit data)
// takes its plain algorithm's model with each value's bytes as its code's plus the scales'.
// False, with *out untouched, for an algorithm without a model ("nccl", "") or fewer than two
// ranks.
bool hostLinkFloor(const std::string& algo, size_t bytes, int nranks, int ranks_per_link,
                   double write_gbps, double read_gbps, double rtt_us, HostLinkFloor* out,
                   double both_gbps = 0);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_REPORT_H_
