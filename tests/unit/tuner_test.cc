// The tuner: built-in plans per topology, forced algorithms, tuning tables and their files,
// (no GPU needed); `tpar tune`'s own parts: tune_search_test.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/child_process.h"
#include "common/fifo_dir.h"
#include "registry/algorithms.h"
#include "comm/comm.h"
#include "base/env.h"
#include "base/error.h"
#include "comm/nccl_route.h"
#include "tools/tpar/tune/tune.h"
#include "topology/topology.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

using kernels::Algo;

TunerContext context(int nranks, LinkClass worst, int islands, bool equal_islands,
                     const std::string& signature = "sig-test") {
  TunerContext c;
  c.nranks = nranks;
  c.signature = signature;
  c.islands = islands;
  c.island_size = equal_islands ? nranks / islands : 0;
  c.worst_link = static_cast<int>(worst);
  c.hierarchical_ok = equal_islands && islands > 1;
  return c;
}

Algo pick(uint64_t bytes, const TunerContext& ctx, int64_t one_shot_max = -1) {
  return defaultPlan(bytes, tparBfloat16, ctx, one_shot_max).algo;
}

constexpr uint64_t kK = 1024, kM = 1024 * 1024;

TEST(TunerDefaults, TwoRanksBehindOneSwitchUseOneShotThenTwoShot) {
  const TunerContext ctx = context(2, LinkClass::kSameSwitch, 1, true);
  // The documented limit (docs/TUNING.md, built-in defaults), not only the code's own value.
  EXPECT_EQ(256 * kK, defaultOneShotMaxBytes(2));
  EXPECT_EQ(Algo::kOneShot, pick(1 * kK, ctx));
  EXPECT_EQ(Algo::kOneShot, pick(256 * kK, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(256 * kK + 1, ctx));
  EXPECT_EQ(Algo::kOneShot, pick(defaultOneShotMaxBytes(2), ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(defaultOneShotMaxBytes(2) + 1, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(64 * kM, ctx));
  const Plan p = defaultPlan(64 * kM, tparBfloat16, ctx, -1);
  EXPECT_EQ(0, p.active_blocks);
  EXPECT_EQ(0, p.threads);
}

TEST(TunerDefaults, EightRanksOnTwoSocketsWithEqualIslandsGoHierarchicalAboveOneShot) {
  const TunerContext ctx = context(8, LinkClass::kAcrossNuma, 2, true);
  EXPECT_EQ(32 * kK, defaultOneShotMaxBytes(8));  // docs/TUNING.md: 32 KiB above 4 ranks
  EXPECT_EQ(Algo::kOneShot, pick(4 * kK, ctx));
  EXPECT_EQ(Algo::kOneShot, pick(32 * kK, ctx));
  EXPECT_EQ(Algo::kHier, pick(32 * kK + 16, ctx));
  EXPECT_EQ(Algo::kOneShot, pick(defaultOneShotMaxBytes(8), ctx));
  EXPECT_EQ(Algo::kHier, pick(defaultOneShotMaxBytes(8) + 16, ctx));
  EXPECT_EQ(Algo::kHier, pick(1 * kM, ctx));
  EXPECT_EQ(Algo::kHier, pick(64 * kM, ctx));
  // No peer access at all is worse still: the same reasoning holds.
  EXPECT_EQ(Algo::kHier, pick(1 * kM, context(8, LinkClass::kNoP2P, 2, true)));
}

TEST(TunerDefaults, EightRanksBehindOneSwitchUseTwoShot) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, true);
  EXPECT_EQ(Algo::kOneShot, pick(16 * kK, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(112 * kK, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(64 * kM, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(1 * kM, context(8, LinkClass::kAcrossSwitches, 1, true)));
}

TEST(TunerDefaults, RootComplexWithoutEqualIslandsUsesStagedForMidSizes) {
  const TunerContext phb = context(8, LinkClass::kSameHostBridge, 1, true);
  EXPECT_EQ(Algo::kOneShot, pick(8 * kK, phb));
  EXPECT_EQ(Algo::kStaged, pick(112 * kK, phb));
  EXPECT_EQ(Algo::kStaged, pick(1 * kM, phb));
  EXPECT_EQ(Algo::kTwoShot, pick(64 * kM, phb));
  // Across sockets with islands of 5 and 3: hierarchical cannot run, staged can.
  const TunerContext uneven = context(8, LinkClass::kAcrossNuma, 2, false);
  EXPECT_EQ(Algo::kStaged, pick(384 * kK, uneven));
  // With two ranks there is one pair: nothing to stage.
  EXPECT_EQ(Algo::kTwoShot, pick(1 * kM, context(2, LinkClass::kSameHostBridge, 1, true)));
  EXPECT_EQ(Algo::kStaged, pick(1 * kM, context(3, LinkClass::kSameHostBridge, 1, true)));
}

TEST(TunerDefaults, VirtualRanksOnOneGpuUseOneShotThenTwoShot) {
  const TunerContext ctx = context(8, LinkClass::kSameDevice, 1, true);
  EXPECT_EQ(Algo::kOneShot, pick(12 * kK, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(384 * kK, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(64 * kM, ctx));
}

TEST(TunerDefaults, RanksSharingAGpuRunSmallOneShotsOnThirtyTwoBlocksOfTheWiderGrid) {
  // NOTE [wide grid for shared GPUs]: their grid is 64 blocks; up to 64 KiB one-shot keeps 32
  // active, larger calls and two-shot take the whole grid (0), as do ranks on their own GPUs.
  // Where every rank is on one GPU (up to 8) the pull of NOTE [small calls of ranks on one GPU]
  // takes the small sizes: the push one-shot's narrow window shows with more ranks on the GPU,
  // with ranks on two GPUs, and under TPAR_ONESHOT_MAX_BYTES.
  for (int n : {12, 16}) {
    TunerContext shared = context(n, LinkClass::kSameDevice, 1, true);
    shared.ranks_per_gpu = n;
    for (uint64_t bytes : {16u, 12u * 1024, 64u * 1024}) {
      if (bytes > defaultOneShotMaxBytes(n)) {  // two-shot above 32 KiB, every block
        EXPECT_EQ(0, defaultPlan(bytes, tparBfloat16, shared, -1).active_blocks) << n;
        continue;
      }
      const Plan p = defaultPlan(bytes, tparBfloat16, shared, -1);
      EXPECT_EQ(Algo::kOneShot, p.algo) << n << " ranks " << bytes;
      EXPECT_EQ(32, p.active_blocks) << n << " ranks " << bytes;
    }
  }
  for (int n : {2, 4, 8}) {
    TunerContext shared = context(n, LinkClass::kSameDevice, 1, true);
    shared.ranks_per_gpu = n;
    TunerContext two_gpus = shared;  // half the ranks on each of two GPUs
    two_gpus.ranks_per_gpu = n / 2;
    for (uint64_t bytes : {16u, 12u * 1024, 64u * 1024}) {
      const Plan split = defaultPlan(bytes, tparBfloat16, two_gpus, -1);
      if (n == 2) {  // one rank per GPU: the ranks of their own GPUs, every block
        EXPECT_EQ(Algo::kOneShot, split.algo);
        EXPECT_EQ(0, split.active_blocks);
      } else if (bytes <= defaultOneShotMaxBytes(n)) {
        EXPECT_EQ(Algo::kOneShot, split.algo) << n << " ranks " << bytes;
        EXPECT_EQ(32, split.active_blocks) << n << " ranks " << bytes;
      }
      // A one-shot limit set by hand turns the pull off and keeps the narrow window.
      const Plan forced_limit = defaultPlan(bytes, tparBfloat16, shared, 2 * kM);
      EXPECT_EQ(Algo::kOneShot, forced_limit.algo) << n << " ranks " << bytes;
      EXPECT_EQ(32, forced_limit.active_blocks) << n << " ranks " << bytes;
    }
    const Plan above = defaultPlan(64 * kK + 16, tparBfloat16, two_gpus, -1);
    EXPECT_EQ(0, above.active_blocks) << n << " ranks, " << algoName(above.algo);
    EXPECT_EQ(0, defaultPlan(4 * kM, tparBfloat16, shared, -1).active_blocks);
    // A forced one-shot limit moves the algorithm, not the narrow window.
    EXPECT_EQ(0, defaultPlan(1 * kM, tparBfloat16, shared, 2 * kM).active_blocks);
    TunerContext own = context(n, LinkClass::kSameSwitch, 1, true);
    EXPECT_EQ(0, defaultPlan(12 * kK, tparBfloat16, own, -1).active_blocks) << n;
    // Host memory keeps its own shapes, not the wide grid's 32 blocks (HostDefaults below).
    shared.host_transport = true;
    const Plan host = defaultPlan(12 * kK, tparBfloat16, shared, -1);
    EXPECT_NE(32, host.active_blocks);
    EXPECT_NE(0, host.active_blocks);
  }
}

TEST(TunerDefaults, RanksOnOneGpuPullSmallCallsAndTwoRanksPushOneShotToThreeMiB) {
  // NOTE [small calls of ranks on one GPU]: from 3 ranks one-shot pull up to 128 KiB (its own
  // shape: every block, but 8 blocks of 128 threads for 3 to 5 ranks up to 16 KiB, NOTE [a
  // narrow one-shot pull for tiny calls of a few ranks on one GPU]), then two-shot; two ranks
  // the push one-shot up to 3 MiB (32 blocks of the wider grid up to 64 KiB, NOTE [wide grid
  // for shared GPUs]), then two-shot.
  for (int n : {2, 3, 4, 5, 8}) {
    TunerContext ctx = context(n, LinkClass::kSameDevice, 1, true);
    ctx.ranks_per_gpu = n;
    for (uint64_t bytes : {uint64_t{2}, uint64_t{4} * kK, uint64_t{12} * kK, uint64_t{16} * kK,
                           uint64_t{16} * kK + 16, uint64_t{64} * kK, uint64_t{64} * kK + 16,
                           uint64_t{112} * kK, uint64_t{128} * kK}) {
      const Plan p = defaultPlan(bytes, tparBfloat16, ctx, -1);
      const bool tiny = n >= 3 && n <= 5 && bytes <= 16 * kK;
      EXPECT_EQ(n == 2 ? Algo::kOneShot : Algo::kOneShotPull, p.algo) << n << " ranks " << bytes;
      EXPECT_EQ(n == 2 && bytes <= 64 * kK ? 32 : tiny ? 8 : 0, p.active_blocks)
          << n << " ranks " << bytes;
      EXPECT_EQ(tiny ? 128 : 0, p.threads) << n << " ranks " << bytes;
      EXPECT_FALSE(p.nccl);
    }
    for (uint64_t bytes : {uint64_t{128} * kK + 16, uint64_t{384} * kK, uint64_t{512} * kK + 16,
                           uint64_t{1} * kM, uint64_t{1} * kM + 16, uint64_t{2} * kM,
                           uint64_t{2} * kM + 16, uint64_t{3} * kM}) {
      const Plan p = defaultPlan(bytes, tparBfloat16, ctx, -1);
      EXPECT_EQ(n == 2 ? Algo::kOneShot : Algo::kTwoShot, p.algo) << n << " ranks " << bytes;
      EXPECT_EQ(0, p.active_blocks) << n << " ranks " << bytes;
    }
    EXPECT_EQ(Algo::kTwoShot, defaultPlan(3 * kM + 16, tparBfloat16, ctx, -1).algo) << n;
    EXPECT_EQ(Algo::kTwoShot, defaultPlan(4 * kM, tparBfloat16, ctx, -1).algo) << n;
    // The one-shot limit the communicator reports follows (oneShotLimit walks the boundaries).
    EXPECT_EQ(n == 2 ? 3 * kM : 128 * kK,
              oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, -1)) << n;
    // TPAR_ONESHOT_MAX_BYTES turns the rule off.
    EXPECT_EQ(Algo::kOneShot, defaultPlan(4 * kK, tparBfloat16, ctx, 8 * kK).algo) << n;
    EXPECT_EQ(Algo::kTwoShot, defaultPlan(4 * kK, tparBfloat16, ctx, 0).algo) << n;
  }
  // Neither more ranks than were measured on one GPU, nor ranks on several GPUs.
  TunerContext sixteen = context(16, LinkClass::kSameDevice, 1, true);
  sixteen.ranks_per_gpu = 16;
  EXPECT_EQ(Algo::kOneShot, defaultPlan(4 * kK, tparBfloat16, sixteen, -1).algo);
  TunerContext split = context(8, LinkClass::kSameDevice, 1, true);
  split.ranks_per_gpu = 4;
  EXPECT_EQ(Algo::kOneShot, defaultPlan(4 * kK, tparBfloat16, split, -1).algo);
  EXPECT_EQ(Algo::kOneShot,
            defaultPlan(4 * kK, tparBfloat16, context(2, LinkClass::kSameSwitch, 1, true), -1).algo);
}

TEST(TunerDefaults, RanksOnOneGpuWithAWholePullAreaPullLargeCalls) {
  // NOTE [two-shot pull for large calls of ranks on one GPU]: with a whole pull area, 7 and 8
  // ranks from 1 MiB, 5 and 6 ranks from 2 MiB, 3 and 4 ranks from 4 MiB; 2 ranks, smaller calls, no
  // whole area, ranks on several GPUs or more than 8, and TPAR_ONESHOT_MAX_BYTES keep the
  // two-shot.
  for (int n : {2, 3, 4, 5, 6, 7, 8}) {
    TunerContext ctx = context(n, LinkClass::kSameDevice, 1, true);
    ctx.ranks_per_gpu = n;
    ctx.whole_pull = true;
    const uint64_t from = n >= 7 ? 1 * kM : n >= 5 ? 2 * kM : 4 * kM;
    for (uint64_t bytes : {from - 16, from, from + 16, 8 * kM, 64 * kM}) {
      const Plan p = defaultPlan(bytes, tparBfloat16, ctx, -1);
      const bool pull = n > 2 && bytes >= from;
      const Algo small = n == 2 && bytes <= 3 * kM ? Algo::kOneShot : Algo::kTwoShot;
      EXPECT_EQ(pull ? Algo::kTwoShotPull : small, p.algo) << n << " ranks " << bytes;
      EXPECT_EQ(0, p.active_blocks) << n << " ranks " << bytes;  // the kernel's own grid
      // Without the whole area, or with a one-shot limit set by hand, nothing moves.
      TunerContext part = ctx;
      part.whole_pull = false;
      EXPECT_EQ(small, defaultPlan(bytes, tparBfloat16, part, -1).algo) << n << " " << bytes;
      EXPECT_EQ(Algo::kTwoShot, defaultPlan(bytes, tparBfloat16, ctx, 0).algo) << n << " " << bytes;
    }
    // Small calls: one-shot pull up to 128 KiB, for 3 and 4 ranks up to 512 KiB (NOTE [one-shot
    // pull to 512 KiB for three and four ranks on one GPU]); without the whole area 128 KiB.
    EXPECT_EQ(n == 2 ? Algo::kOneShot : Algo::kOneShotPull,
              defaultPlan(12 * kK, tparBfloat16, ctx, -1).algo) << n;
    const bool small_group = n == 3 || n == 4;
    EXPECT_EQ(n == 2 ? 3 * kM : small_group ? 512 * kK : 128 * kK,
              oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, -1)) << n;
    if (n > 2) {
      EXPECT_EQ(small_group ? Algo::kOneShotPull : Algo::kTwoShot,
                defaultPlan(384 * kK, tparBfloat16, ctx, -1).algo) << n;
      EXPECT_EQ(small_group ? Algo::kOneShotPull : Algo::kTwoShot,
                defaultPlan(512 * kK, tparBfloat16, ctx, -1).algo) << n;
      EXPECT_EQ(Algo::kTwoShot, defaultPlan(512 * kK + 16, tparBfloat16, ctx, -1).algo) << n;
      TunerContext part = ctx;
      part.whole_pull = false;
      EXPECT_EQ(Algo::kTwoShot, defaultPlan(384 * kK, tparBfloat16, part, -1).algo) << n;
      EXPECT_EQ(128 * kK, oneShotLimit(tparBfloat16, part, nullptr, tparAlgoAuto, -1)) << n;
    }
    // Ranks on two GPUs: the reads would cross a link.
    TunerContext split = ctx;
    split.ranks_per_gpu = n / 2;
    if (n >= 4) EXPECT_EQ(Algo::kTwoShot, defaultPlan(8 * kM, tparBfloat16, split, -1).algo) << n;
    // Host memory has its own lines (HostDefaults), never this one's default shape.
    TunerContext host = ctx;
    host.host_transport = true;
    EXPECT_NE(Algo::kTwoShotPull, defaultPlan(8 * kM, tparBfloat16, host, -1).algo) << n;
  }
  TunerContext sixteen = context(16, LinkClass::kSameDevice, 1, true);
  sixteen.ranks_per_gpu = 16;
  sixteen.whole_pull = true;
  EXPECT_EQ(Algo::kTwoShot, defaultPlan(8 * kM, tparBfloat16, sixteen, -1).algo);
}

TEST(TunerDefaults, OneShotLimitOverrideMovesTheThreshold) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, true);
  EXPECT_EQ(Algo::kTwoShot, pick(1 * kK, ctx, 0));
  EXPECT_EQ(Algo::kOneShot, pick(1 * kM, ctx, 1 * kM));
  EXPECT_EQ(Algo::kTwoShot, pick(1 * kM + 1, ctx, 1 * kM));
  // Without an override the threshold is defaultOneShotMaxBytes, on either side of it.
  const uint64_t t = defaultOneShotMaxBytes(8);
  EXPECT_EQ(Algo::kOneShot, pick(t, ctx));
  EXPECT_EQ(Algo::kTwoShot, pick(t + 1, ctx));
}

TEST(TunerSelect, ForcedAlgorithmsWinOverTableAndDefaults) {
  const TunerContext ctx = context(8, LinkClass::kAcrossNuma, 2, true);
  TuningTable table;
  table.signature = ctx.signature;
  table.nranks = 8;
  table.entries.push_back({1 << 30, tparBfloat16, {Algo::kStaged, 7, 128}, 0});
  EXPECT_EQ(Algo::kOneShot, selectPlan(64 * kM, tparBfloat16, ctx, &table, tparAlgoOneShot, -1).algo);
  EXPECT_EQ(Algo::kTwoShot, selectPlan(1 * kK, tparBfloat16, ctx, &table, tparAlgoTwoShot, -1).algo);
  EXPECT_EQ(Algo::kStaged, selectPlan(1 * kK, tparBfloat16, ctx, nullptr, tparAlgoStaged, -1).algo);
  EXPECT_EQ(Algo::kHier, selectPlan(1 * kK, tparBfloat16, ctx, nullptr, tparAlgoHierarchical, -1).algo);
  const Plan forced = selectPlan(1 * kK, tparBfloat16, ctx, &table, tparAlgoTwoShot, -1);
  EXPECT_EQ(0, forced.active_blocks);
  EXPECT_EQ(0, forced.threads);
}

TEST(TunerSelect, ForcedHierarchicalFallsBackToTwoShotWithoutEqualIslands) {
  for (const TunerContext& ctx : {context(8, LinkClass::kAcrossNuma, 2, false),
                                  context(8, LinkClass::kSameSwitch, 1, true)}) {
    EXPECT_EQ(Algo::kTwoShot,
              selectPlan(1 * kM, tparBfloat16, ctx, nullptr, tparAlgoHierarchical, -1).algo);
  }
}

TuningTable sampleTable() {
  TuningTable t;
  t.signature = "sig-test";
  t.nranks = 8;
  t.created = "2025-01-02T03:04:05Z";
  t.gpu = "NVIDIA Test GPU";
  t.entries = {
      {4 * kK, tparBfloat16, {Algo::kOneShot, 0, 0}, 3.25},
      {64 * kK, tparBfloat16, {Algo::kTwoShot, 16, 0}, 7.5},
      {1 * kM, tparBfloat16, {Algo::kStaged, 0, 256}, 30.125},
      {8 * kK, tparFloat32, {Algo::kTwoShot, 0, 0}, 4.0},
      {2 * kM, tparFloat32, {Algo::kHier, 0, 0}, 0},
  };
  return t;
}

TEST(TunerSelect, TableEntriesCoverSizesUpToTheirMaxBytes) {
  const TunerContext ctx = context(8, LinkClass::kAcrossNuma, 2, true);
  const TuningTable t = sampleTable();
  auto sel = [&](uint64_t b, tparDataType_t d) {
    return selectPlan(b, d, ctx, &t, tparAlgoAuto, -1);
  };
  EXPECT_EQ(Algo::kOneShot, sel(1, tparBfloat16).algo);
  EXPECT_EQ(Algo::kOneShot, sel(4 * kK, tparBfloat16).algo);
  const Plan mid = sel(4 * kK + 2, tparBfloat16);
  EXPECT_EQ(Algo::kTwoShot, mid.algo);
  EXPECT_EQ(16, mid.active_blocks);
  const Plan big = sel(1 * kM, tparBfloat16);
  EXPECT_EQ(Algo::kStaged, big.algo);
  EXPECT_EQ(256, big.threads);
  // Beyond the last entry: the last entry's plan, not the defaults (which say hier here).
  EXPECT_EQ(Algo::kStaged, sel(64 * kM, tparBfloat16).algo);
  EXPECT_EQ(256, sel(64 * kM, tparBfloat16).threads);
}

TEST(TunerSelect, TableEntriesAreSeparatedByDtype) {
  const TunerContext ctx = context(8, LinkClass::kAcrossNuma, 2, true);
  const TuningTable t = sampleTable();
  // bf16 at 2K is one-shot, float32 at 2K is two-shot: each dtype reads its own entries.
  EXPECT_EQ(Algo::kOneShot, selectPlan(2 * kK, tparBfloat16, ctx, &t, tparAlgoAuto, -1).algo);
  EXPECT_EQ(Algo::kTwoShot, selectPlan(2 * kK, tparFloat32, ctx, &t, tparAlgoAuto, -1).algo);
  EXPECT_EQ(Algo::kHier, selectPlan(1 * kM, tparFloat32, ctx, &t, tparAlgoAuto, -1).algo);
  // float16 has no entries: the built-in defaults, not another dtype's crossovers.
  EXPECT_EQ(Algo::kOneShot, selectPlan(16 * kK, tparFloat16, ctx, &t, tparAlgoAuto, -1).algo);
  EXPECT_EQ(Algo::kHier, selectPlan(256 * kK, tparFloat16, ctx, &t, tparAlgoAuto, -1).algo);
}

TEST(TunerSelect, TableOfAnotherTopologyOrRankCountIsIgnored) {
  const TuningTable t = sampleTable();  // says staged at 1M for bf16
  const TunerContext other_sig = context(8, LinkClass::kAcrossNuma, 2, true, "sig-other");
  EXPECT_EQ(Algo::kHier, selectPlan(1 * kM, tparBfloat16, other_sig, &t, tparAlgoAuto, -1).algo);
  const TunerContext other_n = context(4, LinkClass::kAcrossNuma, 2, true);
  EXPECT_EQ(Algo::kHier, selectPlan(1 * kM, tparBfloat16, other_n, &t, tparAlgoAuto, -1).algo);
  const TunerContext same = context(8, LinkClass::kAcrossNuma, 2, true);
  EXPECT_EQ(Algo::kStaged, selectPlan(1 * kM, tparBfloat16, same, &t, tparAlgoAuto, -1).algo);
}

TEST(TunerSelect, TableNamingHierarchicalOnAGroupWithoutIslandsRunsTwoShot) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, true);
  const TuningTable t = sampleTable();  // float32 at 2M: hier
  EXPECT_EQ(Algo::kTwoShot, selectPlan(2 * kM, tparFloat32, ctx, &t, tparAlgoAuto, -1).algo);
}

TEST(TunerNames, AlgoNamesRoundTripAndUnknownNamesAreRejected) {
  for (Algo a : {Algo::kOneShot, Algo::kTwoShot, Algo::kStaged, Algo::kHier, Algo::kOneShotPull,
                 Algo::kTwoShotPull, Algo::kPipelined, Algo::kTwoShotLL}) {
    Algo back = Algo::kOneShot;
    ASSERT_TRUE(algoFromName(algoName(a), &back)) << algoName(a);
    EXPECT_EQ(a, back);
  }
  EXPECT_STREQ("hier", algoName(Algo::kHier));
  EXPECT_STREQ("pipelined", algoName(Algo::kPipelined));
  EXPECT_STREQ("twoshot-ll", algoName(Algo::kTwoShotLL));
  // Every public algorithm but auto and nccl has a kernel, whose public name is the same.
  for (int i = 0; i < tparNumAlgos; ++i) {
    const tparAlgo_t pub = static_cast<tparAlgo_t>(i);
    Algo k = Algo::kOneShot;
    const bool has = kernelAlgoOf(pub, &k);
    EXPECT_EQ(pub != tparAlgoAuto && pub != tparAlgoNccl, has) << i;
    if (has) {
      EXPECT_EQ(pub, publicAlgoOf(k)) << i;
      EXPECT_STREQ(tparAlgoName(pub), algoName(k)) << i;
    }
  }
  Algo out = Algo::kStaged;
  EXPECT_FALSE(algoFromName("ring", &out));
  EXPECT_FALSE(algoFromName("", &out));
  EXPECT_EQ(Algo::kStaged, out);
}

// A fresh directory under TMPDIR for one test, removed afterwards.
class TuningFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/tpar_tuner_test_XXXXXX";
    ASSERT_NE(nullptr, mkdtemp(&tmpl[0]));
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(TuningFiles, SavedTableLoadsBackEqual) {
  const TuningTable t = sampleTable();
  const std::string path = dir_ + "/a/b/tuning.json";  // directories are created
  ASSERT_EQ(tparSuccess, saveTuningFile(path, t)) << lastError();
  TuningTable back;
  ASSERT_EQ(tparSuccess, loadTuningFile(path, context(8, LinkClass::kAcrossNuma, 2, true), &back))
      << lastError();
  EXPECT_EQ(t.signature, back.signature);
  EXPECT_EQ(t.nranks, back.nranks);
  EXPECT_EQ(t.created, back.created);
  EXPECT_EQ(t.gpu, back.gpu);
  EXPECT_EQ(path, back.source);
  ASSERT_EQ(t.entries.size(), back.entries.size());
  for (size_t i = 0; i < t.entries.size(); ++i) {
    EXPECT_EQ(t.entries[i].max_bytes, back.entries[i].max_bytes) << i;
    EXPECT_EQ(t.entries[i].dtype, back.entries[i].dtype) << i;
    EXPECT_EQ(t.entries[i].plan.algo, back.entries[i].plan.algo) << i;
    EXPECT_EQ(t.entries[i].plan.active_blocks, back.entries[i].plan.active_blocks) << i;
    EXPECT_EQ(t.entries[i].plan.threads, back.entries[i].plan.threads) << i;
    EXPECT_DOUBLE_EQ(t.entries[i].us, back.entries[i].us) << i;
  }
  // Saving again replaces the file atomically and leaves no temporary behind.
  ASSERT_EQ(tparSuccess, saveTuningFile(path, t)) << lastError();
  const std::string listing = dir_ + "/a/b";
  EXPECT_EQ(0, std::system(("test \"$(ls -A '" + listing + "')\" = tuning.json").c_str()));
}

TEST_F(TuningFiles, JsonCarriesTheDocumentedFields) {
  const auto j = nlohmann::json::parse(tuningToJson(sampleTable()));
  EXPECT_EQ("tpar-tuning", j["format"]);
  EXPECT_EQ(1, j["version"]);
  EXPECT_EQ("sig-test", j["signature"]);
  EXPECT_EQ(8, j["nranks"]);
  EXPECT_EQ("bfloat16", j["entries"][0]["dtype"]);
  EXPECT_EQ(4096, j["entries"][0]["max_bytes"]);
  EXPECT_EQ("oneshot", j["entries"][0]["algo"]);
  EXPECT_EQ(3.25, j["entries"][0]["us"]);
  EXPECT_FALSE(j["entries"][4].contains("us")) << "an unmeasured entry has no time";
}

// Loading `path` must fail naming `field` and the file, and leave the output alone.
void expectRejected(const std::string& name, const std::string& field, const std::string& path) {
  TuningTable out;
  out.nranks = 99;
  EXPECT_EQ(tparInvalidArgument,
            loadTuningFile(path, context(8, LinkClass::kAcrossNuma, 2, true), &out))
      << name;
  EXPECT_NE(std::string::npos, lastError().find(field)) << name << ": " << lastError();
  EXPECT_NE(std::string::npos, lastError().find(path)) << name << ": " << lastError();
  EXPECT_EQ(99, out.nranks) << name << ": output written on failure";
}

TEST_F(TuningFiles, CorruptFilesAreRejectedNamingTheField) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"wrong format tag", [](nlohmann::json& j) { j["format"] = "nccl-tuning"; }, "'format'"},
      {"no format tag", [](nlohmann::json& j) { j.erase("format"); }, "'format'"},
      {"wrong version", [](nlohmann::json& j) { j["version"] = 2; }, "'version'"},
      {"version as text", [](nlohmann::json& j) { j["version"] = "1"; }, "'version'"},
      {"unknown algo", [](nlohmann::json& j) { j["entries"][1]["algo"] = "ring"; }, "'entries[1].algo'"},
      {"descending sizes", [](nlohmann::json& j) { j["entries"][1]["max_bytes"] = 1024; },
       "'entries[1].max_bytes'"},
      {"equal sizes", [](nlohmann::json& j) { j["entries"][2]["max_bytes"] = 65536; },
       "'entries[2].max_bytes'"},
      {"negative size", [](nlohmann::json& j) { j["entries"][0]["max_bytes"] = -4096; },
       "'entries[0].max_bytes'"},
      {"zero size", [](nlohmann::json& j) { j["entries"][0]["max_bytes"] = 0; }, "'entries[0].max_bytes'"},
      {"fractional size", [](nlohmann::json& j) { j["entries"][0]["max_bytes"] = 4096.5; },
       "'entries[0].max_bytes'"},
      {"negative blocks", [](nlohmann::json& j) { j["entries"][0]["active_blocks"] = -1; },
       "'entries[0].active_blocks'"},
      {"too many blocks", [](nlohmann::json& j) { j["entries"][0]["active_blocks"] = 2000; },
       "'entries[0].active_blocks'"},
      {"threads 100", [](nlohmann::json& j) { j["entries"][2]["threads"] = 100; }, "'entries[2].threads'"},
      {"threads 1024", [](nlohmann::json& j) { j["entries"][2]["threads"] = 1024; }, "'entries[2].threads'"},
      {"threads 32", [](nlohmann::json& j) { j["entries"][2]["threads"] = 32; }, "'entries[2].threads'"},
      {"negative time", [](nlohmann::json& j) { j["entries"][0]["us"] = -3.0; }, "'entries[0].us'"},
      {"negative ranks", [](nlohmann::json& j) { j["nranks"] = -8; }, "'nranks'"},
      {"ranks as text", [](nlohmann::json& j) { j["nranks"] = "8"; }, "'nranks'"},
      {"unknown dtype", [](nlohmann::json& j) { j["entries"][0]["dtype"] = "int8"; }, "'entries[0].dtype'"},
      {"missing algo", [](nlohmann::json& j) { j["entries"][3].erase("algo"); }, "'entries[3].algo'"},
      {"entries not a list", [](nlohmann::json& j) { j["entries"] = 5; }, "'entries'"},
      {"no entries", [](nlohmann::json& j) { j["entries"] = nlohmann::json::array(); }, "'entries'"},
      {"entry not an object", [](nlohmann::json& j) { j["entries"][0] = 4096; }, "'entries[0]'"},
      {"empty signature", [](nlohmann::json& j) { j["signature"] = ""; }, "'signature'"},
      {"top level list", [](nlohmann::json& j) { j = nlohmann::json::array({1, 2}); }, "top level"},
  };
  const std::string good = tuningToJson(sampleTable());
  // The unedited file loads: every rejection below is caused by its edit.
  TuningTable ok;
  ASSERT_EQ(tparSuccess, loadTuningFile(write("good.json", good),
                                        context(8, LinkClass::kAcrossNuma, 2, true), &ok))
      << lastError();
  for (const Case& c : cases) {
    nlohmann::json j = nlohmann::json::parse(good);
    c.edit(j);
    expectRejected(c.name, c.field, write("bad.json", j.dump(2)));
  }
}

TEST_F(TuningFiles, TruncatedJsonIsRejectedNamingTheFile) {
  const std::string good = tuningToJson(sampleTable());
  for (size_t cut : {size_t{0}, size_t{1}, good.size() / 2, good.size() - 3}) {
    const std::string path = write("cut.json", good.substr(0, cut));
    TuningTable out;
    EXPECT_EQ(tparInvalidArgument,
              loadTuningFile(path, context(8, LinkClass::kAcrossNuma, 2, true), &out))
        << cut;
    EXPECT_NE(std::string::npos, lastError().find(path)) << lastError();
    EXPECT_NE(std::string::npos, lastError().find("not valid JSON")) << lastError();
  }
}

TEST_F(TuningFiles, ForeignSignatureOrRankCountIsRejectedNamingBothValues) {
  const std::string path = write("t.json", tuningToJson(sampleTable()));
  TuningTable out;
  EXPECT_EQ(tparInvalidArgument,
            loadTuningFile(path, context(8, LinkClass::kAcrossNuma, 2, true, "sig-here"), &out));
  EXPECT_NE(std::string::npos, lastError().find("'sig-test'")) << lastError();
  EXPECT_NE(std::string::npos, lastError().find("'sig-here'")) << lastError();
  EXPECT_EQ(tparInvalidArgument,
            loadTuningFile(path, context(4, LinkClass::kAcrossNuma, 2, true), &out));
  EXPECT_NE(std::string::npos, lastError().find("with 8 ranks")) << lastError();
  EXPECT_NE(std::string::npos, lastError().find("with 4 ranks")) << lastError();
}

TEST_F(TuningFiles, MissingFileFailsNamingThePath) {
  const std::string path = dir_ + "/does-not-exist.json";
  TuningTable out;
  EXPECT_EQ(tparSystemError, loadTuningFile(path, context(8, LinkClass::kSameSwitch, 1, true), &out));
  EXPECT_NE(std::string::npos, lastError().find(path)) << lastError();
}

// NOTE [user files]: TPAR_TUNING_FILE naming a FIFO blocked communicator init in a blocking
// open. The load runs in a child with a bound, so that a regression cannot hang this binary.
TEST(DISABLED_TuningFileChild, LoadsTheFifo) {
  const std::string fifo = tpar_test::FifoDir::fifoFromEnv();
  ASSERT_FALSE(fifo.empty());
  TuningTable out;
  EXPECT_EQ(tparInvalidArgument,
            loadTuningFile(fifo, context(8, LinkClass::kSameSwitch, 1, true), &out));
  EXPECT_NE(std::string::npos,
            lastError().find("tuning file " + fifo + " is not a regular file (it is a FIFO)"))
      << lastError();
}

TEST_F(TuningFiles, TuningFileThatIsAFifoIsRefusedWithoutBlocking) {
  tpar_test::FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  std::string out;
  EXPECT_EQ(0, tpar_test::runChild({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                    "--gtest_filter=DISABLED_TuningFileChild.LoadsTheFifo"},
                                   {d.env()}, 20, &out))
      << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

TEST_F(TuningFiles, ADirectoryIsRefusedAndNoTableReplacesAFifo) {
  TuningTable out;
  EXPECT_EQ(tparInvalidArgument,
            loadTuningFile(dir_, context(8, LinkClass::kSameSwitch, 1, true), &out));
  EXPECT_NE(std::string::npos, lastError().find("is not a regular file (it is a directory)"))
      << lastError();
  // The temp file + rename of a save would put the table where the FIFO was.
  tpar_test::FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  EXPECT_EQ(tparInvalidArgument, saveTuningFile(d.fifo(), sampleTable()));
  EXPECT_NE(std::string::npos, lastError().find("not a regular file")) << lastError();
  struct stat st;
  ASSERT_EQ(0, stat(d.fifo().c_str(), &st));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(TuningFiles, SavingAnInvalidTableFailsAndWritesNothing) {
  TuningTable t = sampleTable();
  t.entries[2].plan.threads = 100;
  const std::string path = dir_ + "/never.json";
  EXPECT_EQ(tparInvalidArgument, saveTuningFile(path, t));
  EXPECT_NE(std::string::npos, lastError().find("threads")) << lastError();
  EXPECT_NE(0, access(path.c_str(), F_OK));
}

TEST(TuningPath, TuningFileVariableWinsOverCacheDirectories) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, true, "sig-abc");
  EXPECT_EQ("/etc/tpar.json", tuningFilePathFrom(ctx, "/etc/tpar.json", "/xdg", "/home/u"));
}

TEST(TuningPath, CacheDirectoryFollowsXdgThenHome) {
  const TunerContext ctx = context(8, LinkClass::kSameSwitch, 1, true, "sig-abc");
  EXPECT_EQ("/xdg/tpar/tuning-sig-abc-8.json", tuningFilePathFrom(ctx, "", "/xdg", "/home/u"));
  EXPECT_EQ("/home/u/.cache/tpar/tuning-sig-abc-8.json", tuningFilePathFrom(ctx, "", nullptr, "/home/u"));
  EXPECT_EQ("/home/u/.cache/tpar/tuning-sig-abc-8.json", tuningFilePathFrom(ctx, "", "", "/home/u"));
  // The XDG spec says to ignore a relative XDG_CACHE_HOME.
  EXPECT_EQ("/home/u/.cache/tpar/tuning-sig-abc-8.json", tuningFilePathFrom(ctx, "", "rel", "/home/u"));
  EXPECT_EQ("", tuningFilePathFrom(ctx, "", nullptr, nullptr));
  const TunerContext four = context(4, LinkClass::kSameSwitch, 1, true, "sig-abc");
  EXPECT_EQ("/xdg/tpar/tuning-sig-abc-4.json", tuningFilePathFrom(four, "", "/xdg", nullptr));
}

TEST(TuningPath, SignaturesThatAreNotPlainNamesAreHashed) {
  const TunerContext odd = context(8, LinkClass::kSameSwitch, 1, true, "numa0:[0,1]/numa1:[2,3]");
  const std::string p = tuningFilePathFrom(odd, "", "/xdg", nullptr);
  ASSERT_EQ(0u, p.find("/xdg/tpar/tuning-")) << p;
  const std::string name = p.substr(std::string("/xdg/tpar/").size());
  EXPECT_EQ(std::string::npos, name.find('/')) << p;
  EXPECT_EQ(std::string::npos, name.find('[')) << p;
  EXPECT_EQ(p, tuningFilePathFrom(odd, "", "/xdg", nullptr)) << "not stable";
  const TunerContext other = context(8, LinkClass::kSameSwitch, 1, true, "numa0:[0,2]/numa1:[1,3]");
  EXPECT_NE(p, tuningFilePathFrom(other, "", "/xdg", nullptr));
}

}  // namespace
}  // namespace tpar


namespace tpar {
namespace {

// Found by fuzzing: a number too large for any type made the JSON parser throw out_of_range,
// which escaped tuningFromJson (and made communicator init fail instead of ignoring the file).
TEST(TuningJson, HugeNumbersAreRejectedWithoutAnException) {
  const std::string text =
      R"({"format":"tpar-tuning","version":1,"signature":"v1-98cd4a6b19335ee5","nranks":8,)"
      R"("entries":[{"dtype":"bfloat16","max_bytes":401e30896,"algo":"oneshot",)"
      R"("active_blocks":0,"threads":0}]})";
  TuningTable t;
  tparResult_t r = tparSuccess;
  EXPECT_NO_THROW(r = tuningFromJson(text, &t));
  EXPECT_EQ(tparInvalidArgument, r);
  EXPECT_NE(std::string::npos, lastError().find("not valid JSON")) << lastError();
}

}  // namespace
}  // namespace tpar

namespace tpar {
namespace {

// Found by fuzzing the round trip: a time the reader accepted could be written as 0 or null,
// which the reader then refused, leaving an unreadable file.
TEST(TuningJson, EveryAcceptedTimeIsWrittenBackReadably) {
  const std::string head =
      R"({"format":"tpar-tuning","version":1,"signature":"v1-x","nranks":2,"entries":[)"
      R"({"dtype":"bfloat16","max_bytes":4096,"algo":"oneshot","active_blocks":0,"threads":0,)";
  TuningTable t;
  ASSERT_EQ(tparSuccess, tuningFromJson(head + R"("us":0.0004}]})", &t));
  TuningTable back;
  EXPECT_EQ(tparSuccess, tuningFromJson(tuningToJson(t), &back)) << lastError();
  EXPECT_EQ(tparInvalidArgument, tuningFromJson(head + R"("us":1e306}]})", &t));
  EXPECT_NE(std::string::npos, lastError().find("entries[0].us")) << lastError();
}

}  // namespace
}  // namespace tpar

// NCCL routing: tables and forced algorithms that name NCCL, the decision with and without an
// attached NCCL communicator, and what `tpar tune` measures (no GPU needed).
#if __has_include(<nccl.h>)
#include <nccl.h>
// The ABI values tpar declares for itself (it never includes nccl.h) are NCCL's.
static_assert(int(tpar::kNcclFloat16) == int(ncclFloat16) &&
                  int(tpar::kNcclFloat32) == int(ncclFloat32) &&
                  int(tpar::kNcclBfloat16) == int(ncclBfloat16),
              "NCCL datatype values");
static_assert(int(tpar::kNcclSum) == int(ncclSum) && int(tpar::kNcclMax) == int(ncclMax) &&
                  int(tpar::kNcclMin) == int(ncclMin),
              "NCCL reduction op values");
static_assert(tpar::kNcclSuccess == int(ncclSuccess) &&
                  tpar::kNcclInProgress == int(ncclInProgress) &&
                  int(tparInvalidArgument) == int(ncclInvalidArgument) &&
                  int(tparInvalidUsage) == int(ncclInvalidUsage) &&
                  int(tparRemoteError) == int(ncclRemoteError) &&
                  int(tparUnhandledCudaError) == int(ncclUnhandledCudaError),
              "NCCL result values");
static_assert(sizeof(tpar::NcclUniqueId) == sizeof(ncclUniqueId), "ncclUniqueId size");
#endif

namespace tpar {
namespace {

using kernels::Algo;

Plan ncclPlan() {
  Plan p;
  p.nccl = true;
  return p;
}

// bfloat16: up to 4 KiB one-shot, up to 1 MiB NCCL, above two-shot; float32 all NCCL.
TuningTable ncclTable() {
  TuningTable t;
  t.signature = "sig-nccl";
  t.nranks = 8;
  t.entries = {
      {4 * kK, tparBfloat16, {Algo::kOneShot, 0, 0}, 3.5},
      {1 * kM, tparBfloat16, ncclPlan(), 21.25},
      {64 * kM, tparBfloat16, {Algo::kTwoShot, 16, 256}, 900},
      {64 * kK, tparFloat32, ncclPlan(), 0},
  };
  return t;
}

TunerContext ncclContext(bool attached) {
  TunerContext c = context(8, LinkClass::kSameSwitch, 1, true, "sig-nccl");
  c.nccl = attached;
  return c;
}

TEST(NcclRouting, TableEntriesNamingNcclRoundTripThroughJson) {
  const TuningTable t = ncclTable();
  const std::string text = tuningToJson(t);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ("nccl", j["entries"][1]["algo"]);
  EXPECT_EQ("nccl", j["entries"][3]["algo"]);
  EXPECT_EQ("oneshot", j["entries"][0]["algo"]);
  TuningTable back;
  ASSERT_EQ(tparSuccess, tuningFromJson(text, &back)) << lastError();
  ASSERT_EQ(t.entries.size(), back.entries.size());
  for (size_t i = 0; i < t.entries.size(); ++i) {
    EXPECT_EQ(t.entries[i].plan.nccl, back.entries[i].plan.nccl) << i;
    EXPECT_EQ(t.entries[i].max_bytes, back.entries[i].max_bytes) << i;
    EXPECT_EQ(t.entries[i].dtype, back.entries[i].dtype) << i;
    if (!t.entries[i].plan.nccl) {
      EXPECT_EQ(t.entries[i].plan.algo, back.entries[i].plan.algo) << i;
      EXPECT_EQ(t.entries[i].plan.active_blocks, back.entries[i].plan.active_blocks) << i;
      EXPECT_EQ(t.entries[i].plan.threads, back.entries[i].plan.threads) << i;
    }
    EXPECT_DOUBLE_EQ(t.entries[i].us, back.entries[i].us) << i;
  }
  // Written again, the text is the same: the round trip is a fixed point.
  EXPECT_EQ(text, tuningToJson(back));
}

TEST(TuningJson, StepsAndPullRoundTripAndAreOptional) {
  TuningTable t;
  t.signature = "s";
  t.nranks = 8;
  TuningEntry e;
  e.dtype = tparBfloat16;
  e.max_bytes = 1 << 20;
  e.plan.algo = Algo::kPipelined;
  e.plan.active_blocks = 4;
  e.plan.steps = 8;
  e.plan.pull = true;
  e.us = 430.5;
  t.entries.push_back(e);
  const std::string text = tuningToJson(t);
  TuningTable back;
  ASSERT_EQ(tparSuccess, tuningFromJson(text, &back)) << lastError();
  ASSERT_EQ(1u, back.entries.size());
  EXPECT_EQ(Algo::kPipelined, back.entries[0].plan.algo);
  EXPECT_EQ(8, back.entries[0].plan.steps);
  EXPECT_TRUE(back.entries[0].plan.pull);
  EXPECT_EQ(text, tuningToJson(back));
  // Tables written before these fields: both default.
  const std::string old_text =
      R"({"format":"tpar-tuning","version":1,"signature":"s","nranks":2,"entries":[)"
      R"({"dtype":"bfloat16","max_bytes":4096,"algo":"pipelined","active_blocks":2,"threads":0}]})";
  ASSERT_EQ(tparSuccess, tuningFromJson(old_text, &back)) << lastError();
  EXPECT_EQ(0, back.entries[0].plan.steps);
  EXPECT_FALSE(back.entries[0].plan.pull);
  // Out of range: named.
  for (const char* bad : {R"("steps":65)", R"("steps":-1)", R"("pull":2)"}) {
    const std::string text2 =
        std::string(R"({"format":"tpar-tuning","version":1,"signature":"s","nranks":2,"entries":[)") +
        R"({"dtype":"bfloat16","max_bytes":4096,"algo":"pipelined","active_blocks":2,"threads":0,)" +
        bad + "}]}";
    EXPECT_EQ(tparInvalidArgument, tuningFromJson(text2, &back)) << bad;
    const std::string field = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    EXPECT_NE(std::string::npos, lastError().find("entries[0]." + field)) << lastError();
  }
}

// `tpar tune --wire` writes each measured format's threshold: a size, or "never"; tables
// without the field (or without a format in it) leave the format to the default.
TEST(TuningJson, WireThresholdsRoundTripAndAreOptional) {
  TuningTable t;
  t.signature = "s";
  t.nranks = 4;
  TuningEntry e;
  e.max_bytes = 1 << 20;
  e.plan.algo = Algo::kPipelined;
  t.entries.push_back(e);
  std::mt19937_64 rng(std::random_device{}());
  const int64_t fp8 = static_cast<int64_t>(rng() % (uint64_t{1} << 40));
  t.wire_min_bytes[tparWireFp8] = fp8;
  t.wire_min_bytes[tparWireInt4] = kWireNever;
  const std::string text = tuningToJson(t);
  EXPECT_NE(std::string::npos, text.find("\"int4\": \"never\"")) << text;
  EXPECT_EQ(std::string::npos, text.find("int8")) << text;  // not measured: not written
  TuningTable back;
  ASSERT_EQ(tparSuccess, tuningFromJson(text, &back)) << lastError();
  EXPECT_EQ(fp8, back.wire_min_bytes[tparWireFp8]);
  EXPECT_EQ(-1, back.wire_min_bytes[tparWireInt8]);
  EXPECT_EQ(kWireNever, back.wire_min_bytes[tparWireInt4]);
  EXPECT_EQ(text, tuningToJson(back));
  // Without the field every format is unmeasured.
  TuningTable none = t;
  std::fill(std::begin(none.wire_min_bytes), std::end(none.wire_min_bytes), -1);
  const std::string plain = tuningToJson(none);
  EXPECT_EQ(std::string::npos, plain.find("wire_min_bytes")) << plain;
  ASSERT_EQ(tparSuccess, tuningFromJson(plain, &back)) << lastError();
  for (int w = 0; w < tparNumWires; ++w) EXPECT_EQ(-1, back.wire_min_bytes[w]) << w;
  // Bad values and unknown formats are named.
  const std::string head =
      R"({"format":"tpar-tuning","version":1,"signature":"s","nranks":2,"entries":[)"
      R"({"dtype":"bfloat16","max_bytes":4096,"algo":"pipelined","active_blocks":2,"threads":0}],)";
  for (const auto& [bad, field] : std::vector<std::pair<std::string, std::string>>{
           {R"("wire_min_bytes":{"fp9":4096})", "wire_min_bytes.fp9"},
           {R"("wire_min_bytes":{"fp8":-1})", "wire_min_bytes.fp8"},
           {R"("wire_min_bytes":{"int8":"soon"})", "wire_min_bytes.int8"},
           {R"("wire_min_bytes":{"int4":2199023255553})", "wire_min_bytes.int4"},
           {R"("wire_min_bytes":[4096])", "wire_min_bytes"}}) {
    EXPECT_EQ(tparInvalidArgument, tuningFromJson(head + bad + "}", &back)) << bad;
    EXPECT_NE(std::string::npos, lastError().find("'" + field + "'")) << lastError();
  }
}

// A communicator's threshold for its format: TPAR_WIRE_MIN_BYTES when set, else its table's
// measurement of that format, else the default (-1); and what wirePlan then does with it.
TEST(WirePlan, TheSettingWinsOverTheTableWhichWinsOverTheDefault) {
  TuningTable t;
  t.wire_min_bytes[tparWireFp8] = 2 << 20;
  t.wire_min_bytes[tparWireInt4] = kWireNever;
  EXPECT_EQ(4096, wireMinBytes(4096, &t, tparWireFp8));
  EXPECT_EQ(0, wireMinBytes(0, &t, tparWireInt4));
  EXPECT_EQ(2 << 20, wireMinBytes(-1, &t, tparWireFp8));
  EXPECT_EQ(kWireNever, wireMinBytes(-1, &t, tparWireInt4));
  EXPECT_EQ(-1, wireMinBytes(-1, &t, tparWireInt8));  // not measured
  EXPECT_EQ(-1, wireMinBytes(-1, nullptr, tparWireFp8));
  EXPECT_EQ(-1, wireMinBytes(-1, &t, tparWireNone));
  TunerContext host;
  host.nranks = host.ranks_per_gpu = 4;
  host.host_transport = true;
  auto applies = [&](uint64_t bytes, int wire) {
    const Plan base = selectPlan(bytes, tparBfloat16, host, nullptr, tparAlgoAuto, -1);
    bool a = false;
    wirePlan(base, bytes, tparBfloat16, host, tparAlgoAuto, wire, &a, wireMinBytes(-1, &t, wire));
    return a;
  };
  EXPECT_FALSE(applies(1 << 20, tparWireFp8));  // above the default, below the table's
  EXPECT_TRUE(applies(2 << 20, tparWireFp8));
  EXPECT_FALSE(applies(uint64_t{1} << 40, tparWireInt4));  // never
  EXPECT_TRUE(applies(defaultWireMinBytes(4), tparWireInt8));  // the default
  EXPECT_FALSE(applies(defaultWireMinBytes(4) - 2, tparWireInt8));
  // The init log says which and why.
  EXPECT_EQ("float16/bfloat16 calls from 4096 bytes (TPAR_WIRE_MIN_BYTES)",
            wireThresholdText(4096, &t, tparWireFp8, 4));
  EXPECT_EQ("float16/bfloat16 calls from 2097152 bytes (the tuning table)",
            wireThresholdText(-1, &t, tparWireFp8, 4));
  EXPECT_EQ("no call (the tuning table measured it behind)",
            wireThresholdText(-1, &t, tparWireInt4, 4));
  EXPECT_EQ("float16/bfloat16 calls from " + std::to_string(defaultWireMinBytes(4)) +
                " bytes (the default)",
            wireThresholdText(-1, &t, tparWireInt8, 4));
}

TEST(NcclRouting, UnknownAlgorithmInATableIsRejectedListingNccl) {
  const std::string text =
      R"({"format":"tpar-tuning","version":1,"signature":"s","nranks":2,"entries":[)"
      R"({"dtype":"bfloat16","max_bytes":4096,"algo":"NCCL2","active_blocks":0,"threads":0}]})";
  TuningTable t;
  EXPECT_EQ(tparInvalidArgument, tuningFromJson(text, &t));
  EXPECT_NE(std::string::npos, lastError().find("entries[0].algo")) << lastError();
  EXPECT_NE(std::string::npos, lastError().find("nccl")) << lastError();
}

TEST(NcclRouting, TableRangeGoesToNcclOnlyWhenOneIsAttached) {
  const TuningTable t = ncclTable();
  for (bool attached : {false, true}) {
    SCOPED_TRACE(attached ? "attached" : "not attached");
    const TunerContext ctx = ncclContext(attached);
    auto sel = [&](uint64_t b, tparDataType_t d) {
      return selectPlan(b, d, ctx, &t, tparAlgoAuto, -1);
    };
    // Sizes the table gives to tpar are unaffected.
    EXPECT_FALSE(sel(4 * kK, tparBfloat16).nccl);
    EXPECT_EQ(Algo::kOneShot, sel(4 * kK, tparBfloat16).algo);
    EXPECT_FALSE(sel(1 * kM + 2, tparBfloat16).nccl);
    EXPECT_EQ(Algo::kTwoShot, sel(1 * kM + 2, tparBfloat16).algo);
    EXPECT_EQ(16, sel(1 * kM + 2, tparBfloat16).active_blocks);
    for (uint64_t b : {4 * kK + 2, 112 * kK, 1 * kM}) {
      const Plan p = sel(b, tparBfloat16);
      EXPECT_EQ(attached, p.nccl) << b;
      if (!attached) {
        // Not the neighbouring entry's plan: the built-in choice.
        const Plan d = defaultPlan(b, tparBfloat16, ctx, -1);
        EXPECT_EQ(d.algo, p.algo) << b;
        EXPECT_EQ(d.active_blocks, p.active_blocks) << b;
        EXPECT_EQ(d.threads, p.threads) << b;
      }
    }
    // Beyond the last float32 entry, that entry (NCCL) still decides.
    EXPECT_EQ(attached, sel(8 * kM, tparFloat32).nccl);
    if (!attached) EXPECT_EQ(Algo::kTwoShot, sel(8 * kM, tparFloat32).algo);
    // float16 has no entries: the defaults, never NCCL.
    EXPECT_FALSE(sel(112 * kK, tparFloat16).nccl);
  }
  // A table of another topology routes nothing, attached or not.
  TuningTable foreign = t;
  foreign.signature = "sig-other";
  EXPECT_FALSE(selectPlan(112 * kK, tparBfloat16, ncclContext(true), &foreign, tparAlgoAuto, -1).nccl);
}

TEST(NcclRouting, ForcedNcclStaysNcclSoThatTheCallCanRefuseIt) {
  const TuningTable t = sampleTable();
  for (bool attached : {false, true}) {
    const TunerContext ctx = ncclContext(attached);
    for (uint64_t b : {uint64_t(1), 64 * kK, 64 * kM}) {
      EXPECT_TRUE(selectPlan(b, tparBfloat16, ctx, &t, tparAlgoNccl, -1).nccl) << b;
      EXPECT_TRUE(selectPlan(b, tparFloat32, ctx, nullptr, tparAlgoNccl, -1).nccl) << b;
    }
    // Any other forced algorithm wins over a table's NCCL entries.
    const TuningTable nt = ncclTable();
    EXPECT_FALSE(selectPlan(112 * kK, tparBfloat16, ctx, &nt, tparAlgoTwoShot, -1).nccl);
  }
  // The built-in defaults never choose NCCL: nothing measured says it is faster.
  for (uint64_t b = 1; b <= 256 * kM; b *= 4)
    EXPECT_FALSE(selectPlan(b, tparBfloat16, ncclContext(true), nullptr, tparAlgoAuto, -1).nccl);
}

TEST(NcclRouting, PlanNamesIncludeNccl) {
  Plan p;
  ASSERT_TRUE(planAlgoFromName("nccl", &p));
  EXPECT_TRUE(p.nccl);
  EXPECT_STREQ("nccl", planAlgoName(p));
  ASSERT_TRUE(planAlgoFromName("staged", &p));
  EXPECT_FALSE(p.nccl) << "a later name replaces nccl";
  EXPECT_EQ(Algo::kStaged, p.algo);
  EXPECT_STREQ("staged", planAlgoName(p));
  for (Algo a : {Algo::kOneShotPull, Algo::kTwoShotPull}) {
    ASSERT_TRUE(planAlgoFromName(algoName(a), &p)) << algoName(a);
    EXPECT_EQ(a, p.algo);
  }
  EXPECT_FALSE(planAlgoFromName("NCCL", &p));
  EXPECT_FALSE(planAlgoFromName("", &p));
  // The public names agree with the table's.
  EXPECT_STREQ("nccl", tparAlgoName(tparAlgoNccl));
  EXPECT_STREQ(planAlgoName(ncclPlan()), tparAlgoName(tparAlgoNccl));
}

TEST(NcclRouting, EnvironmentForcesNcclAndNamesTheLibrary) {
  std::map<std::string, std::string> vars = {{"TPAR_ALGO", "nccl"},
                                             {"TPAR_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2"}};
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv(
                             [&](const char* n) -> const char* {
                               auto it = vars.find(n);
                               return it == vars.end() ? nullptr : it->second.c_str();
                             },
                             &env))
      << lastError();
  EXPECT_EQ(tparAlgoNccl, env.algo);
  EXPECT_EQ("/opt/nccl/libnccl.so.2", env.nccl_library);
  Env defaults;
  ASSERT_EQ(tparSuccess, parseEnv([](const char*) -> const char* { return nullptr; }, &defaults));
  EXPECT_EQ("", defaults.nccl_library);
}

TEST(NcclAbi, DatatypesOpsAndResultsMapToNcclValues) {
  EXPECT_EQ(7, ncclDataTypeOf(tparFloat32));
  EXPECT_EQ(6, ncclDataTypeOf(tparFloat16));
  EXPECT_EQ(9, ncclDataTypeOf(tparBfloat16));
  EXPECT_EQ(0, ncclRedOpOf(tparSum));
  EXPECT_EQ(2, ncclRedOpOf(tparMax));
  EXPECT_EQ(3, ncclRedOpOf(tparMin));
  EXPECT_EQ(-1, ncclDataTypeOf(tparNumDataTypes));
  EXPECT_EQ(-1, ncclRedOpOf(tparNumOps));
  EXPECT_EQ(tparSuccess, resultOfNccl(0));
  for (int r = 1; r <= 7; ++r) EXPECT_EQ(r, static_cast<int>(resultOfNccl(r)));
  EXPECT_EQ(tparInternalError, resultOfNccl(42));
  EXPECT_EQ("2.28.9", ncclVersionString(22809));
  EXPECT_EQ("none", ncclVersionString(0));
}

TEST(NcclApi, SetNcclCommRejectsNullAndForeignCommunicators) {
  int fake_nccl = 0;
  EXPECT_EQ(tparInvalidArgument, tparCommSetNcclComm(nullptr, &fake_nccl));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("comm is NULL"))
      << tparGetLastError(nullptr);
  EXPECT_EQ(tparInvalidArgument, tparCommSetNcclComm(nullptr, nullptr));
  alignas(64) char fake[256];
  std::memset(fake, 0x5a, sizeof(fake));
  EXPECT_EQ(tparInvalidArgument,
            tparCommSetNcclComm(reinterpret_cast<tparComm_t>(fake), &fake_nccl));
  EXPECT_NE(std::string::npos,
            std::string(tparGetLastError(nullptr)).find("not a live communicator"))
      << tparGetLastError(nullptr);
}

// attachNcclComm on a communicator object that never saw a GPU: the checks before any CUDA.
TEST(NcclAttach, DetachingClearsTheRouteWithoutLoadingNccl) {
  auto comm = std::make_unique<tparComm>();
  int stand_in = 0;
  comm->nccl.comm = reinterpret_cast<NcclComm>(&stand_in);
  comm->tuner_ctx.nccl = true;
  EXPECT_EQ(tparSuccess, attachNcclComm(comm.get(), nullptr));
  EXPECT_EQ(nullptr, comm->nccl.comm);
  EXPECT_FALSE(comm->tuner_ctx.nccl);
}

TEST(NcclAttach, HandleThatIsNoNcclCommunicatorIsRefusedNamingIt) {
  std::string why;
  if (loadNccl(&why) == nullptr) GTEST_SKIP() << "NCCL cannot be loaded: " << why;
  auto comm = std::make_unique<tparComm>();
  comm->nranks = 1;
  // Zeroed memory, larger than any ncclComm: NCCL finds no magic word in it.
  const size_t bytes = 64u << 20;
  std::unique_ptr<void, void (*)(void*)> zeros(std::calloc(1, bytes), std::free);
  ASSERT_NE(nullptr, zeros.get());
  EXPECT_EQ(tparInvalidArgument, attachNcclComm(comm.get(), zeros.get()));
  EXPECT_NE(std::string::npos, lastError().find("ncclComm is not a usable NCCL communicator"))
      << lastError();
  EXPECT_EQ(nullptr, comm->nccl.comm);
  EXPECT_FALSE(comm->tuner_ctx.nccl);
}

TEST(NcclAttach, LoadedLibraryHasEveryFunctionTheRouteCalls) {
  std::string why;
  const NcclLib* lib = loadNccl(&why);
  if (lib == nullptr) GTEST_SKIP() << "NCCL cannot be loaded: " << why;
  EXPECT_NE(nullptr, lib->allReduce);
  EXPECT_NE(nullptr, lib->commCount);
  EXPECT_NE(nullptr, lib->commUserRank);
  EXPECT_NE(nullptr, lib->commCuDevice);
  EXPECT_NE(nullptr, lib->getErrorString);
  EXPECT_GT(lib->version, 0);
  EXPECT_FALSE(lib->path.empty());
  // Loaded once: the same library every time.
  EXPECT_EQ(lib, loadNccl(nullptr));
}

TEST(NcclRouting, CommunicatorWantsNcclWhenItsTableOrForcedAlgorithmNamesIt) {
  auto comm = std::make_unique<tparComm>();
  EXPECT_FALSE(wantsNccl(comm.get()));
  comm->tuning = sampleTable();
  comm->has_tuning = true;
  EXPECT_FALSE(wantsNccl(comm.get()));
  comm->tuning = ncclTable();
  EXPECT_TRUE(wantsNccl(comm.get()));
  comm->cfg.forced_algo = tparAlgoOneShot;  // the table is not used at all
  EXPECT_FALSE(wantsNccl(comm.get()));
  comm->has_tuning = false;
  comm->cfg.forced_algo = tparAlgoNccl;
  EXPECT_TRUE(wantsNccl(comm.get()));
}

}  // namespace
}  // namespace tpar


namespace tpar {
namespace {

// Virtual ranks (all on one GPU, as measured), or one rank per GPU with `per_gpu` = 1.
TunerContext hostContext(int nranks, int per_gpu = -1) {
  TunerContext ctx;
  ctx.nranks = nranks;
  ctx.signature = "test+host";
  ctx.host_transport = true;
  ctx.ranks_per_gpu = per_gpu > 0 ? per_gpu : nranks;
  return ctx;
}

TEST(HostDefaults, OneShotPullThenTwoShotLLThenPipelinedPull) {
  // One rank per GPU (ranks sharing one: SmallCallsOfRanksSharingAGpu below).
  for (int n : {2, 4, 8}) {
    const TunerContext ctx = hostContext(n, 1);
    const uint64_t one_shot = n <= 2 ? (16u << 10) : 0;
    for (uint64_t bytes : {uint64_t{16}, uint64_t{4096}, uint64_t{16} << 10, (uint64_t{16} << 10) + 16,
                           uint64_t{32} << 10, (uint64_t{32} << 10) + 16, uint64_t{1} << 20,
                           uint64_t{64} << 20}) {
      const Plan p = defaultPlan(bytes, tparBfloat16, ctx, -1);
      const Algo want = bytes <= one_shot       ? Algo::kOneShotPull
                        : bytes <= (32u << 10) ? Algo::kTwoShotLL
                                               : Algo::kPipelined;
      EXPECT_EQ(want, p.algo) << n << " ranks, " << bytes << " bytes";
      EXPECT_FALSE(p.nccl);
      if (p.algo == Algo::kPipelined) EXPECT_TRUE(p.pull) << n << " ranks, " << bytes;
    }
  }
  // One rank exchanges nothing: the cheapest kernel.
  EXPECT_EQ(Algo::kOneShotPull, defaultPlan(64u << 20, tparFloat32, hostContext(1), -1).algo);
  // TPAR_ONESHOT_MAX_BYTES moves the one-shot crossover here too.
  EXPECT_EQ(Algo::kOneShotPull, defaultPlan(100000, tparBfloat16, hostContext(8), 128 << 10).algo);
  EXPECT_EQ(Algo::kTwoShotLL, defaultPlan(4096, tparBfloat16, hostContext(2), 0).algo);
}

TEST(HostDefaults, SmallCallsOfRanksSharingAGpu) {
  // NOTE [small host calls on a shared GPU]: up to 12 KiB the sentinel push kernels, one-shot
  // with 2 x 512 up to 4 ranks, two-shot with 1 x 256 above; then the defaults of one rank per
  // GPU again.
  for (int n : {2, 3, 4, 5, 8, 16}) {
    const TunerContext ctx = hostContext(n);
    for (uint64_t bytes : {uint64_t{2}, uint64_t{4096}, uint64_t{8} << 10, uint64_t{12} << 10}) {
      const Plan p = defaultPlan(bytes, tparBfloat16, ctx, -1);
      if (n == 2 && bytes <= (8u << 10)) {  // two ranks keep the one-shot pull up to 8 KiB
        EXPECT_EQ(Algo::kOneShotPull, p.algo) << bytes;
        EXPECT_EQ(defaultPlan(bytes, tparBfloat16, hostContext(n, 1), -1).algo, p.algo) << bytes;
        continue;
      }
      EXPECT_EQ(n <= 4 ? Algo::kOneShot : Algo::kTwoShot, p.algo) << n << " ranks, " << bytes;
      EXPECT_EQ(n <= 4 ? 2 : 1, p.active_blocks) << n << " ranks, " << bytes;
      EXPECT_EQ(n <= 4 ? 512 : 256, p.threads) << n << " ranks, " << bytes;
      EXPECT_FALSE(p.nccl);
    }
    // NOTE [push calls on a shared GPU]: past 12 KiB the push kernels again with 512 threads:
    // 2 ranks one-shot with two blocks up to 64 KiB, then two-shot with four up to 128 KiB;
    // 3 ranks one-shot up to 40 KiB then two-shot, 4 ranks two-shot, both with two blocks up
    // to 96 KiB; 5 to 7 ranks two-shot up to 64 KiB, 8 and more up to 40 KiB, with one block
    // up to 40 KiB and two above. NOTE [two-shot LL on a shared GPU]: then 8 and more the
    // two-shot pull up to 384 KiB, the pipelined two-shot above; fewer ranks the pipelined
    // two-shot of one rank per GPU (never two-shot LL, whose sizes the push covers), with at
    // most 4 blocks of 256 threads up to 384 KiB from 3 ranks.
    for (uint64_t bytes :
         {(uint64_t{12} << 10) + 16, uint64_t{16} << 10, uint64_t{24} << 10,
          (uint64_t{24} << 10) + 16, uint64_t{32} << 10, (uint64_t{32} << 10) + 16,
          uint64_t{40} << 10, (uint64_t{40} << 10) + 16, uint64_t{64} << 10,
          (uint64_t{64} << 10) + 16, uint64_t{96} << 10, (uint64_t{96} << 10) + 16,
          uint64_t{112} << 10, (uint64_t{112} << 10) + 16, uint64_t{128} << 10,
          (uint64_t{128} << 10) + 16, uint64_t{384} << 10, (uint64_t{384} << 10) + 16}) {
      const Plan plan = defaultPlan(bytes, tparBfloat16, ctx, -1);
      const Algo got = plan.algo;
      const uint64_t push_max = n == 2 ? 128u << 10 : n <= 4 ? 96u << 10 : n < 8 ? 64u << 10
                                                                                 : 40u << 10;
      const bool push = bytes <= push_max;
      const bool one_shot =
          (n == 2 && bytes <= (64u << 10)) || (n == 3 && bytes <= (40u << 10));
      const Algo want = push && one_shot                  ? Algo::kOneShot
                        : push                            ? Algo::kTwoShot
                        : n >= 8 && bytes <= (384u << 10) ? Algo::kTwoShotPull
                                                          : Algo::kPipelined;
      EXPECT_EQ(want, got) << n << " ranks, " << bytes;
      if (push) {
        const int blocks = n == 2 ? (one_shot ? 2 : 4) : n <= 4 ? 2 : bytes <= (40u << 10) ? 1 : 2;
        EXPECT_EQ(blocks, plan.active_blocks) << n << " ranks, " << bytes;
        EXPECT_EQ(512, plan.threads) << n << " ranks, " << bytes;
      } else if (n < 8) {
        EXPECT_EQ(defaultPlan(bytes, tparBfloat16, hostContext(n, 1), -1).algo, got) << n;
      }
      if (got == Algo::kPipelined) {
        // Narrow up to 384 KiB from 3 ranks; two ranks and larger calls keep up to 8 blocks,
        // and 256 threads from 4 ranks up to 1 MiB (NOTE [shorter pipelined steps on a shared
        // GPU]), the kernel's own above.
        const bool narrow = n >= 3 && bytes <= (384u << 10);
        const bool mid = n >= 4 && bytes <= (1u << 20);
        EXPECT_EQ(narrow || mid ? 256 : 0, plan.threads) << n << " ranks, " << bytes;
        EXPECT_LE(plan.active_blocks, narrow ? 4 : 8) << n << " ranks, " << bytes;
        if (n >= 3 && n <= 4 && bytes >= (112u << 10) && bytes <= (384u << 10))
          EXPECT_EQ(4, plan.active_blocks) << n << " ranks, " << bytes;
      }
      // The pull's blocks: about one per 16 KiB of a rank's chunk, at least one (hostShape).
      if (got == Algo::kTwoShotPull)
        EXPECT_EQ(n == 8 && bytes == (384u << 10) ? 3 : 1, plan.active_blocks)
            << n << " ranks, " << bytes;
      // TPAR_ONESHOT_MAX_BYTES turns the rule off: the plans of one rank per GPU (with that
      // one-shot limit).
      EXPECT_EQ(defaultPlan(bytes, tparBfloat16, hostContext(n, 1), 8192).algo,
                defaultPlan(bytes, tparBfloat16, ctx, 8192).algo) << n << " ranks, " << bytes;
    }
    // One rank per GPU never takes the rule; TPAR_ONESHOT_MAX_BYTES turns it off.
    EXPECT_NE(Algo::kOneShot, defaultPlan(4096, tparBfloat16, hostContext(n, 1), -1).algo) << n;
    EXPECT_EQ(Algo::kOneShotPull, defaultPlan(4096, tparBfloat16, ctx, 8192).algo) << n;
    EXPECT_EQ(Algo::kTwoShotLL, defaultPlan(4096, tparBfloat16, ctx, 0).algo) << n;
    // The one-shot limit the communicator reports follows (oneShotLimit walks the boundaries).
    const uint64_t limit = oneShotLimit(tparBfloat16, ctx, nullptr, tparAlgoAuto, -1);
    const uint64_t want_limit = n == 2 ? 64u << 10 : n == 3 ? 40u << 10 : n == 4 ? 12u << 10 : 0;
    EXPECT_EQ(want_limit, limit) << n;
  }
  // A table still wins over the rule.
  TuningTable t;
  const TunerContext ctx = hostContext(4);
  t.signature = ctx.signature;
  t.nranks = 4;
  TuningEntry e;
  e.dtype = tparBfloat16;
  e.max_bytes = 64u << 10;
  e.plan.algo = Algo::kTwoShotLL;
  t.entries.push_back(e);
  EXPECT_EQ(Algo::kTwoShotLL, selectPlan(4096, tparBfloat16, ctx, &t, tparAlgoAuto, -1).algo);
}

TEST(HostDefaults, FewBlocksAndStepsThatGrowWithTheMessage) {
  // Pipelined: about one block per 8 KiB a rank sends, at most 32 / n and 8; steps of about
  // 48 KiB per block, at most 16; from 3 ranks sharing a GPU at most 4 blocks up to 384 KiB,
  // from 4 ranks sharing one steps of about 24 KiB above that up to 1 MiB, two ranks sharing
  // one up to 16 blocks from 1 MiB (one rank per GPU: 8) with lossless steps of about 16 KiB.
  struct Case {
    int n;
    uint64_t bytes;
    int blocks, steps;
    int per_gpu = 0;  // ranks sharing a GPU; 0: all of them
  };
  // (8 ranks at 512 KiB send 448 KiB: 4 blocks of 112 KiB, 4 steps of 24 and 2 of 48.)
  for (const Case& c : {Case{8, 512 << 10, 4, 4}, Case{8, 768 << 10, 4, 7},
                        Case{8, 1 << 20, 4, 9}, Case{8, 2 << 20, 4, 9}, Case{8, 64 << 20, 4, 16},
                        Case{8, 512 << 10, 8, 1, 1}, Case{4, 112 << 10, 4, 1},
                        Case{4, 1 << 20, 8, 4}, Case{4, 1 << 20, 8, 2, 1}, Case{3, 1 << 20, 8, 1},
                        Case{5, 512 << 10, 6, 2}, Case{2, 256 << 10, 8, 1},
                        Case{2, 512 << 10, 8, 1}, Case{2, 1 << 20, 16, 2}, Case{2, 4 << 20, 16, 8},
                        Case{2, 16 << 20, 16, 16}, Case{2, 4 << 20, 8, 5, 1},
                        Case{2, 1 << 20, 8, 1, 1}, Case{4, 4 << 20, 8, 8}}) {
    const Plan p = defaultPlan(c.bytes, tparBfloat16, hostContext(c.n, c.per_gpu), -1);
    ASSERT_EQ(Algo::kPipelined, p.algo) << c.n << " ranks, " << c.bytes;
    EXPECT_EQ(c.blocks, p.active_blocks) << c.n << " ranks, " << c.bytes;
    EXPECT_EQ(c.steps, p.steps) << c.n << " ranks, " << c.bytes;
  }
  // A wire format's plan runs a power of two of steps (NOTE [wire steps in powers of two]): the
  // lossless shape's count rounded down, where that count lies between two powers, and at most
  // 8 (kWireMaxSteps): a larger call never runs fewer steps, and the largest run 8.
  for (int n : {2, 3, 4, 5, 8}) {
    int last = 0;
    for (uint64_t bytes = 512u << 10; bytes <= (uint64_t{256} << 20); bytes += bytes / 2) {
      bool applies = false;
      const Plan lossless = defaultPlan(bytes, tparBfloat16, hostContext(n), -1);
      const Plan w = wirePlan(lossless, bytes, tparBfloat16, hostContext(n), tparAlgoAuto,
                              tparWireInt4, &applies);
      ASSERT_TRUE(applies) << n << " ranks, " << bytes;
      EXPECT_GE(w.steps, 1) << n << " ranks, " << bytes;
      EXPECT_LE(w.steps, 8) << n << " ranks, " << bytes;
      EXPECT_EQ(0, w.steps & (w.steps - 1)) << n << " ranks, " << bytes << ": " << w.steps;
      EXPECT_GE(w.steps, last) << n << " ranks, " << bytes;
      last = w.steps;
    }
    EXPECT_EQ(8, last) << n << " ranks at 256 MiB";
  }
  {
    // 8 ranks at 2 MiB: 1792 KiB over 4 blocks is 9 steps of 48 KiB, run as 8; 2 ranks at
    // 16 MiB: 8 MiB over 16 blocks is 10, run as 8.
    bool applies = false;
    const Plan w8 = wirePlan(defaultPlan(2u << 20, tparBfloat16, hostContext(8), -1), 2u << 20,
                             tparBfloat16, hostContext(8), tparAlgoAuto, tparWireFp8, &applies);
    EXPECT_EQ(8, w8.steps);
    const Plan w2 = wirePlan(defaultPlan(16u << 20, tparBfloat16, hostContext(2), -1), 16u << 20,
                             tparBfloat16, hostContext(2), tparAlgoAuto, tparWireFp8, &applies);
    EXPECT_EQ(8, w2.steps);
  }
  // A call of several pieces runs each piece in the shape a call of one piece would have
  // (NOTE [wire shape per piece]), its pieces of one length (evenPieceBytes); without the
  // piece size known, the whole call's shape.
  for (int n : {2, 3, 4, 8}) {
    for (uint64_t piece : {uint64_t{1} << 20, uint64_t{8} << 20}) {
      TunerContext ctx = hostContext(n);
      ctx.piece_bytes = piece;
      bool applies = false;
      for (uint64_t bytes : {piece + 16, 3 * piece - 4096, 3 * piece, 11 * piece / 2,
                             32 * piece}) {
        // FP8's pieces, in blocks of 128 bf16 values: the whole call where its codes fit
        // `piece`, else pieces of at most `piece`.
        const uint64_t each =
            evenPieceBytes(bytes, wirePieceBytes(bytes, piece, n, tparWireFp8, 2), 256);
        const Plan one = wirePlan(defaultPlan(each, tparBfloat16, hostContext(n), -1), each,
                                  tparBfloat16, hostContext(n), tparAlgoAuto, tparWireFp8,
                                  &applies);
        ASSERT_TRUE(applies) << n;
        const Plan w = wirePlan(defaultPlan(bytes, tparBfloat16, ctx, -1), bytes, tparBfloat16,
                                ctx, tparAlgoAuto, tparWireFp8, &applies);
        ASSERT_TRUE(applies) << n << " ranks, " << bytes;
        EXPECT_EQ(one.steps, w.steps) << n << " ranks, " << bytes;
        EXPECT_EQ(one.pull, w.pull) << n << " ranks, " << bytes;
        EXPECT_EQ(one.active_blocks, w.active_blocks) << n << " ranks, " << bytes;
        EXPECT_EQ(one.threads, w.threads) << n << " ranks, " << bytes;
      }
    }
    // Below the piece size nothing changes.
    for (uint64_t bytes = 1u << 20; bytes <= (8u << 20); bytes *= 2) {
      TunerContext ctx = hostContext(n);
      ctx.piece_bytes = 8u << 20;
      bool applies = false;
      const Plan w = wirePlan(defaultPlan(bytes, tparBfloat16, ctx, -1), bytes, tparBfloat16, ctx,
                              tparAlgoAuto, tparWireInt4, &applies);
      const Plan whole = wirePlan(defaultPlan(bytes, tparBfloat16, hostContext(n), -1), bytes,
                                  tparBfloat16, hostContext(n), tparAlgoAuto, tparWireInt4,
                                  &applies);
      EXPECT_EQ(whole.steps, w.steps) << n << " ranks, " << bytes;
    }
  }
  {
    // 2 ranks sharing a GPU, 64 MiB in pieces of 8 MiB: 4 MiB over 16 blocks is 5 steps of 48
    // KiB per piece, run as 4, where the whole call's 32 MiB would be 16, held to 8.
    TunerContext ctx = hostContext(2);
    ctx.piece_bytes = 8u << 20;
    bool applies = false;
    const Plan w = wirePlan(defaultPlan(64u << 20, tparBfloat16, ctx, -1), 64u << 20,
                            tparBfloat16, ctx, tparAlgoAuto, tparWireInt8, &applies);
    EXPECT_EQ(4, w.steps);
    const Plan whole = wirePlan(defaultPlan(64u << 20, tparBfloat16, hostContext(2), -1),
                                64u << 20, tparBfloat16, hostContext(2), tparAlgoAuto,
                                tparWireInt8, &applies);
    EXPECT_EQ(8, whole.steps);
    // The lossless plan keeps the whole call's shape.
    EXPECT_EQ(16, defaultPlan(64u << 20, tparBfloat16, ctx, -1).steps);
  }
  // A wire format's plan keeps the steps of about 48 KiB (on every block of the grid).
  for (int n : {4, 8}) {
    bool applies = false;
    const Plan lossless = defaultPlan(1 << 20, tparBfloat16, hostContext(n), -1);
    const Plan w = wirePlan(lossless, 1 << 20, tparBfloat16, hostContext(n), tparAlgoAuto,
                            tparWireFp8, &applies);
    ASSERT_TRUE(applies) << n;
    EXPECT_EQ(n == 4 ? 2 : 4, w.steps) << n;
    EXPECT_EQ(0, w.active_blocks) << n;
    EXPECT_EQ(0, w.threads) << n;
  }
  for (int n : {2, 3, 4, 8, 16}) {
    int last_blocks = 0, last_steps = 0;
    // (Two ranks sharing a GPU push up to 128 KiB, 8 and more pull up to 384 KiB.)
    for (uint64_t bytes = n >= 8 ? 512u << 10 : n == 2 ? 256u << 10 : 128u << 10;
         bytes <= (uint64_t{1} << 30);
         bytes *= 2) {
      const Plan p = defaultPlan(bytes, tparBfloat16, hostContext(n), -1);
      EXPECT_GE(p.active_blocks, last_blocks) << bytes;
      EXPECT_GE(p.steps, last_steps) << bytes;
      EXPECT_GE(p.active_blocks, 1);
      // Two ranks on one GPU: 16 from 1 MiB (NOTE [wide pipelined calls of two ranks on one GPU]).
      EXPECT_LE(p.active_blocks, n == 2 && bytes >= (1u << 20) ? 16 : std::max(1, std::min(8, 32 / n)))
          << n;
      EXPECT_LE(p.active_blocks, kernels::WorkspaceLayout::kLineBlocks);
      EXPECT_GE(p.steps, 1);
      EXPECT_LE(p.steps, 16);
      last_blocks = p.active_blocks;
      last_steps = p.steps;
    }
  }
  // Two-shot LL: one block when 8 ranks share the GPU (forced: by default they push or pull at
  // its sizes), two otherwise.
  EXPECT_EQ(1, selectPlan(16 << 10, tparBfloat16, hostContext(8), nullptr, tparAlgoTwoShotLL, -1)
                   .active_blocks);
  EXPECT_EQ(2, selectPlan(28 << 10, tparBfloat16, hostContext(5), nullptr, tparAlgoTwoShotLL, -1)
                   .active_blocks);
  EXPECT_EQ(2, defaultPlan(16 << 10, tparBfloat16, hostContext(8, 1), -1).active_blocks);
  EXPECT_EQ(Algo::kTwoShotLL, defaultPlan(16 << 10, tparBfloat16, hostContext(8, 1), -1).algo);
}

TEST(HostDefaults, BlocksFollowTheRanksSharingAGpuNotTheGroupSize) {
  // One rank per GPU: each GPU's link carries one rank's polls and fences.
  EXPECT_EQ(8, defaultPlan(1 << 20, tparBfloat16, hostContext(8, 1), -1).active_blocks);
  EXPECT_EQ(4, defaultPlan(1 << 20, tparBfloat16, hostContext(8, 8), -1).active_blocks);
  EXPECT_EQ(8, defaultPlan(1 << 20, tparBfloat16, hostContext(8, 2), -1).active_blocks);
  EXPECT_EQ(2, defaultPlan(1 << 20, tparBfloat16, hostContext(16, 16), -1).active_blocks);
}

TEST(HostDefaults, ForcedHostAlgorithmsGetTheHostShape) {
  const TunerContext ctx = hostContext(8);
  const Plan p = selectPlan(1 << 20, tparBfloat16, ctx, nullptr, tparAlgoPipelined, -1);
  EXPECT_EQ(Algo::kPipelined, p.algo);
  EXPECT_EQ(4, p.active_blocks);
  // 8 ranks sharing the GPU at 1 MiB: steps of about 24 KiB (NOTE [shorter pipelined steps on
  // a shared GPU]), 896 KiB over 4 blocks.
  EXPECT_EQ(9, p.steps);
  EXPECT_EQ(256, p.threads);
  EXPECT_TRUE(p.pull);
  EXPECT_EQ(1, selectPlan(12 << 10, tparBfloat16, ctx, nullptr, tparAlgoTwoShotLL, -1)
                   .active_blocks);
  EXPECT_EQ(1, selectPlan(12 << 10, tparBfloat16, ctx, nullptr, tparAlgoTwoShotPull, -1)
                   .active_blocks);
  // In GPU memory the kernels keep their own shape.
  TunerContext dev = ctx;
  dev.host_transport = false;
  const Plan q = selectPlan(1 << 20, tparBfloat16, dev, nullptr, tparAlgoPipelined, -1);
  EXPECT_EQ(0, q.active_blocks);
  EXPECT_EQ(0, q.steps);
  EXPECT_FALSE(q.pull);
}

TEST(HostDefaults, GpuMemoryTransportsNeverPickPullByDefault) {
  // Ranks on their own GPUs or on several (a pull there is a read over the link); ranks all on
  // one GPU pull small calls (TunerDefaults.RanksOnOneGpuPull...).
  TunerContext ctx = hostContext(8, 4);
  ctx.host_transport = false;
  for (uint64_t bytes = 16; bytes <= (uint64_t{1} << 28); bytes *= 4) {
    const Algo a = defaultPlan(bytes, tparBfloat16, ctx, -1).algo;
    EXPECT_NE(Algo::kOneShotPull, a) << bytes;
    EXPECT_NE(Algo::kTwoShotPull, a) << bytes;
    EXPECT_NE(Algo::kPipelined, a) << bytes;
    EXPECT_NE(Algo::kTwoShotLL, a) << bytes;
  }
}

TEST(RegionPlace, HostWhenForcedOrWhenAPairLacksP2pAndForcedP2pWithoutItIsRefused) {
  EXPECT_EQ(RegionPlace::kGpuMemory, chooseRegionPlace(0, true));
  EXPECT_EQ(RegionPlace::kHostMemory, chooseRegionPlace(0, false));
  EXPECT_EQ(RegionPlace::kHostMemory, chooseRegionPlace(1, true));
  EXPECT_EQ(RegionPlace::kHostMemory, chooseRegionPlace(1, false));
  EXPECT_EQ(RegionPlace::kGpuMemory, chooseRegionPlace(2, true));
  EXPECT_EQ(RegionPlace::kImpossible, chooseRegionPlace(2, false));
}

TEST(HostLayout, AWholePullAreaRunsAPieceOfTheFullSizeInOneFlagLineLaunch) {
  // NOTE [a whole pull area for ranks on one GPU]: in GPU memory, the flag-line schedules take
  // a whole piece at every group size, where the small area splits it; in host memory they
  // always do (forMaxBytes), so that no call of a multiple of the piece size ends in a launch
  // of a few bytes.
  using kernels::WorkspaceLayout;
  for (uint64_t max : {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{8} << 20,
                       (uint64_t{8} << 20) + 48}) {
    const WorkspaceLayout part = WorkspaceLayout::forMaxBytes(max, false, false);
    for (bool host : {false, true}) {
      const WorkspaceLayout whole = WorkspaceLayout::forMaxBytes(max, host, !host);
      EXPECT_EQ(whole.data_bytes, part.data_bytes);
      const uint64_t half = WorkspaceLayout::pullHalf(whole.pull_bytes);
      for (int n = 2; n <= kernels::kMaxRanks; ++n) {
        for (Algo a : {Algo::kTwoShotPull, Algo::kPipelined}) {
          const uint64_t piece = maxPieceBytes(a, whole, n);
          EXPECT_GE(piece, max) << n << " ranks, " << algoName(a) << (host ? ", host" : "");
          // n chunks of ceil(vecs / n) vectors still fit one half.
          const uint64_t v = max / 16;
          EXPECT_LE((v + n - 1) / n * n * 16, half) << n;
          if (max > WorkspaceLayout::kDevicePullMaxBytes)
            EXPECT_LT(maxPieceBytes(a, part, n), max) << n;
        }
      }
    }
  }
}

TEST(WirePieces, EvenPiecesAreAsFewAsTheLimitAllowsAndOfOneLength) {
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 2000; ++i) {
    const uint64_t align = uint64_t{16} << (rng() % 5);
    const uint64_t limit = ((64u << 10) + rng() % (uint64_t{1} << 30)) / align * align;
    const uint64_t bytes = 1 + rng() % (limit * (1 + rng() % 40));
    const uint64_t each = evenPieceBytes(bytes, limit, align);
    const uint64_t fewest = (bytes + limit - 1) / limit;
    ASSERT_LE(each, limit) << bytes << " over " << limit;
    ASSERT_GE(each, 1u);
    if (bytes <= limit) {
      EXPECT_EQ(bytes, each);
      continue;
    }
    EXPECT_EQ(0u, each % align) << bytes << " over " << limit;
    // As many pieces of `each` as of the limit, the last one no longer than the others.
    EXPECT_EQ(fewest, (bytes + each - 1) / each) << bytes << " over " << limit;
    EXPECT_GT(bytes - (fewest - 1) * each, 0u) << bytes << " over " << limit;
    EXPECT_LE(bytes - (fewest - 1) * each, each) << bytes << " over " << limit;
  }
  EXPECT_EQ(uint64_t{12345}, evenPieceBytes(12345, 0, 64));
  EXPECT_EQ(uint64_t{9} << 19, evenPieceBytes(uint64_t{9} << 20, uint64_t{8} << 20, 64));
  // Two halves of one more byte than the limit, each in whole aligns.
  EXPECT_EQ((uint64_t{4} << 20) + 64,
            evenPieceBytes((uint64_t{8} << 20) + 2, uint64_t{8} << 20, 64));
}

TEST(HostLayout, PullLimitsFitTheirAreasAndGrowWithThePieceOnlyInHostMemory) {
  using kernels::WorkspaceLayout;
  for (uint64_t max : {uint64_t{64} << 10, uint64_t{1} << 20, uint64_t{8} << 20}) {
    for (bool host : {false, true}) {
      const WorkspaceLayout l = WorkspaceLayout::forMaxBytes(max, host);
      const uint64_t half = WorkspaceLayout::pullHalf(l.pull_bytes);
      const uint64_t pull_max =
          host ? max : std::min<uint64_t>(max, WorkspaceLayout::kDevicePullMaxBytes);
      for (int n : {2, 8, 16}) {
        // One-shot pull: two 16-byte lines per 16-byte vector, in groups of 32 vectors.
        const uint64_t v1 = maxPieceBytes(kernels::Algo::kOneShotPull, l, n) / 16;
        EXPECT_LE((v1 + 31) / 32 * 64 * 16, 2 * half);
        EXPECT_GE(maxPieceBytes(kernels::Algo::kOneShotPull, l, n) + 1024, pull_max);
        // Pipelined and two-shot pull: n chunks of ceil(vecs / n) vectors in each half.
        const uint64_t v3 = maxPieceBytes(kernels::Algo::kPipelined, l, n) / 16;
        EXPECT_LE((v3 + n - 1) / n * n * 16, half);
        EXPECT_GE(maxPieceBytes(kernels::Algo::kPipelined, l, n) + 16 * n + 16, pull_max);
        // Two-shot LL: two lines per vector of n chunks, in groups of 32, in each half.
        const uint64_t v4 = maxPieceBytes(kernels::Algo::kTwoShotLL, l, n) / 16;
        EXPECT_LE(((v4 + n - 1) / n * n + 31) / 32 * 64 * 16, half);
        EXPECT_GE(2 * maxPieceBytes(kernels::Algo::kTwoShotLL, l, n) + 2048 + 32 * n, pull_max);
      }
      EXPECT_EQ(l.totalBytes(), l.pullBase() + 2 * l.pull_bytes);
    }
  }
}

}  // namespace
}  // namespace tpar

namespace tpar {
namespace {

// Where a communicator's wire format applies (wirePlan): the host transport from defaultWireMinBytes
// for 16-bit data under auto or a forced pipelined; GPU memory only when pipelined is forced;
// never for float32, smaller calls, other forced algorithms, NCCL or no format.
TEST(WirePlan, AppliesOnlyWhereItWasMeasuredToWin) {
  TunerContext host;
  host.nranks = 4;
  host.ranks_per_gpu = 4;
  host.host_transport = true;
  TunerContext gpu = host;
  gpu.host_transport = false;
  const uint64_t big = defaultWireMinBytes(host.nranks), small = big - 2;
  auto applies = [](const TunerContext& ctx, uint64_t bytes, tparDataType_t dt, tparAlgo_t forced,
                    int wire, Plan* out = nullptr) {
    const Plan base = selectPlan(bytes, dt, ctx, nullptr, forced, -1);
    bool a = false;
    const Plan p = wirePlan(base, bytes, dt, ctx, forced, wire, &a);
    if (out != nullptr) *out = p;
    return a;
  };
  for (int wire : {tparWireFp8, tparWireInt8, tparWireInt4}) {
    Plan p;
    EXPECT_TRUE(applies(host, big, tparBfloat16, tparAlgoAuto, wire, &p));
    EXPECT_EQ(kernels::Algo::kPipelined, p.algo);
    EXPECT_TRUE(p.pull);
    EXPECT_EQ(0, p.active_blocks);  // every block of the grid
    EXPECT_TRUE(applies(host, big, tparFloat16, tparAlgoPipelined, wire));
    EXPECT_FALSE(applies(host, small, tparBfloat16, tparAlgoAuto, wire));
    EXPECT_FALSE(applies(host, big, tparFloat32, tparAlgoAuto, wire));
    EXPECT_FALSE(applies(host, big, tparBfloat16, tparAlgoTwoShot, wire));
    EXPECT_FALSE(applies(host, big, tparBfloat16, tparAlgoNccl, wire));
    EXPECT_FALSE(applies(gpu, big, tparBfloat16, tparAlgoAuto, wire));
    EXPECT_TRUE(applies(gpu, big, tparBfloat16, tparAlgoPipelined, wire));
  }
  EXPECT_FALSE(applies(host, big, tparBfloat16, tparAlgoAuto, tparWireNone));
  EXPECT_FALSE(applies(host, big, tparBfloat16, tparAlgoAuto, tparNumWires));
  // The default: 512 KiB at every rank count (the measured break-even sizes).
  for (int n : {2, 3, 4, 5, 8, 16}) EXPECT_EQ(uint64_t{512} << 10, defaultWireMinBytes(n)) << n;
  TunerContext eight = host;
  eight.nranks = eight.ranks_per_gpu = 8;
  EXPECT_FALSE(applies(eight, (512u << 10) - 16, tparBfloat16, tparAlgoAuto, tparWireFp8));
  EXPECT_TRUE(applies(eight, 512u << 10, tparBfloat16, tparAlgoAuto, tparWireFp8));
  EXPECT_TRUE(applies(eight, 2u << 20, tparBfloat16, tparAlgoAuto, tparWireFp8));
  EXPECT_FALSE(applies(host, 256u << 10, tparBfloat16, tparAlgoAuto, tparWireFp8));
  EXPECT_TRUE(applies(host, 1u << 20, tparBfloat16, tparAlgoAuto, tparWireFp8));
  // TPAR_WIRE_MIN_BYTES moves the smallest size either way; -1 is the default.
  for (int wire : {tparWireFp8, tparWireInt4}) {
    const Plan base = selectPlan(1u << 20, tparBfloat16, host, nullptr, tparAlgoAuto, -1);
    bool a = false;
    wirePlan(base, 1u << 20, tparBfloat16, host, tparAlgoAuto, wire, &a, 1u << 20);
    EXPECT_TRUE(a);
    wirePlan(base, (1u << 20) - 2, tparBfloat16, host, tparAlgoAuto, wire, &a, 1u << 20);
    EXPECT_FALSE(a);
    wirePlan(base, big, tparBfloat16, host, tparAlgoAuto, wire, &a, static_cast<int64_t>(big) * 2);
    EXPECT_FALSE(a);
    wirePlan(base, big, tparBfloat16, host, tparAlgoAuto, wire, &a, -1);
    EXPECT_TRUE(a);
  }
  // Every format has a variant of the pipelined schedule, and none of another algorithm.
  for (int wire : {tparWireFp8, tparWireInt8, tparWireInt4}) {
    ASSERT_NE(nullptr, wireAlgorithmOf(kernels::Algo::kPipelined, static_cast<tparWire_t>(wire)));
    EXPECT_EQ(nullptr, wireAlgorithmOf(kernels::Algo::kTwoShot, static_cast<tparWire_t>(wire)));
  }
}

}  // namespace
}  // namespace tpar
