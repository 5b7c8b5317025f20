#include "shim_test_util.h"

#include <unistd.h>

#include "common/child_process.h"

namespace tpar_shim_test {

bool Standin::attach() {
  handle_ = dlopen(TPAR_STANDIN_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  return handle_ != nullptr;
}

void Standin::clearLog() { symbol<void (*)()>(handle_, "standinClearLog")(); }

void Standin::setResult(int rc) { symbol<void (*)(int)>(handle_, "standinSetResult")(rc); }

void Standin::setGroup(int nranks, int rank, int device) {
  symbol<void (*)(int, int, int)>(handle_, "standinSetGroup")(nranks, rank, device);
}

int Standin::size() { return symbol<int (*)()>(handle_, "standinLogSize")(); }

std::string Standin::line(int i) {
  char buf[512];
  symbol<void (*)(int, char*, int)>(handle_, "standinLogLine")(i, buf, sizeof(buf));
  return buf;
}

std::vector<std::string> Standin::lines() {
  std::vector<std::string> out;
  for (int i = 0, n = size(); i < n; ++i) out.push_back(line(i));
  return out;
}

int runChildTestStatus(const std::string& name, const std::vector<std::string>& env,
                       std::string* output) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) {
    *output = "cannot find this test binary";
    return -2;  // as ChildProcess::wait for a child that never started
  }
  exe[n] = '\0';
  std::vector<std::string> all = env;
  all.push_back("TPAR_SHIM_TEST_CHILD=1");
  return tpar_test::runChild({exe, "--gtest_filter=ShimChild." + name}, all, 120, output);
}

int runChildTest(const std::string& name, const std::vector<std::string>& env,
                 std::string* output) {
  if (runChildTestStatus(name, env, output) != 0) return 1;
  if (output->find("[  SKIPPED ] 1 test") != std::string::npos) return 2;
  // A child that ran nothing (a misspelt name) exits 0 too.
  return output->find("[  PASSED  ] 1 test") != std::string::npos ? 0 : 1;
}

}  // namespace tpar_shim_test
