// The compressed wire formats' arithmetic (src/kernels/prims/wire.h), against references
// written here from the formats' definitions: every FP8 e4m3 code, the nearest code of random
// values, the error bound of a block, NaN and infinities, and the tile's bytes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
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

// ---- The kernels' vector codec (WireVec, NOTE [wire codec fast paths]) ----------------------
// WireVec must give wireEncode's and wireDecode's bits for every input: the GPU tests compare
// the kernels with the value-by-value reference, and ranks agree only if every one of them
// codes the same way.

using tpar::kernels::WireVec;
using tpar::kernels::wireScale;

template <WireFormat F>
void referenceWords(const float* x, uint16_t scale, uint32_t* w) {
  using V = WireVec<F>;
  for (int k = 0; k < V::kWords; ++k) {
    uint32_t word = 0;
    for (int i = 0; i < V::kPerWord; ++i)
      word |= uint32_t(wireEncode<F>(x[k * V::kPerWord + i], scale)) << (i * WireCodes<F>::kBits);
    w[k] = word;
  }
}

// A bf16 value's bits, uniformly over sign-free finite bf16 with exponents in [lo, hi].
uint16_t randomBf16(std::mt19937_64& rng, int lo, int hi) {
  const int e = lo + static_cast<int>(rng() % uint64_t(hi - lo + 1));
  return static_cast<uint16_t>(((e + 127) << 7) | (rng() & 0x7F));
}

std::string words(const float* x, uint16_t scale) {
  std::string t = "scale 0x";
  char b[32];
  std::snprintf(b, sizeof b, "%04x x", scale);
  t += b;
  for (int i = 0; i < 8; ++i) {
    std::snprintf(b, sizeof b, " %.9g", double(x[i]));
    t += b;
  }
  return t;
}

template <WireFormat F>
void checkVecEncode(const char* name) {
  using V = WireVec<F>;
  using C = WireCodes<F>;
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> bulk(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  const float inf = std::numeric_limits<float>::infinity();
  int fast = 0;
  for (int trial = 0; trial < 60000; ++trial) {
    float x[8];
    uint16_t scale;
    const int kind = pick(rng);
    if (kind <= 3) {
      // A vector of a block: its values at any magnitude fp32 holds (the fast path's scale
      // bounds inside and outside), the block's peak at or above the vector's own.
      const float unit = std::ldexp(1.0f, static_cast<int>(rng() % 280) - 150);
      for (float& v : x) v = bulk(rng) * unit;
      if (kind == 0) x[rng() % 8] *= 80.0f;
      if (kind == 1) x[rng() % 8] = std::ldexp(bulk(rng), static_cast<int>(rng() % 300) - 160);
      float amax;
      bool has_inf;
      V::scalePart(x, V::magnitude(x), &amax, &has_inf);
      const float block = amax * (kind == 2 ? std::ldexp(1.0f, static_cast<int>(rng() % 12)) : 1.0f);
      scale = wireScale<F>(std::isfinite(block) ? block : amax, has_inf);
    } else if (kind <= 6) {
      // Exact ties and their neighbours: x = (k + 1/2) s for the integers, the midpoint of two
      // e4m3 codes times s for FP8, one ulp either side, under a scale in the fast range.
      scale = randomBf16(rng, -96, 95);
      const float s = wire::bf16Value(scale);
      for (float& v : x) {
        float mid;
        if (F == WireFormat::kFp8) {
          const int c = 1 + static_cast<int>(rng() % 0x7C);
          mid = 0.5f * (wire::e4m3ToFloat(uint8_t(c)) + wire::e4m3ToFloat(uint8_t(c + 1)));
        } else {
          mid = static_cast<float>(static_cast<int>(rng() % uint64_t(2 * C::kMax)) - C::kMax) + 0.5f;
        }
        v = mid * s;
        const int step = static_cast<int>(rng() % 3) - 1;
        if (step != 0) v = std::nextafter(v, step > 0 ? inf : -inf);
        if (rng() & 1) v = -v;
      }
    } else if (kind == 7) {
      // NaN, infinities, zeros and subnormals among normal values.
      for (float& v : x) v = bulk(rng);
      const float odd[] = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 0.0f, -0.0f,
                           1e-40f, -3e-42f, std::numeric_limits<float>::max()};
      for (int j = 0; j < 3; ++j) x[rng() % 8] = odd[rng() % 8];
      float amax;
      bool has_inf;
      const float m = V::magnitude(x);
      bool finite = true;
      for (float v : x) finite &= std::isfinite(v);
      ASSERT_EQ(finite, std::isfinite(m)) << name << " " << words(x, 0) << " seed " << seed;
      V::scalePart(x, m, &amax, &has_inf);
      scale = wireScale<F>(amax, has_inf);
    } else {
      // Any scale bits at all (zero, subnormal, huge, with the infinity bit), values that may
      // saturate (kind 8) or lie anywhere in fp32's range, overflowing x / s (kind 9).
      scale = static_cast<uint16_t>(rng());
      if ((scale & 0x7F80) == 0x7F80) scale &= 0xBFFF;  // a finite scale, as wireScale makes
      const float s = wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFF));
      for (float& v : x) {
        v = kind == 8 ? bulk(rng) * s * static_cast<float>(C::kMax) * 1.5f
                      : std::ldexp(bulk(rng), static_cast<int>(rng() % 280) - 150);
      }
    }
    // magnitude and scalePart agree with the value-by-value block scale over these 8 values.
    float amax;
    bool has_inf;
    const float m = V::magnitude(x);
    V::scalePart(x, m, &amax, &has_inf);
    ASSERT_EQ(wireBlockScale<F>(x, 8), wireScale<F>(amax, has_inf))
        << name << " " << words(x, 0) << " seed " << seed;
    uint32_t got[2] = {0xDEADBEEFu, 0xDEADBEEFu}, want[2] = {0, 0};
    V::encode(x, scale, m, got);
    referenceWords<F>(x, scale, want);
    fast += V::fastEncode(m, wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFF)));
    for (int k = 0; k < V::kWords; ++k)
      ASSERT_EQ(want[k], got[k])
          << name << " word " << k << " " << words(x, scale) << " seed " << seed;
  }
  // Most vectors took the fast path (else this would test only the fallback).
  EXPECT_GT(fast, 30000) << name;
}

TEST(WireVec, Fp8EncodeGivesTheValueByValueCodes) { checkVecEncode<WireFormat::kFp8>("fp8"); }
TEST(WireVec, Int8EncodeGivesTheValueByValueCodes) { checkVecEncode<WireFormat::kInt8>("int8"); }
TEST(WireVec, Int4EncodeGivesTheValueByValueCodes) { checkVecEncode<WireFormat::kInt4>("int4"); }

template <WireFormat F>
void checkVecDecode(const char* name) {
  using V = WireVec<F>;
  using C = WireCodes<F>;
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  // Scales: every edge a scale can be (zero, the smallest, the largest finite, with and
  // without the infinity bit) and fresh random ones.
  std::vector<uint16_t> scales = {0x0000, 0x0001, 0x0080, 0x3F80, 0x7F7F,
                                  0x8000, 0x8001, 0xBF80, 0xFF7F};
  for (int i = 0; i < 600; ++i) {
    uint16_t scale = static_cast<uint16_t>(rng());
    if ((scale & 0x7F80) == 0x7F80) scale &= 0xBFFF;  // a finite scale, as wireScale makes
    scales.push_back(scale);
  }
  constexpr int kCodes = 1 << C::kBits;
  int plain = 0;
  for (const uint16_t scale : scales) {
    // Every code in every place of the vector, the other places random (NaN codes among them
    // at times), and the same with the other places all that code.
    for (int c = 0; c < kCodes; ++c) {
      for (int fill = 0; fill < 2; ++fill) {
        uint32_t w[2] = {0, 0};
        for (int i = 0; i < 8; ++i) {
          const bool here = fill || i == c % 8;
          const uint32_t code = here ? uint32_t(c) : uint32_t(rng() % kCodes);
          w[i / V::kPerWord] |= code << ((i % V::kPerWord) * C::kBits);
        }
        float got[8];
        for (float& g : got) g = wire::bitsFloat(0x7FBADBADu);
        V::decode(w, scale, got);
        plain += V::plainCodes(w, scale);
        for (int i = 0; i < 8; ++i) {
          const float want = wireDecode<F>(static_cast<uint8_t>(V::code(w, i)), scale);
          // A NaN is a NaN (which one is the platform's); everything else bit for bit.
          if (std::isnan(want) && std::isnan(got[i])) continue;
          ASSERT_EQ(wire::floatBits(want), wire::floatBits(got[i]))
              << name << " scale 0x" << std::hex << scale << " code 0x" << V::code(w, i)
              << " place " << std::dec << i << " seed " << seed;
        }
      }
    }
  }
  EXPECT_GT(plain, static_cast<int>(scales.size()) * kCodes / 2) << name;
}

TEST(WireVec, Fp8DecodeGivesTheValueByValueBits) { checkVecDecode<WireFormat::kFp8>("fp8"); }
TEST(WireVec, Int8DecodeGivesTheValueByValueBits) { checkVecDecode<WireFormat::kInt8>("int8"); }
TEST(WireVec, Int4DecodeGivesTheValueByValueBits) { checkVecDecode<WireFormat::kInt4>("int4"); }

// The NaN-code test on whole words against a field-by-field look, on random words and on
// words with exactly one field at each value.
TEST(WireVec, AWordHasAZeroFieldExactlyWhenOneOfItsFieldsIsZero) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  auto slow = [](uint32_t v, int bits) {
    for (int i = 0; i < 32; i += bits)
      if (((v >> i) & ((1u << bits) - 1)) == 0) return true;
    return false;
  };
  for (int t = 0; t < 2000000; ++t) {
    uint32_t v = static_cast<uint32_t>(rng());
    // Sparse and dense words too, where zero fields are common.
    if (t % 3 == 1) v &= static_cast<uint32_t>(rng());
    if (t % 3 == 2) v |= static_cast<uint32_t>(rng());
    ASSERT_EQ(slow(v, 8), wire::anyFieldZero<8>(v)) << std::hex << v << " seed " << seed;
    ASSERT_EQ(slow(v, 4), wire::anyFieldZero<4>(v)) << std::hex << v << " seed " << seed;
  }
  for (int bits : {4, 8}) {
    for (int place = 0; place < 32; place += bits) {
      for (uint32_t f = 0; f < (1u << bits); ++f) {
        const uint32_t v = (0xFFFFFFFFu & ~(((1u << bits) - 1) << place)) | (f << place);
        EXPECT_EQ(f == 0, bits == 8 ? wire::anyFieldZero<8>(v) : wire::anyFieldZero<4>(v))
            << bits << " " << std::hex << v;
      }
    }
  }
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

// The checkers compute the reference in segments that start at multiples of the block, on
// several cores (tpar bench's wire check, the GPU test of the formats): each segment must give
// the bits the whole buffer gives there, for every format at its kernel block and at 32, every
// op, with counts off every multiple, NaN and infinities among the values.
TEST(WireAllReduce, SegmentsOfWholeBlocksGiveTheWholeBuffersReference) {
  const uint64_t seed = freshSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int n : {2, 3, 8}) {
    const size_t count = 3 * 4096 + 1 + rng() % 4096;
    std::vector<std::vector<float>> in(n, std::vector<float>(count));
    for (auto& x : in)
      for (size_t i = 0; i < count; ++i) {
        x[i] = normal(rng) * (i % 97 == 5 ? 80.0f : 1.0f);
        if (rng() % 1999 == 0) x[i] = rng() % 2 ? NAN : -INFINITY;
      }
    for (WireFormat f : {WireFormat::kFp8, WireFormat::kInt8, WireFormat::kInt4}) {
      for (int block : {wireKernelBlock(f), 32}) {
        for (tparRedOp_t op : {tparSum, tparMax, tparMin}) {
          const std::vector<float> whole =
              tpar::ref::wireAllReduce(f, block, WireAlgo::kTwoShot, in, op);
          const size_t segment = size_t(block) * (1 + rng() % 40);
          for (size_t a = 0; a < count; a += segment) {
            const size_t b = std::min(count, a + segment);
            std::vector<std::vector<float>> part(n);
            for (int r = 0; r < n; ++r) part[r].assign(in[r].begin() + a, in[r].begin() + b);
            const std::vector<float> got =
                tpar::ref::wireAllReduce(f, block, WireAlgo::kTwoShot, part, op);
            for (size_t i = a; i < b; ++i) {
              uint32_t w, g;
              std::memcpy(&w, &whole[i], 4);
              std::memcpy(&g, &got[i - a], 4);
              ASSERT_EQ(w, g) << "n " << n << " format " << int(f) << " block " << block
                              << " op " << int(op) << " segment " << segment << " i " << i
                              << " seed " << seed;
            }
          }
        }
      }
    }
  }
}

// The bounds docs/WIRE.md states for activations with outlier channels (relative L2 error of
// the bf16 result against the exact sum, two-shot), with the lossless path's, at the block each
// format's kernels send (the bounds were set for blocks of 32: a larger block must come with
// its own).
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
    auto wire = [&](WireFormat f) {
      return relL2(tpar::ref::wireAllReduce(f, wireKernelBlock(f), WireAlgo::kTwoShot, in));
    };
    EXPECT_LE(wire(WireFormat::kFp8), 0.025) << n << " seed " << seed;
    EXPECT_LE(wire(WireFormat::kInt8), 0.025) << n << " seed " << seed;
    EXPECT_LE(wire(WireFormat::kInt4), 0.12) << n << " seed " << seed;
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
