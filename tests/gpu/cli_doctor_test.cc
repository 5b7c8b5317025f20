// `tpar doctor` as a user runs it on this machine: it must pass here, name the GPUs, give a
// verdict, and write JSON with every section filled.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

std::string tempJson(const char* tag) {
  return "/tmp/tpar_cli_doctor_" + std::string(tag) + "_" + std::to_string(getpid()) + ".json";
}

bool readJson(const std::string& path, nlohmann::json* j) {
  std::ifstream f(path);
  try {
    f >> *j;
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

TEST(CliDoctor, QuickRunPassesNamesTheGpusAndWritesJson) {
  TPAR_REQUIRE_GPU();
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const std::string json = tempJson("quick");
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "doctor", "--quick", "--json", json}, {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find(prop.name)) << out;
  EXPECT_NE(std::string::npos, out.find("Verdict: tpar works here")) << out;
  EXPECT_NE(std::string::npos, out.find("TPAR_ENGINE_PLUGIN=1")) << out;

  nlohmann::json j;
  ASSERT_TRUE(readJson(json, &j)) << out;
  for (const char* key : {"gpus", "nvidia_driver", "commit", "command", "nccl", "doctor"})
    EXPECT_TRUE(j.contains(key)) << key;
  const nlohmann::json& d = j["doctor"];
  EXPECT_EQ(0, d["verdict"]["exit_code"].get<int>());
  EXPECT_TRUE(d["verdict"]["tpar_works"].get<bool>());
  ASSERT_EQ(static_cast<size_t>(ngpus), d["gpus"].size());
  EXPECT_EQ(prop.name, d["gpus"][0]["name"].get<std::string>());
  EXPECT_EQ(static_cast<size_t>(ngpus) * (ngpus - 1), d["pairs"].size());
  // --quick skips bandwidth but still measures every latency.
  for (const auto& g : d["gpus"]) {
    EXPECT_TRUE(g["host"]["write_gbps"].is_null());
    EXPECT_GT(g["host"]["latency_us"].get<double>(), 0.0) << g.dump();
  }
  for (const auto& p : d["pairs"])
    if (p["peer_access"].get<bool>()) EXPECT_GT(p["latency_us"].get<double>(), 0.0) << p.dump();
  // oneshot, twoshot, staged, hier on the machine's GPUs, then hier on the fixture's islands.
  const auto& results = d["self_test"]["results"];
  ASSERT_EQ(5u, results.size());
  for (const auto& t : results) EXPECT_TRUE(t["passed"].get<bool>()) << t.dump();
  const auto& fixture = results[4];
  EXPECT_EQ("tpar:hier", fixture["backend"].get<std::string>());
  EXPECT_EQ("hier", fixture["ran"].get<std::string>()) << fixture.dump();
  EXPECT_TRUE(fixture["fallback"].is_null()) << fixture.dump();
  EXPECT_NE(std::string::npos, fixture["where"].get<std::string>().find("islands {0-3} {4-7}"))
      << fixture.dump();
  // On the machine itself hier runs only where its GPUs form equal islands; elsewhere the
  // report names the fallback and never prints a PASS for hier there.
  const auto& own = results[3];
  tparCommInfo_t info{};
  {
    std::vector<int> devs;
    for (int g = 0; g < std::max(ngpus, 1); ++g) devs.push_back(g);
    if (ngpus == 1) devs = {0, 0};
    std::vector<tparComm_t> comms(devs.size());
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.allowSharedDevice = 1;
    TPAR_OK(tparCommInitAllConfig(comms.data(), static_cast<int>(devs.size()), devs.data(), &cfg));
    TPAR_OK(tparCommQuery(comms[0], &info));
    for (tparComm_t c : comms) TPAR_OK(tparCommDestroy(c));
  }
  if (info.islands <= 1) {
    EXPECT_EQ("twoshot (one island)", own["fallback"].get<std::string>()) << own.dump();
    EXPECT_EQ("twoshot", own["ran"].get<std::string>()) << own.dump();
    EXPECT_NE(std::string::npos, out.find("tpar:hier     fell back to twoshot (one island)"))
        << out;
  }
  EXPECT_EQ(info.oneShotMaxBytes, d["self_test"]["one_shot_max_bytes"].get<size_t>());
  EXPECT_FALSE(d["self_test"]["transport"].get<std::string>().empty());
  ASSERT_EQ(2u, d["timing"]["rows"].size());
  for (const auto& row : d["timing"]["rows"]) {
    EXPECT_GT(row["tpar_us"].get<double>(), 0.0) << row.dump();
    EXPECT_FALSE(row["tpar_algo"].get<std::string>().empty());
  }
  EXPECT_EQ(ngpus > 1, d["timing"]["comparable_with_nccl"].get<bool>());
  unlink(json.c_str());
}

TEST(CliDoctor, FullRunMeasuresBandwidthAndHonoursNoNccl) {
  TPAR_REQUIRE_GPU();
  const std::string json = tempJson("full");
  std::string out;
  const int rc =
      runProcess({TPAR_CLI_BINARY, "doctor", "--no-nccl", "--json", json}, {}, 600, &out);
  ASSERT_EQ(0, rc) << out;
  nlohmann::json j;
  ASSERT_TRUE(readJson(json, &j)) << out;
  const nlohmann::json& d = j["doctor"];
  for (const auto& g : d["gpus"]) {
    EXPECT_GT(g["host"]["write_gbps"].get<double>(), 0.0) << g.dump();
    EXPECT_GT(g["host"]["read_gbps"].get<double>(), 0.0) << g.dump();
    EXPECT_GT(g["host"]["both_gbps"].get<double>(), 0.0) << g.dump();
    EXPECT_EQ("", g["host"]["error"].get<std::string>());
  }
  if (d["gpus"].size() == 1) {
    EXPECT_GT(d["gpus"][0]["local"]["write_gbps"].get<double>(), 0.0);
    EXPECT_GT(d["gpus"][0]["local"]["latency_us"].get<double>(), 0.0);
  }
  for (const auto& p : d["pairs"]) {
    if (!p["peer_access"].get<bool>()) continue;
    EXPECT_GT(p["write_gbps"].get<double>(), 0.0) << p.dump();
    EXPECT_GT(p["read_gbps"].get<double>(), 0.0) << p.dump();
  }
  for (const auto& row : d["timing"]["rows"]) {
    EXPECT_TRUE(row["nccl_us"].is_null());
    EXPECT_NE(std::string::npos, row["nccl_error"].get<std::string>().find("--no-nccl"));
  }
  unlink(json.c_str());
}

TEST(CliDoctor, UnknownOptionIsRefused) {
  TPAR_REQUIRE_GPU();
  std::string out;
  EXPECT_NE(0, runProcess({TPAR_CLI_BINARY, "doctor", "--bogus"}, {}, 60, &out)) << out;
  EXPECT_NE(std::string::npos, out.find("bogus")) << out;
}

}  // namespace
}  // namespace tpar_test
