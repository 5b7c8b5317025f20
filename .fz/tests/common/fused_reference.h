// Reference arithmetic for the fused all-reduce + residual add + RMSNorm (+ quantized output)
// tests, written from the formats' definitions and independent of the kernels: the unfused
// sequence in float64, and the FP8 (e4m3) and NVFP4 (e2m1 values, e4m3 block scales, fp32
// global scale) quantizers with the scale layout of vLLM's scaled_fp4_quant.
#ifndef TPAR_TESTS_COMMON_FUSED_REFERENCE_H_
#define TPAR_TESTS_COMMON_FUSED_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tpar {
namespace ref {

// FP8 e4m3 ("fn": no infinities; 0x7F / 0xFF are NaN; largest finite 448). Encoding rounds to
// nearest, ties to even, and saturates finite values beyond 448 to +-448.
constexpr float kFp8Max = 448.0f;
uint8_t fp8Encode(float x);
float fp8Decode(uint8_t b);

// FP4 e2m1: +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; sign in bit 3. Rounds to nearest, ties to even,
// saturates at 6.
constexpr float kFp4Max = 6.0f;
uint8_t fp4Encode(float x);
float fp4Decode(uint8_t nibble);

// The unfused sequence for one row of `hidden` values, in float64: sum = the ranks' inputs
// added; r = residual + sum (or sum without a residual); y = r / sqrt(mean(r^2) + eps) * weight.
// `inputs[k]` is rank k's row.
struct RowResult {
  std::vector<double> residual;  // r
  std::vector<double> out;       // y
};
RowResult addRmsNorm(const std::vector<std::vector<float>>& inputs, const float* residual,
                     const float* weight, double eps, int hidden);

// FP8 with one scale per row (dynamic): scale = max(|y|) / 448, at least 1 / (448 * 512) (as
// vLLM's per-token quantization); bytes = fp8Encode(y / scale).
struct Fp8Row {
  float scale;
  std::vector<uint8_t> bytes;
};
Fp8Row quantizeFp8Dynamic(const std::vector<float>& y);
// FP8 with a given per-tensor scale (static): bytes = fp8Encode(y / scale).
std::vector<uint8_t> quantizeFp8Static(const std::vector<float>& y, float scale);

// NVFP4: blocks of 16 values; block scale s = e4m3(global_scale * max|block| / 6); values
// e2m1(y * global_scale / s) (0 where s is 0), two per byte, the first in the low nibble.
struct Fp4Row {
  std::vector<uint8_t> packed;       // hidden / 2 bytes
  std::vector<uint8_t> block_scale;  // hidden / 16 e4m3 bytes, in row order
};
Fp4Row quantizeNvfp4(const std::vector<float>& y, float global_scale);

// Where block scale `block` of row `row` sits in vLLM's swizzled scale tensor (the 128 x 4
// tiles of scaled_fp4_quant's default layout), for `blocks` = hidden / 16 scales per row: rows
// padded to 128, blocks to 4.
size_t nvfp4ScaleOffset(int row, int block, int blocks);
// Bytes of that tensor for `rows` rows.
size_t nvfp4ScaleBytes(int rows, int blocks);

}  // namespace ref
}  // namespace tpar

#endif  // TPAR_TESTS_COMMON_FUSED_REFERENCE_H_
