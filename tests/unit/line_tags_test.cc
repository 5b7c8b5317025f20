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

// A line h of a vector as a writer stores it in `epoch` (only the tag words matter here).
struct Tags {
  uint32_t w1, w3;
};
Tags written(uint32_t epoch, uint32_t h) {
  return Tags{lineTag(epoch, 2 * h), lineTag(epoch, 2 * h + 1)};
}

TEST(LineTags, AReaderAcceptsTheLineOfItsEpochAndNoOtherEpochs) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0; n < 100000; ++n) {
    const uint32_t e = static_cast<uint32_t>(rng());
    const uint32_t h = static_cast<uint32_t>(rng() % 2);
    const Tags now = written(e, h);
    EXPECT_TRUE(lineCarries(now.w1, now.w3, e, h)) << e << " " << h;
    const Tags before = written(e - 2, h);  // the same parity, two epochs ago
    ASSERT_FALSE(lineCarries(before.w1, before.w3, e, h)) << e << " " << h;
    const uint32_t other = e + 1 + static_cast<uint32_t>(rng() % 0xFFFFFFFEu);  // any but e
    const Tags then = written(other, h);
    ASSERT_FALSE(lineCarries(then.w1, then.w3, e, h)) << e << " " << other << " " << h;
    // The other line's tags are not this line's.
    const Tags half = written(e, 1 - h);
    ASSERT_FALSE(lineCarries(half.w1, half.w3, e, h)) << e << " " << h;
  }
}

// Words that are the same at both tag positions (the initial fill, constant data, zeros, a
// repeated pair) never pass, at any epoch: the two tags of a line differ.
TEST(LineTags, RepeatedWordsNeverPassAtAnyEpoch) {
  std::mt19937_64 rng(std::random_device{}());
  const uint32_t words[] = {0u, 0xFFFFFFFFu, 0xFFFFFFFEu, 0x3C000000u, 0x00003C00u, 0x3F800000u,
                            0x3F803F80u, 0x00000005u, static_cast<uint32_t>(rng())};
  for (uint32_t h = 0; h < 2; ++h) {
    for (uint32_t w : words) {
      // The only epoch the first tag word would take; the second then disagrees.
      const uint32_t e = w ^ lineTagMix(2 * h);
      ASSERT_FALSE(lineCarries(w, w, e, h)) << h << " " << w;
      ASSERT_FALSE(lineCarries(w, w, w, h)) << h << " " << w;
      for (int n = 0; n < 10000; ++n) {
        const uint32_t any = static_cast<uint32_t>(rng());
        ASSERT_FALSE(lineCarries(w, w, any, h)) << h << " " << w << " " << any;
      }
    }
  }
}

// Plain data whose tag positions hold the bare epoch (what a bare epoch tag would take for a
// line of this epoch) is not taken for one.
TEST(LineTags, PlainDataHoldingTheBareEpochIsNotALine) {
  std::mt19937_64 rng(std::random_device{}());
  for (int n = 0; n < 100000; ++n) {
    const uint32_t e = n < 50000 ? static_cast<uint32_t>(rng() % 100000)  // early, small words
                                 : static_cast<uint32_t>(rng());
    const uint32_t h = static_cast<uint32_t>(rng() % 2);
    ASSERT_FALSE(lineCarries(e, e, e, h)) << e << " " << h;
  }
}

// Other plain data passes at one epoch at most, and only when its two tag-position words differ
// by the XOR of the line's two tag constants: two unrelated 32-bit values at once.
TEST(LineTags, PlainDataPassesOnlyWithTheTagsDifference) {
  std::mt19937_64 rng(std::random_device{}());
  for (uint32_t h = 0; h < 2; ++h) {
    const uint32_t diff = lineTagMix(2 * h) ^ lineTagMix(2 * h + 1);
    for (int n = 0; n < 100000; ++n) {
      const uint32_t w1 = static_cast<uint32_t>(rng());
      const uint32_t w3 = n % 2 ? w1 ^ diff : static_cast<uint32_t>(rng());
      const uint32_t e = w1 ^ lineTagMix(2 * h);  // the one epoch whose first tag w1 is
      EXPECT_EQ((w1 ^ w3) == diff, lineCarries(w1, w3, e, h)) << w1 << " " << w3 << " " << h;
      const uint32_t other = e + 1 + static_cast<uint32_t>(rng() % 0xFFFFFFFEu);
      ASSERT_FALSE(lineCarries(w1, w3, other, h)) << w1 << " " << w3 << " " << other;
    }
  }
}

// The four mixes are distinct and not zero, which the tests above rest on.
TEST(LineTags, MixesAreDistinctAndNonZero) {
  std::set<uint32_t> seen;
  for (uint32_t k = 0; k < 4; ++k) {
    ASSERT_NE(0u, lineTagMix(k)) << k;
    ASSERT_TRUE(seen.insert(lineTagMix(k)).second) << k;
  }
}

}  // namespace
}  // namespace kernels
}  // namespace tpar
