// Compressed wire formats: what a lossy codec puts on the wire for one block of values
// (docs/WIRE.md). Host and device share this code, so that the host's tests and the accuracy
// study (bench/experiments/wire_accuracy.cc) check the very arithmetic the kernels run.
//
// A block of kBlock values travels as kBlock codes of the format's width plus one scale: the
// bf16 value s with amax / s <= the format's largest finite code, rounded up so that nothing
// saturates. Decoding is code x s, exact in fp32 (the code has at most 4 significant bits
// (FP8) or 7 (INT8), the scale 8). Two rules that hold whatever is in the block:
//  * a NaN decodes as NaN: it has its own code (INT8 -128, INT4 -8, FP8 e4m3 0x7F);
//  * an infinity decodes as the same infinity: a block holding one sets the scale's sign bit,
//    and then the largest code (+-127, +-7, +-448) means +-Inf while the finite values take one
//    step less (+-126, +-6, +-416), scaled from the largest finite magnitude.
// Encoding is a pure function of the block: every rank that encodes the same values writes the
// same bits.
#ifndef TPAR_KERNELS_PRIMS_WIRE_H_
#define TPAR_KERNELS_PRIMS_WIRE_H_

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TPAR_HD __host__ __device__ __forceinline__
#else
#define TPAR_HD inline
#endif

namespace tpar {
namespace kernels {

// Keep the numbers in step with tparWire_t (include/tpar/tpar.h) once that exists.
enum class WireFormat : uint8_t { kFp8 = 1, kInt8 = 2, kInt4 = 3 };

namespace wire {

// Bit casts by memcpy, which host and device compilers both turn into moves.
TPAR_HD uint32_t floatBits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

TPAR_HD float bitsFloat(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

TPAR_HD bool isNan(float x) { return (floatBits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
TPAR_HD bool isInf(float x) { return (floatBits(x) & 0x7FFFFFFFu) == 0x7F800000u; }
TPAR_HD float absf(float x) { return bitsFloat(floatBits(x) & 0x7FFFFFFFu); }
TPAR_HD float quietNan() { return bitsFloat(0x7FC00000u); }

// x / y rounded to nearest even, whatever the compiler's flags.
TPAR_HD float divRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, y);
#else
  return x / y;
#endif
}

// The smallest bf16 value >= x, for finite x >= 0 (its bits: the upper half of an fp32).
TPAR_HD uint16_t bf16Up(float x) {
  const uint32_t u = floatBits(x);
  uint32_t hi = u >> 16;
  if ((u & 0xFFFFu) != 0) ++hi;  // carries into the exponent where it must; never past Inf
  return static_cast<uint16_t>(hi);
}

TPAR_HD float bf16Value(uint16_t b) { return bitsFloat(uint32_t(b) << 16); }

// FP8 e4m3 (bias 7, no infinities, 0x7F and 0xFF NaN, largest finite 448), rounded to nearest
// even and saturated to +-448: cuda_fp8.h's conversions, as the fused call's FP8 output uses
// them (norm_epilogue.cuh); they run in hardware on sm_89+ and in software on older GPUs and
// the host, to the same bits.
TPAR_HD uint8_t e4m3FromFloat(float x) {
  if (isNan(x)) return 0x7F;  // one NaN code, whatever the NaN's sign
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

TPAR_HD float e4m3ToFloat(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3)));
}

}  // namespace wire

// A format's codes: the largest finite code and, in blocks holding an infinity, the one that
// means +-Inf instead.
template <WireFormat F>
struct WireCodes;

template <>
struct WireCodes<WireFormat::kInt8> {
  static constexpr int kBits = 8;
  static constexpr float kMax = 127.0f;
  static constexpr float kMaxWithInf = 126.0f;
  static constexpr uint8_t kNan = 0x80;  // -128
  TPAR_HD static uint8_t encode(float q) { return static_cast<uint8_t>(static_cast<int8_t>(q)); }
  TPAR_HD static float decode(uint8_t c) { return static_cast<float>(static_cast<int8_t>(c)); }
};

template <>
struct WireCodes<WireFormat::kInt4> {
  static constexpr int kBits = 4;
  static constexpr float kMax = 7.0f;
  static constexpr float kMaxWithInf = 6.0f;
  static constexpr uint8_t kNan = 0x8;  // -8
  TPAR_HD static uint8_t encode(float q) {
    return static_cast<uint8_t>(static_cast<int>(q) & 0xF);
  }
  TPAR_HD static float decode(uint8_t c) {
    return static_cast<float>((c & 0x8) ? static_cast<int>(c) - 16 : static_cast<int>(c));
  }
};

template <>
struct WireCodes<WireFormat::kFp8> {
  static constexpr int kBits = 8;
  static constexpr float kMax = 448.0f;
  static constexpr float kMaxWithInf = 416.0f;  // the largest e4m3 value below 448
  static constexpr uint8_t kNan = 0x7F;
  TPAR_HD static uint8_t encode(float q) { return wire::e4m3FromFloat(q); }
  TPAR_HD static float decode(uint8_t c) { return wire::e4m3ToFloat(c); }
};

// The scale of a block: amax is the largest finite magnitude, inf whether it holds an infinity.
template <WireFormat F>
TPAR_HD uint16_t wireScale(float amax, bool inf) {
  const float top = inf ? WireCodes<F>::kMaxWithInf : WireCodes<F>::kMax;
  // amax / top, rounded up to bf16 after an fp32 division that may itself have rounded down:
  // one more bf16 step where the product falls short keeps amax / s <= top.
  // amax / top below fp32's smallest subnormal rounds to zero: the smallest bf16 then, whose
  // codes are all zero for such values either way.
  uint16_t s = amax > 0.0f ? wire::bf16Up(wire::divRn(amax, top)) : 0;
  if (amax > 0.0f && s == 0) s = 1;
  if (s != 0 && wire::bf16Value(s) * top < amax) ++s;
  return static_cast<uint16_t>(s | (inf ? 0x8000u : 0u));
}

// The code of one value x under scale bits `scale` (as wireScale returns them).
template <WireFormat F>
TPAR_HD uint8_t wireEncode(float x, uint16_t scale) {
  using C = WireCodes<F>;
  const bool inf_block = (scale & 0x8000u) != 0;
  const float s = wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFFu));
  const float top = inf_block ? C::kMaxWithInf : C::kMax;
  if (wire::isNan(x)) return C::kNan;
  if (wire::isInf(x)) {
    // Only blocks whose scale says so hold infinities; the largest code is Inf there.
    const float big = x > 0.0f ? C::kMax : -C::kMax;
    return C::encode(big);
  }
  if (s == 0.0f) return C::encode(0.0f);
  float y = wire::divRn(x, s);
  if (y > top) y = top;
  if (y < -top) y = -top;
  if (F != WireFormat::kFp8) y = rintf(y);
  return C::encode(y);
}

template <WireFormat F>
TPAR_HD float wireDecode(uint8_t code, uint16_t scale) {
  using C = WireCodes<F>;
  if (code == C::kNan) return wire::quietNan();
  const float q = C::decode(code);
  if ((scale & 0x8000u) != 0 && (q == C::kMax || q == -C::kMax))
    return q > 0.0f ? wire::bitsFloat(0x7F800000u) : wire::bitsFloat(0xFF800000u);
  return q * wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFFu));
}

// One block: its scale from the values, then every value's code (n <= the block's size;
// missing values count as zero).
template <WireFormat F>
TPAR_HD uint16_t wireBlockScale(const float* x, int n) {
  float amax = 0.0f;
  bool inf = false;
  for (int i = 0; i < n; ++i) {
    if (wire::isInf(x[i])) {
      inf = true;
    } else if (!wire::isNan(x[i])) {
      const float a = wire::absf(x[i]);
      amax = a > amax ? a : amax;
    }
  }
  return wireScale<F>(amax, inf);
}

// The block the kernels send (wire_two_shot.cuh): 32 values, one bf16 scale. The kernel is
// written for any block of 32, 64 or 128 values (docs/WIRE.md, "The block size").
constexpr int kWireKernelBlock = 32;
static_assert(kWireKernelBlock == 32 || kWireKernelBlock == 64 || kWireKernelBlock == 128,
              "a kernel block is 4, 8 or 16 lanes' vectors of 8 values, within one warp's run");
// The 16-byte vectors of 8 values of one kernel block: the lanes that agree on its scale.
constexpr int kWireKernelBlockVecs = kWireKernelBlock / 8;
// Kernel blocks in one warp's run of 32 vectors: the unit the formats' schedule aligns chunks,
// slices and steps to (NOTE [wire schedule in runs of a warp]).
constexpr int kWireKernelAlign = 32 / kWireKernelBlockVecs;

// Bytes on the wire per value in the kernels' blocks: the codes and the block's scale.
template <WireFormat F>
constexpr double wireBytesPerValue() {
  return (kWireKernelBlock * WireCodes<F>::kBits / 8 + 2) / static_cast<double>(kWireKernelBlock);
}

// One block in 32-bit words, as a thread of a kernel holds it: code i in bits 8i (FP8, INT8) or
// 4i (INT4) of the stream of words, lowest first (the byte order of both host and GPU). n <= kBlock
// values of x, the rest count as zero; returns the scale.
template <WireFormat F, int kBlock>
struct WireBlock {
  static constexpr int kWords = kBlock * WireCodes<F>::kBits / 32;
  static constexpr int kPerWord = 32 / WireCodes<F>::kBits;

  TPAR_HD static uint16_t encode(const float* x, int n, uint32_t* words) {
    const uint16_t scale = wireBlockScale<F>(x, n);
    for (int w = 0; w < kWords; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < kPerWord; ++k) {
        const int i = w * kPerWord + k;
        const uint32_t c = wireEncode<F>(i < n ? x[i] : 0.0f, scale);
        word |= c << (k * WireCodes<F>::kBits);
      }
      words[w] = word;
    }
    return scale;
  }

  TPAR_HD static void decode(const uint32_t* words, uint16_t scale, float* x, int n) {
    constexpr uint32_t mask = (1u << WireCodes<F>::kBits) - 1;
    for (int i = 0; i < n; ++i) {
      const uint32_t c = (words[i / kPerWord] >> ((i % kPerWord) * WireCodes<F>::kBits)) & mask;
      x[i] = wireDecode<F>(static_cast<uint8_t>(c), scale);
    }
  }
};

// A tile on the wire: kBlocks blocks' codes, then their scales in one 16-byte vector. Tiles
// keep every piece 16-byte aligned, so that the kernels move whole vectors, and a chunk of the
// user's buffer maps to whole tiles.
template <WireFormat F, int kBlock>
struct WireTile {
  static_assert(kBlock % 32 == 0, "a block is whole 16-byte vectors of 4-bit codes");
  using Block = WireBlock<F, kBlock>;
  static constexpr int kBlocks = 8;  // 8 bf16 scales fill one vector
  static constexpr int kValues = kBlocks * kBlock;
  static constexpr int kBlockCodeBytes = Block::kWords * 4;
  static constexpr int kCodeBytes = kBlocks * kBlockCodeBytes;
  static constexpr int kBytes = kCodeBytes + 16;

  // n <= kValues values of x (the rest count as zero) into kBytes bytes at out.
  static void encode(const float* x, int n, uint8_t* out) {
    uint16_t scales[kBlocks];
    uint32_t words[Block::kWords];
    for (int b = 0; b < kBlocks; ++b) {
      const int first = b * kBlock;
      const int m = n - first < 0 ? 0 : (n - first > kBlock ? kBlock : n - first);
      scales[b] = Block::encode(x + first, m, words);
      std::memcpy(out + b * kBlockCodeBytes, words, sizeof(words));
    }
    std::memcpy(out + kCodeBytes, scales, sizeof(scales));
  }

  static void decode(const uint8_t* in, int n, float* x) {
    uint16_t scales[kBlocks];
    uint32_t words[Block::kWords];
    std::memcpy(scales, in + kCodeBytes, sizeof(scales));
    for (int b = 0; b * kBlock < n; ++b) {
      std::memcpy(words, in + b * kBlockCodeBytes, sizeof(words));
      const int m = n - b * kBlock > kBlock ? kBlock : n - b * kBlock;
      Block::decode(words, scales[b], x + b * kBlock, m);
    }
  }
};

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_WIRE_H_
