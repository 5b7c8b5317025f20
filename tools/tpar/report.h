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

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_REPORT_H_
