// `tpar tune` (no GPU): its options, the choice and the table it writes, the candidates of the search space and what is excluded with
// which reason, the time estimate, the options, the table's new fields, and the gain report.
#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "registry/algorithms.h"
#include "base/error.h"
#include "tools/tpar/tune/tune.h"
#include "unit/tune_test_util.h"
#include "tuner/tuner.h"

namespace tpar_cli {
namespace {

using tpar::Plan;
using tpar::kernels::Algo;

tpar::TunerContext group(int nranks, bool host = false) {
  tpar::TunerContext ctx;
  ctx.nranks = nranks;
  ctx.signature = "sig-search";
  ctx.host_transport = host;
  return ctx;
}

TEST(TuneArgs, DefaultsCoverOneKibToSixtyFourMibByTwo) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({}, &opt));
  const auto sizes = tuneSizes(opt);
  ASSERT_EQ(17u, sizes.size());
  EXPECT_EQ(1024u, sizes.front());
  EXPECT_EQ(64u << 20, sizes.back());
  EXPECT_EQ(std::vector<tparDataType_t>{tparBfloat16}, opt.dtypes);
  EXPECT_TRUE(opt.shapes);
  EXPECT_EQ("", opt.output);
}

TEST(TuneArgs, OptionsLikeBenchAreUnderstood) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({"--sizes", "64K,4K,4K,1M", "-n", "20", "-w", "2", "-d",
                               "float16,float32", "--ranks", "4", "--output", "/tmp/t.json",
                               "--shapes", "0"},
                              &opt));
  EXPECT_EQ((std::vector<size_t>{4096, 65536, 1u << 20}), tuneSizes(opt));
  EXPECT_EQ(20, opt.iters);
  EXPECT_EQ(2, opt.warmup);
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat16, tparFloat32}), opt.dtypes);
  EXPECT_EQ(4, opt.ranks);
  EXPECT_EQ("/tmp/t.json", opt.output);
  EXPECT_FALSE(opt.shapes);
  TuneOptions bad;
  EXPECT_NE("", parseTuneArgs({"-d", "int8"}, &bad));
  TuneOptions bad2;
  EXPECT_NE("", parseTuneArgs({"--ranks", "99"}, &bad2));
  TuneOptions bad3;
  EXPECT_NE("", parseTuneArgs({"--sizes", "4K,x"}, &bad3));
}

TEST(TunePick, FastestCorrectPlanWinsAndWrongOrFailedPlansNever) {
  using A = tpar::kernels::Algo;
  const std::vector<TuneCandidate> cs = {
      cand(A::kOneShot, 0, 10.0, 0), cand(A::kTwoShot, 0, 8.0, 0),
      cand(A::kStaged, 0, 2.0, 5),  // fastest but wrong
      cand(A::kHier, 0, 1.0, -1, "not supported here"), cand(A::kTwoShot, 16, 7.0, 0)};
  EXPECT_EQ(4, pickFastest(cs, 0.03));
  // Within the noise margin the earlier candidate stays.
  const std::vector<TuneCandidate> close = {cand(A::kOneShot, 0, 10.0, 0),
                                            cand(A::kTwoShot, 0, 9.9, 0)};
  EXPECT_EQ(0, pickFastest(close, 0.03));
  EXPECT_EQ(1, pickFastest(close, 0.0));
  EXPECT_EQ(-1, pickFastest({cand(A::kOneShot, 0, 3.0, 1)}, 0.03));
}

TEST(TunePick, TableHasOneEntryPerBucketAndKeepsOtherDtypes) {
  using A = tpar::kernels::Algo;
  tpar::TunerContext ctx;
  ctx.nranks = 4;
  ctx.signature = "sig-t";
  std::vector<TuneBucket> buckets(3);
  buckets[0].bytes = 4096;
  buckets[0].candidates = {cand(A::kOneShot, 0, 3.0, 0), cand(A::kTwoShot, 0, 5.0, 0)};
  buckets[1].bytes = 65536;
  buckets[1].candidates = {cand(A::kOneShot, 0, 3.0, 7)};  // nothing correct: left out
  buckets[2].bytes = 1 << 20;
  buckets[2].candidates = {cand(A::kOneShot, 0, 30.0, 0), cand(A::kTwoShot, 8, 12.0, 0)};
  tpar::TuningTable old;
  old.signature = "sig-t";
  old.nranks = 4;
  old.entries = {{8192, tparFloat32, {A::kTwoShot, 0, 0}, 2.0},
                 {2048, tparBfloat16, {A::kHier, 0, 0}, 1.0}};  // replaced by the new bf16
  const tpar::TuningTable t = tableFromBuckets(buckets, ctx, &old, 0.03);
  EXPECT_EQ("sig-t", t.signature);
  EXPECT_EQ(4, t.nranks);
  ASSERT_EQ(3u, t.entries.size());
  EXPECT_EQ(tparFloat32, t.entries[0].dtype);
  EXPECT_EQ(8192u, t.entries[0].max_bytes);
  EXPECT_EQ(4096u, t.entries[1].max_bytes);
  EXPECT_EQ(A::kOneShot, t.entries[1].plan.algo);
  EXPECT_DOUBLE_EQ(3.0, t.entries[1].us);
  EXPECT_EQ(1u << 20, t.entries[2].max_bytes);
  EXPECT_EQ(A::kTwoShot, t.entries[2].plan.algo);
  EXPECT_EQ(8, t.entries[2].plan.active_blocks);
  // The result is a valid table.
  tpar::TuningTable back;
  EXPECT_EQ(tparSuccess, tpar::tuningFromJson(tpar::tuningToJson(t), &back)) << tpar::lastError();
  // A previous table of another topology contributes nothing.
  old.signature = "sig-other";
  EXPECT_EQ(2u, tableFromBuckets(buckets, ctx, &old, 0.03).entries.size());
}

TEST(TunePick, NcclEntersTheTableOnlyWhereItBeatsTparBeyondTheNoise) {
  tpar::TunerContext ctx;
  ctx.nranks = 2;
  ctx.signature = "sig-n";
  auto ncclCand = [](double us) {
    TuneCandidate c;
    c.plan.nccl = true;
    c.us = us;
    c.wrong = 0;
    return c;
  };
  std::vector<TuneBucket> buckets(3);
  buckets[0].bytes = 4096;  // tpar clearly faster
  buckets[0].candidates = {cand(Algo::kOneShot, 0, 5.0, 0), ncclCand(20.0)};
  buckets[1].bytes = 65536;  // NCCL within 3%: tpar keeps it
  buckets[1].candidates = {cand(Algo::kTwoShot, 0, 10.0, 0), ncclCand(9.8)};
  buckets[2].bytes = 1 << 20;  // NCCL clearly faster
  buckets[2].candidates = {cand(Algo::kTwoShot, 0, 50.0, 0), ncclCand(40.0)};
  const tpar::TuningTable t = tableFromBuckets(buckets, ctx, nullptr, 0.03);
  ASSERT_EQ(3u, t.entries.size());
  EXPECT_FALSE(t.entries[0].plan.nccl);
  EXPECT_FALSE(t.entries[1].plan.nccl);
  EXPECT_TRUE(t.entries[2].plan.nccl);
  EXPECT_DOUBLE_EQ(40.0, t.entries[2].us);
  tpar::TuningTable back;
  ASSERT_EQ(tparSuccess, tpar::tuningFromJson(tpar::tuningToJson(t), &back)) << tpar::lastError();
  EXPECT_TRUE(back.entries[2].plan.nccl);
}

TEST(TuneArgs, NcclIsMeasuredUnlessTurnedOff) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({}, &opt));
  EXPECT_TRUE(opt.nccl);
  TuneOptions off;
  ASSERT_EQ("", parseTuneArgs({"--nccl", "0"}, &off));
  EXPECT_FALSE(off.nccl);
}

using Shape = std::tuple<int, int, int, int, bool>;  // algo, blocks, threads, steps, pull
std::set<Shape> shapesOf(const std::vector<Plan>& plans) {
  std::set<Shape> s;
  for (const Plan& p : plans)
    if (!p.nccl) s.insert({static_cast<int>(p.algo), p.active_blocks, p.threads, p.steps, p.pull});
  return s;
}

const ExcludedPlan* excludedShape(const TuneCandidates& c, Algo a, int blocks, int threads) {
  for (const ExcludedPlan& x : c.excluded)
    if (x.plan.algo == a && x.plan.active_blocks == blocks && x.plan.threads == threads) return &x;
  return nullptr;
}

TEST(TuneSearch, EveryAlgorithmGetsEveryBlockAndThreadCountItCanLaunch) {
  for (bool host : {false, true}) {
    TuneLimits limits;
    limits.grid_blocks = 64;
    const TuneSpace space = fullTuneSpace();
    const TuneCandidates c = tuneCandidates(group(4, host), space, limits, true, false);
    const std::set<Shape> got = shapesOf(c.plans);
    EXPECT_EQ(got.size(), c.plans.size()) << "each plan once";
    for (const tpar::Algorithm& a : tpar::algorithms()) {
      if (a.needs_islands) continue;  // one island here: below
      const bool pipelined = a.id == Algo::kPipelined;
      for (int b : {1, 2, 4, 8, 16, 32, 64}) {
        for (int t : {64, 128, 256, 512}) {
          if (t < a.min_threads) {
            // 64 threads are in the space, too few for the flag-line kernels' warp groups.
            const ExcludedPlan* few = excludedShape(c, a.id, b, t);
            ASSERT_NE(nullptr, few) << a.name << " " << t;
            EXPECT_NE(std::string::npos, few->why.find("below the algorithm's")) << few->why;
            continue;
          }
          for (int s : pipelined ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{0}) {
            for (bool pull : pipelined ? std::vector<bool>{false, true} : std::vector<bool>{false})
              EXPECT_TRUE(got.count({static_cast<int>(a.id), b, t, s, pull}))
                  << a.name << " blocks " << b << " threads " << t << " steps " << s
                  << " pull " << pull << " host " << host;
          }
        }
        // 1024 threads are in the space and excluded by the launch bound, with the reason.
        const ExcludedPlan* x = excludedShape(c, a.id, b, 1024);
        ASSERT_NE(nullptr, x) << a.name;
        EXPECT_NE(std::string::npos, x->why.find("launch bound of 512")) << x->why;
      }
    }
    for (const Plan& p : c.plans) {
      EXPECT_GE(p.active_blocks, 1);
      EXPECT_LE(p.active_blocks, 64);
      EXPECT_LE(p.threads, tpar::kernels::kMaxThreads);
      if (p.algo != Algo::kPipelined) {
        EXPECT_EQ(0, p.steps) << tpar::algoName(p.algo) << ": steps apply to pipelined only";
        EXPECT_FALSE(p.pull) << tpar::algoName(p.algo);
      }
    }
  }
}

TEST(TuneSearch, AlgorithmsTheGroupCannotRunAreExcludedOnceWithTheReason) {
  TuneLimits limits;
  const TuneCandidates c = tuneCandidates(group(2), fullTuneSpace(), limits, true, false);
  size_t hier = 0, staged = 0;
  for (const ExcludedPlan& x : c.excluded) {
    if (x.plan.algo == Algo::kHier) {
      ++hier;
      EXPECT_NE(std::string::npos, x.why.find("one island")) << x.why;
    }
    if (x.plan.algo == Algo::kStaged) {
      ++staged;
      EXPECT_NE(std::string::npos, x.why.find("3 ranks or more")) << x.why;
    }
  }
  EXPECT_EQ(1u, hier);
  EXPECT_EQ(1u, staged);
  for (const Plan& p : c.plans) {
    EXPECT_NE(Algo::kHier, p.algo);
    EXPECT_NE(Algo::kStaged, p.algo);
  }
  // Equal islands: hierarchical is searched like the others.
  tpar::TunerContext islands = group(4);
  islands.islands = 2;
  islands.island_size = 2;
  islands.hierarchical_ok = true;
  const TuneCandidates h = tuneCandidates(islands, quickTuneSpace(), limits, true, false);
  EXPECT_TRUE(shapesOf(h.plans).count({static_cast<int>(Algo::kHier), 8, 256, 0, false}));
}

TEST(TuneSearch, ShapesBeyondTheGroupOrTheAlgorithmAreExcludedWithTheReason) {
  TuneLimits limits;
  limits.grid_blocks = 32;
  limits.max_threads = 256;
  TuneSpace space = fullTuneSpace();
  space.threads = {64, 128, 256, 512};
  space.blocks = {16, 32, 48, 64};
  const TuneCandidates c = tuneCandidates(group(4), space, limits, true, false);
  const std::set<Shape> got = shapesOf(c.plans);
  const ExcludedPlan* grid = excludedShape(c, Algo::kOneShot, 48, 256);
  ASSERT_NE(nullptr, grid);
  EXPECT_NE(std::string::npos, grid->why.find("grid of 32")) << grid->why;
  EXPECT_NE(std::string::npos, grid->why.find("TPAR_MAX_BLOCKS")) << grid->why;
  const ExcludedPlan* threads = excludedShape(c, Algo::kTwoShot, 32, 512);
  ASSERT_NE(nullptr, threads);
  EXPECT_NE(std::string::npos, threads->why.find("TPAR_THREADS")) << threads->why;
  // The flag-line kernels split a block into groups of whole warps: 64 threads are too few.
  const ExcludedPlan* few = excludedShape(c, Algo::kPipelined, 16, 64);
  ASSERT_NE(nullptr, few);
  EXPECT_NE(std::string::npos, few->why.find("below the algorithm's 128")) << few->why;
  EXPECT_TRUE(got.count({static_cast<int>(Algo::kOneShot), 16, 64, 0, false}));
  // Above the flag lines' 64 blocks, even where the grid is larger.
  limits.grid_blocks = 1024;
  space.blocks = {96};
  const TuneCandidates wide = tuneCandidates(group(4), space, limits, true, false);
  const ExcludedPlan* lines = excludedShape(wide, Algo::kTwoShotLL, 96, 128);
  ASSERT_NE(nullptr, lines);
  EXPECT_NE(std::string::npos, lines->why.find("algorithm's 64")) << lines->why;
  EXPECT_TRUE(shapesOf(wide.plans).count({static_cast<int>(Algo::kOneShot), 96, 128, 0, false}));
  // Nothing measured is also listed as excluded.
  for (const ExcludedPlan& x : c.excluded)
    EXPECT_FALSE(got.count({static_cast<int>(x.plan.algo), x.plan.active_blocks, x.plan.threads,
                            x.plan.steps, x.plan.pull}));
}

TEST(TuneSearch, WithoutShapesEveryAlgorithmOnceAndNcclLast) {
  const TuneCandidates c = tuneCandidates(group(4), fullTuneSpace(), TuneLimits{}, false, true);
  ASSERT_FALSE(c.plans.empty());
  EXPECT_TRUE(c.plans.back().nccl);
  size_t nccl = 0;
  std::set<int> algos;
  for (const Plan& p : c.plans) {
    nccl += p.nccl;
    if (p.nccl) continue;
    EXPECT_TRUE(algos.insert(static_cast<int>(p.algo)).second) << tpar::algoName(p.algo);
    EXPECT_EQ(0, p.active_blocks);
    EXPECT_EQ(0, p.threads);
  }
  EXPECT_EQ(1u, nccl);
  EXPECT_EQ(tpar::algorithms().size() - 1, algos.size());  // all but hier (one island)
}

TEST(TuneSearch, EveryAlgorithmTheGroupCanRunIsAlsoMeasuredAsForced) {
  // Forcing an algorithm runs it in its own shape (the grid, or the host shape; threads sized
  // from the work), which the blocks x threads grid need not hold: the search measures that
  // plan per size too, so a table is never beaten by an algorithm forced by hand.
  for (int n : {2, 4}) {
    for (bool host : {false, true}) {
      const TuneCandidates c = tuneCandidates(group(n, host), quickTuneSpace(), TuneLimits{}, true, false);
      std::set<int> want;
      for (const tpar::Algorithm& a : tpar::algorithms())
        if (!a.needs_islands && n >= a.min_ranks) want.insert(static_cast<int>(a.id));
      std::set<int> got;
      for (const Plan& p : c.forced) {
        EXPECT_TRUE(got.insert(static_cast<int>(p.algo)).second) << tpar::algoName(p.algo) << " twice";
        EXPECT_EQ(0, p.active_blocks);
        EXPECT_EQ(0, p.threads);
        EXPECT_FALSE(p.nccl);
      }
      EXPECT_EQ(want, got) << n << " ranks, host " << host;
    }
  }
  // Without shapes every algorithm is a plain candidate already.
  EXPECT_TRUE(tuneCandidates(group(4), fullTuneSpace(), TuneLimits{}, false, false).forced.empty());
}

TEST(TuneSearch, QuickModeIsASmallSubsetAndTheEstimateGrowsWithTheWork) {
  TuneLimits limits;
  const auto full = tuneCandidates(group(4), fullTuneSpace(), limits, true, false).plans;
  const auto quick = tuneCandidates(group(4), quickTuneSpace(), limits, true, false).plans;
  EXPECT_LT(quick.size() * 2, full.size());
  const std::set<Shape> all = shapesOf(full);
  for (const Shape& s : shapesOf(quick)) EXPECT_TRUE(all.count(s));
  // The shapes that won elsewhere are in the quick space (32x256 one-shot, 8x512 pulls).
  EXPECT_TRUE(shapesOf(quick).count({static_cast<int>(Algo::kOneShot), 32, 256, 0, false}));
  EXPECT_TRUE(shapesOf(quick).count({static_cast<int>(Algo::kOneShotPull), 8, 512, 0, false}));
  // And the small-call shapes of GPU memory: 64 threads, 64 blocks where the grid allows.
  EXPECT_TRUE(shapesOf(quick).count({static_cast<int>(Algo::kOneShot), 16, 64, 0, false}));

  const std::vector<size_t> sizes = {12 << 10, 112 << 10, 4 << 20};
  const double e = tuneEstimateSeconds(full.size(), sizes, 50, 5, 2);
  EXPECT_GT(e, 0.0);
  EXPECT_GT(e, tuneEstimateSeconds(quick.size(), sizes, 50, 5, 2));
  EXPECT_GT(tuneEstimateSeconds(full.size(), {64 << 20}, 50, 5, 2),
            tuneEstimateSeconds(full.size(), {1 << 10}, 50, 5, 2));
  EXPECT_GT(tuneEstimateSeconds(full.size(), sizes, 200, 5, 2), e);
}

TEST(TuneArgs, SearchOptionsAreParsedAndBadListsRejected) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({"--virtual", "--quick", "--blocks", "8,16,32", "--threads", "256,512", "--steps",
                               "1,4", "--all"},
                              &opt));
  EXPECT_TRUE(opt.quick);
  EXPECT_TRUE(opt.virtual_ranks);
  EXPECT_TRUE(opt.print_all);
  EXPECT_EQ((std::vector<int>{8, 16, 32}), opt.blocks);
  EXPECT_EQ((std::vector<int>{256, 512}), opt.threads);
  EXPECT_EQ((std::vector<int>{1, 4}), opt.steps);
  TuneOptions d;
  ASSERT_EQ("", parseTuneArgs({}, &d));
  EXPECT_FALSE(d.quick);
  EXPECT_TRUE(d.blocks.empty());
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--blocks", "0"}, {"--blocks", "8,x"}, {"--threads", "2048"},
        {"--steps", "65"}}) {
    TuneOptions o;
    const std::string err = parseTuneArgs(bad, &o);
    EXPECT_NE(std::string::npos, err.find(bad[0])) << bad[0] << " " << bad[1] << ": " << err;
  }
}

// --wire: the formats named, "none" and repeats dropped, anything else refused naming it.
TEST(TuneArgs, WireFormatsAreParsedAndUnknownOnesRefused) {
  TuneOptions opt;
  ASSERT_EQ("", parseTuneArgs({"--wire", "int4,fp8,none,int4"}, &opt));
  EXPECT_EQ((std::vector<int>{tparWireInt4, tparWireFp8}), opt.wires);
  TuneOptions d;
  ASSERT_EQ("", parseTuneArgs({}, &d));
  EXPECT_TRUE(d.wires.empty());
  TuneOptions o;
  const std::string err = parseTuneArgs({"--wire", "fp8,fp9"}, &o);
  EXPECT_NE(std::string::npos, err.find("--wire")) << err;
  EXPECT_NE(std::string::npos, err.find("fp9")) << err;
}

WirePoint point(uint64_t bytes, double lossless, double wire, long long wrong = 0) {
  WirePoint p;
  p.bytes = bytes;
  p.lossless_us = lossless;
  p.wire_us = wire;
  p.wrong = wrong;
  return p;
}

// The threshold is the smallest size from which the format wins at every size measured: a
// win below a loss does not count, a loss at the largest size keeps the format off, a wrong or
// failed size is no win, and a win must clear the noise.
TEST(TuneWire, TheThresholdIsWhereTheFormatWinsFromOnUpward) {
  const double noise = 0.03;
  std::mt19937_64 rng(std::random_device{}());
  const uint64_t k = 1024 * (1 + rng() % 64);  // sizes in units of a random few KiB
  EXPECT_EQ(-1, wireBreakEven({}, noise));
  // Wins from the third size on.
  EXPECT_EQ(static_cast<int64_t>(4 * k),
            wireBreakEven({point(k, 10, 12), point(2 * k, 20, 21), point(4 * k, 40, 30),
                           point(8 * k, 80, 50)},
                          noise));
  // A win at the smallest size below a loss: only the sizes above the last loss.
  EXPECT_EQ(static_cast<int64_t>(8 * k),
            wireBreakEven({point(k, 10, 5), point(2 * k, 20, 25), point(4 * k, 40, 41),
                           point(8 * k, 80, 50)},
                          noise));
  // Every size.
  EXPECT_EQ(static_cast<int64_t>(k),
            wireBreakEven({point(k, 10, 5), point(2 * k, 20, 10)}, noise));
  // Behind at the largest size: never.
  EXPECT_EQ(tpar::kWireNever,
            wireBreakEven({point(k, 10, 5), point(2 * k, 20, 30)}, noise));
  // Within the noise is no win.
  EXPECT_EQ(tpar::kWireNever, wireBreakEven({point(k, 10, 10 / (1 + noise / 2))}, noise));
  // Wrong elements, a failure, or no lossless time: no win there.
  EXPECT_EQ(static_cast<int64_t>(4 * k),
            wireBreakEven({point(2 * k, 20, 10, 3), point(4 * k, 40, 20), point(8 * k, 80, 30)},
                          noise));
  WirePoint failed = point(8 * k, 80, 0, -1);
  failed.error = "the format does not apply here";
  EXPECT_EQ(tpar::kWireNever, wireBreakEven({point(k, 10, 5), failed}, noise));
  EXPECT_EQ(tpar::kWireNever, wireBreakEven({point(k, 0, 5)}, noise));
}

// The table keeps the previous file's thresholds (a run without --wire changes none), and
// the report names each format's sizes, times and outcome.
TEST(TuneWire, TheTableKeepsThresholdsAndTheReportShowsThem) {
  tpar::TunerContext ctx;
  ctx.nranks = 4;
  ctx.signature = "sig-w";
  std::vector<TuneBucket> buckets(1);
  buckets[0].bytes = 1 << 20;
  buckets[0].candidates = {cand(Algo::kPipelined, 0, 100.0, 0)};
  tpar::TuningTable old;
  old.signature = "sig-w";
  old.nranks = 4;
  old.wire_min_bytes[tparWireInt8] = 4 << 20;
  old.wire_min_bytes[tparWireInt4] = tpar::kWireNever;
  tpar::TuningTable t = tableFromBuckets(buckets, ctx, &old, 0.03);
  EXPECT_EQ(4 << 20, t.wire_min_bytes[tparWireInt8]);
  EXPECT_EQ(tpar::kWireNever, t.wire_min_bytes[tparWireInt4]);
  EXPECT_EQ(-1, t.wire_min_bytes[tparWireFp8]);
  old.signature = "sig-other";
  EXPECT_EQ(-1, tableFromBuckets(buckets, ctx, &old, 0.03).wire_min_bytes[tparWireInt8]);

  WireResult fp8;
  fp8.wire = tparWireFp8;
  fp8.points = {point(512 << 10, 50, 60), point(1 << 20, 100, 70)};
  fp8.min_bytes = wireBreakEven(fp8.points, 0.03);
  WireResult int4;
  int4.wire = tparWireInt4;
  WirePoint off = point(1 << 20, 100, 0, -1);
  off.error = "the format does not apply here";
  int4.points = {off};
  int4.min_bytes = wireBreakEven(int4.points, 0.03);
  const std::string report = wireReport({fp8, int4});
  EXPECT_NE(std::string::npos, report.find("# wire fp8")) << report;
  EXPECT_NE(std::string::npos, report.find("1.429x")) << report;  // 100 / 70
  EXPECT_NE(std::string::npos, report.find("ahead from 1048576 B")) << report;
  EXPECT_NE(std::string::npos, report.find("does not apply here")) << report;
  EXPECT_NE(std::string::npos, report.find("int4: not ahead")) << report;
}

TEST(TuneTable, NewShapesAndTheDefaultTimeRoundTrip) {
  std::mt19937 rng(std::random_device{}());
  tpar::TuningTable t;
  t.signature = "sig-rt";
  t.nranks = 4;
  const int blocks = 1 + static_cast<int>(rng() % 64);
  const int threads = 128 << (rng() % 3);
  const int steps = 1 + static_cast<int>(rng() % 8);
  const double us = 1.0 + (rng() % 100000) / 1000.0;
  const double def_us = us * 1.5;
  Plan p;
  p.algo = Algo::kPipelined;
  p.active_blocks = blocks;
  p.threads = threads;
  p.steps = steps;
  p.pull = true;
  t.entries.push_back({12 << 10, tparBfloat16, p, us, def_us});
  Plan q;
  q.algo = Algo::kOneShot;
  q.active_blocks = 64;
  q.threads = 512;
  t.entries.push_back({112 << 10, tparBfloat16, q, 3.5, 0});  // no default time: not written
  tpar::TuningTable back;
  const std::string text = tpar::tuningToJson(t);
  ASSERT_EQ(tparSuccess, tpar::tuningFromJson(text, &back)) << tpar::lastError() << text;
  ASSERT_EQ(2u, back.entries.size());
  EXPECT_EQ(blocks, back.entries[0].plan.active_blocks);
  EXPECT_EQ(threads, back.entries[0].plan.threads);
  EXPECT_EQ(steps, back.entries[0].plan.steps);
  EXPECT_TRUE(back.entries[0].plan.pull);
  EXPECT_NEAR(us, back.entries[0].us, 1e-3);
  EXPECT_NEAR(def_us, back.entries[0].default_us, 1e-3);
  EXPECT_EQ(64, back.entries[1].plan.active_blocks);
  EXPECT_EQ(0.0, back.entries[1].default_us);
  EXPECT_EQ(std::string::npos, text.find("\"default_us\": 0")) << text;

  // Threads past the launch bound and bad default times are refused, naming the field.
  std::string over = text;
  const std::string key = "\"threads\": " + std::to_string(threads);
  over.replace(over.find(key), key.size(), "\"threads\": 1024");
  EXPECT_EQ(tparInvalidArgument, tpar::tuningFromJson(over, &back));
  EXPECT_NE(std::string::npos, tpar::lastError().find("entries[0].threads")) << tpar::lastError();
  EXPECT_NE(std::string::npos, tpar::lastError().find("..512")) << tpar::lastError();
  std::string neg = text;
  const size_t at = neg.find("\"default_us\": ");
  ASSERT_NE(std::string::npos, at);
  neg.insert(at + 14, "-");
  EXPECT_EQ(tparInvalidArgument, tpar::tuningFromJson(neg, &back));
  EXPECT_NE(std::string::npos, tpar::lastError().find("entries[0].default_us")) << tpar::lastError();
}

TEST(TuneGainReport, TunedAgainstTheDefaultOfTheSameRunPerSize) {
  std::mt19937 rng(std::random_device{}());
  const double def_us = 5.0 + (rng() % 1000) / 100.0;
  std::vector<TuneBucket> b(3);
  b[0].bytes = 12 << 10;  // a faster shape wins by 2x
  b[0].candidates = {asDefault(shaped(Algo::kOneShot, 0, 0, def_us)),
                     shaped(Algo::kOneShot, 32, 256, def_us / 2),
                     shaped(Algo::kOneShot, 8, 512, def_us / 4, /*wrong=*/3)};
  b[1].bytes = 112 << 10;  // nothing beats the default beyond the noise: it stays
  b[1].candidates = {asDefault(shaped(Algo::kTwoShot, 0, 0, def_us)),
                     shaped(Algo::kTwoShot, 16, 256, def_us * 0.99)};
  b[2].bytes = 4 << 20;  // the default failed; the tuned plan has no ratio
  b[2].candidates = {asDefault(shaped(Algo::kTwoShot, 0, 0, def_us, 5)),
                     shaped(Algo::kPipelined, 8, 512, def_us)};
  const std::vector<TuneGain> g = tuneGains(b, 0.03);
  ASSERT_EQ(3u, g.size());
  EXPECT_DOUBLE_EQ(2.0, g[0].gain());
  EXPECT_EQ(32, g[0].tuned.active_blocks);
  EXPECT_EQ(256, g[0].tuned.threads);
  EXPECT_DOUBLE_EQ(def_us, g[0].default_us);
  EXPECT_DOUBLE_EQ(1.0, g[1].gain());
  EXPECT_EQ(0, g[1].tuned.active_blocks);
  EXPECT_FALSE(g[2].default_ok);
  EXPECT_TRUE(g[2].tuned_ok);
  EXPECT_EQ(0.0, g[2].gain());

  const std::string r = gainReport(g);
  EXPECT_NE(std::string::npos, r.find("2.00x")) << r;
  EXPECT_NE(std::string::npos, r.find("1.00x")) << r;
  EXPECT_NE(std::string::npos, r.find("(failed)")) << r;
  char tuned[32];
  std::snprintf(tuned, sizeof(tuned), "%.2f", def_us / 2);
  EXPECT_NE(std::string::npos, r.find(tuned)) << r;
  EXPECT_NE(std::string::npos, r.find("changes 1 of 2 sizes")) << r;

  // The table keeps both times of each size.
  tpar::TunerContext ctx = group(4);
  const tpar::TuningTable t = tableFromBuckets(b, ctx, nullptr, 0.03);
  ASSERT_EQ(3u, t.entries.size());
  EXPECT_DOUBLE_EQ(def_us / 2, t.entries[0].us);
  EXPECT_DOUBLE_EQ(def_us, t.entries[0].default_us);
  EXPECT_EQ(0.0, t.entries[2].default_us);
  EXPECT_EQ(Algo::kPipelined, t.entries[2].plan.algo);
}

}  // namespace
}  // namespace tpar_cli
