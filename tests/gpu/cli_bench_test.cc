// `tpar bench` as a user runs it: a short run on this machine's GPUs, checked, with JSON.
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/nccl_tests_output.h"
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

// --wire: each format's rows named with it, run with it (algo), checked bit for bit against its
// reference; one process per rank too, where each child takes the format from the name.
TEST(CliBench, WireRowsRunTheirFormatAndAreChecked) {
  TPAR_REQUIRE_GPU();
  for (const bool procs : {false, true}) {
    const std::string json = "/tmp/tpar_cli_bench_wire_" + std::to_string(getpid()) + ".json";
    std::vector<std::string> args = {TPAR_CLI_BINARY, "bench", "--wire", "bf16,int4,fp8",
                                     "--transport", "host", "--ranks", "2", "--backends", "tpar",
                                     "--sizes", "1M,4M", "-n", "2", "-w", "1", "--json", json};
    if (procs) args.insert(args.begin() + 2, "--procs");
    std::string out;
    const int rc = runProcess(args, {"TPAR_WIRE_MIN_BYTES=2M"}, 600, &out);
    ASSERT_EQ(0, rc) << out;
    EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements")) << out;
    std::ifstream f(json);
    nlohmann::json j;
    ASSERT_NO_THROW(f >> j) << out;
    ASSERT_EQ(6u, j["rows"].size()) << out;
    for (const auto& r : j["rows"]) {
      const std::string backend = r["backend"], chosen = r["chosen"];
      const size_t bytes = r["bytes"];
      EXPECT_EQ(0, r["wrong_out_of_place"].get<int>()) << r.dump();
      EXPECT_EQ(0, r["wrong_in_place"].get<int>()) << r.dump();
      // Below TPAR_WIRE_MIN_BYTES every row is lossless; above it, the row's format ran.
      if (backend == "tpar+none" || bytes < (2u << 20))
        EXPECT_EQ(std::string::npos, chosen.find('+')) << r.dump();
      else
        EXPECT_EQ("pipelined" + backend.substr(4), chosen) << r.dump();
    }
    if (!procs) EXPECT_NE(std::string::npos, out.find("speed-up of each wire format")) << out;
    unlink(json.c_str());
  }
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
  // 4 ranks: one per GPU where there are 4 (every GPU's link measured), else virtual ranks on
  // GPU 0 (its link only).
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  ASSERT_EQ(ngpus >= 4 ? 4u : 1u, j["host_link"]["gpus"].size()) << j["host_link"].dump(2);
  for (const auto& link : j["host_link"]["gpus"]) {
    EXPECT_EQ("", link["error"].get<std::string>());
    EXPECT_GT(link["write_gbps"].get<double>(), 1.0);
    EXPECT_GT(link["read_gbps"].get<double>(), 1.0);
    EXPECT_GT(link["both_gbps"].get<double>(), 1.0);
    EXPECT_GT(link["rtt_us"].get<double>(), 0.1);
  }
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
    // The physical floor (lowest over the algorithms) never exceeds the chosen one's.
    ASSERT_TRUE(r.contains("phys_floor_us")) << what << ": " << r.dump();
    EXPECT_GT(r["phys_floor_us"].get<double>(), 0.0) << what;
    EXPECT_LE(r["phys_floor_us"].get<double>(), r["floor_us"].get<double>()) << what;
    EXPECT_NE("", r["phys_floor_algo"].get<std::string>()) << what;
    // The both-ways floor adds a term to the same lowest floor: never below it.
    ASSERT_TRUE(r.contains("phys_both_floor_us")) << what << ": " << r.dump();
    EXPECT_GE(r["phys_both_floor_us"].get<double>(), r["phys_floor_us"].get<double>()) << what;
    EXPECT_NEAR(r["us_out_of_place"].get<double>() / r["phys_both_floor_us"].get<double>(),
                r["x_phys_both_out_of_place"].get<double>(), 1e-9) << what;
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

namespace tpar_test {
namespace {

int gpuCount() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return n;
}

// stdout only (warnings on stderr are no rows), as a script reading nccl-tests' output sees it.
int runTableOnly(const std::string& args, std::string* out) {
  return runProcess({"/bin/sh", "-c", std::string("'") + TPAR_CLI_BINARY + "' " + args + " 2>/dev/null"},
                    {}, 600, out);
}

// An nccl-tests command line as its users type it (-g GPUs, -c check count, -G graph launches,
// -o all, -d all, -m aggregation), read by a reader written for nccl-tests' output.
TEST(CliBench, NcclTestsCommandLineRunsAndReadsLikeNcclTestsOutput) {
  TPAR_REQUIRE_GPU();
  // -g 2: two GPUs, or two virtual ranks on one.
  std::string out;
  const int rc = runTableOnly("bench -b 8 -e 1M -f 32 -g 2 -c 2 -n 3 -w 1 -G 2 -m 2 -o all "
                              "-d all -a 1 --backends tpar,tpar:twoshot",
                              &out);
  ASSERT_EQ(0, rc) << out;
  const NcclTestsOutput t = parseNcclTestsOutput(out);
  ASSERT_EQ("", t.error) << out;
  // 2 backends x 3 types x 3 ops x 5 sizes (8, 256, 8K, 256K, 1M).
  ASSERT_EQ(90u, t.rows.size()) << out;
  for (const NcclTestsRow& r : t.rows) {
    const std::string what = r.type + " " + r.redop + " " + std::to_string(r.size);
    EXPECT_TRUE(r.type == "half" || r.type == "float" || r.type == "bfloat16") << what;
    EXPECT_TRUE(r.redop == "sum" || r.redop == "max" || r.redop == "min") << what;
    EXPECT_EQ(-1, r.root) << what;
    EXPECT_GT(r.out_of_place.time_us, 0.0) << what;
    EXPECT_GT(r.in_place.time_us, 0.0) << what;
    EXPECT_EQ(0, r.out_of_place.wrong) << what;  // checked: a number, not N/A
    EXPECT_EQ(0, r.in_place.wrong) << what;
    ASSERT_GE(r.extras.size(), 2u) << what;
    EXPECT_TRUE(r.extras[0] == "tpar" || r.extras[0] == "tpar:twoshot") << what;
  }
  EXPECT_EQ(0, t.out_of_bounds) << out;
  EXPECT_EQ(2u, t.avg_busbw.size()) << out;  // one per backend
}

TEST(CliBench, PerRankTimesAndCpuTimeAreReported) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_ranks_" + std::to_string(getpid()) + ".json";
  std::string out;
  const int rc = runTableOnly("bench --ranks 3 --sizes 4K,64K -n 5 -w 1 -C 1 -a 2 --backends "
                              "tpar -J " + json, &out);
  ASSERT_EQ(0, rc) << out;
  const NcclTestsOutput t = parseNcclTestsOutput(out);
  ASSERT_EQ("", t.error) << out;
  ASSERT_GE(t.columns.size(), 13u);
  EXPECT_EQ("cputime", t.columns[5]) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  EXPECT_TRUE(j["cputime"].get<bool>());
  EXPECT_EQ(2, j["average"].get<int>());
  ASSERT_EQ(2u, j["rows"].size());
  for (const auto& r : j["rows"]) {
    ASSERT_EQ(3u, r["rank_us_out_of_place"].size()) << r.dump();
    for (const auto& us : r["rank_us_out_of_place"]) EXPECT_GT(us.get<double>(), 0.0);
  }
  unlink(json.c_str());
}

TEST(CliBench, NoBackendThatCanRunExitsFour) {
  TPAR_REQUIRE_GPU();
  // NCCL refuses two ranks on one GPU: more ranks than GPUs leaves nothing to measure.
  const int ranks = std::min(gpuCount() + 1, TPAR_MAX_RANKS);
  std::string out;
  EXPECT_EQ(4, runProcess({TPAR_CLI_BINARY, "bench", "--backends", "nccl", "--ranks",
                           std::to_string(ranks), "--sizes", "4K", "-n", "2"},
                          {}, 300, &out))
      << out;
  EXPECT_NE(std::string::npos, out.find("skipped nccl")) << out;
}

// -R 1: NCCL's buffers registered (ncclCommRegister), results still checked.
TEST(CliBench, RegisteredNcclBuffersAreMeasuredAndChecked) {
  TPAR_REQUIRE_GPU();
  if (gpuCount() < 2) GTEST_SKIP() << "NCCL needs two GPUs";
  std::string out;
  const int rc = runTableOnly("bench -g 2 -b 1K -e 64K -f 8 -n 3 -w 1 -R 1 --backends nccl", &out);
  ASSERT_EQ(0, rc) << out;
  const NcclTestsOutput t = parseNcclTestsOutput(out);
  ASSERT_EQ("", t.error) << out;
  ASSERT_EQ(3u, t.rows.size()) << out;
  for (const NcclTestsRow& r : t.rows) EXPECT_EQ(0, r.out_of_place.wrong) << r.size;
}

}  // namespace
}  // namespace tpar_test

namespace tpar_test {
namespace {

// -G 0: every row timed eagerly and, up to --graph-max-bytes, from a graph replay of the same
// calls, printed side by side; every row still checked.
TEST(CliBench, GraphZeroPrintsEagerNextToGraphAndChecksEveryRow) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_eager_" + std::to_string(getpid()) + ".json";
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--ranks", "2", "--backends",
                             "tpar,tpar:twoshot", "--sizes", "12K,112K,2M", "-G", "0",
                             "--graph-max-bytes", "1M", "-n", "5", "-w", "1", "--json", json},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("# ok: 0 wrong elements in 6 checked rows")) << out;
  EXPECT_NE(std::string::npos, out.find("e-g")) << out;  // the table's graph columns
  EXPECT_NE(std::string::npos, out.find("# -G 0: time = eager calls")) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  EXPECT_EQ("eager+graph", j["timing"].get<std::string>());
  ASSERT_EQ(6u, j["rows"].size()) << out;
  for (const auto& r : j["rows"]) {
    const size_t bytes = r["bytes"].get<size_t>();
    const std::string what = r["backend"].get<std::string>() + " " + std::to_string(bytes) + " B";
    EXPECT_EQ(0, r["wrong_out_of_place"].get<int>()) << what;
    EXPECT_EQ(0, r["wrong_in_place"].get<int>()) << what;
    EXPECT_FALSE(r["graph"].get<bool>()) << what;  // the time columns are the eager ones
    EXPECT_GT(r["us_out_of_place"].get<double>(), 0.0) << what;
    if (bytes > (1u << 20)) {
      EXPECT_FALSE(r.contains("graph_us_out_of_place")) << what << ": above the bound";
      continue;
    }
    ASSERT_TRUE(r.contains("graph_us_out_of_place")) << what << ": " << r.dump();
    for (const char* half : {"out_of_place", "in_place"}) {
      const double eager = r[std::string("eager_us_") + half].get<double>();
      const double graph = r[std::string("graph_us_") + half].get<double>();
      EXPECT_GT(graph, 0.0) << what << " " << half;
      EXPECT_NEAR(eager - graph, r[std::string("eager_minus_graph_us_") + half].get<double>(),
                  1e-9)
          << what << " " << half;
    }
  }
  unlink(json.c_str());
}

// --host-cost: per backend and size, the host time of one call with the streams held, a bare
// launch of the same parameter size beside it, and every batch's outputs checked.
TEST(CliBench, HostCostTimesTheCallAndABareLaunchAndChecksEveryBatch) {
  TPAR_REQUIRE_GPU();
  const std::string json = "/tmp/tpar_cli_bench_host_cost_" + std::to_string(getpid()) + ".json";
  // NCCL needs a GPU per rank.
  const bool nccl = gpuCount() >= 2;
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "bench", "--host-cost", "--ranks", "2",
                             "--backends", nccl ? "tpar,tpar:twoshot,nccl" : "tpar,tpar:twoshot",
                             "--sizes", "12K,1M", "--host-cost-batch", "100",
                             "--host-cost-batches", "7", "--json", json},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  const size_t rows = nccl ? 6 : 4;
  EXPECT_NE(std::string::npos,
            out.find("# ok: 0 wrong elements in " + std::to_string(rows) + " checked rows"))
      << out;
  EXPECT_NE(std::string::npos, out.find("call-bare")) << out;
  std::ifstream f(json);
  nlohmann::json j;
  ASSERT_NO_THROW(f >> j) << out;
  EXPECT_GT(j["param_bytes"].get<int>(), 0);
  ASSERT_EQ(rows, j["host_cost"].size()) << out;
  for (const auto& r : j["host_cost"]) {
    const std::string what =
        r["backend"].get<std::string>() + " " + std::to_string(r["bytes"].get<size_t>()) + " B";
    EXPECT_TRUE(r["checked"].get<bool>()) << what;
    EXPECT_EQ(0, r["wrong"].get<int>()) << what;
    EXPECT_EQ(7, r["batches"].get<int>()) << what;
    EXPECT_GT(r["batch"].get<int>(), 0) << what;
    EXPECT_GT(r["min_us"].get<double>(), 0.0) << what;
    EXPECT_LE(r["min_us"].get<double>(), r["median_us"].get<double>()) << what;
    EXPECT_GT(r["bare_min_us"].get<double>(), 0.0) << what;
    EXPECT_LE(r["bare_min_us"].get<double>(), r["bare_median_us"].get<double>()) << what;
    EXPECT_NEAR(r["median_us"].get<double>() - r["bare_median_us"].get<double>(),
                r["overhead_us"].get<double>(), 1e-9)
        << what;
    // Enqueueing with the stream held never waits for the GPU: far below a millisecond.
    EXPECT_LT(r["median_us"].get<double>(), 1000.0) << what;
  }
  unlink(json.c_str());
}

}  // namespace
}  // namespace tpar_test
