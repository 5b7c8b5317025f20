// Host-side plan arithmetic: workspace layout, piece sizes, algorithm choice, call headers.
#include <algorithm>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "registry/algorithms.h"
#include "registry/launcher.h"
#include "kernels/launch.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

using kernels::Algo;
using kernels::WorkspaceLayout;

TEST(WorkspaceLayout, DefaultFitsTheMemoryBudget) {
  const auto l = WorkspaceLayout::forMaxBytes(8u << 20);
  EXPECT_LE(l.totalBytes(), 64u << 20);
  EXPECT_GE(l.totalBytes(), 4u * (8u << 20));
}

TEST(WorkspaceLayout, EveryPieceFitsItsParityRegion) {
  for (uint64_t max : {64ull << 10, 1ull << 20, 8ull << 20, 100000ull}) {
    const auto l = WorkspaceLayout::forMaxBytes(max & ~15ull);
    for (int n = 1; n <= kernels::kMaxRanks; ++n) {
      // One-shot: n slots of the padded message.
      const uint64_t one = maxPieceBytes(Algo::kOneShot, l, n);
      EXPECT_EQ(0u, one % 16);
      EXPECT_LE(uint64_t(n) * ((one + 15) / 16) * 16, l.data_bytes);
      // Two-shot: reduce-scatter and all-gather areas of n chunks each.
      const uint64_t two = maxPieceBytes(Algo::kTwoShot, l, n);
      EXPECT_GE(two, max & ~15ull) << "two-shot must carry a whole piece of maxBytesPerCall";
      const uint64_t vecs = (two + 15) / 16;
      const uint64_t chunk = (vecs + n - 1) / n;
      EXPECT_LE(2 * uint64_t(n) * chunk * 16, l.data_bytes) << "n " << n;
    }
  }
}

TEST(WorkspaceLayout, HeaderSlotsAreDistinctAndBeforeTheData) {
  std::set<uint64_t> seen;
  for (uint32_t parity = 0; parity < 2; ++parity) {
    for (int s = 0; s < kernels::kMaxRanks; ++s) {
      const uint64_t off = WorkspaceLayout::headerOffset(parity, s);
      EXPECT_TRUE(seen.insert(off).second);
      EXPECT_LT(off + WorkspaceLayout::kHeaderBytes, 2048u);
    }
  }
}

// Vectors of work of a piece of `count` elements of `elem_bytes` over `nranks`.
uint64_t workVectors(Algo algo, uint64_t count, size_t elem_bytes, int nranks) {
  AlgoShape s;
  s.nranks = nranks;
  s.elem_bytes = elem_bytes;
  return algorithm(algo).work_vectors((count * elem_bytes + 15) / 16, s);
}

TEST(WorkVectors, TwoShotCountsOnePairPerPeerAndChunkPosition) {
  EXPECT_EQ(1u, workVectors(Algo::kOneShot, 1, 2, 8));
  EXPECT_EQ(2u, workVectors(Algo::kOneShot, 9, 2, 8));
  EXPECT_EQ(3u, workVectors(Algo::kOneShot, 9, 4, 8));
  // Two-shot: (peers x chunk) pairs; a chunk is a rank's share of the vectors.
  EXPECT_EQ(7u * 896u, workVectors(Algo::kTwoShot, 57344, 2, 8));
  EXPECT_EQ(7u, workVectors(Algo::kTwoShot, 3, 2, 8));
  EXPECT_EQ(1u, workVectors(Algo::kTwoShot, 3, 2, 1));
}

TEST(Select, OneShotLimitShrinksAsRanksGrow) {
  EXPECT_GE(defaultOneShotMaxBytes(2), defaultOneShotMaxBytes(8));
  // The thresholds docs/TUNING.md documents, written out: 256 KiB at 2 ranks, 64 KiB at 3-4,
  // 32 KiB above.
  EXPECT_EQ(256u << 10, defaultOneShotMaxBytes(2));
  EXPECT_EQ(64u << 10, defaultOneShotMaxBytes(3));
  EXPECT_EQ(64u << 10, defaultOneShotMaxBytes(4));
  EXPECT_EQ(32u << 10, defaultOneShotMaxBytes(5));
  EXPECT_EQ(32u << 10, defaultOneShotMaxBytes(8));
}

TEST(CallMeta, DiffersWhenDatatypeOpAlgorithmTotalCountOrNcclAttachmentDiffer) {
  const uint32_t base = makeCallMeta(tparBfloat16, tparSum, Algo::kOneShot, 1000);
  EXPECT_EQ(base, makeCallMeta(tparBfloat16, tparSum, Algo::kOneShot, 1000));
  EXPECT_NE(base, makeCallMeta(tparFloat16, tparSum, Algo::kOneShot, 1000));
  EXPECT_NE(base, makeCallMeta(tparBfloat16, tparMax, Algo::kOneShot, 1000));
  EXPECT_NE(base, makeCallMeta(tparBfloat16, tparSum, Algo::kTwoShot, 1000));
  EXPECT_NE(base, makeCallMeta(tparBfloat16, tparSum, Algo::kOneShot, 1001));
  // NOTE [agreement]: a rank with NCCL attached and one without never pass each other's check.
  EXPECT_NE(base, makeCallMeta(tparBfloat16, tparSum, Algo::kOneShot, 1000, true));
  for (uint64_t count : {1ull, 1000ull, 1ull << 40}) {
    for (int algo = 0; algo <= static_cast<int>(Algo::kTwoShotLL); ++algo) {
      const Algo a = static_cast<Algo>(algo);
      EXPECT_NE(makeCallMeta(tparFloat32, tparMin, a, count, false),
                makeCallMeta(tparFloat32, tparMin, a, count, true))
          << "algo " << algo << " count " << count;
    }
  }
}

}  // namespace
}  // namespace tpar

namespace tpar {
namespace {

TEST(LaunchShape, WorkIsSpreadOverEveryBlockWithinThreadBounds) {
  EXPECT_EQ(64, threadsFor(1, 16, 512));
  EXPECT_EQ(64, threadsFor(768, 16, 512));     // 48 per block, at least 64
  EXPECT_EQ(96, threadsFor(1500, 16, 512));    // 94 per block, rounded to a warp
  EXPECT_EQ(512, threadsFor(1 << 20, 32, 512));
  EXPECT_EQ(256, threadsFor(1 << 20, 32, 256));
  for (uint64_t work : {1ull, 77ull, 4096ull, 100000ull}) {
    const int t = threadsFor(work, 20, 512);
    EXPECT_EQ(0, t % 32);
    EXPECT_GE(t, 64);
    EXPECT_LE(t, 512);
  }
}

// Row groups of the fused kernel (NOTE [row groups]): every vector of a row in exactly one
// block's slice, slices even, no group wider than the grid, the slots or the polling threads,
// and every block's share within its threads.
TEST(LaunchShape, FusedRowGroupsCoverEveryRowOnceWithinTheGridAndSlots) {
  for (int grid : {1, 7, 18, 32, 200}) {
    for (uint64_t rows : {1ull, 2ull, 3ull, 8ull, 64ull, 256ull}) {
      for (uint64_t row_vecs : {1ull, 2ull, 64ull, 256ull, 512ull, 640ull, 896ull, 1024ull, 2048ull}) {
        for (int max_threads : {64, 512}) {
          SCOPED_TRACE(testing::Message() << "grid " << grid << " rows " << rows << " row_vecs "
                                          << row_vecs << " threads " << max_threads);
          const NormShape s = normShapeFor(rows, row_vecs, grid, max_threads);
          EXPECT_EQ(0, s.threads % 32);
          EXPECT_GE(s.threads, 64);
          EXPECT_LE(s.threads, max_threads);
          if (s.group <= 1) {
            // Whole rows: one thread per vector up to the block's size.
            EXPECT_EQ(std::min<uint64_t>(std::max<uint64_t>(64, (row_vecs + 31) / 32 * 32),
                                         max_threads),
                      static_cast<uint64_t>(s.threads));
            continue;
          }
          EXPECT_LE(rows * s.group, static_cast<uint64_t>(grid));
          EXPECT_LE(rows * s.group, WorkspaceLayout::kRowPartialSlots);
          EXPECT_LE(s.group, static_cast<uint32_t>(s.threads));  // a polling thread each
          EXPECT_EQ(0u, s.slice % 2);
          EXPECT_GE(s.slice, kMinNormSliceVecs);
          // The slices [k * slice, min((k + 1) * slice, row_vecs)) tile the row, none empty.
          std::vector<int> seen(row_vecs, 0);
          for (uint32_t k = 0; k < s.group; ++k) {
            const uint64_t c0 = uint64_t(k) * s.slice;
            const uint64_t c1 = std::min<uint64_t>(c0 + s.slice, row_vecs);
            EXPECT_LT(c0, c1);
            for (uint64_t c = c0; c < c1; ++c) ++seen[c];
          }
          for (uint64_t c = 0; c < row_vecs; ++c) EXPECT_EQ(1, seen[c]) << "vector " << c;
        }
      }
    }
  }
  // One token of hidden 8192 (bf16: 1024 vectors) on 18 blocks: 16 blocks of 64 vectors.
  const NormShape one = normShapeFor(1, 1024, 18, 512);
  EXPECT_EQ(16u, one.group);
  EXPECT_EQ(64u, one.slice);
  EXPECT_EQ(64, one.threads);
  // As many rows as blocks: whole rows.
  EXPECT_EQ(1u, normShapeFor(18, 1024, 18, 512).group);
}

TEST(WorkspaceLayout, ControlWordsPrecedeTheDataAndFitEveryBlock) {
  EXPECT_LE(WorkspaceLayout::kHeaderRegion, WorkspaceLayout::kStateOffset);
  EXPECT_LE(WorkspaceLayout::kStateOffset + sizeof(kernels::DeviceState),
            WorkspaceLayout::kRowPartialsOffset);
  EXPECT_LE(WorkspaceLayout::kRowPartialsOffset +
                2ull * WorkspaceLayout::kRowPartialSlots * sizeof(uint64_t),
            WorkspaceLayout::kEpochsOffset);
  EXPECT_LE(WorkspaceLayout::kEpochsOffset + 4ull * kernels::kMaxBlocks,
            WorkspaceLayout::kDataOffset);
}

}  // namespace
}  // namespace tpar
