// The host-staged transport with virtual ranks: receive regions in pinned host memory mapped
// into the GPU, so that every push, poll and pull crosses the GPU's PCIe link. What it reports,
// how it fails (timeouts, mismatched calls, abort), and a stress run of 100,000 calls of random
// sizes on one communicator, every result checked on the GPU: torn or reordered writes through
// host memory would show there. The correctness matrix of every algorithm, size and datatype on
// this transport is in allreduce_test.cc and graph_test.cc (their "host" instances).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/stress_kernels.h"
#include "gpu/test_util.h"

namespace tpar_test {
namespace {

tparConfig_t hostConfig(tparAlgo_t algo = tparAlgoAuto, int64_t timeout_ms = 20000) {
  tparConfig_t cfg = sharedDeviceConfig(timeout_ms);
  cfg.transport = kTransportHost;
  cfg.algorithm = algo;
  return cfg;
}

const std::vector<tparAlgo_t> kForcedAlgos = forcedAlgos();

// ---------------------------------------------------------------------------------------------
// What the communicator reports

TEST(HostTransport, ReportedAsHostWhenForcedByTheConfig) {
  TPAR_REQUIRE_GPU();
  for (int n : {2, 4, 8}) {
    SCOPED_TRACE("n " + std::to_string(n));
    VirtualGroup g;
    ASSERT_EQ("", g.init(n, hostConfig()));
    for (int r = 0; r < n; ++r) {
      tparCommInfo_t info;
      TPAR_OK(tparCommQuery(g.comm(r), &info));
      EXPECT_EQ(tparTransportHost, info.transport) << tparTransportName(info.transport);
      EXPECT_STREQ("host", tparTransportName(info.transport));
      EXPECT_EQ(n, info.nranks);
      EXPECT_GT(info.hostMemoryBytes, 0u);
    }
    runAndCheck(g, 4097, tparBfloat16, tparSum, false);
  }
}

TEST(HostTransport, GpuMemoryOnlyKeepsVirtualRanksInDeviceMemory) {
  TPAR_REQUIRE_GPU();
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = 2;  // always GPU memory: one GPU needs no peer-to-peer
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, cfg));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  EXPECT_EQ(tparTransportSameDevice, info.transport) << tparTransportName(info.transport);
}

TEST(HostTransport, UnknownTransportValueIsRejectedAndNamed) {
  TPAR_REQUIRE_GPU();
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = 3;
  std::vector<tparComm_t> comms(2, nullptr);
  const int devs[2] = {0, 0};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms.data(), 2, devs, &cfg));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("transport"))
      << tparGetLastError(nullptr);
}

// Runs in a child with TPAR_TRANSPORT=host (the environment is read once per process); started
// by ReportedAsHostWhenForcedByTheEnvironment.
TEST(DISABLED_HostTransportEnvChild, EnvironmentForcesHostAndTheConfigOverridesIt) {
  TPAR_REQUIRE_GPU();
  ASSERT_STREQ("host", std::getenv("TPAR_TRANSPORT"));
  {
    VirtualGroup g;
    ASSERT_EQ("", g.init(3, sharedDeviceConfig()));  // transport -1: the environment decides
    tparCommInfo_t info;
    TPAR_OK(tparCommQuery(g.comm(0), &info));
    EXPECT_EQ(tparTransportHost, info.transport) << tparTransportName(info.transport);
    runAndCheck(g, 30001, tparBfloat16, tparSum, false);
  }
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = kTransportDefault;  // set in the config: wins over the environment
  VirtualGroup g;
  ASSERT_EQ("", g.init(3, cfg));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  EXPECT_EQ(tparTransportSameDevice, info.transport) << tparTransportName(info.transport);
}

TEST(HostTransport, ReportedAsHostWhenForcedByTheEnvironment) {
  TPAR_REQUIRE_GPU();
  std::string output;
  const int rc =
      runSelfChild("DISABLED_HostTransportEnvChild.EnvironmentForcesHostAndTheConfigOverridesIt",
                   {"TPAR_TRANSPORT=host"}, 120, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
}

// ---------------------------------------------------------------------------------------------
// Faults: the same guarantees as in device memory (fault_test.cc), for every algorithm

TEST(HostTransportFaults, TimesOutWhenPeerNeverArrives) {
  TPAR_REQUIRE_GPU();
  for (tparAlgo_t algo : kForcedAlgos) {
    SCOPED_TRACE(tparAlgoName(algo));
    expectTimeoutWhenPeerNeverArrives(hostConfig(algo, /*timeout_ms=*/300));
  }
}

TEST(HostTransportFaults, EveryWaitingRankGivesUpWhenOneRankNeverArrives) {
  TPAR_REQUIRE_GPU();
  const int n = 4;
  for (tparAlgo_t algo : kForcedAlgos) {
    SCOPED_TRACE(tparAlgoName(algo));
    VirtualGroup g;
    ASSERT_EQ("", g.init(n, hostConfig(algo, /*timeout_ms=*/300)));
    Buffers b;
    CUDA_OK(b.alloc(n, 1 << 20));
    const auto t0 = std::chrono::steady_clock::now();
    // Ranks 0..n-2 call; rank n-1 never does.
    for (int r = 0; r + 1 < n; ++r)
      TPAR_OK(tparAllReduce(b.in[r], b.out[r], 200000, tparBfloat16, tparSum, g.comm(r),
                            g.stream(r)));
    for (int r = 0; r + 1 < n; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
    EXPECT_LT(secondsSince(t0), 5.0);
    int timeouts = 0;
    for (int r = 0; r + 1 < n; ++r) {
      tparResult_t async = tparSuccess;
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
      // A rank may learn of the failure from a peer that timed out first.
      EXPECT_TRUE(async == tparTimeout || async == tparRemoteError)
          << "rank " << r << ": " << tparGetErrorString(async);
      timeouts += async == tparTimeout;
    }
    EXPECT_GE(timeouts, 1);
  }
}

TEST(HostTransportFaults, RanksThatDisagreeOnCountGetInvalidUsage) {
  TPAR_REQUIRE_GPU();
  for (tparAlgo_t algo : forcedAlgos(false, true)) {
    SCOPED_TRACE(tparAlgoName(algo));
    VirtualGroup g;
    ASSERT_EQ("", g.init(2, hostConfig(algo, 2000)));
    Buffers b;
    CUDA_OK(b.alloc(2, 1 << 16));
    TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
    TPAR_OK(tparAllReduce(b.in[1], b.out[1], 1001, tparBfloat16, tparSum, g.comm(1), g.stream(1)));
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < 2; ++r) {
      tparResult_t async = tparSuccess;
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
      EXPECT_EQ(tparInvalidUsage, async) << "rank " << r << ": " << tparGetErrorString(async);
    }
  }
}

TEST(HostTransportFaults, AbortReleasesAWaitingKernel) {
  TPAR_REQUIRE_GPU();
  for (tparAlgo_t algo : {tparAlgoOneShotPull, tparAlgoTwoShot}) {
    SCOPED_TRACE(tparAlgoName(algo));
    VirtualGroup g;
    ASSERT_EQ("", g.init(2, hostConfig(algo, /*timeout_ms=*/60000)));
    Buffers b;
    CUDA_OK(b.alloc(2, 1 << 16));
    TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t0 = std::chrono::steady_clock::now();
    TPAR_OK(tparCommAbort(g.comm(0)));
    EXPECT_LT(secondsSince(t0), 5.0);
    TPAR_OK(tparCommDestroy(g.comm(1)));
    // The group's destructor destroys both handles again: tpar reports that, nothing more.
  }
}

// ---------------------------------------------------------------------------------------------
// Stress: many calls of random shape through one communicator's host regions

struct StressCall {
  uint64_t seed = 0;
  size_t count = 0;
  tparDataType_t dtype = tparBfloat16;
  tparRedOp_t op = tparSum;
  bool in_place = false;
  size_t send_off = 0, recv_off = 0;  // elements
};

std::string describe(const StressCall& c) {
  return "count " + std::to_string(c.count) + " " + tparDataTypeName(c.dtype) + " " +
         tparRedOpName(c.op) + (c.in_place ? " in place" : " out of place") + ", offsets " +
         std::to_string(c.send_off) + "/" + std::to_string(c.recv_off);
}

// Sizes from 1 element to max_bytes, log-uniform (small and large messages equally likely per
// octave); datatype, op, in place and element offsets random too.
StressCall randomCall(std::mt19937_64& rng, size_t max_bytes) {
  StressCall c;
  c.seed = rng();
  const tparDataType_t dtypes[] = {tparBfloat16, tparFloat16, tparFloat32};
  c.dtype = dtypes[rng() % 3];
  const uint64_t op_pick = rng() % 10;
  c.op = op_pick < 8 ? tparSum : (op_pick == 8 ? tparMax : tparMin);
  c.in_place = rng() % 4 == 0;
  const size_t max_count = max_bytes / tpar::elementBytes(c.dtype);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  c.count = static_cast<size_t>(std::exp(u * std::log(static_cast<double>(max_count) + 1.0)));
  c.count = std::min(std::max<size_t>(c.count, 1), max_count);
  c.send_off = rng() % 8;
  c.recv_off = c.in_place ? c.send_off : rng() % 8;
  return c;
}

// Issues `calls` random all-reduces on every rank of a host-transport group of `n` ranks
// (algorithm `algo`), checks every result on the GPU, and stops at the first failed batch.
void stress(int n, tparAlgo_t algo, int calls, size_t max_bytes) {
  CUDA_OK(preloadStressKernels());
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, hostConfig(algo)));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  ASSERT_EQ(tparTransportHost, info.transport);
  // Per rank one input and one output buffer with room for the offsets and the guard.
  const size_t buf_bytes = max_bytes + 8 * sizeof(float) + kStressGuardBytes + 64;
  Buffers b;
  CUDA_OK(b.alloc(n, buf_bytes));
  StressCounterSet counters;
  CUDA_OK(counters.init(n));
  CUDA_OK(cudaDeviceSynchronize());

  const uint64_t rng_seed = freshSeed();
  std::mt19937_64 rng(rng_seed);
  SCOPED_TRACE("random seed " + std::to_string(rng_seed));
  std::vector<StressCall> issued;
  issued.reserve(calls);
  const int kBatch = 2000;  // calls between checks of the counters and the async errors
  const auto t0 = std::chrono::steady_clock::now();
  for (int first = 0; first < calls; first += kBatch) {
    const int last = std::min(calls, first + kBatch);
    for (int i = first; i < last; ++i) {
      const StressCall c = randomCall(rng, max_bytes);
      issued.push_back(c);
      const size_t es = tpar::elementBytes(c.dtype);
      for (int r = 0; r < n; ++r) {
        char* send = static_cast<char*>(b.in[r]) + c.send_off * es;
        char* recv = c.in_place ? send : static_cast<char*>(b.out[r]) + c.recv_off * es;
        CUDA_OK(launchStressFill(send, recv, c.count, c.dtype, c.seed, r, c.in_place,
                                 g.stream(r)));
        ASSERT_EQ(tparSuccess, tparAllReduce(send, recv, c.count, c.dtype, c.op, g.comm(r),
                                             g.stream(r)))
            << "call " << i << " rank " << r << ": " << tparGetLastError(g.comm(r));
        CUDA_OK(launchStressCheck(recv, c.count, c.dtype, c.op, c.seed, n, i, counters.rank(r),
                                  g.stream(r)));
      }
    }
    for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
    for (int r = 0; r < n; ++r) {
      tparResult_t async = tparSuccess;
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
      ASSERT_EQ(tparSuccess, async) << "rank " << r << " after calls " << first << ".." << last - 1
                                    << ": " << tparGetLastError(g.comm(r));
    }
    const std::string bad = counters.failure(
        [&](unsigned long long k) { return k < issued.size() ? describe(issued[k]) : "?"; });
    if (!bad.empty()) FAIL() << "calls " << first << ".." << last - 1 << ": " << bad;
  }
  const double s = secondsSince(t0);
  std::printf("[ stress   ] %d ranks, %s, %d calls in %.1f s (%.1f us per call)\n", n,
              tparAlgoName(algo), calls, s, 1e6 * s / calls);
}

TEST(HostTransportStress, HundredThousandRandomCallsOnOneCommunicatorAreAllCorrect) {
  TPAR_REQUIRE_GPU();
  // Auto: the algorithm changes with the size from call to call, through the same regions.
  stress(/*n=*/8, tparAlgoAuto, /*calls=*/100000, /*max_bytes=*/2u << 20);
}

class HostTransportStressForced : public ::testing::TestWithParam<tparAlgo_t> {};

TEST_P(HostTransportStressForced, TenThousandRandomCallsAreAllCorrect) {
  TPAR_REQUIRE_GPU();
  stress(/*n=*/4, GetParam(), /*calls=*/10000, /*max_bytes=*/2u << 20);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, HostTransportStressForced, ::testing::ValuesIn(kForcedAlgos),
                         [](const ::testing::TestParamInfo<tparAlgo_t>& info) {
                           return testNamePart(tparAlgoName(info.param));
                         });

}  // namespace
}  // namespace tpar_test
