#include "tools/tpar/common/report.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include <cuda_runtime_api.h>

#include "api/internal.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/nccl_loader.h"
#include "tpar/tpar.h"

namespace tpar_cli {

std::vector<GpuInfo> listGpus(std::string* why) {
  std::vector<GpuInfo> out;
  int n = 0;
  if (std::string no = whyNoGpu(&n); !no.empty()) {
    if (why) *why = no;
    return out;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    GpuInfo g;
    g.index = d;
    g.name = p.name;
    g.cc_major = p.major;
    g.cc_minor = p.minor;
    g.sms = p.multiProcessorCount;
    g.memory_bytes = p.totalGlobalMem;
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), d);
    g.bus_id = bus;
    out.push_back(g);
  }
  return out;
}

std::string nvidiaDriverVersion() {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  std::getline(f, line);
  std::stringstream ss(line);
  std::string tok;
  while (ss >> tok) {
    if (!tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) &&
        tok.find('.') != std::string::npos)
      return tok;
  }
  return "unknown";
}

nlohmann::json machineReport(const std::string& tool, const std::string& command_line) {
  nlohmann::json j;
  j["tool"] = tool;
  j["commit"] = TPAR_GIT_COMMIT;
  j["command"] = command_line;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  j["host"] = host;
  std::time_t now = std::time(nullptr);
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  j["time"] = when;
  int version = 0;
  tparGetVersion(&version);
  j["tpar_version"] = version;
  std::string why;
  const auto gpus = listGpus(&why);
  j["gpus"] = nlohmann::json::array();
  for (const GpuInfo& g : gpus) {
    j["gpus"].push_back({{"index", g.index},
                         {"name", g.name},
                         {"compute_capability", std::to_string(g.cc_major) + "." +
                                                    std::to_string(g.cc_minor)},
                         {"sms", g.sms},
                         {"memory_bytes", g.memory_bytes},
                         {"bus_id", g.bus_id}});
  }
  if (gpus.empty()) j["gpus_missing"] = why;
  j["nvidia_driver"] = nvidiaDriverVersion();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  j["cuda_driver"] = driver;
  j["cuda_runtime"] = runtime;
  std::string nccl_why;
  const NcclLib* nccl = loadNccl(&nccl_why);
  j["nccl"] = nccl ? ncclVersionString(nccl->version) : "unavailable: " + nccl_why;
  nlohmann::json peer = nlohmann::json::array();
  for (size_t a = 0; a < gpus.size(); ++a) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t b = 0; b < gpus.size(); ++b) {
      int can = a == b ? 1 : 0;
      if (a != b) cudaDeviceCanAccessPeer(&can, static_cast<int>(a), static_cast<int>(b));
      row.push_back(can);
    }
    peer.push_back(row);
  }
  j["peer_access"] = peer;
  return j;
}

double algBandwidth(size_t bytes, double us) { return us > 0 ? bytes / (us * 1e3) : 0.0; }

double busBandwidth(size_t bytes, double us, int nranks) {
  return nranks > 0 ? algBandwidth(bytes, us) * 2.0 * (nranks - 1) / nranks : 0.0;
}

std::string algorithmTable() {
  std::string s;
  char line[128];
  for (const tpar::Algorithm& a : tpar::algorithms()) {
    std::snprintf(line, sizeof(line), "  %-13s %-13s %-9s %s\n", a.name, a.schedule, a.protocol,
                  a.direction);
    s += line;
  }
  return s;
}

bool hostLinkFloor(const std::string& algo, size_t bytes, int nranks, int ranks_per_link,
                   double write_gbps, double read_gbps, double rtt_us, HostLinkFloor* out,
                   double both_gbps) {
  if (nranks < 2 || ranks_per_link < 1 || write_gbps <= 0 || read_gbps <= 0) return false;
  // Bytes per call of all ranks together, in units of the message size M, and rounds: the
  // algorithm's byte model in the registry (docs/PERFORMANCE.md says where each term comes from).
  const tpar::Algorithm* a = tpar::findAlgorithm(algo);
  // A wire variant ("pipelined+fp8", 16-bit data): its plain algorithm's model, each 2-byte
  // value replaced by its bytes on the wire.
  double per_byte = 1.0;
  for (const tpar::WireAlgorithm& v : tpar::wireAlgorithms()) {
    if (a == nullptr && algo == v.name) {
      a = &tpar::algorithm(v.plain);
      per_byte = v.bytes_per_value / 2.0;
    }
  }
  if (a == nullptr) return false;
  const double n = nranks;
  const double w = a->bytes.write(n) * per_byte;
  const double r = a->bytes.read(n) * per_byte;
  const int rounds = a->bytes.rounds(nranks);
  // Only the ranks on one GPU share its link.
  const double share = static_cast<double>(std::min(ranks_per_link, nranks)) / n;
  const double m = static_cast<double>(bytes);
  HostLinkFloor f;
  f.write_bytes = w * m * share;
  f.read_bytes = r * m * share;
  f.rounds = rounds;
  // GB/s = 1e3 bytes per microsecond.
  const double one_way = std::max(f.write_bytes / (write_gbps * 1e3), f.read_bytes / (read_gbps * 1e3));
  f.us = one_way + rounds * rtt_us;
  if (both_gbps > 0)
    f.both_us = std::max(one_way, (f.write_bytes + f.read_bytes) / (both_gbps * 1e3)) +
                rounds * rtt_us;
  *out = f;
  return true;
}

}  // namespace tpar_cli
