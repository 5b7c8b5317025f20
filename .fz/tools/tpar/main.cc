// The `tpar` command: `tpar info | bench | doctor | verify | tune | env`. With no subcommand it
// describes the machine and runs a short benchmark on its GPUs. Every command exits with the
// one map of common/exit_codes.h.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/exit_codes.h"
#include "tpar/tpar.h"

int main(int argc, char** argv) {
  using namespace tpar_cli;
  const std::string cmdline = commandLineOf(argc, argv);
  CLI::App app{"tpar: all-reduce for tensor-parallel inference on PCIe GPU servers", "tpar"};
  app.set_version_flag("--version", std::string("tpar ") + std::to_string(TPAR_MAJOR) + "." +
                                        std::to_string(TPAR_MINOR) + "." +
                                        std::to_string(TPAR_PATCH) + " (commit " +
                                        TPAR_GIT_COMMIT + ")");
  app.require_subcommand(0, 1);
  std::vector<std::pair<CLI::App*, Action>> commands;
  auto add = [&](Action action) {
    commands.emplace_back(app.get_subcommands({}).back(), std::move(action));
  };
  add(addInfoCommand(app, cmdline));
  add(addBenchCommand(app, cmdline));
  add(addDoctorCommand(app, cmdline));
  add(addVerifyCommand(app, cmdline));
  add(addTuneCommand(app, cmdline));
  add(addEnvCommand(app, cmdline));
  return runCli(app, argc, argv, commands, [&] { return runDefault(cmdline); });
}
