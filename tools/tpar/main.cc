// The `tpar` command: `tpar info | bench | doctor | verify | tune | env`. With no subcommand it
// describes the machine and runs a short benchmark on its GPUs.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "tools/tpar/commands.h"
#include "tpar/tpar.h"

int main(int argc, char** argv) {
  const std::string cmdline = tpar_cli::commandLineOf(argc, argv);
  CLI::App app{"tpar: all-reduce for tensor-parallel inference on PCIe GPU servers", "tpar"};
  app.set_version_flag("--version", std::string("tpar ") + std::to_string(TPAR_MAJOR) + "." +
                                        std::to_string(TPAR_MINOR) + "." +
                                        std::to_string(TPAR_PATCH) + " (commit " +
                                        TPAR_GIT_COMMIT + ")");
  app.require_subcommand(0, 1);
  std::vector<std::pair<CLI::App*, tpar_cli::Action>> commands;
  auto add = [&](tpar_cli::Action action) {
    commands.emplace_back(app.get_subcommands({}).back(), std::move(action));
  };
  add(tpar_cli::addInfoCommand(app, cmdline));
  add(tpar_cli::addBenchCommand(app, cmdline));
  add(tpar_cli::addDoctorCommand(app, cmdline));
  add(tpar_cli::addVerifyCommand(app, cmdline));
  add(tpar_cli::addTuneCommand(app, cmdline));
  add(tpar_cli::addEnvCommand(app, cmdline));
  CLI11_PARSE(app, argc, argv);
  for (auto& [sub, action] : commands) {
    if (sub->parsed()) return action();
  }
  // No subcommand: what this machine has, then a short benchmark where there are GPUs.
  return tpar_cli::runDefault(cmdline);
}
