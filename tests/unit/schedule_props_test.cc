// Properties of the schedules (CPU): the staged and hierarchical transfer lists, and the
// formulas every kernel runs (src/kernels/prims/schedule.h).
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <gtest/gtest.h>

#include "kernels/prims/schedule.h"
#include "kernels/prims/wire.h"
#include "unit/schedule_model.h"

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


// ---- the kernels' own formulas (src/kernels/prims/schedule.h) ---------------------------------

namespace kernels_formulas {

using kernels::blockSlice;
using kernels::chunkVecs;
using kernels::PeerPositions;
using kernels::Slice;
using kernels::spreadIndex;
using kernels::stagedSource;
using kernels::stagedTarget;
using kernels::stepRange;

TEST(KernelSchedule, ChunksCoverTheMessageAndFollowRows) {
  for (uint64_t vecs : {1ull, 7ull, 64ull, 1000ull, 57344ull}) {
    for (int n = 1; n <= 16; ++n) {
      for (uint64_t row : {1ull, 3ull, 8ull}) {
        const uint64_t c = chunkVecs(vecs, n, row);
        EXPECT_GE(c * n, vecs) << vecs << " " << n;
        EXPECT_EQ(0u, c % row);
        EXPECT_LT(c, (vecs + n - 1) / n + row) << "no more than one row of padding";
      }
    }
  }
}

TEST(KernelSchedule, BlockSlicesAndStepsCoverEveryPositionOfAChunkOnce) {
  for (uint64_t vecs : {1ull, 5ull, 100ull, 4097ull, 65536ull}) {
    for (int n : {1, 2, 3, 8, 16}) {
      for (int grid : {1, 2, 7, 32, 64}) {
        for (int steps : {1, 2, 5, 16}) {
          std::vector<int> seen;
          uint64_t chunk = 0;
          for (int b = 0; b < grid; ++b) {
            const Slice s = blockSlice(vecs, n, grid, b, 1);
            chunk = s.chunk;
            seen.resize(chunk, 0);
            uint64_t covered = 0;
            for (int k = 0; k < steps; ++k) {
              uint64_t s0, s1;
              stepRange(s, steps, k, &s0, &s1);
              ASSERT_LE(s0, s1);
              for (uint64_t j = s0; j < s1; ++j) ++seen[j];
              covered += s1 - s0;
            }
            EXPECT_EQ(s.width(), covered) << "the steps of block " << b << " cover its slice";
          }
          for (uint64_t j = 0; j < chunk; ++j)
            ASSERT_EQ(1, seen[j]) << "vecs " << vecs << " n " << n << " grid " << grid << " j " << j;
        }
      }
    }
  }
}

TEST(KernelSchedule, AlignedSlicesAndStepsCoverEveryPositionOnceInAlignedRuns) {
  for (uint64_t vecs : {1ull, 5ull, 100ull, 4097ull, 65536ull, 160000ull}) {
    for (int n : {1, 2, 3, 8}) {
      for (int grid : {1, 7, 16, 64}) {
        for (int steps : {1, 5, 10, 16}) {
          for (uint64_t align : {1ull, 8ull}) {
            std::vector<int> seen;
            uint64_t chunk = 0;
            for (int b = 0; b < grid; ++b) {
              const Slice s = kernels::alignedBlockSlice(vecs, n, grid, b, align);
              chunk = s.chunk;
              ASSERT_EQ(0u, chunk % align);
              ASSERT_GE(chunk * n, vecs);
              seen.resize(chunk, 0);
              uint64_t covered = 0;
              for (int k = 0; k < steps; ++k) {
                uint64_t s0, s1;
                kernels::alignedStepRange(s, steps, k, align, &s0, &s1);
                ASSERT_LE(s0, s1);
                // Both ends: the wire kernel's 16-byte runs (NOTE [wire codes in 16-byte runs])
                // need every step's width in whole warp runs, not only its start.
                if (s1 > s0) ASSERT_EQ(0u, s0 % align) << "step " << k << " of block " << b;
                if (s1 > s0) ASSERT_EQ(0u, s1 % align) << "end of step " << k << " of block " << b;
                for (uint64_t j = s0; j < s1; ++j) ++seen[j];
                covered += s1 - s0;
              }
              EXPECT_EQ(s.width(), covered) << "the steps of block " << b << " cover its slice";
            }
            for (uint64_t j = 0; j < chunk; ++j)
              ASSERT_EQ(1, seen[j]) << "vecs " << vecs << " n " << n << " grid " << grid << " j " << j;
          }
        }
      }
    }
  }
}

// The formats' kernel pads every chunk to whole runs of a warp's wire blocks (NOTE [wire
// schedule in runs of a warp]) inside the half of the region the lossless pipelined schedule
// sizes for the same piece: its codes and scales (B * bits / 8 + 2 bytes per block of B 16-bit
// values) must fit there for every piece, from a single block to the largest, at every group
// size, with each format's block. The half holds at least the smallest maxBytesPerCall (64 KiB)
// and at least the lossless chunks of the piece.
TEST(KernelSchedule, AlignedWireChunksFitTheHalfTheLosslessPieceUses) {
  const struct {
    kernels::WireFormat f;
    uint64_t bits;
  } formats[] = {{kernels::WireFormat::kFp8, 8}, {kernels::WireFormat::kInt8, 8},
                 {kernels::WireFormat::kInt4, 4}};
  for (const auto& w : formats) {
    const uint64_t kB = kernels::wireKernelBlock(w.f);
    ASSERT_TRUE(kernels::wireKernelBlockValid(static_cast<int>(kB))) << kB;
    for (int n = 2; n <= 16; ++n) {
      for (uint64_t bytes = 64; bytes <= (64ull << 20); bytes = bytes * 3 / 2 + 64) {
        const uint64_t blocks = (bytes + 2 * kB - 1) / (2 * kB);
        const Slice s = kernels::alignedBlockSlice(blocks, n, 64, 0,
                                                   kernels::wireBlockAlign(static_cast<int>(kB)));
        const uint64_t wire = uint64_t(n) * s.chunk * (kB * w.bits / 8 + 2);
        const uint64_t lossless = uint64_t(n) * kernels::chunkVecs((bytes + 15) / 16, n, 1) * 16;
        const uint64_t half = std::max<uint64_t>(lossless, 64u << 10);
        ASSERT_LE(wire, half) << "block " << kB << " n " << n << " bytes " << bytes;
      }
    }
  }
}

// A format's piece in an area (NOTE [wire pieces by the bytes that travel]): the kernel's
// chunks of it, codes and scales, fit the area; one more run of a warp per chunk would not; and
// it is at least the lossless piece of 16-bit values the area holds, in whole blocks.
TEST(KernelSchedule, WirePiecesAreTheLongestWhoseAlignedChunksFitTheArea) {
  for (auto f : {kernels::WireFormat::kFp8, kernels::WireFormat::kInt8,
                 kernels::WireFormat::kInt4}) {
    const uint64_t kB = kernels::wireKernelBlock(f);
    const uint64_t align = kernels::wireBlockAlign(static_cast<int>(kB));
    const uint64_t per = kB * (f == kernels::WireFormat::kInt4 ? 4 : 8) / 8 + 2;
    for (int n = 2; n <= 16; ++n) {
      for (uint64_t area = 64u << 10; area <= (1ull << 30); area = area * 3 / 2 + 16) {
        const uint64_t values = kernels::wirePieceValues(f, n, area);
        ASSERT_EQ(0u, values % kB) << n << " " << area;
        const Slice s = kernels::alignedBlockSlice(values / kB, n, 64, 0, align);
        EXPECT_LE(uint64_t(n) * s.chunk * per, area) << "block " << kB << " n " << n;
        EXPECT_GT(uint64_t(n) * (s.chunk + align) * per, area) << "block " << kB << " n " << n;
        EXPECT_GE(values, area / 2 / kB * kB) << "block " << kB << " n " << n << " " << area;
        // The schedule's 32-bit pairs: fewer than 2^28 vectors in a piece.
        EXPECT_LT(values / 8, 1ull << 28) << area;
      }
    }
  }
}

TEST(KernelSchedule, PeerPositionsVisitEveryOtherPeerOncePerPositionInRotation) {
  for (int n : {1, 2, 3, 5, 8, 16}) {
    for (uint32_t width : {1u, 3u, 32u, 100u}) {
      const uint64_t s0 = 7;
      // step q of every rank: rank me sends to ahead(me, 1 + q): one inbound per rank.
      std::map<uint32_t, std::multiset<int>> targets;
      for (int me = 0; me < n; ++me) {
        const PeerPositions pp{n, me, s0, width};
        std::set<std::pair<int, uint64_t>> pairs;
        for (uint32_t u = 0; u < pp.pairs(); ++u) {
          uint64_t j;
          const int p = pp.peer(u, &j);
          EXPECT_NE(me, p);
          EXPECT_GE(j, s0);
          EXPECT_LT(j, s0 + width);
          EXPECT_TRUE(pairs.insert({p, j}).second) << "pair visited twice";
          targets[u / width].insert(p);
        }
        EXPECT_EQ(size_t(n - 1) * width, pairs.size());
      }
      for (const auto& [q, t] : targets)
        EXPECT_EQ(t.size() / width, std::set<int>(t.begin(), t.end()).size())
            << "n " << n << ": two ranks target one peer in rotation step " << q;
    }
  }
}

TEST(KernelSchedule, StagedStepsArePermutationsWithMatchingSources) {
  for (int n = 2; n <= 16; ++n) {
    for (int s = 1; s < n; ++s) {
      std::set<int> to;
      for (int me = 0; me < n; ++me) {
        const int t = stagedTarget(me, s, n);
        EXPECT_NE(me, t);
        to.insert(t);
        EXPECT_EQ(me, stagedSource(t, s, n)) << "the receiver waits for the rank that sends";
      }
      EXPECT_EQ(size_t(n), to.size());
    }
  }
}

TEST(KernelSchedule, SpreadIndexIsABijectionThatKeepsWarpsContiguous) {
  for (int grid : {1, 3, 32}) {
    for (uint32_t threads : {32u, 64u, 512u}) {
      std::set<uint64_t> seen;
      for (int b = 0; b < grid; ++b) {
        for (uint32_t t = 0; t < threads; ++t) {
          const uint64_t i = spreadIndex(t, b, grid);
          EXPECT_LT(i, uint64_t(grid) * threads);
          EXPECT_TRUE(seen.insert(i).second);
          if (t % 32 != 0) EXPECT_EQ(spreadIndex(t - 1, b, grid) + 1, i);
        }
      }
      // The first warp of every block comes before any block's second warp: few items still
      // reach every block.
      for (int b = 0; b < grid; ++b) EXPECT_EQ(uint64_t(b), spreadIndex(0, b, grid) / 32);
    }
  }
}

}  // namespace kernels_formulas

}  // namespace
}  // namespace tpar
