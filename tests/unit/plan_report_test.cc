// What reports say about a communicator's plan comes from the plan: the algorithm that runs
// when a forced one cannot (fallbackReason, forcedFallback), and how far one-shot goes
// (oneShotLimit, tparCommQuery's oneShotMaxBytes), checked against selectPlan size by size.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "topology/topology.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

using kernels::Algo;

constexpr uint64_t kK = 1024, kM = 1024 * 1024;
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

TunerContext context(int nranks, LinkClass worst, int islands, int island_size,
                     bool host = false, int ranks_per_gpu = 1) {
  TunerContext c;
  c.nranks = nranks;
  c.signature = "sig-plan-report";
  c.islands = islands;
  c.island_size = island_size;
  c.worst_link = static_cast<int>(worst);
  c.hierarchical_ok = island_size > 0 && islands > 1;
  c.host_transport = host;
  c.ranks_per_gpu = ranks_per_gpu;
  return c;
}

bool oneShot(const Plan& p) {
  return !p.nccl && (p.algo == Algo::kOneShot || p.algo == Algo::kOneShotPull);
}

// The largest size up to which every size runs one-shot, by looking at every size in `sizes`
// (ascending) under selectPlan: what oneShotLimit must agree with.
uint64_t bruteLimit(const std::vector<uint64_t>& sizes, const TunerContext& ctx,
                    const TuningTable* table, tparAlgo_t forced, int64_t one_shot_max) {
  uint64_t last = 0;
  for (uint64_t b : sizes) {
    if (!oneShot(selectPlan(b, tparBfloat16, ctx, table, forced, one_shot_max))) return last;
    last = b;
  }
  return kUnbounded;
}

// Every size up to 80 KiB, then every power of two and its neighbours up to 1 GiB, and random
// sizes: every boundary a default or a table below uses lies among them.
std::vector<uint64_t> probeSizes() {
  std::vector<uint64_t> s;
  for (uint64_t b = 1; b <= 80 * kK; ++b) s.push_back(b);
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint64_t> more;
  for (uint64_t p = 128 * kK; p <= 1024 * kM; p *= 2)
    for (int64_t d = -2; d <= 2; ++d) more.push_back(p + d);
  for (int i = 0; i < 2000; ++i) more.push_back(80 * kK + rng() % (64 * kM));
  std::sort(more.begin(), more.end());
  for (uint64_t b : more)
    if (b > s.back()) s.push_back(b);
  return s;
}

TEST(PlanFallback, HierarchicalOnOneIslandRunsTwoShotAndSaysWhy) {
  const TunerContext one = context(8, LinkClass::kSameDevice, 1, 8);
  EXPECT_STREQ("one island", fallbackReason(Algo::kHier, one));
  const Fallback f = forcedFallback(tparAlgoHierarchical, one);
  EXPECT_EQ(Algo::kHier, f.requested);
  EXPECT_EQ(Algo::kTwoShot, f.runs);
  EXPECT_STREQ("one island", f.why);
  EXPECT_EQ(Algo::kTwoShot,
            selectPlan(64 * kK, tparBfloat16, one, nullptr, tparAlgoHierarchical, -1).algo);
}

TEST(PlanFallback, UnequalIslandsAreNamedAsSuch) {
  const TunerContext uneven = context(8, LinkClass::kAcrossNuma, 2, 0);
  EXPECT_STREQ("islands of unequal size", fallbackReason(Algo::kHier, uneven));
  EXPECT_STREQ("islands of unequal size", forcedFallback(tparAlgoHierarchical, uneven).why);
}

TEST(PlanFallback, NothingFallsBackWhereTheAlgorithmRuns) {
  const TunerContext islands = context(8, LinkClass::kAcrossNuma, 2, 4);
  EXPECT_EQ(nullptr, fallbackReason(Algo::kHier, islands));
  const Fallback f = forcedFallback(tparAlgoHierarchical, islands);
  EXPECT_EQ(nullptr, f.why);
  EXPECT_EQ(Algo::kHier, f.runs);
  // Algorithms that need no islands never fall back, and auto or NCCL are not forced kernels.
  const TunerContext one = context(4, LinkClass::kSameDevice, 1, 4, true, 4);
  for (tparAlgo_t a : {tparAlgoOneShot, tparAlgoTwoShot, tparAlgoStaged, tparAlgoOneShotPull,
                       tparAlgoTwoShotPull, tparAlgoPipelined, tparAlgoTwoShotLL, tparAlgoAuto,
                       tparAlgoNccl}) {
    EXPECT_EQ(nullptr, forcedFallback(a, one).why) << a;
  }
}

TEST(OneShotLimit, GpuMemoryDefaultsAreTheRankThresholds) {
  for (int n : {2, 3, 4, 8, 16}) {
    const TunerContext ctx = context(n, LinkClass::kSameSwitch, 1, n);
    EXPECT_EQ(defaultOneShotMaxBytes(n), oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, -1))
        << n;
  }
}

// The thresholds as docs/TUNING.md states them (built-in defaults: 256 KiB at 2 ranks, 64 KiB at
// 3-4, 32 KiB above), so that a change of the code's value cannot pass without the docs.
TEST(OneShotLimit, GpuMemoryDefaultsAreTheDocumentedValues) {
  const std::vector<std::pair<int, uint64_t>> documented = {
      {2, 256 * kK}, {3, 64 * kK}, {4, 64 * kK}, {5, 32 * kK}, {8, 32 * kK}, {16, 32 * kK}};
  for (const auto& [n, limit] : documented) {
    EXPECT_EQ(limit, defaultOneShotMaxBytes(n)) << n;
    const TunerContext ctx = context(n, LinkClass::kSameSwitch, 1, n);
    EXPECT_EQ(limit, oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, -1)) << n;
  }
}

TEST(OneShotLimit, HostMemoryDefaultsAreNotTheGpuMemoryOnes) {
  // Two ranks on their own GPUs: one-shot pull up to 16 KiB; more ranks: two-shot LL from the
  // first byte.
  EXPECT_EQ(64 * kK, oneShotLimit(tparBfloat16, context(2, LinkClass::kSameDevice, 1, 2, true, 2),
                                  nullptr, tparAlgoAuto, -1));
  EXPECT_EQ(16 * kK, oneShotLimit(tparBfloat16, context(2, LinkClass::kNoP2P, 1, 2, true, 1),
                                  nullptr, tparAlgoAuto, -1));
  EXPECT_EQ(0u, oneShotLimit(tparBfloat16, context(8, LinkClass::kSameDevice, 1, 8, true, 8),
                             nullptr, tparAlgoAuto, -1));
  // Ranks sharing a GPU push past the small calls (NOTE [push calls on a shared GPU]): two
  // one-shot up to 64 KiB, three up to 40 KiB, four two-shot after the small calls' one-shot
  // (12 KiB).
  EXPECT_EQ(40 * kK, oneShotLimit(tparBfloat16, context(3, LinkClass::kSameDevice, 1, 3, true, 3),
                                  nullptr, tparAlgoAuto, -1));
  EXPECT_EQ(12 * kK, oneShotLimit(tparBfloat16, context(4, LinkClass::kSameDevice, 1, 4, true, 4),
                                  nullptr, tparAlgoAuto, -1));
  EXPECT_EQ(0u, oneShotLimit(tparBfloat16, context(4, LinkClass::kNoP2P, 1, 4, true, 1),
                             nullptr, tparAlgoAuto, -1));
}

TEST(OneShotLimit, ForcedAlgorithmsAndOneRank) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, 8);
  EXPECT_EQ(kUnbounded, oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoOneShot, -1));
  EXPECT_EQ(kUnbounded, oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoOneShotPull, -1));
  EXPECT_EQ(0u, oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoTwoShot, -1));
  EXPECT_EQ(0u, oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoNccl, -1));
  EXPECT_EQ(kUnbounded, oneShotLimit(tparBfloat16, context(1, LinkClass::kSameDevice, 1, 1),
                                     nullptr, tparAlgoAuto, -1));
}

TEST(OneShotLimit, ATuningTableDecides) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, 8);
  TuningTable t;
  t.signature = ctx.signature;
  t.nranks = 8;
  auto entry = [&](uint64_t max_bytes, Algo a, tparDataType_t d = tparBfloat16) {
    TuningEntry e;
    e.max_bytes = max_bytes;
    e.dtype = d;
    e.plan.algo = a;
    t.entries.push_back(e);
  };
  entry(4 * kK, Algo::kOneShot);
  entry(96 * kK, Algo::kOneShotPull);
  entry(512 * kK, Algo::kTwoShot);
  entry(8 * kM, Algo::kOneShot);  // one-shot again above: the limit stays at the first gap
  entry(1 * kM, Algo::kOneShot, tparFloat32);
  EXPECT_EQ(96 * kK, oneShotLimit(tparBfloat16, ctx, &t, tparAlgoAuto, -1));
  EXPECT_EQ(kUnbounded, oneShotLimit(tparFloat32, ctx, &t, tparAlgoAuto, -1));
  // TPAR_ONESHOT_MAX_BYTES moves the defaults only; the table still decides.
  EXPECT_EQ(96 * kK, oneShotLimit(tparBfloat16, ctx, &t, tparAlgoAuto, 1 * kK));
  // A table of another machine is ignored: the defaults.
  t.signature = "another";
  EXPECT_EQ(defaultOneShotMaxBytes(8), oneShotLimit(tparBfloat16, ctx, &t, tparAlgoAuto, -1));
}

// oneShotLimit looks only where the plan may change; check it against every size, so that a
// default added to defaultPlan without its boundary cannot go unnoticed.
TEST(OneShotLimit, AgreesWithThePlanAtEverySize) {
  const std::vector<uint64_t> sizes = probeSizes();
  std::vector<TunerContext> contexts;
  for (int n : {1, 2, 3, 4, 5, 8, 12, 16}) {
    contexts.push_back(context(n, LinkClass::kSameSwitch, 1, n));
    contexts.push_back(context(n, LinkClass::kSameHostBridge, 1, n));
    contexts.push_back(context(n, LinkClass::kSameDevice, 1, n, true, n));
    contexts.push_back(context(n, LinkClass::kNoP2P, 1, n, true, 1));
    if (n % 2 == 0 && n > 2) contexts.push_back(context(n, LinkClass::kAcrossNuma, 2, n / 2));
  }
  for (const TunerContext& ctx : contexts) {
    for (int64_t over : {int64_t{-1}, int64_t{0}, int64_t{3000}, int64_t{40 * kK}}) {
      EXPECT_EQ(bruteLimit(sizes, ctx, nullptr, tparAlgoAuto, over),
                oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, over))
          << "ranks " << ctx.nranks << " host " << ctx.host_transport << " worst "
          << ctx.worst_link << " override " << over;
    }
  }
}

}  // namespace
}  // namespace tpar
