// The subcommands of `tpar`. Each registers itself on the root CLI11 app and returns what runs
// it once parsed. The returned Action owns the storage the options are parsed into: keep it
// alive until parsing is over (dropping it first leaves the parser writing into freed memory,
// as AddressSanitizer showed in a unit test).
#ifndef TPAR_TOOLS_COMMANDS_H_
#define TPAR_TOOLS_COMMANDS_H_

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace tpar_cli {

using Action = std::function<int()>;

// `command_line` is the whole invocation, recorded in JSON output.
Action addInfoCommand(CLI::App& root, const std::string& command_line);
Action addEnvCommand(CLI::App& root, const std::string& command_line);
Action addBenchCommand(CLI::App& root, const std::string& command_line);
Action addDoctorCommand(CLI::App& root, const std::string& command_line);
Action addVerifyCommand(CLI::App& root, const std::string& command_line);
Action addTuneCommand(CLI::App& root, const std::string& command_line);

// `tpar` with no subcommand: info, then a short benchmark when a GPU is present.
int runDefault(const std::string& command_line);
// The short benchmark of runDefault (bench.cu).
int runQuickBench(const std::string& command_line);

// The whole command line, as typed.
std::string commandLineOf(int argc, char** argv);

// Parses argv and runs the chosen subcommand (or `no_subcommand`). Help and --version exit 0; a
// parse error prints CLI11's message and exits kExitUsage, and so does a malformed TPAR_*
// variable, before any command but `env` and `info` (which report it themselves) runs. Adds the
// exit-status table to the help of the root and of every subcommand.
int runCli(CLI::App& app, int argc, char** argv,
           const std::vector<std::pair<CLI::App*, Action>>& commands,
           const Action& no_subcommand);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_COMMANDS_H_
