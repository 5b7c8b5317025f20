// `tpar bench` as a user runs it: a short run on this machine's GPUs, checked, with JSON.
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

TEST(CliBench, ShortRunChecksEveryResultAndWritesJson) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_" + std::to_string(getpid()) + ".json";
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--ranks", "2", "--sizes", "4K,200K", "-n",
                             "5", "-w", "1", "--json", json},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements")) << out;
  EXPECT_NE(std::string::npos, out.find("launch floor")) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  ASSERT_TRUE(j.contains("rows"));
  int tpar_rows = 0;
  for (const auto& r : j["rows"]) {
    EXPECT_EQ(0, r["wrong_out_of_place"].get<int>());
    EXPECT_EQ(0, r["wrong_in_place"].get<int>());
    EXPECT_GT(r["us_out_of_place"].get<double>(), 0.0);
    tpar_rows += r["backend"].get<std::string>().rfind("tpar", 0) == 0;
  }
  // tpar, tpar:oneshot, tpar:twoshot, tpar:staged (and tpar:hier with 3+ GPUs) at two sizes.
  int ngpus = 0;
  cudaGetDeviceCount(&ngpus);
  EXPECT_EQ(ngpus > 2 ? 10 : 8, tpar_rows);
  for (const char* key : {"gpus", "nvidia_driver", "commit", "command", "nccl"})
    EXPECT_TRUE(j.contains(key)) << key;
  unlink(json.c_str());
}

TEST(CliBench, BadArgumentsExitWithTwoAndSayWhy) {
  TPAR_REQUIRE_GPU();
  std::string out;
  EXPECT_EQ(2, runProcess({TPAR_CLI_BINARY, "bench", "--backends", "mpi"}, {}, 60, &out)) << out;
  EXPECT_NE(std::string::npos, out.find("mpi")) << out;
}

}  // namespace
}  // namespace tpar_test

namespace tpar_test {
namespace {

TEST(CliBench, OneProcessPerRankChecksEveryResult) {
  TPAR_REQUIRE_GPU();
  std::string out;
  // Two processes; on a single GPU they are time-sliced, so only a few calls.
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--procs", "--ranks", "2", "--backends",
                             "tpar,tpar:twoshot", "--sizes", "4K,100K", "-n", "3", "-w", "1"},
                            {}, 600, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("one process per rank")) << out;
  EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements")) << out;
  EXPECT_NE(std::string::npos, out.find("tpar:twoshot")) << out;
}

}  // namespace
}  // namespace tpar_test
