// `tpar tune` as a user runs it: a tiny search on 2 virtual ranks, per transport, in one
// process and in one process per rank, that must check every candidate, print the gain over
// the defaults and write a table that a communicator of the same group loads.
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "gpu/test_util.h"
#include "tuner/tuner.h"

namespace tpar_test {
namespace {

class CliTune : public ::testing::TestWithParam<const char*> {};

// The table at `path`, read the way the communicator reads it, for 2 virtual ranks of
// `transport`; "" or why it cannot be. `defaults`, when given, receives the group's built-in
// plan (no table) for each of `sizes`.
std::string loadForTwoVirtualRanks(const std::string& path, const std::string& transport,
                                   tpar::TuningTable* t,
                                   const std::vector<uint64_t>& sizes = {},
                                   std::vector<tpar::Plan>* defaults = nullptr) {
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = transport == "host" ? kTransportHost : kTransportDefault;
  VirtualGroup g;
  if (std::string e = g.init(2, cfg); !e.empty()) return e;
  if (tpar::loadTuningFile(path, g.comm(0)->tuner_ctx, t) != tparSuccess)
    return tparGetLastError(nullptr);
  if (defaults != nullptr)
    for (uint64_t bytes : sizes)
      defaults->push_back(tpar::selectPlan(bytes, tparBfloat16, g.comm(0)->tuner_ctx, nullptr,
                                           tparAlgoAuto, -1));
  return "";
}

// The first GPU this process may use, as a child's CUDA_VISIBLE_DEVICES names it.
std::string firstVisibleGpu() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr || *v == '\0') return "0";
  const std::string s(v);
  return s.substr(0, s.find(','));
}

TEST_P(CliTune, TinySearchOnTwoVirtualRanksWritesATableTheGroupLoads) {
  TPAR_REQUIRE_GPU();
  const std::string transport = GetParam();
  const std::string path =
      "/tmp/tpar_cli_tune_" + std::to_string(getpid()) + "_" + transport + ".json";
  unlink(path.c_str());
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "tune", "--virtual", "--ranks", "2", "--sizes",
                             "4K,64K", "--quick", "--blocks", "1,8", "--threads", "128,256,1024",
                             "--steps", "1,2", "-n", "5", "-w", "1", "--nccl", "0",
                             "--transport", transport, "--output", path},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  for (const char* text : {"candidates per size", "excluded", "launch bound of 512",
                           "(default)", "<- chosen", "gain = default / tuned", "wrote"})
    EXPECT_NE(std::string::npos, out.find(text)) << text << "\n" << out;

  // The group that the tool measured loads the table (the communicator's own reader).
  tpar::TuningTable t;
  std::vector<tpar::Plan> defaults;
  ASSERT_EQ("", loadForTwoVirtualRanks(path, transport, &t, {4096, 65536}, &defaults)) << out;
  ASSERT_EQ(2u, t.entries.size()) << out;
  ASSERT_EQ(2u, defaults.size());
  EXPECT_EQ(4096u, t.entries[0].max_bytes);
  EXPECT_EQ(65536u, t.entries[1].max_bytes);
  for (size_t i = 0; i < t.entries.size(); ++i) {
    const tpar::TuningEntry& e = t.entries[i];
    EXPECT_GT(e.us, 0.0);
    EXPECT_GT(e.default_us, 0.0) << "the default is measured in the same run";
    // Either the built-in plan (kernel shape, host shape or a shape of its own, as the push
    // calls of ranks sharing a GPU on the host have) or one of the searched shapes.
    if (e.plan.threads != 0 && !tpar::samePlan(e.plan, defaults[i])) {
      EXPECT_TRUE(e.plan.threads == 128 || e.plan.threads == 256) << e.plan.threads;
      EXPECT_TRUE(e.plan.active_blocks == 1 || e.plan.active_blocks == 8) << e.plan.active_blocks;
    }
  }
  unlink(path.c_str());
}

// One process per rank: the children search in lockstep and the parent writes the table.
// Two processes on one GPU are time-sliced (slow but correct), so the search is a few plans.
TEST_P(CliTune, OneProcessPerRankMergesTheRanksAndWritesATableTheGroupLoads) {
  TPAR_REQUIRE_GPU();
  const std::string transport = GetParam();
  const std::string path =
      "/tmp/tpar_cli_tune_procs_" + std::to_string(getpid()) + "_" + transport + ".json";
  unlink(path.c_str());
  std::string out;
  const int rc = runProcess({TPAR_CLI_BINARY, "tune", "--procs", "--virtual", "--ranks", "2",
                             "--sizes", "8K", "--quick", "--blocks", "2", "--threads", "256",
                             "--steps", "1", "-n", "3", "-w", "1", "--transport", transport,
                             "--output", path},
                            {}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  for (const char* text : {"candidates per size", "the slowest counts", "(default)",
                           "gain = default / tuned", "wrote"})
    EXPECT_NE(std::string::npos, out.find(text)) << text << "\n" << out;
  tpar::TuningTable t;
  ASSERT_EQ("", loadForTwoVirtualRanks(path, transport, &t)) << out;
  ASSERT_EQ(1u, t.entries.size()) << out;
  EXPECT_EQ(8192u, t.entries[0].max_bytes);
  EXPECT_GT(t.entries[0].us, 0.0);
  EXPECT_GT(t.entries[0].default_us, 0.0);
  unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Transports, CliTune, ::testing::Values("auto", "host"),
                         transportParamName);

// --wire on 2 virtual ranks over the host transport: each size of the format is checked
// against its reference and timed against the lossless plan the search chose, and the table
// gets the format's threshold (one of the sizes measured, or "never"), which a communicator
// with that format then follows: at the larger size the format runs exactly when the
// threshold is at most that size.
TEST(CliTuneWire, TheTableGetsTheFormatsThresholdAndTheGroupFollowsIt) {
  TPAR_REQUIRE_GPU();
  const std::string path = "/tmp/tpar_cli_tune_wire_" + std::to_string(getpid()) + ".json";
  unlink(path.c_str());
  std::string out;
  // One GPU visible to both runs, so that they see the same topology (the table's key).
  const int rc = runProcess({TPAR_CLI_BINARY, "tune", "--virtual", "--ranks", "2", "--sizes",
                             "256K,4M", "--shapes", "0", "-n", "5", "-w", "1", "--nccl", "0",
                             "--transport", "host", "--wire", "int4", "--output", path},
                            {"CUDA_VISIBLE_DEVICES=" + firstVisibleGpu()}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  for (const char* text : {"# wire int4", "lossless us", "wrote"})
    EXPECT_NE(std::string::npos, out.find(text)) << text << "\n" << out;
  tpar::TuningTable t;
  ASSERT_EQ("", loadForTwoVirtualRanks(path, "host", &t)) << out;
  const int64_t least = t.wire_min_bytes[tparWireInt4];
  EXPECT_TRUE(least == 256 * 1024 || least == 4 * 1024 * 1024 || least == tpar::kWireNever)
      << least << "\n" << out;
  EXPECT_EQ(-1, t.wire_min_bytes[tparWireFp8]);
  // A group with the format and the table (`tpar bench`, whose communicators read
  // TPAR_TUNING_FILE at init) runs the format at 4 MiB exactly when the threshold allows it.
  const int brc = runProcess({TPAR_CLI_BINARY, "bench", "--ranks", "2", "--sizes", "4M",
                              "--backends", "tpar", "--transport", "host", "-n", "2", "-w", "1"},
                             {"TPAR_TUNING_FILE=" + path, "TPAR_WIRE=int4",
                              "CUDA_VISIBLE_DEVICES=" + firstVisibleGpu()},
                             120, &out);
  ASSERT_EQ(0, brc) << out;
  const bool runs = out.find("pipelined+int4") != std::string::npos;
  EXPECT_EQ(least <= 4 * 1024 * 1024, runs) << least << "\n" << out;
  unlink(path.c_str());
}

}  // namespace
}  // namespace tpar_test
