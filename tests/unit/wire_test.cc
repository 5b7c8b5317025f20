// The compressed wire formats' arithmetic (src/kernels/prims/wire.h), against references
// written here from the formats' definitions: every FP8 e4m3 code, the nearest code of random
// values, the error bound of a block, NaN and infinities, and the tile's bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/fused_reference.h"
#include "common/wire_reference.h"
#include "kernels/prims/wire.h"

namespace {

using tpar::kernels::WireCodes;
using tpar::kernels::WireFormat;
using tpar::kernels::WireTile;
using tpar::kernels::wireBlockScale;
using tpar::kernels::wireDecode;
using tpar::kernels::wireEncode;
namespace wire = tpar::kernels::wire;

uint64_t freshSeed() { return std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}(); }

// The e4m3 reference of the fused call's tests (tests/common/fused_reference.h), written from
// the format's definition.
double e4m3Definition(int c) { return tpar::ref::fp8Decode(static_cast<uint8_t>(c)); }

TEST(WireFp8, EveryCodeDecodesAsItsDefinitionAndEncodesBack) {
  for (int c = 0; c < 256; ++c) {
    const double want = e4m3Definition(c);
    const float got = wire::e4m3ToFloat(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(0x7F, wire::e4m3FromFloat(got)) << c;
      continue;
    }
    EXPECT_EQ(want, static_cast<double>(got)) << "code " << c;
    EXPECT_EQ(c, wire::e4m3FromFloat(got)) << "code " << c << " value " << got;
  }
}

TEST(WireFp8, RandomValuesTakeTheNearestCodeTiesToEvenAndSaturate) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> expo(-12.0, 10.0);
  std::uniform_int_distribution<int> coin(0, 1);
  for (int i = 0; i < 20000; ++i) {
    float x = static_cast<float>(std::exp2(expo(rng)));
    if (coin(rng)) x = -x;
    const int want = tpar::ref::fp8Encode(x);
    ASSERT_EQ(want, wire::e4m3FromFloat(x)) << "x " << x << " seed " << seed;
  }
  // Exact midpoints between neighbours go to the even one, on both sides of each binade.
  for (int c = 1; c < 0x7D; ++c) {
    const double mid = (e4m3Definition(c) + e4m3Definition(c + 1)) / 2;
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(even, wire::e4m3FromFloat(static_cast<float>(mid))) << "between " << c << " and " << c + 1;
  }
  EXPECT_EQ(0x7E, wire::e4m3FromFloat(std::numeric_limits<float>::infinity()));
  EXPECT_EQ(0xFE, wire::e4m3FromFloat(-1e30f));
  EXPECT_EQ(0x00, wire::e4m3FromFloat(1e-10f));
}

template <WireFormat F>
void checkBlocks(const char* name) {
  using C = WireCodes<F>;
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bulk(0.0f, 1.0f);
  std::uniform_real_distribution<double> magnitude(-30.0, 30.0);
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 32;
    std::vector<float> x(n);
    const float unit = static_cast<float>(std::exp2(magnitude(rng)));
    for (float& v : x) v = bulk(rng) * unit;
    x[rng() % n] *= 80.0f;  // an outlier, as activations have
    const uint16_t scale = wireBlockScale<F>(x.data(), n);
    ASSERT_EQ(0, scale & 0x8000) << name;
    const double s = wire::bf16Value(scale);
    double amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(double(v)));
    // The scale never lets a value saturate, and is within one bf16 step of the least that
    // would not.
    ASSERT_LE(amax, s * C::kMax) << name << " seed " << seed;
    ASSERT_GT(amax, s * C::kMax / (1.0 + 3.0 / 128)) << name << " seed " << seed;
    for (int i = 0; i < n; ++i) {
      const uint8_t code = wireEncode<F>(x[i], scale);
      const double back = wireDecode<F>(code, scale);
      // Half a step of the code grid: s for the integers; for FP8 the e4m3 spacing at x / s.
      double step = s;
      if (F == WireFormat::kFp8) {
        const double y = std::fabs(double(x[i]) / s);
        step = s * (y < 0.015625 ? std::ldexp(1.0, -9) : std::ldexp(1.0, std::ilogb(y) - 3));
      }
      ASSERT_LE(std::fabs(back - x[i]), step / 2 * (1 + 1e-4))
          << name << " x " << x[i] << " back " << back << " seed " << seed;
      ASSERT_FALSE(std::isnan(back)) << name;
    }
  }
}

TEST(WireBlock, Fp8ValuesComeBackWithinHalfACodeStep) { checkBlocks<WireFormat::kFp8>("fp8"); }
TEST(WireBlock, Int8ValuesComeBackWithinHalfACodeStep) { checkBlocks<WireFormat::kInt8>("int8"); }
TEST(WireBlock, Int4ValuesComeBackWithinHalfACodeStep) { checkBlocks<WireFormat::kInt4>("int4"); }

template <WireFormat F>
void checkSpecials(const char* name) {
  using C = WireCodes<F>;
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bulk(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> x(32);
    for (float& v : x) v = bulk(rng);
    // Three distinct places: the first three of a shuffle.
    std::vector<int> at(32);
    for (int i = 0; i < 32; ++i) at[i] = i;
    std::shuffle(at.begin(), at.end(), rng);
    const int nan_at = at[0], pinf_at = at[1], ninf_at = at[2];
    const bool with_inf = trial % 2 == 0;
    x[nan_at] = std::numeric_limits<float>::quiet_NaN();
    if (with_inf) {
      x[pinf_at] = inf;
      x[ninf_at] = -inf;
    }
    const uint16_t scale = wireBlockScale<F>(x.data(), 32);
    EXPECT_EQ(with_inf, (scale & 0x8000) != 0) << name;
    const double s = wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFF));
    const double top = with_inf ? C::kMaxWithInf : C::kMax;
    for (int i = 0; i < 32; ++i) {
      const float back = wireDecode<F>(wireEncode<F>(x[i], scale), scale);
      if (i == nan_at) {
        EXPECT_TRUE(std::isnan(back)) << name << " seed " << seed;
      } else if (with_inf && i == pinf_at) {
        EXPECT_EQ(inf, back) << name << " seed " << seed;
      } else if (with_inf && i == ninf_at) {
        EXPECT_EQ(-inf, back) << name << " seed " << seed;
      } else {
        // Finite values stay finite and inside the finite range of this block.
        ASSERT_TRUE(std::isfinite(back)) << name << " x " << x[i] << " seed " << seed;
        EXPECT_LE(std::fabs(back), s * top) << name;
        EXPECT_LE(std::fabs(back - x[i]), s * (F == WireFormat::kFp8 ? top / 16 : 0.5) + 1e-30)
            << name << " x " << x[i] << " seed " << seed;
      }
    }
  }
  // A block of zeros: a zero scale and zeros back. A block of only NaN and Inf: no finite
  // magnitude, and still NaN and Inf back.
  std::vector<float> z(32, 0.0f);
  EXPECT_EQ(0, wireBlockScale<F>(z.data(), 32)) << name;
  EXPECT_EQ(0.0f, wireDecode<F>(wireEncode<F>(0.0f, 0), 0)) << name;
  std::vector<float> odd = {std::numeric_limits<float>::quiet_NaN(), inf, -inf};
  const uint16_t os = wireBlockScale<F>(odd.data(), 3);
  EXPECT_TRUE(std::isnan(wireDecode<F>(wireEncode<F>(odd[0], os), os))) << name;
  EXPECT_EQ(inf, wireDecode<F>(wireEncode<F>(odd[1], os), os)) << name;
  EXPECT_EQ(-inf, wireDecode<F>(wireEncode<F>(odd[2], os), os)) << name;
  // Subnormal magnitudes get a nonzero scale.
  std::vector<float> tiny = {1e-40f, -3e-41f};
  EXPECT_NE(0, wireBlockScale<F>(tiny.data(), 2)) << name;
}

TEST(WireBlock, Fp8KeepsNanAndInfinities) { checkSpecials<WireFormat::kFp8>("fp8"); }
TEST(WireBlock, Int8KeepsNanAndInfinities) { checkSpecials<WireFormat::kInt8>("int8"); }
TEST(WireBlock, Int4KeepsNanAndInfinities) { checkSpecials<WireFormat::kInt4>("int4"); }

template <WireFormat F, int kBlock>
void checkTile(const char* name, int expect_bytes) {
  using Tile = WireTile<F, kBlock>;
  EXPECT_EQ(expect_bytes, Tile::kBytes) << name;
  EXPECT_EQ(0, Tile::kBytes % 16) << name;
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bulk(0.0f, 1.0f);
  for (int n : {Tile::kValues, Tile::kValues - 1, kBlock + 3, 1}) {
    std::vector<float> x(Tile::kValues, 0.0f);
    for (int i = 0; i < n; ++i) x[i] = bulk(rng);
    std::vector<uint8_t> a(Tile::kBytes, 0xA5), b(Tile::kBytes, 0x5A);
    // Every byte of the tile is written, whatever the buffer held: two ranks encoding the
    // same values send the same bytes.
    Tile::encode(x.data(), n, a.data());
    Tile::encode(x.data(), n, b.data());
    EXPECT_EQ(a, b) << name << " n " << n << " seed " << seed;
    // Each value comes back as its block's decode, and what was not given as zero.
    std::vector<float> back(Tile::kValues, std::numeric_limits<float>::quiet_NaN());
    Tile::decode(a.data(), Tile::kValues, back.data());
    for (int i = 0; i < Tile::kValues; ++i) {
      const int blk = i / kBlock;
      uint16_t scale;
      std::memcpy(&scale, a.data() + Tile::kCodeBytes + 2 * blk, 2);
      EXPECT_EQ(wireDecode<F>(wireEncode<F>(x[i], scale), scale), back[i]) << name << " " << i;
      if (i >= n) EXPECT_EQ(0.0f, back[i]) << name << " " << i;
    }
  }
}

TEST(WireTile, TilesHoldEightBlocksAndTheirScalesAndEveryByteIsWritten) {
  // 8 blocks: codes of 8 x block values, then 16 bytes of scales.
  checkTile<WireFormat::kInt4, 32>("int4/32", 8 * 16 + 16);
  checkTile<WireFormat::kInt4, 64>("int4/64", 8 * 32 + 16);
  checkTile<WireFormat::kInt8, 32>("int8/32", 8 * 32 + 16);
  checkTile<WireFormat::kFp8, 32>("fp8/32", 8 * 32 + 16);
  checkTile<WireFormat::kFp8, 128>("fp8/128", 8 * 128 + 16);
}

}  // namespace

// ---- The all-reduce through a format (tests/common/wire_reference.h) -------------------------

namespace {

using tpar::ref::WireAlgo;

// Activations shaped like a row-parallel layer's partial outputs: a normal bulk and 8 outlier
// channels of 50 to 100 times, rounded to bf16, fresh for each call.
std::vector<std::vector<float>> activations(int ranks, int rows, int hidden, std::mt19937_64& rng) {
  std::vector<float> factor(hidden, 1.0f);
  std::uniform_real_distribution<float> big(50.0f, 100.0f);
  for (int k = 0; k < 8; ++k) factor[rng() % hidden] = big(rng);
  std::normal_distribution<float> bulk(0.0f, 1.0f);
  std::vector<std::vector<float>> in(ranks, std::vector<float>(size_t(rows) * hidden));
  for (auto& r : in)
    for (size_t i = 0; i < r.size(); ++i) r[i] = tpar::ref::bf16Round(bulk(rng) * factor[i % hidden]);
  return in;
}

// The most one value of a block can move through the format: half a code step, from the
// block's largest magnitude alone (the scale is at most two bf16 steps above amax / top).
double halfStep(WireFormat f, double amax, double x) {
  const double s = amax / (f == WireFormat::kFp8 ? 448.0 : f == WireFormat::kInt8 ? 127.0 : 7.0) *
                   (1.0 + 1.0 / 64);
  if (f != WireFormat::kFp8) return s / 2;
  const double y = std::fabs(x) / s;
  return s * (y < 0.015625 ? std::ldexp(1.0, -10) : std::ldexp(1.0, std::ilogb(y) - 4)) * 1.01;
}

std::vector<double> blockAmax(const std::vector<float>& x, int block) {
  std::vector<double> a(x.size());
  for (size_t b = 0; b < x.size(); b += block) {
    double m = 0;
    for (size_t i = b; i < b + block && i < x.size(); ++i) m = std::max(m, std::fabs(double(x[i])));
    for (size_t i = b; i < b + block && i < x.size(); ++i) a[i] = m;
  }
  return a;
}

TEST(WireAllReduce, EveryValueStaysWithinHalfAStepPerEncodingOfTheExactSum) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  for (int n : {2, 4, 8}) {
    const auto in = activations(n, 4, 7168, rng);
    for (WireFormat f : {WireFormat::kFp8, WireFormat::kInt8, WireFormat::kInt4}) {
      for (int block : {32, 128}) {
        const std::vector<float> out = tpar::ref::wireAllReduce(f, block, WireAlgo::kTwoShot, in);
        std::vector<float> decoded_sum(out.size(), 0.0f), d;
        std::vector<double> bound(out.size(), 0.0), exact(out.size(), 0.0);
        for (const auto& x : in) {
          const auto a = blockAmax(x, block);
          tpar::ref::wireRoundTrip(f, block, x, &d);
          for (size_t i = 0; i < x.size(); ++i) {
            bound[i] += halfStep(f, a[i], x[i]);
            exact[i] += x[i];
            decoded_sum[i] += d[i];
          }
        }
        // The all-gather's encoding of the sum, and fp32's own rounding of the adds.
        const auto a = blockAmax(decoded_sum, block);
        for (size_t i = 0; i < out.size(); ++i) {
          const double b = bound[i] + halfStep(f, a[i], decoded_sum[i]) +
                           n * std::ldexp(std::fabs(exact[i]) + bound[i], -23);
          ASSERT_LE(std::fabs(out[i] - exact[i]), b)
              << "n " << n << " format " << int(f) << " block " << block << " i " << i
              << " seed " << seed;
        }
      }
    }
  }
}

// The bounds docs/WIRE.md states for activations with outlier channels (relative L2 error of
// the bf16 result against the exact sum, blocks of 32, two-shot), with the lossless path's.
TEST(WireAllReduce, RelativeErrorOnActivationsMeetsTheStatedBounds) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  for (int n : {2, 4, 8}) {
    const auto in = activations(n, 16, 7168, rng);
    std::vector<double> exact(in[0].size(), 0.0);
    for (const auto& x : in)
      for (size_t i = 0; i < x.size(); ++i) exact[i] += x[i];
    auto relL2 = [&](std::vector<float> out) {
      double num = 0, den = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        const double d = tpar::ref::bf16Round(out[i]) - exact[i];
        num += d * d;
        den += exact[i] * exact[i];
      }
      return std::sqrt(num / den);
    };
    EXPECT_LE(relL2(tpar::ref::losslessAllReduce(in)), 0.003) << n << " seed " << seed;
    EXPECT_LE(relL2(tpar::ref::wireAllReduce(WireFormat::kFp8, 32, WireAlgo::kTwoShot, in)), 0.025)
        << n << " seed " << seed;
    EXPECT_LE(relL2(tpar::ref::wireAllReduce(WireFormat::kInt8, 32, WireAlgo::kTwoShot, in)), 0.025)
        << n << " seed " << seed;
    EXPECT_LE(relL2(tpar::ref::wireAllReduce(WireFormat::kInt4, 32, WireAlgo::kTwoShot, in)), 0.12)
        << n << " seed " << seed;
  }
}

TEST(WireAllReduce, NanAndInfinitiesReachTheResultAsInTheExactSum) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  const float inf = std::numeric_limits<float>::infinity();
  auto in = activations(4, 1, 1024, rng);
  in[1][10] = std::numeric_limits<float>::quiet_NaN();  // NaN + anything: NaN
  in[2][100] = inf;                                      // +Inf + finite: +Inf
  in[0][200] = -inf;                                     // -Inf + finite: -Inf
  in[3][300] = inf;                                      // +Inf + -Inf: NaN
  in[1][300] = -inf;
  for (WireFormat f : {WireFormat::kFp8, WireFormat::kInt8, WireFormat::kInt4}) {
    for (WireAlgo algo : {WireAlgo::kTwoShot, WireAlgo::kOneShot}) {
      const auto out = tpar::ref::wireAllReduce(f, 32, algo, in);
      EXPECT_TRUE(std::isnan(out[10])) << int(f);
      EXPECT_EQ(inf, out[100]) << int(f);
      EXPECT_EQ(-inf, out[200]) << int(f);
      EXPECT_TRUE(std::isnan(out[300])) << int(f);
      // The rest of those blocks stays finite.
      for (int i : {11, 101, 201, 301}) EXPECT_TRUE(std::isfinite(out[i])) << int(f) << " " << i;
    }
  }
}

}  // namespace
