// `tpar tune --procs` without a GPU: what each rank's child is told, how its measurements
// travel back, and how the ranks' measurements merge.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/tpar/tune/tune.h"
#include "unit/tune_test_util.h"

namespace tpar_cli {
namespace {

using tpar::kernels::Algo;

TEST(TuneProcs, ChildrenRunTheParentsSearchWithoutItsOutputOptions) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({"--procs", "--ranks", "2", "-b", "4K", "-e", "16K", "-n", "7", "-w",
                               "3", "-d", "float16,float32", "--transport", "host", "--quick",
                               "--blocks", "8,32", "--threads", "256", "--steps", "1,4",
                               "--output", "/tmp/x.json", "--all"},
                              &opt));
  EXPECT_TRUE(opt.procs);
  std::vector<std::string> args = childTuneArgs(opt);
  ASSERT_FALSE(args.empty());
  EXPECT_EQ("tune", args[0]);
  for (const std::string& a : args) {
    EXPECT_NE("--output", a) << "the parent writes the table";
    EXPECT_NE("--procs", a) << "a child is one rank";
  }
  TuneOptions child;
  ASSERT_EQ("", parseTuneArgs(std::vector<std::string>(args.begin() + 1, args.end()), &child));
  EXPECT_EQ(tuneSizes(opt), tuneSizes(child));
  EXPECT_EQ(7, child.iters);
  EXPECT_EQ(3, child.warmup);
  EXPECT_EQ(opt.dtypes, child.dtypes);
  EXPECT_EQ(opt.transport, child.transport);
  EXPECT_TRUE(child.quick);
  EXPECT_EQ(opt.blocks, child.blocks);
  EXPECT_EQ(opt.threads, child.threads);
  EXPECT_EQ(opt.steps, child.steps);
  EXPECT_FALSE(child.nccl) << "NCCL is not a candidate across processes";
  EXPECT_TRUE(child.output.empty());
}

std::vector<TuneBucket> rankBuckets(double us0, double us1, long long wrong1) {
  std::vector<TuneBucket> b(1);
  b[0].bytes = 12 << 10;
  b[0].dtype = tparBfloat16;
  b[0].candidates = {asDefault(shaped(Algo::kOneShot, 0, 0, us0)),
                     shaped(Algo::kOneShot, 32, 256, us1, wrong1)};
  b[0].candidates[1].plan.steps = 0;
  return b;
}

TEST(TuneProcs, MeasurementsSurviveTheTripFromAChild) {
  std::mt19937 rng(std::random_device{}());
  const double us = 1.0 + (rng() % 10000) / 100.0;
  std::vector<TuneBucket> b = rankBuckets(us, us / 2, 3);
  b[0].candidates.push_back(shaped(Algo::kPipelined, 8, 512, 0, -1));
  b[0].candidates.back().plan.steps = 4;
  b[0].candidates.back().plan.pull = true;
  b[0].candidates.back().error = "tparAllReduce: timeout";
  tpar::TunerContext ctx;
  ctx.signature = "sig-procs";
  ctx.nranks = 2;
  std::vector<TuneBucket> back;
  tpar::TunerContext back_ctx;
  ASSERT_EQ("", bucketsFromJson(bucketsToJson(b, ctx), &back, &back_ctx));
  EXPECT_EQ("sig-procs", back_ctx.signature);
  EXPECT_EQ(2, back_ctx.nranks);
  ASSERT_EQ(1u, back.size());
  ASSERT_EQ(3u, back[0].candidates.size());
  EXPECT_TRUE(back[0].candidates[0].is_default);
  EXPECT_DOUBLE_EQ(us, back[0].candidates[0].us);
  EXPECT_EQ(32, back[0].candidates[1].plan.active_blocks);
  EXPECT_EQ(256, back[0].candidates[1].plan.threads);
  EXPECT_EQ(3, back[0].candidates[1].wrong);
  EXPECT_EQ(Algo::kPipelined, back[0].candidates[2].plan.algo);
  EXPECT_EQ(4, back[0].candidates[2].plan.steps);
  EXPECT_TRUE(back[0].candidates[2].plan.pull);
  EXPECT_EQ("tparAllReduce: timeout", back[0].candidates[2].error);
  // A child that failed says why.
  std::vector<TuneBucket> none;
  EXPECT_EQ("rank 1: cudaSetDevice failed",
            bucketsFromJson(R"({"error": "rank 1: cudaSetDevice failed"})", &none, &back_ctx));
  EXPECT_NE("", bucketsFromJson("{", &none, &back_ctx));
}

TEST(TuneProcs, TheSlowestRankCountsAndAWrongRankSpoilsTheCandidate) {
  std::vector<TuneBucket> merged;
  ASSERT_EQ("", mergeRankBuckets({rankBuckets(5.0, 3.0, 0), rankBuckets(6.0, 2.0, 4)}, &merged));
  ASSERT_EQ(1u, merged.size());
  EXPECT_DOUBLE_EQ(6.0, merged[0].candidates[0].us);
  EXPECT_DOUBLE_EQ(3.0, merged[0].candidates[1].us);
  EXPECT_EQ(4, merged[0].candidates[1].wrong);
  EXPECT_FALSE(merged[0].candidates[1].usable());
  EXPECT_EQ(0, pickFastest(merged[0].candidates, 0.03));

  std::vector<TuneBucket> other = rankBuckets(5.0, 3.0, 0);
  other[0].candidates[1].plan.threads = 512;
  EXPECT_NE("", mergeRankBuckets({rankBuckets(5.0, 3.0, 0), other}, &merged));
  std::vector<TuneBucket> fewer;
  EXPECT_NE("", mergeRankBuckets({rankBuckets(5.0, 3.0, 0), fewer}, &merged));
}

}  // namespace
}  // namespace tpar_cli
