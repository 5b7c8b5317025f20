// Two processes on one GPU through CUDA IPC.
#include <unistd.h>

#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(MultiProcess, TwoProcessesOnOneGpuGetCorrectBitwiseEqualResults) {
  TPAR_REQUIRE_GPU();
  const int n = 2;
  tparUniqueId id;
  TPAR_OK(tparGetUniqueId(&id));
  std::string hex;
  char buf[3];
  for (char c : id.internal) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<unsigned char>(c));
    hex += buf;
  }
  const uint64_t seed = freshSeed() % 1000000007ull;
  std::vector<std::future<int>> procs;
  std::vector<std::string> outputs(n), files(n);
  for (int r = 0; r < n; ++r) {
    files[r] = "/tmp/tpar_mp_" + std::to_string(getpid()) + "_" + std::to_string(r);
    procs.push_back(std::async(std::launch::async, [&, r] {
      return runProcess({TPAR_MP_WORKER, hex, std::to_string(r), std::to_string(n),
                         std::to_string(seed), files[r]},
                        {"TPAR_ALLOW_SHARED_DEVICE=1"}, 300, &outputs[r]);
    }));
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(0, procs[r].get()) << "rank " << r << ":\n" << outputs[r];
  const std::string first = readFile(files[0]);
  EXPECT_FALSE(first.empty());
  for (int r = 1; r < n; ++r) EXPECT_EQ(first, readFile(files[r])) << "rank " << r << " differs";
  for (const auto& f : files) unlink(f.c_str());
}

}  // namespace
}  // namespace tpar_test
