// The reference quantizers and the float64 sequence the fused all-reduce tests compare
// against (tests/common/fused_reference.h), checked against the formats' definitions: known
// codes, rounding ties, saturation, and the scale layout derived from vLLM's description of it.
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "common/fused_reference.h"

namespace tpar {
namespace {

std::mt19937 freshRng() { return std::mt19937(std::random_device{}()); }

TEST(Fp8Reference, KnownCodesOfTheFormat) {
  // e4m3fn: bias 7, 3 mantissa bits, no infinities.
  EXPECT_EQ(0x38, ref::fp8Encode(1.0f));
  EXPECT_EQ(0x3C, ref::fp8Encode(1.5f));
  EXPECT_EQ(0x40, ref::fp8Encode(2.0f));
  EXPECT_EQ(0xB8, ref::fp8Encode(-1.0f));
  EXPECT_EQ(0x7E, ref::fp8Encode(448.0f));
  EXPECT_EQ(0x08, ref::fp8Encode(std::ldexp(1.0f, -6)));  // smallest normal
  EXPECT_EQ(0x01, ref::fp8Encode(std::ldexp(1.0f, -9)));  // smallest subnormal
  EXPECT_EQ(0x00, ref::fp8Encode(0.0f));
  EXPECT_EQ(448.0f, ref::fp8Decode(0x7E));
  EXPECT_EQ(-448.0f, ref::fp8Decode(0xFE));
  EXPECT_EQ(0.875f * std::ldexp(1.0f, -6), ref::fp8Decode(0x07));  // largest subnormal
  EXPECT_TRUE(std::isnan(ref::fp8Decode(0x7F)));
  EXPECT_TRUE(std::isnan(ref::fp8Decode(0xFF)));
}

TEST(Fp8Reference, RoundsToNearestTiesToEvenAndSaturates) {
  EXPECT_EQ(0x38, ref::fp8Encode(1.0625f));   // between 1 (m=0) and 1.125 (m=1): even
  EXPECT_EQ(0x3A, ref::fp8Encode(1.1875f));   // between 1.125 (m=1) and 1.25 (m=2): even
  EXPECT_EQ(0x7E, ref::fp8Encode(1000.0f));
  EXPECT_EQ(0xFE, ref::fp8Encode(-1e30f));
  EXPECT_EQ(0x7F, ref::fp8Encode(std::nanf("")));
  // Every finite code decodes to a value that encodes to it again.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(c, ref::fp8Encode(ref::fp8Decode(static_cast<uint8_t>(c)))) << c;
  }
  // Random values: no other finite code is nearer than the one chosen.
  auto rng = freshRng();
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 2000; ++i) {
    const float x = std::ldexp(1.0f, 0) * std::exp2(mag(rng)) * (i % 2 ? -1.0f : 1.0f);
    const float got = ref::fp8Decode(ref::fp8Encode(x));
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7F) == 0x7F) continue;
      ASSERT_LE(std::fabs(got - x), std::fabs(ref::fp8Decode(static_cast<uint8_t>(c)) - x))
          << x << " code " << c;
    }
  }
}

TEST(Fp4Reference, TheGridAndItsTies) {
  const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(grid[c], ref::fp4Decode(static_cast<uint8_t>(c)));
    EXPECT_EQ(-grid[c], ref::fp4Decode(static_cast<uint8_t>(c | 8)));
    EXPECT_EQ(c, ref::fp4Encode(grid[c]));
  }
  // Midpoints go to the even code.
  const std::pair<float, float> ties[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2},
                                          {2.5f, 2},  {3.5f, 4},  {5.0f, 4}};
  for (const auto& [x, want] : ties) EXPECT_EQ(want, ref::fp4Decode(ref::fp4Encode(x))) << x;
  EXPECT_EQ(0.5f, ref::fp4Decode(ref::fp4Encode(0.26f)));
  EXPECT_EQ(6.0f, ref::fp4Decode(ref::fp4Encode(5.01f)));
  EXPECT_EQ(6.0f, ref::fp4Decode(ref::fp4Encode(100.0f)));
  EXPECT_EQ(-6.0f, ref::fp4Decode(ref::fp4Encode(-7.0f)));
}

TEST(Nvfp4ScaleLayout, MatchesThe128By4TilesElementByElement) {
  // The layout as vLLM's convert_swizzled_to_linear reads it: the swizzled tensor viewed as
  // [m_tiles, k_tiles, 32, 4, 4] and permuted to [m_tiles, 4, 32, k_tiles, 4] is the linear
  // [rows, blocks] tensor. Walk the swizzled order and check every position.
  for (int rows : {1, 3, 127, 128, 130, 300}) {
    for (int blocks : {1, 2, 4, 5, 8, 16, 448}) {
      const int m_tiles = (rows + 127) / 128, k_tiles = (blocks + 3) / 4;
      ASSERT_EQ(size_t(m_tiles) * 128 * k_tiles * 4, ref::nvfp4ScaleBytes(rows, blocks));
      std::set<size_t> seen;
      size_t swizzled = 0;
      for (int mt = 0; mt < m_tiles; ++mt)
        for (int kt = 0; kt < k_tiles; ++kt)
          for (int r32 = 0; r32 < 32; ++r32)
            for (int r4 = 0; r4 < 4; ++r4)
              for (int k4 = 0; k4 < 4; ++k4, ++swizzled) {
                const int row = mt * 128 + r4 * 32 + r32, col = kt * 4 + k4;
                if (row >= rows || col >= blocks) continue;
                ASSERT_EQ(swizzled, ref::nvfp4ScaleOffset(row, col, blocks))
                    << rows << "x" << blocks << " at " << row << "," << col;
                seen.insert(swizzled);
              }
      EXPECT_EQ(size_t(rows) * blocks, seen.size());
    }
  }
  EXPECT_EQ(533u, ref::nvfp4ScaleOffset(33, 5, 8));  // worked by hand
}

TEST(FusedReference, AddRmsNormOfRandomRows) {
  auto rng = freshRng();
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int hidden : {8, 64, 4096}) {
    std::vector<std::vector<float>> in(3, std::vector<float>(hidden));
    std::vector<float> res(hidden), ones(hidden, 1.0f), w(hidden);
    for (auto& v : in)
      for (float& x : v) x = d(rng);
    for (float& x : res) x = d(rng);
    for (float& x : w) x = d(rng);
    const ref::RowResult r = ref::addRmsNorm(in, res.data(), ones.data(), 0.0, hidden);
    double ms = 0;
    for (int i = 0; i < hidden; ++i) {
      EXPECT_DOUBLE_EQ(double(res[i]) + double(in[0][i]) + double(in[1][i]) + double(in[2][i]),
                       r.residual[i]);
      ms += r.out[i] * r.out[i];
    }
    EXPECT_NEAR(1.0, ms / hidden, 1e-12);  // unit weight, no eps: unit mean square
    const ref::RowResult rw = ref::addRmsNorm(in, nullptr, w.data(), 1e-6, hidden);
    double ms_in = 0;
    for (int i = 0; i < hidden; ++i) ms_in += rw.residual[i] * rw.residual[i];
    const double inv = 1.0 / std::sqrt(ms_in / hidden + 1e-6);
    for (int i = 0; i < hidden; ++i) EXPECT_NEAR(rw.residual[i] * inv * w[i], rw.out[i], 1e-9);
  }
}

TEST(FusedReference, Fp8DynamicScaleMapsTheLargestValueTo448) {
  auto rng = freshRng();
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> y(4096);
  for (float& x : y) x = d(rng);
  const ref::Fp8Row q = ref::quantizeFp8Dynamic(y);
  size_t imax = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (std::fabs(y[i]) > std::fabs(y[imax])) imax = i;
  EXPECT_EQ(std::fabs(y[imax]) / 448.0f, q.scale);
  EXPECT_EQ(448.0f, std::fabs(ref::fp8Decode(q.bytes[imax])));
  for (size_t i = 0; i < y.size(); ++i) {
    // Half a step of 3 mantissa bits, relative, or half the subnormal step.
    const float back = ref::fp8Decode(q.bytes[i]) * q.scale;
    EXPECT_LE(std::fabs(back - y[i]),
              std::max(std::fabs(y[i]) / 16.0f, q.scale * std::ldexp(1.0f, -10)) * 1.0001f)
        << i;
  }
  std::vector<float> zeros(64, 0.0f);
  EXPECT_EQ(1.0f / (448.0f * 512.0f), ref::quantizeFp8Dynamic(zeros).scale);
}

TEST(FusedReference, Nvfp4BlocksDequantizeWithinTheirStep) {
  auto rng = freshRng();
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> y(2048);
  for (float& x : y) x = d(rng);
  float amax = 0;
  for (float x : y) amax = std::max(amax, std::fabs(x));
  const float global = 448.0f * 6.0f / amax;  // the usual choice: the largest block scale is 448
  const ref::Fp4Row q = ref::quantizeNvfp4(y, global);
  ASSERT_EQ(y.size() / 2, q.packed.size());
  ASSERT_EQ(y.size() / 16, q.block_scale.size());
  for (size_t b = 0; b < y.size() / 16; ++b) {
    float bmax = 0;
    for (int i = 0; i < 16; ++i) bmax = std::max(bmax, std::fabs(y[b * 16 + i]));
    const float s = ref::fp8Decode(q.block_scale[b]);
    EXPECT_EQ(ref::fp8Encode(global * bmax / 6.0f), q.block_scale[b]);
    for (int i = 0; i < 16; ++i) {
      const size_t k = b * 16 + i;
      const uint8_t nib = (q.packed[k / 2] >> (k % 2 ? 4 : 0)) & 0xF;
      const float back = ref::fp4Decode(nib) * s / global;
      // Half the widest gap of the grid (1, between 4 and 6) in block units, plus what a block
      // scale rounded down (by at most 1/16) clips off the largest value.
      EXPECT_LE(std::fabs(back - y[k]), s / global * 1.0f + bmax / 16.0f) << k;
    }
  }
}

}  // namespace
}  // namespace tpar
