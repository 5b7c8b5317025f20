#include "common/fused_reference.h"

#include <algorithm>
#include <cmath>

namespace tpar {
namespace ref {

uint8_t fp8Encode(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  double a = std::fabs(static_cast<double>(x));
  if (a >= kFp8Max) return sign | 0x7E;  // saturate: 0x7E is 448
  // Subnormals: steps of 2^-9 below 2^-6; the code is the step count, and 8 steps is the
  // smallest normal's code, so rounding up into the normals needs no special case.
  if (a < std::ldexp(1.0, -6)) return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0));
  int e;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;                       // a = (2m) * 2^exp, 2m in [1, 2)
  int q = static_cast<int>(std::nearbyint((2 * m - 1) * 8));  // ties to even (default mode)
  if (q == 8) {
    q = 0;
    ++exp;
  }
  const int code = ((exp + 7) << 3) | q;
  return sign | static_cast<uint8_t>(std::min(code, 0x7E));
}

float fp8Decode(uint8_t b) {
  if ((b & 0x7F) == 0x7F) return std::nanf("");
  const int e = (b >> 3) & 0xF, m = b & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return static_cast<float>((b & 0x80) ? -v : v);
}

namespace {
constexpr double kFp4Grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
}

uint8_t fp4Encode(float x) {
  const uint8_t sign = std::signbit(x) ? 0x8 : 0;
  const double a = std::min(std::fabs(static_cast<double>(x)), 6.0);
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - kFp4Grid[c]), db = std::fabs(a - kFp4Grid[best]);
    // Nearer wins; on a tie the even code (lowest bit 0) wins.
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return sign | static_cast<uint8_t>(best);
}

float fp4Decode(uint8_t nibble) {
  const double v = kFp4Grid[nibble & 7];
  return static_cast<float>((nibble & 8) ? -v : v);
}

RowResult addRmsNorm(const std::vector<std::vector<float>>& inputs, const float* residual,
                     const float* weight, double eps, int hidden) {
  RowResult r;
  r.residual.assign(hidden, 0.0);
  for (int i = 0; i < hidden; ++i) {
    double s = 0;
    for (const auto& in : inputs) s += in[i];
    r.residual[i] = (residual != nullptr ? residual[i] : 0.0) + s;
  }
  double ms = 0;
  for (double v : r.residual) ms += v * v;
  ms /= hidden;
  const double inv = 1.0 / std::sqrt(ms + eps);
  r.out.resize(hidden);
  for (int i = 0; i < hidden; ++i) r.out[i] = r.residual[i] * inv * weight[i];
  return r;
}

Fp8Row quantizeFp8Dynamic(const std::vector<float>& y) {
  float amax = 0;
  for (float v : y) amax = std::max(amax, std::fabs(v));
  Fp8Row r;
  r.scale = std::max(amax / kFp8Max, 1.0f / (kFp8Max * 512.0f));
  r.bytes = quantizeFp8Static(y, r.scale);
  return r;
}

std::vector<uint8_t> quantizeFp8Static(const std::vector<float>& y, float scale) {
  std::vector<uint8_t> out(y.size());
  for (size_t i = 0; i < y.size(); ++i) out[i] = fp8Encode(y[i] / scale);
  return out;
}

Fp4Row quantizeNvfp4(const std::vector<float>& y, float global_scale) {
  Fp4Row r;
  const size_t n = y.size();
  r.packed.assign(n / 2, 0);
  r.block_scale.assign(n / 16, 0);
  for (size_t b = 0; b < n / 16; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(y[b * 16 + i]));
    const uint8_t s8 = fp8Encode(std::min(global_scale * (amax / kFp4Max), kFp8Max));
    r.block_scale[b] = s8;
    const float s = fp8Decode(s8);
    const float mult = s == 0 ? 0.0f : global_scale / s;
    for (size_t i = 0; i < 16; ++i) {
      const size_t k = b * 16 + i;
      const uint8_t q = fp4Encode(y[k] * mult);
      r.packed[k / 2] |= (k % 2 == 0) ? q : static_cast<uint8_t>(q << 4);
    }
  }
  return r;
}

size_t nvfp4ScaleOffset(int row, int block, int blocks) {
  const size_t k_tiles = (blocks + 3) / 4;
  const size_t m_tile = row / 128, r = row % 128, k_tile = block / 4;
  return ((((m_tile * k_tiles + k_tile) * 32 + r % 32) * 4 + r / 32) * 4) + block % 4;
}

size_t nvfp4ScaleBytes(int rows, int blocks) {
  return static_cast<size_t>((rows + 127) / 128) * 128 * ((blocks + 3) / 4) * 4;
}

}  // namespace ref
}  // namespace tpar
