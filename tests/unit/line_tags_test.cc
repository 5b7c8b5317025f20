// NOTE [line tags]: the tags of epoch-tagged lines, on the CPU with the functions the kernels
// run (src/kernels/prims/line_tags.h). What a line reader accepts, for what a pull area can hold
// when the reader runs ahead of its writer: the writer's line of this epoch (accepted), its line
// of two epochs ago, the initial fill, and plain data of the flag-line schedules (none of them).
#include <cstdint>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "kernels/prims/line_tags.h"

namespace tpar {
namespace kernels {
namespace {

// A line h of vector i as a writer stores it in `epoch` (only the tag words matter here).
struct Tags {
  uint32_t w1, w3;
};
Tags written(uint32_t epoch, uint64_t i, uint32_t h) {
  return Tags{lineTag(epoch, i, 2 * h), lineTag(epoch, i, 2 * h + 1)};
}

TEST(LineTags, AReaderAcceptsTheLineOfItsEpochAndNotTheOneOfTwoEpochsAgo) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0; n < 100000; ++n) {
    const uint32_t e = static_cast<uint32_t>(rng());
    const uint64_t i = rng() % (uint64_t{1} << 30);
    const uint32_t h = static_cast<uint32_t>(rng() % 2);
    const Tags now = written(e, i, h);
    EXPECT_TRUE(lineCarries(now.w1, now.w3, e, i, h)) << e << " " << i << " " << h;
    const Tags before = written(e - 2, i, h);  // the same parity, two epochs ago
    ASSERT_FALSE(lineCarries(before.w1, before.w3, e, i, h)) << e << " " << i << " " << h;
    // Another vector's or the other line's tags are not this line's.
    const Tags other = written(e, i ^ (1 + rng() % 1000), h);
    ASSERT_FALSE(lineCarries(other.w1, other.w3, e, i, h)) << e << " " << i << " " << h;
    const Tags half = written(e, i, 1 - h);
    ASSERT_FALSE(lineCarries(half.w1, half.w3, e, i, h)) << e << " " << i << " " << h;
  }
}

// Words that are the same at both tag positions (the initial fill, constant data, zeros, a
// repeated pair) never pass, at any epoch: the two tags of a line differ.
TEST(LineTags, RepeatedWordsNeverPassAtAnyEpoch) {
  std::mt19937_64 rng(std::random_device{}());
  const uint32_t words[] = {0u, 0xFFFFFFFEu, 0x3C000000u, 0x00003C00u, 0x3F800000u,
                            0x3F803F80u, 0x00000005u, static_cast<uint32_t>(rng())};
  for (uint64_t i = 0; i < (uint64_t{1} << 16); ++i) {
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t w : words) {
        // The only epoch the first tag word would take; the second then disagrees.
        const uint32_t e = w ^ lineTagMix(i, 2 * h);
        ASSERT_FALSE(lineCarries(w, w, e, i, h)) << i << " " << h << " " << w;
        ASSERT_FALSE(lineCarries(w, w, w, i, h)) << i << " " << h << " " << w;
      }
    }
  }
}

// Plain data whose tag positions hold the bare epoch (what a bare epoch tag would take for a
// line of this epoch) is not taken for one.
TEST(LineTags, PlainDataHoldingTheBareEpochIsNotALine) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0; n < 100000; ++n) {
    const uint32_t e = static_cast<uint32_t>(rng() % 100000);  // an early epoch, a small word
    const uint64_t i = rng() % (uint64_t{1} << 30);
    const uint32_t h = static_cast<uint32_t>(rng() % 2);
    ASSERT_FALSE(lineCarries(e, e, e, i, h)) << e << " " << i << " " << h;
  }
}

// The mixes of the four tag words of every vector in an area are distinct and not zero, which
// the three tests above rest on; exhaustively for the first 2^18 vectors, sampled up to 2^30.
TEST(LineTags, MixesAreDistinctAndNonZero) {
  std::set<uint32_t> seen;
  for (uint64_t i = 0; i < (uint64_t{1} << 18); ++i) {
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t m = lineTagMix(i, k);
      ASSERT_NE(0u, m) << i << " " << k;
      ASSERT_TRUE(seen.insert(m).second) << i << " " << k;
    }
  }
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0; n < 100000; ++n) {
    const uint64_t i = rng() % (uint64_t{1} << 30);
    for (uint32_t a = 0; a < 4; ++a)
      for (uint32_t b = a + 1; b < 4; ++b) ASSERT_NE(lineTagMix(i, a), lineTagMix(i, b)) << i;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace tpar
