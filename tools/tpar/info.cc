// `tpar info`, `tpar env`, and `tpar` with no subcommand.
#include <cstdio>

#include "core/env.h"
#include "tools/tpar/commands.h"
#include "tools/tpar/nccl_loader.h"
#include "tools/tpar/report.h"
#include "tpar/tpar.h"

namespace tpar_cli {
namespace {

int info() {
  int version = 0;
  tparGetVersion(&version);
  std::printf("tpar %d.%d.%d (commit %s)\n", version / 10000, version / 100 % 100, version % 100,
              TPAR_GIT_COMMIT);
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
    std::printf("No CUDA GPU on this machine (%s).\n", why.c_str());
    std::printf("tpar needs NVIDIA GPUs (sm_80 or newer) to all-reduce; what runs here without\n"
                "one: the unit tests (scripts/test.sh) and `tpar env`.\n");
    return 0;
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
  const tpar::Env* env = nullptr;
  if (tpar::processEnv(&env) != tparSuccess) {
    std::printf("environment: %s\n", tparGetLastError(nullptr));
    return 1;
  }
  for (const auto& kv : env->set_vars) std::printf("  set: %s\n", kv.c_str());
  return 0;
}

}  // namespace

int runDefault(const std::string& command_line) {
  if (int rc = info()) return rc;
  std::string why;
  if (listGpus(&why).empty()) return 0;
  std::printf("\n");
  return runQuickBench(command_line);
}

Action addInfoCommand(CLI::App& root, const std::string&) {
  root.add_subcommand("info", "GPUs, driver, NCCL and the settings tpar would use");
  return [] { return info(); };
}

Action addEnvCommand(CLI::App& root, const std::string&) {
  CLI::App* sub = root.add_subcommand("env", "environment variables tpar reads");
  auto markdown = std::make_shared<bool>(false);
  sub->add_flag("--markdown", *markdown, "print docs/env.md");
  return [markdown] {
    if (*markdown) {
      std::printf("%s", tpar::envMarkdown().c_str());
      return 0;
    }
    for (const auto& spec : tpar::envRegistry())
      std::printf("%-28s default %-8s %s\n", spec.name, spec.default_value, spec.description);
    return 0;
  };
}

}  // namespace tpar_cli
