// What the library logs on a GPU (docs/LOGGING.md): init with its transport and algorithm
// table, every call at trace, a mismatch, a timeout, an abort and destroy, each with the
// [rank@device] of the rank it concerns. A child of this binary runs the calls with TPAR_DEBUG
// set (the variables are read once per process).
#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

TEST(DISABLED_LogChild, MatchedMismatchedTimedOutAbortedAndDestroyed) {
  TPAR_REQUIRE_GPU();
  Buffers b;
  CUDA_OK(b.alloc(2, 1 << 16));
  {
    VirtualGroup g;
    ASSERT_EQ("", g.init(2, sharedDeviceConfig(2000)));
    for (int r = 0; r < 2; ++r)
      TPAR_OK(tparAllReduce(b.in[r], b.out[r], 1000, tparBfloat16, tparSum, g.comm(r), g.stream(r)));
    TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
    TPAR_OK(tparAllReduce(b.in[1], b.out[1], 1001, tparBfloat16, tparSum, g.comm(1), g.stream(1)));
    CUDA_OK(cudaDeviceSynchronize());
    for (int twice = 0; twice < 2; ++twice) {
      for (int r = 0; r < 2; ++r) {
        tparResult_t async = tparSuccess;
        TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
        EXPECT_EQ(tparInvalidUsage, async);
      }
    }
  }
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig(/*timeout_ms=*/300)));
  TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
  CUDA_OK(cudaStreamSynchronize(g.stream(0)));
  tparResult_t async = tparSuccess;
  TPAR_OK(tparCommGetAsyncError(g.comm(0), &async));
  EXPECT_EQ(tparTimeout, async);
  TPAR_OK(tparCommAbort(g.comm(0)));
  TPAR_OK(tparCommDestroy(g.comm(1)));
}

TEST(Logging, EveryEventIsLoggedAtItsLevelWithItsRank) {
  TPAR_REQUIRE_GPU();
  std::string out;
  const int rc = runSelfChild("DISABLED_LogChild.*",
                              {"TPAR_DEBUG=TRACE", "TPAR_DEBUG_SUBSYS=^ENV"}, 300, &out);
  ASSERT_EQ(0, rc) << out;
  const std::regex line(R"(^\S+:\d+:\d+ \[(-|\d+)@(-|\d+)\] tpar (WARN|INFO|TRACE) (.*)$)");
  int calls[2] = {0, 0}, mismatch[2] = {0, 0}, init = 0, table = 0, transport = 0;
  int timeout = 0, virtual_cause = 0, abort = 0, destroy = 0, env = 0;
  std::istringstream in(out);
  std::string l;
  while (std::getline(in, l)) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    const std::string rank = m[1], level = m[3], msg = m[4];
    const int r = rank == "1" ? 1 : 0;
    if (msg.rfind("AllReduce: sendbuff", 0) == 0) {
      EXPECT_EQ("TRACE", level) << l;
      EXPECT_EQ("0", std::string(m[2])) << l;  // virtual ranks: all on GPU 0
      ++calls[r];
    }
    if (msg.find("mismatched calls") != std::string::npos) {
      EXPECT_EQ("WARN", level) << l;
      ++mismatch[r];
    }
    init += msg.rfind("init COMPLETE", 0) == 0 && level == "INFO";
    table += msg.rfind("algorithm table for 2 ranks", 0) == 0;
    transport += msg.rfind("transport same-device", 0) == 0;
    timeout += msg.find("timed out") != std::string::npos && level == "WARN" && rank == "0";
    // On virtual ranks the timeout names the likely cause (docs/DESIGN.md, "Virtual ranks and
    // other work").
    virtual_cause += msg.find("(virtual ranks): the likely cause") != std::string::npos &&
                     msg.find("launched in clusters") != std::string::npos && level == "WARN" &&
                     rank == "0";
    abort += msg.find("aborted") != std::string::npos && level == "WARN" && rank == "0";
    destroy += msg.rfind("destroy COMPLETE", 0) == 0 && level == "INFO";
    env += msg.find("set by environment") != std::string::npos;  // excluded by ^ENV
  }
  EXPECT_EQ(3, calls[0]) << out;
  EXPECT_EQ(2, calls[1]) << out;
  EXPECT_EQ(1, mismatch[0]) << out;  // once per communicator, however often it is asked
  EXPECT_EQ(1, mismatch[1]) << out;
  EXPECT_EQ(4, init) << out;
  EXPECT_EQ(2, table) << out;  // rank 0 of each group
  EXPECT_EQ(4, transport) << out;
  EXPECT_EQ(1, timeout) << out;
  EXPECT_EQ(1, virtual_cause) << out;
  EXPECT_EQ(1, abort) << out;
  EXPECT_EQ(3, destroy) << out;
  EXPECT_EQ(0, env) << out;
}

}  // namespace
}  // namespace tpar_test
