// A child process for tests: started with extra environment entries, its stdout and stderr in a
// temporary file, waited for with a bound (killed when it runs over). The unit, GPU and
// multi-process tests all start children this way.
#ifndef TPAR_TESTS_COMMON_CHILD_PROCESS_H_
#define TPAR_TESTS_COMMON_CHILD_PROCESS_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace tpar_test {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills a child still running and removes its output file.
  ~ChildProcess();

  // Starts argv[0] (looked up in PATH) with this process's environment, less GoogleTest's
  // sharding variables, where each NAME=value of `env` replaces or adds NAME (so a test may
  // still hand a child a shard on purpose). False when the output file or the process cannot
  // be made.
  bool start(const std::vector<std::string>& argv, const std::vector<std::string>& env);

  // Exit status, 128 + the signal that ended it, -1 when it still ran after timeout_s (it is
  // then killed), -2 when it never started. A second call returns the same.
  int wait(int timeout_s);

  // False once it has ended (it is then reaped).
  bool running();

  // What it wrote to stdout and stderr so far.
  std::string output() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string log_;
};

// Starts `argv`, waits up to timeout_s, and returns ChildProcess::wait's result; *output gets
// its output (with a note when it was killed).
int runChild(const std::vector<std::string>& argv, const std::vector<std::string>& env,
             int timeout_s, std::string* output);

}  // namespace tpar_test

#endif  // TPAR_TESTS_COMMON_CHILD_PROCESS_H_
