// The pipelined two-shot under launch shapes its defaults never pick: any number of active
// blocks up to its limit, and more steps than a block has positions (empty steps), on both
// transports. The shape goes in as a one-entry tuning table, the path a saved table takes.
#include <string>
#include <vector>

#include "comm/comm_access.h"
#include "gpu/test_util.h"
#include "tuner/tuner.h"

namespace tpar_test {
namespace {

void usePlan(VirtualGroup& g, const tpar::Plan& plan) {
  for (int r = 0; r < g.size(); ++r) tpar::usePlan(g.comm(r), plan);
}

class PipelinedShapes : public ::testing::TestWithParam<int> {};

TEST_P(PipelinedShapes, EveryBlockAndStepCountIsCorrect) {
  TPAR_REQUIRE_GPU();
  struct Shape {
    int blocks, steps;
  };
  // One step runs every phase on the whole block; more steps, in groups of warps side by side.
  const Shape shapes[] = {{1, 1}, {5, 1}, {1, 5}, {2, 16}, {7, 3}, {64, 64}};
  for (int n : {2, 3, 8}) {
    tparConfig_t cfg = sharedDeviceConfig();
    cfg.transport = GetParam();
    VirtualGroup g;
    ASSERT_EQ("", g.init(n, cfg));
    for (const Shape& s : shapes) {
      tpar::Plan plan;
      plan.algo = tpar::kernels::Algo::kPipelined;
      plan.active_blocks = s.blocks;
      plan.steps = s.steps;
      usePlan(g, plan);
      tparAlgo_t runs_as = tparAlgoAuto;
      TPAR_OK(tparCommSelectAlgorithm(g.comm(0), 4096, &runs_as));
      ASSERT_EQ(tparAlgoPipelined, runs_as);
      for (size_t count : {size_t{1}, size_t{9}, size_t{1000}, size_t{6145}, size_t{57347},
                           size_t{524293}}) {
        SCOPED_TRACE("n " + std::to_string(n) + ", blocks " + std::to_string(s.blocks) +
                     ", steps " + std::to_string(s.steps) + ", count " + std::to_string(count));
        runAndCheck(g, count, tparBfloat16, tparSum, /*in_place=*/false);
        runAndCheck(g, count, tparBfloat16, tparSum, /*in_place=*/true);
        runAndCheck(g, count, tparFloat32, tparMax, /*in_place=*/false, /*send_off=*/1,
                    /*recv_off=*/3);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, PipelinedShapes,
                         ::testing::Values(kTransportDefault, kTransportHost),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return transportLabel(info.param);
                         });

// Ranks that disagree on the shape (one rank's table differs) get tparInvalidUsage from the
// flag lines' check, not a hang or a wrong sum.
TEST(PipelinedShapes, RanksThatDisagreeOnStepsGetInvalidUsage) {
  TPAR_REQUIRE_GPU();
  tparConfig_t cfg = sharedDeviceConfig(/*timeout_ms=*/2000);
  cfg.transport = kTransportHost;
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, cfg));
  tpar::Plan plan;
  plan.algo = tpar::kernels::Algo::kPipelined;
  plan.active_blocks = 1;
  plan.steps = 2;
  usePlan(g, plan);
  plan.steps = 3;
  tpar::usePlan(g.comm(1), plan);  // rank 1 alone gets 3 steps
  Buffers b;
  CUDA_OK(b.alloc(2, 1 << 16));
  for (int r = 0; r < 2; ++r)
    TPAR_OK(tparAllReduce(b.in[r], b.out[r], 20000, tparBfloat16, tparSum, g.comm(r),
                          g.stream(r)));
  for (int r = 0; r < 2; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
  for (int r = 0; r < 2; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_TRUE(async == tparInvalidUsage || async == tparRemoteError)
        << "rank " << r << ": " << tparGetErrorString(async);
  }
}

}  // namespace
}  // namespace tpar_test
