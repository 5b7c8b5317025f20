// `tpar bench` as a user runs it: a short run on this machine's GPUs, checked, with JSON.
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

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
  // tpar, tpar:oneshot, tpar:twoshot, tpar:staged, tpar:oneshot-pull, tpar:twoshot-pull,
  // tpar:pipelined, tpar:twoshot-ll (and tpar:hier with 3+ GPUs) at two sizes.
  int ngpus = 0;
  cudaGetDeviceCount(&ngpus);
  EXPECT_EQ(ngpus > 2 ? 18 : 16, tpar_rows);
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

namespace tpar_test {
namespace {

// The host-staged transport: the link is measured in the same run and every row carries the
// floor of its algorithm (docs/PERFORMANCE.md, "Host-staged transport").
TEST(CliBench, HostTransportRunPrintsTheLinkFloorOfEveryRowAndChecksEveryResult) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_host_" + std::to_string(getpid()) + ".json";
  const std::vector<std::string> backends = {"tpar", "tpar:oneshot", "tpar:twoshot",
                                             "tpar:oneshot-pull", "tpar:twoshot-pull"};
  std::string list;
  for (const auto& b : backends) list += (list.empty() ? "" : ",") + b;
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--transport", "host", "--ranks", "4",
                             "--backends", list, "--sizes", "12K,112K,1M", "-n", "5", "-w", "1",
                             "--json", json},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements")) << out;
  EXPECT_NE(std::string::npos, out.find("# tpar transport: host")) << out;
  EXPECT_NE(std::string::npos, out.find("# host link of GPU 0, measured now")) << out;
  EXPECT_NE(std::string::npos, out.find("x floor")) << out;  // the table's floor columns
  EXPECT_NE(std::string::npos, out.find("against the host-link floor")) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  EXPECT_EQ("host", j["transport"].get<std::string>());
  ASSERT_TRUE(j["host_link"].is_object()) << j.dump(2);
  ASSERT_EQ(1u, j["host_link"]["gpus"].size()) << j["host_link"].dump(2);
  const auto& link = j["host_link"]["gpus"][0];
  EXPECT_EQ("", link["error"].get<std::string>());
  EXPECT_GT(link["write_gbps"].get<double>(), 1.0);
  EXPECT_GT(link["read_gbps"].get<double>(), 1.0);
  EXPECT_GT(link["rtt_us"].get<double>(), 0.1);
  ASSERT_EQ(backends.size() * 3, j["rows"].size()) << out;
  for (const auto& r : j["rows"]) {
    const std::string what = r["backend"].get<std::string>() + " " +
                             std::to_string(r["bytes"].get<size_t>()) + " B";
    EXPECT_EQ(0, r["wrong_out_of_place"].get<int>()) << what;
    EXPECT_EQ(0, r["wrong_in_place"].get<int>()) << what;
    EXPECT_EQ("host", r.value("transport", "")) << what;
    ASSERT_TRUE(r.contains("floor_us")) << what << ": " << r.dump();
    EXPECT_GT(r["floor_us"].get<double>(), 0.0) << what;
    EXPECT_GE(r["floor_rounds"].get<int>(), 1) << what;
    EXPECT_GT(r["floor_write_bytes"].get<double>(), 0.0) << what;
    EXPECT_GT(r["floor_read_bytes"].get<double>(), 0.0) << what;
    // No all-reduce beats the physics; well below its floor, the byte model over-counts.
    EXPECT_GT(r["x_floor_out_of_place"].get<double>(), 0.5)
        << what << " (" << r["chosen"].get<std::string>() << "): "
        << r["us_out_of_place"].get<double>() << " us against a floor of "
        << r["floor_us"].get<double>() << " us";
  }
  unlink(json.c_str());
}

// Two processes through one shared host region (memfd passed at the rendezvous).
TEST(CliBench, OneProcessPerRankOverHostMemoryChecksEveryResult) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_host_procs_" + std::to_string(getpid()) + ".json";
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--procs", "--transport", "host",
                             "--ranks", "2", "--backends", "tpar,tpar:twoshot-pull",
                             "--sizes", "4K,100K", "-n", "3", "-w", "1", "--json", json},
                            {}, 600, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("one process per rank")) << out;
  EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements")) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  ASSERT_EQ(4u, j["rows"].size()) << out;
  for (const auto& r : j["rows"]) {
    EXPECT_EQ("host", r.value("transport", "")) << r.dump();
    EXPECT_TRUE(r.contains("floor_us")) << r.dump();
  }
  unlink(json.c_str());
}

}  // namespace
}  // namespace tpar_test
