// `tpar info`, `tpar env`, and `tpar` with no subcommand.
#include <cstdio>
#include <cstdlib>

#include "api/internal.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/nccl_loader.h"
#include "tools/tpar/common/report.h"
#include "tools/tpar/info/env_report.h"
#include "tpar/tpar.h"

extern char** environ;

namespace tpar_cli {
namespace {

std::vector<EnvSetting> processSettings() {
  return envSettings([](const char* n) { return std::getenv(n); });
}

std::vector<std::string> processEnvironment() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) out.push_back(*e);
  return out;
}

// Prints the malformed TPAR_* values; true when there are any.
bool reportBadSettings(const std::vector<EnvSetting>& settings) {
  bool bad = false;
  for (const EnvSetting& e : settings) {
    if (e.error.empty()) continue;
    std::fprintf(stderr, "tpar: %s\n", e.error.c_str());
    bad = true;
  }
  return bad;
}

int info() {
  int version = 0;
  tparGetVersion(&version);
  std::printf("tpar %d.%d.%d (commit %s)\n", version / 10000, version / 100 % 100, version % 100,
              TPAR_GIT_COMMIT);
  const std::vector<EnvSetting> settings = processSettings();
  for (const EnvSetting& e : settings)
    if (e.source != "default" && e.error.empty())
      std::printf("  set: %s=%s\n", e.name.c_str(), e.value.c_str());
  // A malformed variable makes every communicator init fail: say so before anything else.
  if (reportBadSettings(settings)) return kExitUsage;
  std::printf("Algorithms (TPAR_ALGO; tpar:<name> in tpar bench): name, schedule, protocol, "
              "direction\n%s",
              algorithmTable().c_str());
  std::string why;
  const auto gpus = listGpus(&why);
  std::string nccl_why;
  const NcclLib* nccl = loadNccl(&nccl_why);
  std::printf("NCCL: %s\n",
              nccl ? (ncclVersionString(nccl->version) + " (" + nccl->path + ")").c_str()
                   : nccl_why.c_str());
  if (gpus.empty()) {
    std::printf("tpar cannot run here: %s.\n", why.c_str());
    std::printf("tpar needs NVIDIA GPUs (sm_80 or newer) to all-reduce; what runs here without\n"
                "one: the unit tests (scripts/test.sh) and `tpar env`.\n");
    return kExitNoGpu;
  }
  int driver = 0;
  cudaDriverGetVersion(&driver);
  std::printf("NVIDIA driver %s (CUDA %d.%d), %zu GPU(s):\n", nvidiaDriverVersion().c_str(),
              driver / 1000, driver % 1000 / 10, gpus.size());
  for (const GpuInfo& g : gpus) {
    std::printf("  GPU %d: %s, sm_%d%d, %d SMs, %.0f GiB, PCI %s\n", g.index, g.name.c_str(),
                g.cc_major, g.cc_minor, g.sms, g.memory_bytes / double(1 << 30), g.bus_id.c_str());
  }
  for (size_t a = 0; a < gpus.size(); ++a) {
    for (size_t b = 0; b < gpus.size(); ++b) {
      if (a == b) continue;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, static_cast<int>(a), static_cast<int>(b));
      if (!can) std::printf("  GPU %zu cannot access GPU %zu peer-to-peer\n", a, b);
    }
  }
  return kExitOk;
}

}  // namespace

int runDefault(const std::string& command_line) {
  if (int rc = info()) return rc;
  std::printf("\n");
  return runQuickBench(command_line);
}

Action addInfoCommand(CLI::App& root, const std::string&) {
  root.add_subcommand("info", "GPUs, driver, NCCL and the settings tpar would use");
  return [] { return info(); };
}

Action addEnvCommand(CLI::App& root, const std::string&) {
  CLI::App* sub = root.add_subcommand(
      "env", "environment variables tpar reads: the value in force and where it comes from");
  auto markdown = std::make_shared<bool>(false);
  sub->add_flag("--markdown", *markdown, "print docs/env.md (the registry) instead");
  sub->footer("For env: 2 when a TPAR_* variable is malformed (communicator init would fail).");
  return [markdown] {
    if (*markdown) {
      std::printf("%s", tpar::envMarkdown().c_str());
      return kExitOk;
    }
    const std::vector<EnvSetting> settings = processSettings();
    std::printf("%s", renderEnvSettings(settings, unknownTparVariables(processEnvironment())).c_str());
    return reportBadSettings(settings) ? kExitUsage : kExitOk;
  };
}

}  // namespace tpar_cli
