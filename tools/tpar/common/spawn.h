// Child processes of the `tpar` command: one per rank (`bench --procs`, `tune --procs`) or one
// per NCCL variant, started together and waited for with a bound.
#ifndef TPAR_TOOLS_COMMON_SPAWN_H_
#define TPAR_TOOLS_COMMON_SPAWN_H_

#include <string>
#include <vector>

namespace tpar_cli {

// Starts every command (argv lists) with `extra_env` added and its stdout discarded, waits for
// all (killing them all after timeout_s). Returns "" when every one exited 0.
std::string runAll(const std::vector<std::vector<std::string>>& cmds,
                   const std::vector<std::string>& extra_env, int timeout_s);

// This program's own path (/proc/self/exe), or "".
std::string selfPath();

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_COMMON_SPAWN_H_
