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

// The arguments that make the command a worker of a group of `world` processes: its rank, the
// group's tpar unique id, and `out_flag out_path`, the file it writes its results to.
std::vector<std::string> workerArgs(int rank, int world, const std::string& id,
                                    const std::string& out_flag, const std::string& out_path);

// A temporary file through which a child hands its results back (/tmp/tpar_child_XXXXXX);
// removed when this goes out of scope. path() is "" when it could not be created.
class ChildFile {
 public:
  ChildFile();
  ChildFile(const ChildFile&) = delete;
  ChildFile& operator=(const ChildFile&) = delete;
  ~ChildFile();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_COMMON_SPAWN_H_
