// Where the copy-engine path's pieces lie (comm/copy_engine.h): every byte of a launch is in
// exactly one piece of exactly one chunk, pieces stay inside their chunk, the copies start on
// vectors, and the check word tells apart what ranks may disagree on.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "comm/copy_engine.h"
#include "kernels/launch.h"

namespace tpar {
namespace {

TEST(CopyEngineGeometry, PiecesTileTheMessageOnceInsideTheirChunks) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<uint64_t> sizes = {2, 14, 16, 18, 4096, 8u << 20, (8u << 20) - 2};
  for (int i = 0; i < 40; ++i) sizes.push_back(2 * (1 + rng() % (4u << 20)));
  for (uint64_t bytes : sizes) {
    for (int n : {1, 2, 3, 4, 7, 8, 16}) {
      for (int pieces : {0, 1, 2, 3, 5, 8, 16, 40}) {
        const CeGeometry g = ceGeometry(bytes, n, pieces);
        ASSERT_GE(g.pieces, 1);
        ASSERT_LE(g.pieces, kernels::WorkspaceLayout::kCeMaxPieces);
        std::vector<std::pair<uint64_t, uint64_t>> ranges;
        for (int c = 0; c < n; ++c) {
          const CeRange whole = ceChunk(g, c);
          uint64_t in_chunk = 0;
          for (int k = 0; k < g.pieces; ++k) {
            const CeRange r = ceRange(g, c, k);
            if (r.len == 0) continue;
            EXPECT_EQ(0u, r.off % 16) << bytes << " " << n << " " << c << " " << k;
            EXPECT_GE(r.off, whole.off);
            EXPECT_LE(r.off + r.len, whole.off + whole.len);
            ranges.emplace_back(r.off, r.off + r.len);
            in_chunk += r.len;
          }
          EXPECT_EQ(whole.len, in_chunk) << bytes << " " << n << " chunk " << c;
        }
        // Sorted, they follow each other from 0 to the end: no gap, no overlap.
        std::sort(ranges.begin(), ranges.end());
        uint64_t at = 0;
        for (const auto& [b0, b1] : ranges) {
          ASSERT_EQ(at, b0) << bytes << " bytes, " << n << " ranks, " << pieces << " pieces";
          at = b1;
        }
        ASSERT_EQ(bytes, at) << bytes << " bytes, " << n << " ranks, " << pieces << " pieces";
      }
    }
  }
}

TEST(CopyEngineGeometry, AChunkFitsTheOutputAreaOfTheLayout) {
  for (bool host : {false, true}) {
    const auto l = kernels::WorkspaceLayout::forMaxBytes(8u << 20, host);
    for (int n : {2, 3, 8, 16}) {
      const CeGeometry g = ceGeometry(l.ce_bytes, n, 4);
      for (int c = 0; c < n; ++c) {
        EXPECT_LE(ceChunk(g, c).len, l.ceOutBytes());
        // The reduction stores whole vectors of its pieces into the output area.
        EXPECT_LE(g.chunk_vecs * 16, l.ceOutBytes());
      }
    }
  }
}

TEST(CopyEngineGeometry, TheCheckTellsApartHeaderCountAndPieces) {
  std::mt19937 rng(std::random_device{}());
  const uint32_t meta = rng();
  const uint64_t count = 1 + rng() % 100000000;
  const int pieces = 1 + static_cast<int>(rng() % 16);
  const uint32_t c = ceCheck(meta, count, pieces);
  EXPECT_EQ(c, ceCheck(meta, count, pieces));
  EXPECT_NE(c, ceCheck(meta ^ 1u, count, pieces));
  EXPECT_NE(c, ceCheck(meta, count + 1, pieces));
  EXPECT_NE(c, ceCheck(meta, count + (uint64_t{1} << 32), pieces));
  EXPECT_NE(c, ceCheck(meta, count, pieces % 16 + 1));
}

}  // namespace
}  // namespace tpar
