// Properties of the staged and hierarchical schedules (CPU).
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "tuner/schedule.h"

namespace tpar {
namespace {

TEST(StagedSchedule, OneInboundAndOneOutboundPeerPerRankAndStep) {
  for (int n : {2, 3, 4, 5, 8, 16}) {
    std::map<int, std::multiset<int>> out_of, in_of;  // step -> senders / receivers
    for (const Transfer& t : stagedSchedule(n)) {
      EXPECT_NE(t.from, t.to);
      out_of[t.step].insert(t.from);
      in_of[t.step].insert(t.to);
    }
    EXPECT_EQ(size_t(2 * (n - 1)), out_of.size()) << n;
    for (const auto& [step, senders] : out_of) {
      EXPECT_EQ(size_t(n), senders.size()) << "n " << n << " step " << step;
      EXPECT_EQ(size_t(n), std::set<int>(senders.begin(), senders.end()).size());
      const auto& receivers = in_of[step];
      EXPECT_EQ(size_t(n), std::set<int>(receivers.begin(), receivers.end()).size())
          << "a receiver has two writers in step " << step;
    }
  }
}

TEST(StagedSchedule, EveryChunkIsReducedOnceAndReachesEveryRank) {
  for (int n : {2, 3, 4, 8}) {
    // Reduce-scatter: chunk c arrives at its owner c from every other rank exactly once.
    std::map<std::pair<int, int>, int> rs, ag;  // (chunk, rank) -> count
    for (const Transfer& t : stagedSchedule(n)) {
      if (t.phase == Phase::kReduceScatter) {
        EXPECT_EQ(t.chunk, t.to) << "a chunk goes to its owner";
        ++rs[{t.chunk, t.from}];
      } else {
        EXPECT_EQ(t.chunk, t.from) << "an owner sends its own chunk";
        ++ag[{t.chunk, t.to}];
      }
    }
    for (int c = 0; c < n; ++c) {
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(r == c ? 0 : 1, (rs[{c, r}])) << "n " << n << " chunk " << c << " from " << r;
        EXPECT_EQ(r == c ? 0 : 1, (ag[{c, r}])) << "n " << n << " chunk " << c << " to " << r;
      }
    }
  }
}

std::vector<std::vector<int>> islandsOf(int k, int m) {
  std::vector<std::vector<int>> out(k);
  for (int i = 0; i < k; ++i)
    for (int p = 0; p < m; ++p) out[i].push_back(i * m + p);
  return out;
}

TEST(HierSchedule, EveryElementReducedOnceAcrossIslandsAndGatheredEverywhere) {
  for (auto [k, m] : {std::pair{2, 2}, {2, 4}, {4, 2}, {2, 1}, {1, 4}}) {
    const auto islands = islandsOf(k, m);
    std::map<int, int> island_of, pos_of;
    for (int i = 0; i < k; ++i)
      for (int p = 0; p < m; ++p) {
        island_of[islands[i][p]] = i;
        pos_of[islands[i][p]] = p;
      }
    // Which ranks' inputs each rank holds for each chunk, phase by phase.
    const int n = k * m;
    std::map<std::pair<int, int>, std::set<int>> holds;  // (rank, chunk) -> contributions
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < m; ++c) holds[{r, c}] = {r};
    std::map<std::pair<int, int>, int> partial_seen;  // (owner, from island) -> count
    for (const Transfer& t : hierSchedule(islands)) {
      if (t.phase == Phase::kReduceScatter) {
        EXPECT_EQ(island_of[t.from], island_of[t.to]) << "step 1 stays in the island";
        EXPECT_EQ(pos_of[t.to], t.chunk) << "a chunk goes to its owner";
        holds[{t.to, t.chunk}].insert(t.from);
      } else if (t.phase == Phase::kCrossIslands) {
        EXPECT_NE(island_of[t.from], island_of[t.to]);
        EXPECT_EQ(pos_of[t.from], pos_of[t.to]) << "partials go to the same position";
        ++partial_seen[{t.to, island_of[t.from]}];
      }
    }
    for (int r = 0; r < n; ++r) {
      const int c = pos_of[r];
      // Owner r holds every input of its island exactly once for its chunk...
      EXPECT_EQ(size_t(m), (holds[{r, c}].size())) << "k " << k << " m " << m << " rank " << r;
      for (int q : holds[{r, c}]) EXPECT_EQ(island_of[r], island_of[q]);
      // ...and one partial from every other island.
      for (int i = 0; i < k; ++i)
        if (i != island_of[r]) EXPECT_EQ(1, (partial_seen[{r, i}])) << "k " << k << " m " << m;
    }
    // Step 3: every rank receives every chunk it does not own, once, from its island's owner.
    std::map<std::pair<int, int>, int> got;
    for (const Transfer& t : hierSchedule(islands)) {
      if (t.phase != Phase::kAllGather) continue;
      EXPECT_EQ(island_of[t.from], island_of[t.to]);
      EXPECT_EQ(pos_of[t.from], t.chunk);
      ++got[{t.to, t.chunk}];
    }
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < m; ++c) EXPECT_EQ(c == pos_of[r] ? 0 : 1, (got[{r, c}]));
  }
}

TEST(HierSchedule, CrossIslandBytesMeetTheBound) {
  // 2 islands of 4 (two sockets), 112 KiB of bf16: a rank sends 1/4 of the message across
  // as fp32 (x2), against 2 * 4 * 1/8 = the whole message for flat two-shot.
  const uint64_t bytes = 114688;
  EXPECT_EQ(bytes / 4 * 2, hierCrossBytesPerRank(bytes, 2, 2, 4));
  EXPECT_EQ(bytes, twoShotCrossBytesPerRank(bytes, 2, 4));
  EXPECT_LT(hierCrossBytesPerRank(bytes, 2, 2, 4), twoShotCrossBytesPerRank(bytes, 2, 4));
  // fp32 data: no widening.
  EXPECT_EQ(bytes / 4, hierCrossBytesPerRank(bytes, 4, 2, 4));
  // The schedule's step-2 transfers match: (k-1) per rank, each 1/m of the message.
  for (auto [k, m] : {std::pair{2, 4}, {4, 2}, {2, 2}}) {
    std::map<int, int> cross;
    for (const Transfer& t : hierSchedule(islandsOf(k, m)))
      if (t.phase == Phase::kCrossIslands) ++cross[t.from];
    for (int r = 0; r < k * m; ++r) EXPECT_EQ(k - 1, cross[r]);
  }
}

}  // namespace
}  // namespace tpar
