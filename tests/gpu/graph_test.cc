// CUDA graphs: captured all-reduces replay with no host work and stay correct.
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

TEST(AllReduceGraph, HundredCallsReplayedHundredTimesWithNewDataEachReplay) {
  TPAR_REQUIRE_GPU();
  const int n = 4;
  const int kCalls = 100;
  const int kReplays = 100;
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, sharedDeviceConfig()));
  // Sizes cycle over both algorithms' ranges and odd counts.
  const size_t sizes[] = {1, 777, 6144, 57344, 100003};
  std::vector<size_t> count(kCalls), offset(kCalls);
  size_t total = 0;
  for (int c = 0; c < kCalls; ++c) {
    count[c] = sizes[c % 5];
    offset[c] = total;
    total += (count[c] + 63) / 64 * 64;
  }
  Buffers b;
  CUDA_OK(b.alloc(n, total * 2));
  // One graph per rank, as each process of a real deployment would capture its own.
  std::vector<cudaGraphExec_t> exec(n);
  for (int r = 0; r < n; ++r) {
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(g.stream(r), cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < kCalls; ++c) {
      const char* in = static_cast<const char*>(b.in[r]) + offset[c] * 2;
      char* out = static_cast<char*>(b.out[r]) + offset[c] * 2;
      ASSERT_EQ(tparSuccess, tparAllReduce(in, out, count[c], tparBfloat16, tparSum, g.comm(r),
                                           g.stream(r)))
          << tparGetLastError(g.comm(r));
    }
    CUDA_OK(cudaStreamEndCapture(g.stream(r), &graph));
    CUDA_OK(cudaGraphInstantiate(&exec[r], graph, 0));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  for (int rep = 0; rep < kReplays; ++rep) {
    const uint64_t seed = freshSeed();
    for (int r = 0; r < n; ++r) {
      CUDA_OK(fillRandom(b.in[r], total, tparBfloat16, seed + r, g.stream(r)));
      CUDA_OK(poison(b.out[r], total * 2, g.stream(r)));
    }
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphLaunch(exec[r], g.stream(r)));
    CUDA_OK(cudaDeviceSynchronize());
    for (int c = 0; c < kCalls; ++c) {
      std::vector<const void*> ins, outs;
      for (int r = 0; r < n; ++r) {
        ins.push_back(static_cast<const char*>(b.in[r]) + offset[c] * 2);
        outs.push_back(static_cast<const char*>(b.out[r]) + offset[c] * 2);
      }
      CheckResult res;
      CUDA_OK(checkOutputs(ins, outs, count[c], tparBfloat16, tparSum, &res));
      ASSERT_EQ(0ull, res.wrong + res.off_ref + res.disagree)
          << "replay " << rep << " call " << c << " count " << count[c] << " seed " << seed;
    }
  }
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_EQ(tparSuccess, async);
    cudaGraphExecDestroy(exec[r]);
  }
}

// Runs in a child process with TPAR_EPOCH_START near 2^32 (the environment is read once per
// process); started by CounterWrapsAroundUnderGraphReplay.
TEST(DISABLED_EpochWrapChild, CrossesTheWrapUnderGraphReplay) {
  TPAR_REQUIRE_GPU();
  ASSERT_NE(nullptr, getenv("TPAR_EPOCH_START"));
  const int n = 3;
  const int kCalls = 20;
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, sharedDeviceConfig()));
  const size_t count = 30011;  // two-shot under auto selection at n = 3? either way: both parities
  Buffers b;
  CUDA_OK(b.alloc(n, kCalls * count * 2 + 64));
  std::vector<cudaGraphExec_t> exec(n);
  for (int r = 0; r < n; ++r) {
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(g.stream(r), cudaStreamCaptureModeThreadLocal));
    for (int c = 0; c < kCalls; ++c) {
      ASSERT_EQ(tparSuccess,
                tparAllReduce(static_cast<char*>(b.in[r]) + c * count * 2,
                              static_cast<char*>(b.out[r]) + c * count * 2, count - c,
                              tparBfloat16, tparSum, g.comm(r), g.stream(r)));
    }
    CUDA_OK(cudaStreamEndCapture(g.stream(r), &graph));
    CUDA_OK(cudaGraphInstantiate(&exec[r], graph, 0));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  for (int rep = 0; rep < 3; ++rep) {
    const uint64_t seed = freshSeed();
    for (int r = 0; r < n; ++r) {
      CUDA_OK(fillRandom(b.in[r], kCalls * count, tparBfloat16, seed + r, g.stream(r)));
      CUDA_OK(poison(b.out[r], kCalls * count * 2, g.stream(r)));
    }
    CUDA_OK(cudaDeviceSynchronize());
    for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphLaunch(exec[r], g.stream(r)));
    CUDA_OK(cudaDeviceSynchronize());
    for (int c = 0; c < kCalls; ++c) {
      std::vector<const void*> ins, outs;
      for (int r = 0; r < n; ++r) {
        ins.push_back(static_cast<const char*>(b.in[r]) + c * count * 2);
        outs.push_back(static_cast<const char*>(b.out[r]) + c * count * 2);
      }
      CheckResult res;
      CUDA_OK(checkOutputs(ins, outs, count - c, tparBfloat16, tparSum, &res));
      ASSERT_EQ(0ull, res.wrong + res.off_ref + res.disagree) << "replay " << rep << " call " << c;
    }
  }
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_EQ(tparSuccess, async);
    cudaGraphExecDestroy(exec[r]);
  }
}

TEST(AllReduceEpochs, CounterWrapsAroundUnderGraphReplay) {
  TPAR_REQUIRE_GPU();
  std::string output;
  const int rc = runSelfChild("DISABLED_EpochWrapChild.CrossesTheWrapUnderGraphReplay",
                              {"TPAR_EPOCH_START=4294967291"}, 300, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
}

}  // namespace
}  // namespace tpar_test
