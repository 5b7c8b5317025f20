// Helpers of the shim's CPU tests: the shim and the stand-in NCCL loaded in this process, and
// a child process of this test binary running one ShimChild.* test.
#ifndef TPAR_NCCL_SHIM_TESTS_SHIM_TEST_UTIL_H_
#define TPAR_NCCL_SHIM_TESTS_SHIM_TEST_UTIL_H_

#include <dlfcn.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tpar_shim_test {

// A function of a loaded library, typed; fails the test when absent.
template <typename F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

// The stand-in NCCL as the shim loaded it (RTLD_NOLOAD: never a second copy).
class Standin {
 public:
  // False when the stand-in is not loaded in this process.
  bool attach();
  void clearLog();
  void setResult(int rc);
  void setGroup(int nranks, int rank, int device);
  int size();
  std::string line(int i);
  std::vector<std::string> lines();
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
};

// Runs this test binary's ShimChild.<name> in a child process with `env` (NAME=value) added,
// and returns tpar_test::ChildProcess::wait's status (128 + a signal that ended it); its output
// goes to *output. For a child that is expected to stop the process.
int runChildTestStatus(const std::string& name, const std::vector<std::string>& env,
                       std::string* output);

// The same, as a verdict: 0 when the child's test passed, 2 when it skipped, 1 otherwise. The
// child's failures print in *output.
int runChildTest(const std::string& name, const std::vector<std::string>& env,
                 std::string* output);

}  // namespace tpar_shim_test

#endif  // TPAR_NCCL_SHIM_TESTS_SHIM_TEST_UTIL_H_
