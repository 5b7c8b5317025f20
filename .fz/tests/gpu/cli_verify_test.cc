// `tpar verify` as a user runs it: a two-layer model on this machine's GPUs (two virtual ranks
// on one GPU), timed and checked, with its JSON record.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

int visibleGpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

TEST(CliVerify, SmallModelRunsChecksRanksAndWritesJson) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_verify_" + std::to_string(getpid()) + ".json";
  std::string out;
  const int rc =
      runProcess({TPAR_CLI_BINARY, "verify", "--layers", "2", "--hidden", "1024", "--intermediate",
                  "2048", "--tokens", "8", "--tp", "2", "--iters", "3", "--json", json},
                 {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  // The table, its legend and the per-pass arithmetic.
  for (const char* text : {"pass_ms", "compute_ms", "ar_share", "ar_only", "tokens/s",
                           "accept_len / (verify_ms + draft_ms) * 1000", "4 all-reduces",
                           "check tpar: final hidden state of all 2 ranks bitwise identical"})
    EXPECT_NE(std::string::npos, out.find(text)) << text << "\n" << out;
  if (visibleGpus() < 2) {
    EXPECT_NE(std::string::npos, out.find("VIRTUAL RANKS")) << out;
    EXPECT_NE(std::string::npos, out.find("skipped: ")) << out;
  }

  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  for (const char* key : {"gpus", "commit", "command", "config", "per_pass", "formula",
                          "compute_only_ms", "backends", "ratios", "ok"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(2, j["config"]["layers"].get<int>());
  EXPECT_EQ(1024, j["config"]["hidden"].get<int>());
  EXPECT_EQ(2, j["config"]["tp"].get<int>());
  EXPECT_EQ(4, j["per_pass"]["allreduces"].get<int>());
  EXPECT_EQ(2u * 2 * 8 * 1024 * 2, j["per_pass"]["allreduce_bytes_per_rank"].get<size_t>());
  EXPECT_GT(j["compute_only_ms"].get<double>(), 0.0);

  ASSERT_EQ(2u, j["backends"].size());  // tpar and nccl (run or skipped)
  const auto& tpar = j["backends"][0];
  EXPECT_EQ("tpar", tpar["backend"].get<std::string>());
  ASSERT_EQ("ok", tpar["status"].get<std::string>()) << tpar.dump();
  EXPECT_TRUE(tpar["ranks_bitwise_equal"].get<bool>());
  EXPECT_EQ(0, tpar["nonfinite"].get<int>());
  EXPECT_GT(tpar["pass_ms"].get<double>(), 0.0);
  EXPECT_GT(tpar["allreduce_only_ms"].get<double>(), 0.0);
  EXPECT_EQ(3u, tpar["pass_samples_ms"].size());
  const double tps = tpar["tokens_per_s"].get<double>();
  EXPECT_NEAR(3.0 / tpar["pass_ms"].get<double>() * 1000.0, tps, 1e-6 * tps);
  const auto& nccl = j["backends"][1];
  EXPECT_EQ("nccl", nccl["backend"].get<std::string>());
  if (visibleGpus() < 2) {
    EXPECT_EQ("skipped", nccl["status"].get<std::string>());
  }
  if (nccl["status"] == "ok") {
    EXPECT_EQ(1u, j["ratios"].size());
    EXPECT_NE(std::string::npos, out.find("tpar vs nccl")) << out;
  }
  unlink(json.c_str());
}

// Options are checked before the GPU is looked for: this one runs anywhere.
TEST(CliVerify, BadOptionsExitWithTwoAndSayWhy) {
  std::string out;
  EXPECT_EQ(2,
            runProcess({TPAR_CLI_BINARY, "verify", "--hidden", "1000", "--tp", "3"}, {}, 60, &out))
      << out;
  EXPECT_NE(std::string::npos, out.find("--hidden 1000 is not divisible by --ranks 3")) << out;
}

}  // namespace
}  // namespace tpar_test
