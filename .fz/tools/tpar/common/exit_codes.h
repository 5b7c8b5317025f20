// One exit-status map for every `tpar` command, printed by --help, listed in docs/CLI.md and
// the README, and tested per command. A command exits with the first of these that applies.
#ifndef TPAR_TOOLS_EXIT_CODES_H_
#define TPAR_TOOLS_EXIT_CODES_H_

#include <string>
#include <vector>

namespace tpar_cli {

constexpr int kExitOk = 0;           // the command did what was asked; every check passed
constexpr int kExitCheckFailed = 1;  // it ran, and a result was wrong (a wrong element, a failed
                                     // self-test, ranks whose outputs differ)
constexpr int kExitUsage = 2;        // a bad option, argument, output path or TPAR_* variable:
                                     // nothing was run
constexpr int kExitNoGpu = 3;        // no NVIDIA driver, or no usable CUDA GPU: nothing to run on
constexpr int kExitRunError = 4;     // it started and could not finish: a CUDA, NCCL or tpar call
                                     // failed, a wait timed out, a file could not be written

struct ExitCodeInfo {
  int code;
  const char* name;     // "ok", "check failed", ...
  const char* meaning;  // one line
};

// Every code above, in order.
const std::vector<ExitCodeInfo>& exitCodes();

// The table as --help prints it (after "Exit status:").
std::string exitCodeHelp();

// Why CUDA cannot run here, in words a user acts on ("no NVIDIA driver found (...)"), or ""
// when at least one GPU is usable. `gpu_count` (may be null) receives the number of GPUs.
// `driver_library`: the driver's user-space library (tests name a missing one).
std::string whyNoGpu(int* gpu_count, const char* driver_library = "libcuda.so.1");

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_EXIT_CODES_H_
