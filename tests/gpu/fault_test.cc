// Faults with virtual ranks: absent peers, mismatched calls, abort, lazy module loading; bad
// input that needs a GPU (a live communicator, a real device list, files named by the
// environment); and a one-rank sweep of every kernel for compute-sanitizer.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "common/dead_handle.h"
#include "gpu/test_util.h"

namespace tpar_test {
namespace {

TEST(Faults, TimesOutWhenPeerNeverArrives) {
  TPAR_REQUIRE_GPU();
  for (tparAlgo_t algo : {tparAlgoOneShot, tparAlgoTwoShot}) {
    SCOPED_TRACE(tparAlgoName(algo));
    tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/300);
    cfg.algorithm = algo;
    expectTimeoutWhenPeerNeverArrives(cfg);
  }
}

TEST(Faults, RanksThatDisagreeOnCountOrTypeGetInvalidUsage) {
  TPAR_REQUIRE_GPU();
  struct Case {
    size_t count1;
    tparDataType_t dt1;
    tparRedOp_t op1;
  } cases[] = {{1001, tparBfloat16, tparSum}, {1000, tparFloat16, tparSum}, {1000, tparBfloat16, tparMax}};
  for (const Case& c : cases) {
    VirtualGroup g;
    ASSERT_EQ("", g.init(2, sharedDeviceConfig(2000)));
    Buffers b;
    CUDA_OK(b.alloc(2, 1 << 16));
    TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
    TPAR_OK(tparAllReduce(b.in[1], b.out[1], c.count1, c.dt1, c.op1, g.comm(1), g.stream(1)));
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < 2; ++r) {
      tparResult_t async = tparSuccess;
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
      EXPECT_EQ(tparInvalidUsage, async) << "rank " << r;
    }
  }
}

// Two ranks whose calls disagree, under each kernel of two ranks that checks call headers (the
// sentinel one-shot and two-shot, the one-shot pull over epoch lines; NOTE [call header]), in
// GPU memory and over host memory: both ranks report tparInvalidUsage, well before their
// timeout, and neither output holds anything but its poison. The counts 1000 and 1001 leave
// most of the slots a rank polls written by the other; the count 200000 puts the peer's data
// elsewhere, so only the header can end the wait before the timeout.
TEST(Faults, TwoRanksThatDisagreeReportInvalidUsageAndLeaveTheOutputs) {
  TPAR_REQUIRE_GPU();
  struct Case {
    size_t count1;
    tparDataType_t dt1;
    tparRedOp_t op1;
  } cases[] = {{1001, tparBfloat16, tparSum},
               {1000, tparFloat16, tparSum},
               {1000, tparBfloat16, tparMax},
               {200000, tparBfloat16, tparSum}};
  const size_t bytes = 200000 * 2;
  for (int transport : {kTransportDefault, kTransportHost}) {
    for (tparAlgo_t algo : {tparAlgoOneShot, tparAlgoOneShotPull, tparAlgoTwoShot}) {
      for (const Case& c : cases) {
        SCOPED_TRACE(transportLabel(transport) + ", " + tparAlgoName(algo) + ", rank 1: count " +
                     std::to_string(c.count1) + ", " + tparDataTypeName(c.dt1) + ", " +
                     tparRedOpName(c.op1));
        tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/10000);
        cfg.transport = transport;
        cfg.algorithm = algo;
        VirtualGroup g;
        ASSERT_EQ("", g.init(2, cfg));
        Buffers b;
        CUDA_OK(b.alloc(2, bytes));
        const uint64_t seed = freshSeed();
        for (int r = 0; r < 2; ++r) {
          CUDA_OK(fillRandom(b.in[r], r == 0 ? 1000 : c.count1, r == 0 ? tparBfloat16 : c.dt1,
                             seed + r, nullptr));
          CUDA_OK(poison(b.out[r], bytes, nullptr));
        }
        CUDA_OK(cudaDeviceSynchronize());
        const auto t0 = std::chrono::steady_clock::now();
        TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0),
                              g.stream(0)));
        TPAR_OK(tparAllReduce(b.in[1], b.out[1], c.count1, c.dt1, c.op1, g.comm(1), g.stream(1)));
        CUDA_OK(cudaDeviceSynchronize());
        // Well before the timeout: the mismatch ends the waits, not the clock.
        EXPECT_LT(secondsSince(t0), 5.0) << "seed " << seed;
        for (int r = 0; r < 2; ++r) {
          tparResult_t async = tparSuccess;
          TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
          EXPECT_EQ(tparInvalidUsage, async)
              << "rank " << r << ": " << tparGetErrorString(async) << ", seed " << seed;
          std::vector<unsigned char> host(bytes);
          CUDA_OK(cudaMemcpy(host.data(), b.out[r], bytes, cudaMemcpyDeviceToHost));
          size_t written = 0;
          for (unsigned char x : host) written += x != 0xA7;
          EXPECT_EQ(0u, written) << "rank " << r << " wrote its output, seed " << seed;
        }
      }
    }
  }
}

// Groups of 3 to 8 ranks whose calls disagree, in GPU memory and over host memory. Forced
// one-shot pull (flag lines over host memory from 3 ranks, and in GPU memory for 8 ranks on
// one GPU), the last rank with one more element: every rank reports tparInvalidUsage. Under
// auto, the last rank with a call large enough for another algorithm: no rank hangs or
// succeeds; each reports invalid usage, or a timeout where its kernel waited for what the
// other rank's kernel never sends (a call header, a flag line).
TEST(Faults, GroupsOfThreeToEightThatDisagreeOnCountFailEveryRank) {
  TPAR_REQUIRE_GPU();
  for (int transport : {kTransportDefault, kTransportHost}) {
    for (int n : {3, 4, 8}) {
      for (bool forced : {true, false}) {
        SCOPED_TRACE(std::string(transport == kTransportHost ? "host" : "GPU memory") + ", " +
                     std::to_string(n) + " ranks, " + (forced ? "one-shot pull" : "auto"));
        tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/1000);
        cfg.transport = transport;
        if (forced) cfg.algorithm = tparAlgoOneShotPull;
        VirtualGroup g;
        ASSERT_EQ("", g.init(n, cfg));
        const size_t odd = forced ? 1001 : size_t{1} << 20;
        Buffers b;
        CUDA_OK(b.alloc(n, odd * 2 + 64));
        for (int r = 0; r < n; ++r) {
          const size_t count = r == n - 1 ? odd : 1000;
          TPAR_OK(tparAllReduce(b.in[r], b.out[r], count, tparBfloat16, tparSum, g.comm(r),
                                g.stream(r)));
        }
        CUDA_OK(cudaDeviceSynchronize());
        for (int r = 0; r < n; ++r) {
          tparResult_t async = tparSuccess;
          TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
          if (forced) EXPECT_EQ(tparInvalidUsage, async) << "rank " << r;
          EXPECT_TRUE(async == tparInvalidUsage || async == tparTimeout)
              << "rank " << r << ": " << tparGetErrorString(async);
        }
      }
    }
  }
}

// Eight ranks in GPU memory: seven run the one-shot pull over flag lines, which reads the
// peers' call headers in its flag poll rather than waiting for them first (awaitLine), and the
// last a call large enough for a kernel that rings no flag line and sends a header. The seven
// would otherwise wait for its flags until their timeout; each rank reports tparInvalidUsage.
TEST(Faults, FlagPullRanksReportAPeerOnAnotherKernelAsInvalidUsage) {
  TPAR_REQUIRE_GPU();
  const int n = 8;
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, sharedDeviceConfig(/*timeout_ms=*/5000)));
  const size_t small = 1000;
  tparAlgo_t small_algo = tparAlgoAuto;
  TPAR_OK(tparCommSelectAlgorithm(g.comm(0), small * 2, &small_algo));
  ASSERT_EQ(tparAlgoOneShotPull, small_algo) << "the premise: small calls pull over flag lines";
  // The smallest call past the pull whose kernel waits for call headers.
  size_t odd = 0;
  for (size_t bytes = 64 << 10; bytes <= (4u << 20) && odd == 0; bytes += 16 << 10) {
    tparAlgo_t a = tparAlgoAuto;
    TPAR_OK(tparCommSelectAlgorithm(g.comm(n - 1), bytes, &a));
    if (a == tparAlgoOneShot || a == tparAlgoTwoShot) odd = bytes / 2;
  }
  ASSERT_NE(0u, odd) << "no size up to 4 MiB takes a kernel that sends call headers";
  Buffers b;
  CUDA_OK(b.alloc(n, odd * 2 + 64));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < n; ++r) {
    TPAR_OK(tparAllReduce(b.in[r], b.out[r], r == n - 1 ? odd : small, tparBfloat16, tparSum,
                          g.comm(r), g.stream(r)));
  }
  CUDA_OK(cudaDeviceSynchronize());
  // Well before the timeout: the mismatch ends the waits, not the clock.
  EXPECT_LT(secondsSince(t0), 4.0);
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_EQ(tparInvalidUsage, async) << "rank " << r << ": " << tparGetErrorString(async);
  }
}

TEST(Faults, AbortReleasesWaitingKernelsAndANewCommunicatorWorks) {
  TPAR_REQUIRE_GPU();
  {
    VirtualGroup g;
    ASSERT_EQ("", g.init(2, sharedDeviceConfig(/*timeout_ms=*/60000)));
    Buffers b;
    CUDA_OK(b.alloc(2, 1 << 16));
    TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t0 = std::chrono::steady_clock::now();
    TPAR_OK(tparCommAbort(g.comm(0)));
    EXPECT_LT(secondsSince(t0), 5.0);
    // The aborted handle is gone; using it is reported, not dereferenced.
    int rank = -1;
    EXPECT_EQ(tparInvalidArgument, tparCommUserRank(g.comm(0), &rank));
    TPAR_OK(tparCommDestroy(g.comm(1)));
  }
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig()));
  Buffers b;
  CUDA_OK(b.alloc(2, 4096 * 2));
  std::vector<const void*> ins, outs;
  const uint64_t seed = freshSeed();
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(fillRandom(b.in[r], 4096, tparBfloat16, seed + r, nullptr));
    CUDA_OK(poison(b.out[r], 4096 * 2, nullptr));
    ins.push_back(b.in[r]);
    outs.push_back(b.out[r]);
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < 2; ++r)
    TPAR_OK(tparAllReduce(b.in[r], b.out[r], 4096, tparBfloat16, tparSum, g.comm(r), g.stream(r)));
  CUDA_OK(cudaDeviceSynchronize());
  CheckResult res;
  CUDA_OK(checkOutputs(ins, outs, 4096, tparBfloat16, tparSum, &res));
  EXPECT_EQ(0ull, res.wrong + res.off_ref + res.disagree);
}

// Runs in a child with CUDA_MODULE_LOADING=LAZY. One host thread issues two different kernels
// for rank 0 before rank 1's first: without the preload at init, the second launch's module
// load waits for the device, whose first kernel waits for rank 1: a deadlock that the timeout
// turns into tparTimeout.
TEST(DISABLED_LazyLoadingChild, TwoRanksTwoStreamsTwoKernels) {
  TPAR_REQUIRE_GPU();
  ASSERT_STREQ("LAZY", getenv("CUDA_MODULE_LOADING"));
  const int n = 2;
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, sharedDeviceConfig(/*timeout_ms=*/5000)));
  const size_t small = 1000, large = 300000;
  Buffers b16, b32;
  CUDA_OK(b16.alloc(n, small * 2));
  CUDA_OK(b32.alloc(n, large * 4));
  const uint64_t seed = freshSeed();
  for (int r = 0; r < n; ++r) {
    CUDA_OK(fillRandom(b16.in[r], small, tparBfloat16, seed + r, nullptr));
    CUDA_OK(fillRandom(b32.in[r], large, tparFloat32, seed + 7 + r, nullptr));
    CUDA_OK(poison(b16.out[r], small * 2, nullptr));
    CUDA_OK(poison(b32.out[r], large * 4, nullptr));
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < n; ++r) {
    TPAR_OK(tparAllReduce(b16.in[r], b16.out[r], small, tparBfloat16, tparSum, g.comm(r), g.stream(r)));
    TPAR_OK(tparAllReduce(b32.in[r], b32.out[r], large, tparFloat32, tparSum, g.comm(r), g.stream(r)));
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_EQ(tparSuccess, async) << "rank " << r;
  }
  CheckResult res;
  CUDA_OK(checkOutputs({b16.in[0], b16.in[1]}, {b16.out[0], b16.out[1]}, small, tparBfloat16, tparSum, &res));
  EXPECT_EQ(0ull, res.wrong + res.off_ref + res.disagree);
  CUDA_OK(checkOutputs({b32.in[0], b32.in[1]}, {b32.out[0], b32.out[1]}, large, tparFloat32, tparSum, &res));
  EXPECT_EQ(0ull, res.wrong + res.off_ref + res.disagree);
}

TEST(LazyLoading, SpinningKernelsOnTwoStreamsDoNotDeadlock) {
  TPAR_REQUIRE_GPU();
  std::string output;
  const int rc = runSelfChild("DISABLED_LazyLoadingChild.TwoRanksTwoStreamsTwoKernels",
                              {"CUDA_MODULE_LOADING=LAZY"}, 120, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
}

}  // namespace
}  // namespace tpar_test

namespace tpar_test {
namespace {

TEST(AllReduceArguments, BadArgumentsAreNamedAndTheOutputIsUntouched) {
  TPAR_REQUIRE_GPU();
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig()));
  Buffers b;
  CUDA_OK(b.alloc(2, 4096));
  CUDA_OK(poison(b.out[0], 4096, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  tparComm_t c = g.comm(0);
  cudaStream_t s = g.stream(0);
  char* in = static_cast<char*>(b.in[0]);
  char* out = static_cast<char*>(b.out[0]);
  struct Case {
    tparResult_t want;
    const char* text;
    tparResult_t got;
  } cases[] = {
      {tparInvalidArgument, "sendbuff", tparAllReduce(nullptr, out, 8, tparBfloat16, tparSum, c, s)},
      {tparInvalidArgument, "recvbuff", tparAllReduce(in, nullptr, 8, tparBfloat16, tparSum, c, s)},
      {tparInvalidArgument, "datatype",
       tparAllReduce(in, out, 8, static_cast<tparDataType_t>(9), tparSum, c, s)},
      {tparInvalidArgument, "op", tparAllReduce(in, out, 8, tparBfloat16, static_cast<tparRedOp_t>(-2), c, s)},
      {tparInvalidArgument, "sendbuff", tparAllReduce(in + 1, out, 8, tparBfloat16, tparSum, c, s)},
      {tparInvalidArgument, "recvbuff", tparAllReduce(in, out + 2, 8, tparFloat32, tparSum, c, s)},
      {tparInvalidArgument, "overlap", tparAllReduce(out, out + 16, 64, tparBfloat16, tparSum, c, s)},
      {tparInvalidArgument, "overflows",
       tparAllReduce(in, out, SIZE_MAX / 2 + 7, tparBfloat16, tparSum, c, s)},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(k.want, k.got) << k.text;
  }
  // The last error names the problem (checked for the last case; each case recorded its own).
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(c)).find("overflows"));
  // count 0 is a no-op.
  EXPECT_EQ(tparSuccess, tparAllReduce(in, out, 0, tparBfloat16, tparSum, c, s));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<unsigned char> host(4096);
  CUDA_OK(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost));
  for (unsigned char x : host) ASSERT_EQ(0xA7, x) << "an argument error wrote the output";
  // The communicator still works after argument errors: they are not sticky.
  tparResult_t async = tparSuccess;
  TPAR_OK(tparCommGetAsyncError(c, &async));
  EXPECT_EQ(tparSuccess, async);
}

TEST(AllReduceArguments, StreamOfAnotherGpuIsRejected) {
  TPAR_REQUIRE_GPU();
  int n = 0;
  CUDA_OK(cudaGetDeviceCount(&n));
  if (n < 2) GTEST_SKIP() << "needs two GPUs, found " << n;
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig()));
  Buffers b;
  CUDA_OK(b.alloc(2, 4096));
  CUDA_OK(cudaSetDevice(1));
  cudaStream_t other;
  CUDA_OK(cudaStreamCreate(&other));
  CUDA_OK(cudaSetDevice(0));
  EXPECT_EQ(tparInvalidArgument, tparAllReduce(b.in[0], b.out[0], 8, tparBfloat16, tparSum, g.comm(0), other));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(g.comm(0))).find("stream"));
  cudaStreamDestroy(other);
}

}  // namespace
}  // namespace tpar_test

// ---------------------------------------------------------------------------------------------
// Bad input that needs a live communicator (the rest is in tests/unit/api_test.cc).

namespace tpar_test {
namespace {

constexpr int kSentinel = -12345;

// A one-rank communicator on GPU 0, made without VirtualGroup (no streams of its own).
tparComm_t oneRankComm() {
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  tparComm_t comm = nullptr;
  const int dev = 0;
  if (tparCommInitAllConfig(&comm, 1, &dev, &cfg) != tparSuccess) return nullptr;
  return comm;
}

TEST(CommArguments, NullOutputPointersAreNamedAndTheCommunicatorStaysUsable) {
  TPAR_REQUIRE_GPU();
  tparComm_t comm = oneRankComm();
  ASSERT_NE(nullptr, comm) << tparGetLastError(nullptr);
  struct Case {
    const char* name;
    tparResult_t got;
  } cases[] = {
      {"count", tparCommCount(comm, nullptr)},
      {"rank", tparCommUserRank(comm, nullptr)},
      {"device", tparCommCuDevice(comm, nullptr)},
      {"asyncError", tparCommGetAsyncError(comm, nullptr)},
      {"info", tparCommQuery(comm, nullptr)},
      {"algo", tparCommSelectAlgorithm(comm, 4096, nullptr)},
  };
  for (const Case& k : cases) EXPECT_EQ(tparInvalidArgument, k.got) << k.name;
  // Each call recorded its own text on the communicator; the last one names `algo`.
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(comm)).find("algo"))
      << tparGetLastError(comm);
  int v = kSentinel;
  TPAR_OK(tparCommCount(comm, &v));
  EXPECT_EQ(1, v);
  tparResult_t async = tparInternalError;
  TPAR_OK(tparCommGetAsyncError(comm, &async));
  EXPECT_EQ(tparSuccess, async);
  TPAR_OK(tparCommDestroy(comm));
}

TEST(Destroy, UseAfterDestroyAndDoubleDestroyAreRefusedWithoutTouchingOutputs) {
  TPAR_REQUIRE_GPU();
  for (bool by_abort : {false, true}) {
    SCOPED_TRACE(by_abort ? "after abort" : "after destroy");
    tparComm_t comm = oneRankComm();
    ASSERT_NE(nullptr, comm) << tparGetLastError(nullptr);
    TPAR_OK(by_abort ? tparCommAbort(comm) : tparCommDestroy(comm));
    // No communicator is created in between, so the address cannot belong to a new one.
    expectQueriesRefuseDeadHandle(comm);
    void* buf = nullptr;
    CUDA_OK(cudaMalloc(&buf, 256));
    EXPECT_EQ(tparInvalidArgument, tparAllReduce(buf, buf, 8, tparFloat32, tparSum, comm, nullptr));
    EXPECT_EQ(tparInvalidArgument, tparCommDestroy(comm));  // double destroy
    EXPECT_EQ(tparInvalidArgument, tparCommAbort(comm));
    CUDA_OK(cudaFree(buf));
  }
}

TEST(InitAllArguments, DevlistOfAMissingGpuOrASharedGpuWithoutPermissionIsNamed) {
  TPAR_REQUIRE_GPU();
  int ngpus = 0;
  CUDA_OK(cudaGetDeviceCount(&ngpus));
  const tparComm_t untouched = reinterpret_cast<tparComm_t>(0x1234);
  tparComm_t comms[2] = {untouched, untouched};
  const int missing[2] = {0, ngpus};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(comms, 2, missing));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("devlist[1]"))
      << tparGetLastError(nullptr);
  const int negative[1] = {-1};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(comms, 1, negative));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("devlist[0]"));
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.allowSharedDevice = 0;
  const int shared[2] = {0, 0};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 2, shared, &cfg));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("allowSharedDevice"))
      << tparGetLastError(nullptr);
  EXPECT_EQ(untouched, comms[0]);
  EXPECT_EQ(untouched, comms[1]);
}

// One rank, so that it runs under compute-sanitizer too (the script's filter includes it).
TEST(AllReduceArguments, EdgeValuesAreRefusedLeavingBuffersAloneAndTheCommunicatorUsable) {
  TPAR_REQUIRE_GPU();
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, sharedDeviceConfig()));
  tparComm_t c = g.comm(0);
  cudaStream_t s = g.stream(0);
  const size_t kBytes = 4096;
  Buffers b;
  CUDA_OK(b.alloc(1, kBytes));
  char* in = static_cast<char*>(b.in[0]);
  char* out = static_cast<char*>(b.out[0]);
  CUDA_OK(fillRandom(in, kBytes / 2, tparBfloat16, freshSeed(), s));
  CUDA_OK(poison(out, kBytes, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<unsigned char> in_before(kBytes), out_before(kBytes);
  CUDA_OK(cudaMemcpy(in_before.data(), in, kBytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out_before.data(), out, kBytes, cudaMemcpyDeviceToHost));
  struct Case {
    const char* name;  // what the message must contain
    std::function<tparResult_t()> call;
  } cases[] = {
      {"datatype",
       [&] { return tparAllReduce(in, out, 8, static_cast<tparDataType_t>(-1), tparSum, c, s); }},
      {"datatype", [&] { return tparAllReduce(in, out, 8, tparNumDataTypes, tparSum, c, s); }},
      {"op", [&] { return tparAllReduce(in, out, 8, tparBfloat16, tparNumOps, c, s); }},
      {"op",
       [&] { return tparAllReduce(in, out, 8, tparBfloat16, static_cast<tparRedOp_t>(-1), c, s); }},
      // recvbuff before sendbuff, overlapping by all but one element
      {"overlap", [&] { return tparAllReduce(out + 2, out, 64, tparBfloat16, tparSum, c, s); }},
      // the last element of sendbuff is the first of recvbuff
      {"overlap", [&] { return tparAllReduce(out, out + 126, 64, tparBfloat16, tparSum, c, s); }},
      // in place, but not aligned to the element
      {"sendbuff", [&] { return tparAllReduce(out + 2, out + 2, 8, tparFloat32, tparSum, c, s); }},
      {"overflows",
       [&] { return tparAllReduce(in, out, SIZE_MAX / 4 + 1, tparFloat32, tparSum, c, s); }},
      {"overflows", [&] { return tparAllReduce(in, out, SIZE_MAX, tparBfloat16, tparSum, c, s); }},
      {"sendbuff", [&] { return tparAllReduce(nullptr, nullptr, 8, tparBfloat16, tparSum, c, s); }},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(tparInvalidArgument, k.call()) << k.name;
    EXPECT_NE(std::string::npos, std::string(tparGetLastError(c)).find(k.name))
        << k.name << ": " << tparGetLastError(c);
  }
  // count 0 is a no-op, whatever the buffers.
  EXPECT_EQ(tparSuccess, tparAllReduce(nullptr, nullptr, 0, tparBfloat16, tparSum, c, s));
  CUDA_OK(cudaStreamSynchronize(s));
  std::vector<unsigned char> in_after(kBytes), out_after(kBytes);
  CUDA_OK(cudaMemcpy(in_after.data(), in, kBytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out_after.data(), out, kBytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(in_before == in_after) << "an argument error changed the input";
  EXPECT_TRUE(out_before == out_after) << "an argument error changed the output";
  tparResult_t async = tparSuccess;
  TPAR_OK(tparCommGetAsyncError(c, &async));
  EXPECT_EQ(tparSuccess, async);
  runAndCheck(g, 1000, tparBfloat16, tparSum, false);
}

// ---------------------------------------------------------------------------------------------
// Bad files named by the environment: the environment is read once per process, so each case
// runs in a child of this binary with the variable set.

TEST(DISABLED_BadEnvironmentChild, TopologyFileIsRefusedNamingItAndCommsAreUntouched) {
  TPAR_REQUIRE_GPU();
  const char* path = std::getenv("TPAR_TOPO_FILE");
  ASSERT_NE(nullptr, path);
  const tparComm_t untouched = reinterpret_cast<tparComm_t>(0x1234);
  tparComm_t comms[2] = {untouched, untouched};
  const int devs[2] = {0, 0};
  const tparConfig_t cfg = sharedDeviceConfig();
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 2, devs, &cfg));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find(path))
      << tparGetLastError(nullptr);
  EXPECT_EQ(untouched, comms[0]);
  EXPECT_EQ(untouched, comms[1]);
}

TEST(DISABLED_BadEnvironmentChild, BadTuningFileIsIgnoredAndTheDefaultsWork) {
  TPAR_REQUIRE_GPU();
  ASSERT_NE(nullptr, std::getenv("TPAR_TUNING_FILE"));
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig()));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  EXPECT_EQ(0, info.tuningTableLoaded);
  runAndCheck(g, 5000, tparBfloat16, tparSum, false);
}

std::string writeTempFile(const std::string& text) {
  char path[] = "/tmp/tpar_bad_file_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "";
  if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    close(fd);
    return "";
  }
  close(fd);
  return path;
}

TEST(BadEnvironment, MissingOrGarbageTopologyFileFailsInitNamingThePath) {
  TPAR_REQUIRE_GPU();
  const std::string garbage = writeTempFile("<topology><object type=\"Machine\" os_index=\"x\"");
  ASSERT_FALSE(garbage.empty());
  for (const std::string& path : {std::string("/nonexistent/tpar-topology.xml"), garbage}) {
    std::string output;
    const int rc = runSelfChild("DISABLED_BadEnvironmentChild.TopologyFileIsRefused*",
                                {"TPAR_TOPO_FILE=" + path}, 120, &output);
    EXPECT_EQ(0, rc) << path << ":\n" << output;
    EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
  }
  unlink(garbage.c_str());
}

TEST(BadEnvironment, GarbageTuningFileIsIgnoredWithAWarningNamingIt) {
  TPAR_REQUIRE_GPU();
  const std::string garbage = writeTempFile("{\"format\": \"tpar-tuning\", \"version\": [");
  ASSERT_FALSE(garbage.empty());
  std::string output;
  const int rc = runSelfChild("DISABLED_BadEnvironmentChild.BadTuningFileIsIgnored*",
                              {"TPAR_TUNING_FILE=" + garbage}, 120, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
  EXPECT_NE(std::string::npos, output.find("ignoring tuning file")) << output;
  EXPECT_NE(std::string::npos, output.find(garbage)) << output;
  unlink(garbage.c_str());
}

// ---------------------------------------------------------------------------------------------
// Every kernel with one rank: the coverage that compute-sanitizer gets in one process (virtual
// ranks of two or more need their kernels resident together, which the sanitizer does not
// promise; see docs/RELIABILITY.md). Small on purpose: every launch is slow under the tools.

class OneRankSweep : public ::testing::TestWithParam<int> {};

TEST_P(OneRankSweep, EveryAlgorithmDatatypeOpOffsetAndPieceIsCorrect) {
  TPAR_REQUIRE_GPU();
  for (tparAlgo_t algo : forcedAlgos(true, true)) {
    SCOPED_TRACE(tparAlgoName(algo));
    tparConfig_t cfg = sharedDeviceConfig();
    cfg.transport = GetParam();
    cfg.algorithm = algo;
    cfg.maxBytesPerCall = 64 << 10;  // the largest case below is split into pieces
    VirtualGroup g;
    ASSERT_EQ("", g.init(1, cfg));
    runAndCheck(g, 1, tparBfloat16, tparSum, false);
    runAndCheck(g, 4097, tparBfloat16, tparSum, false, 1, 3);
    runAndCheck(g, 9, tparFloat16, tparMin, true, 5, 5);
    runAndCheck(g, 70001, tparFloat32, tparMax, false);
    runAndCheck(g, 300001, tparBfloat16, tparSum, true);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, OneRankSweep, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == 1 ? "host" : "default");
                         });

}  // namespace
}  // namespace tpar_test
