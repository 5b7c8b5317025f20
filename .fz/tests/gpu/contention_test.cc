// All-reduces between other work, as a serving engine issues them: on every virtual rank's
// stream, before each all-reduce, the three GEMMs of a transformer layer's verify pass (cuBLAS,
// a token count that changes from call to call) and a compute kernel of random length, grid and
// shared memory (some take a whole multiprocessor). Every result is checked on the GPU. Ranks
// are driven the way `tpar verify` drives them: one thread, phase by phase (every rank's
// compute, then every rank's gate, then every rank's all-reduce; NOTE [rank gate] in
// tools/tpar/common/rank_gate.cu). Without the gate the same calls time out
// (ContentionAllReduceHazard, an experiment run by scripts/contention-check.sh).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu/contention_kernels.h"
#include "gpu/stress_kernels.h"
#include "gpu/test_util.h"
#include "tools/tpar/common/rank_gate.h"

namespace tpar_test {
namespace {

// The GEMMs of one layer of `tpar verify --model kimi-k2` on one of 8 ranks (hidden 7168,
// intermediate 18432): attention output, gate+up, down; tokens from 1 to 128.
constexpr int kGemmMaxTokens = 128;
struct GemmShape {
  int k, n;
};
constexpr GemmShape kLayerGemms[] = {{896, 7168}, {7168, 4608}, {2304, 7168}};
constexpr size_t kGemmMaxK = 7168, kGemmMaxN = 7168, kGemmMaxWeights = 7168 * 4608;
constexpr size_t kMinBytes = 12 << 10;
constexpr size_t kMaxBytes = 2 << 20;

struct ContentionCall {
  uint64_t seed = 0;
  size_t count = 0;
  tparDataType_t dtype = tparBfloat16;
  tparRedOp_t op = tparSum;
  bool in_place = false;
  int gemm_tokens = 1;
  int grid = 1, smem = 0;
  uint32_t cycles = 0;
};

std::string describe(const ContentionCall& c) {
  return "count " + std::to_string(c.count) + " " + tparDataTypeName(c.dtype) + " " +
         tparRedOpName(c.op) + (c.in_place ? " in place" : "") + "; GEMMs of " +
         std::to_string(c.gemm_tokens) + " tokens; compute " + std::to_string(c.grid) + " blocks, " +
         std::to_string(c.smem) + " B shared, " + std::to_string(c.cycles) + " cycles";
}

// The device's limits the random compute kernels are drawn within.
struct ComputeLimits {
  int sms = 0;
  int max_smem = 0;                // opt-in shared memory of one block
  std::vector<int> smem_choices;   // none, a quarter, almost half, and all of max_smem
  std::vector<int> blocks_per_sm;  // for each choice
};

std::string computeLimits(ComputeLimits* lim) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return "cudaGetDevice failed";
  if (cudaDeviceGetAttribute(&lim->sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&lim->max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) !=
          cudaSuccess)
    return "cudaDeviceGetAttribute failed";
  if (preloadContentionKernel(lim->max_smem) != cudaSuccess) return "preloadContentionKernel failed";
  lim->smem_choices = {0, lim->max_smem / 4, lim->max_smem / 2 - 1024, lim->max_smem};
  for (int s : lim->smem_choices) {
    int b = 0;
    if (contentionBlocksPerSm(s, &b) != cudaSuccess || b < 1)
      return "contention kernel with " + std::to_string(s) + " B of shared memory cannot run";
    lim->blocks_per_sm.push_back(b);
  }
  return "";
}

ContentionCall randomCall(std::mt19937_64& rng, const ComputeLimits& lim) {
  ContentionCall c;
  c.seed = rng();
  const tparDataType_t dtypes[] = {tparBfloat16, tparFloat16, tparFloat32};
  c.dtype = dtypes[rng() % 3];
  const uint64_t op_pick = rng() % 10;
  c.op = op_pick < 8 ? tparSum : (op_pick == 8 ? tparMax : tparMin);
  c.in_place = rng() % 4 == 0;
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  const size_t bytes = static_cast<size_t>(
      std::exp(std::log(double(kMinBytes)) + u * (std::log(double(kMaxBytes)) - std::log(double(kMinBytes)))));
  c.count = std::max<size_t>(1, bytes / tpar::elementBytes(c.dtype));
  c.gemm_tokens = 1 + static_cast<int>(rng() % kGemmMaxTokens);
  const size_t pick = rng() % lim.smem_choices.size();
  c.smem = lim.smem_choices[pick];
  // Up to two waves of blocks.
  c.grid = 1 + static_cast<int>(rng() % (2u * lim.sms * lim.blocks_per_sm[pick]));
  c.cycles = static_cast<uint32_t>(rng() % 40000);  // up to about 20 us
  return c;
}

// Per rank: a cuBLAS handle on the rank's stream (with cuBLAS's own workspace, allocated when
// cuBLAS wants it) and the GEMMs' operands, random bf16 values (never zeros).
struct RankGemm {
  cublasHandle_t blas = nullptr;
  void *a = nullptr, *w = nullptr, *c = nullptr;
};

class Gemms {
 public:
  ~Gemms() {
    for (RankGemm& g : ranks_) {
      if (g.blas) cublasDestroy(g.blas);
      cudaFree(g.a);
      cudaFree(g.w);
      cudaFree(g.c);
    }
  }
  std::string init(const VirtualGroup& group) {
    ranks_.resize(group.size());
    for (int r = 0; r < group.size(); ++r) {
      RankGemm& g = ranks_[r];
      if (cublasCreate(&g.blas) != CUBLAS_STATUS_SUCCESS) return "cublasCreate failed";
      if (cublasSetStream(g.blas, group.stream(r)) != CUBLAS_STATUS_SUCCESS)
        return "cublasSetStream failed";
      const size_t a = kGemmMaxTokens * kGemmMaxK;
      if (cudaMalloc(&g.a, a * 2) != cudaSuccess || cudaMalloc(&g.w, kGemmMaxWeights * 2) != cudaSuccess ||
          cudaMalloc(&g.c, kGemmMaxTokens * kGemmMaxN * 2) != cudaSuccess)
        return "cudaMalloc failed";
      if (fillRandom(g.a, a, tparBfloat16, freshSeed(), group.stream(r)) != cudaSuccess ||
          fillRandom(g.w, kGemmMaxWeights, tparBfloat16, freshSeed(), group.stream(r)) != cudaSuccess)
        return "fillRandom failed";
    }
    return cudaDeviceSynchronize() == cudaSuccess ? "" : "cudaDeviceSynchronize failed";
  }
  // The layer's GEMMs for `tokens` tokens. Row-major C[t x n] = A[t x k] W[k x n], as
  // column-major cuBLAS sees it: C^T = W^T A^T.
  std::string launch(int r, int tokens) {
    RankGemm& g = ranks_[r];
    const float one = 1.f, zero = 0.f;
    for (const GemmShape& s : kLayerGemms) {
      const cublasStatus_t st = cublasGemmEx(
          g.blas, CUBLAS_OP_N, CUBLAS_OP_N, s.n, tokens, s.k, &one, g.w, CUDA_R_16BF, s.n, g.a,
          CUDA_R_16BF, s.k, &zero, g.c, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) return std::string("cublasGemmEx: ") + cublasGetStatusString(st);
    }
    return "";
  }

 private:
  std::vector<RankGemm> ranks_;
};

struct Outcome {
  int calls_done = 0;                 // calls whose results were checked
  tparResult_t async = tparSuccess;   // the first asynchronous error seen
  int async_rank = -1;
  std::string failure;                // anything else that went wrong
};

// Issues `calls` calls on every rank of an `n`-rank group made with `cfg`, each preceded on
// every rank's stream by the layer's GEMMs and a compute kernel, phase by phase, with each
// rank's all-reduce behind a rank gate when `gated`; checks every result.
void runContention(int n, const tparConfig_t& cfg, int calls, bool gated, Outcome* out) {
  ComputeLimits lim;
  ASSERT_EQ("", computeLimits(&lim));
  CUDA_OK(preloadStressKernels());
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, cfg));
  Gemms gemms;
  ASSERT_EQ("", gemms.init(g));
  tpar_cli::RankGate gate;
  ASSERT_EQ("", gate.init(n, cfg.timeoutMs));
  Buffers b;
  CUDA_OK(b.alloc(n, kMaxBytes + kStressGuardBytes + 64));
  StressCounterSet counters;
  CUDA_OK(counters.init(n));
  CUDA_OK(cudaDeviceSynchronize());

  const uint64_t rng_seed = freshSeed();
  std::mt19937_64 rng(rng_seed);
  SCOPED_TRACE("random seed " + std::to_string(rng_seed));
  std::vector<ContentionCall> issued;
  issued.reserve(calls);

  auto compute = [&](int r, const ContentionCall& c) -> std::string {
    void* send = b.in[r];
    void* recv = c.in_place ? send : b.out[r];
    if (launchStressFill(send, recv, c.count, c.dtype, c.seed, r, c.in_place, g.stream(r)) !=
        cudaSuccess)
      return "launchStressFill failed";
    if (std::string e = gemms.launch(r, c.gemm_tokens); !e.empty()) return e;
    if (launchContentionKernel(c.grid, c.smem, c.cycles, g.stream(r)) != cudaSuccess)
      return "launchContentionKernel failed";
    return "";
  };
  auto reduce = [&](int r, const ContentionCall& c) -> std::string {
    void* send = b.in[r];
    void* recv = c.in_place ? send : b.out[r];
    if (tparAllReduce(send, recv, c.count, c.dtype, c.op, g.comm(r), g.stream(r)) != tparSuccess)
      return "tparAllReduce rank " + std::to_string(r) + ": " + tparGetLastError(g.comm(r));
    return "";
  };
  auto check = [&](int r, const ContentionCall& c, int i) -> std::string {
    const void* recv = c.in_place ? b.in[r] : b.out[r];
    if (launchStressCheck(recv, c.count, c.dtype, c.op, c.seed, n, i, counters.rank(r),
                          g.stream(r)) != cudaSuccess)
      return "launchStressCheck failed";
    return "";
  };

  const int kBatch = 500;  // calls between checks of the counters and the async errors
  const auto t0 = std::chrono::steady_clock::now();
  for (int first = 0; first < calls; first += kBatch) {
    const int last = std::min(calls, first + kBatch);
    for (int i = first; i < last && out->failure.empty(); ++i) {
      const ContentionCall c = randomCall(rng, lim);
      issued.push_back(c);
      std::string err;
      for (int r = 0; r < n && err.empty(); ++r) err = compute(r, c);
      for (int r = 0; r < n && err.empty() && gated; ++r)
        if (gate.launch(r, g.stream(r)) != cudaSuccess) err = "RankGate::launch failed";
      for (int r = 0; r < n && err.empty(); ++r) err = reduce(r, c);
      for (int r = 0; r < n && err.empty(); ++r) err = check(r, c, i);
      if (!err.empty()) out->failure = "call " + std::to_string(i) + " (" + describe(c) + "): " + err;
    }
    for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
    if (out->failure.empty()) out->failure = gate.check();
    for (int r = 0; r < n && out->async == tparSuccess; ++r) {
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &out->async));
      if (out->async != tparSuccess) out->async_rank = r;
    }
    if (out->async != tparSuccess || !out->failure.empty()) {
      std::printf("[ contention ] stopped in calls %d..%d: %s%s\n", first, last - 1,
                  out->async != tparSuccess ? tparGetErrorString(out->async) : "",
                  out->failure.c_str());
      return;
    }
    const std::string bad = counters.failure(
        [&](unsigned long long k) { return k < issued.size() ? describe(issued[k]) : "?"; });
    if (!bad.empty()) FAIL() << "calls " << first << ".." << last - 1 << ": " << bad;
    out->calls_done = last;
  }
  const double s = secondsSince(t0);
  std::printf("[ contention ] %d ranks, %s, %s transport: %d calls in %.1f s (%.1f us per call)\n",
              n, tparAlgoName(static_cast<tparAlgo_t>(cfg.algorithm)), transportLabel(cfg.transport).c_str(), calls, s,
              1e6 * s / calls);
}

// Every algorithm (auto included) on both transports: 100,000 calls in all.
struct ContentionParam {
  tparAlgo_t algo;
  int transport;
};

std::vector<ContentionParam> contentionParams() {
  std::vector<ContentionParam> out;
  for (int transport : {kTransportDefault, kTransportHost})
    for (tparAlgo_t a : forcedAlgos(/*with_islands=*/false, /*with_auto=*/true))
      out.push_back({a, transport});
  return out;
}

constexpr int kTotalCalls = 100000;

class ContentionAllReduce : public ::testing::TestWithParam<ContentionParam> {};

TEST_P(ContentionAllReduce, EightVirtualRanksBetweenGemmsAndComputeNeverTimeOut) {
  TPAR_REQUIRE_GPU();
  const int configs = static_cast<int>(contentionParams().size());
  const int calls = (kTotalCalls + configs - 1) / configs;
  tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/10000);
  cfg.algorithm = GetParam().algo;
  cfg.transport = GetParam().transport;
  Outcome out;
  runContention(8, cfg, calls, /*gated=*/true, &out);
  if (HasFatalFailure()) return;
  EXPECT_EQ(tparSuccess, out.async) << "rank " << out.async_rank << " after " << out.calls_done
                                    << " checked calls: " << tparGetErrorString(out.async);
  EXPECT_EQ("", out.failure);
  EXPECT_EQ(calls, out.calls_done);
}

INSTANTIATE_TEST_SUITE_P(
    AlgorithmsAndTransports, ContentionAllReduce, ::testing::ValuesIn(contentionParams()),
    [](const ::testing::TestParamInfo<ContentionParam>& info) {
      return testNamePart(tparAlgoName(info.param.algo)) + "_" +
             transportLabel(info.param.transport);
    });

// The class the gate removes, kept as an experiment (run by hand with
// --gtest_also_run_disabled_tests; scripts/contention-check.sh runs it): the same calls without
// the gate. Each rank's all-reduce then waits, holding its blocks, while ranks behind it still
// have GEMMs queued. It passes when the group times out, as NOTE [rank gate] says it may; if it
// never does on a GPU, the note must say so.
TEST(ContentionAllReduceHazard, DISABLED_UngatedAllReducesBehindGemmsTimeOut) {
  TPAR_REQUIRE_GPU();
  tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/5000);
  Outcome out;
  runContention(8, cfg, 20000, /*gated=*/false, &out);
  if (HasFatalFailure()) return;
  std::printf("[ hazard ] %s after %d checked calls\n", tparGetErrorString(out.async),
              out.calls_done);
  EXPECT_EQ(tparTimeout, out.async) << out.failure;
}

}  // namespace
}  // namespace tpar_test
