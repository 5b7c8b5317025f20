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
#define TPAR_HD_UNROLL _Pragma("unroll")
#else
#define TPAR_HD inline
#define TPAR_HD_UNROLL
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

// x * y and x * y + z, each rounded once to nearest even. On the GPU the intrinsics keep nvcc
// from fusing a product into the addition after it; on the host a compiler allowed to contract
// could fuse mulRn's product only where the codec's products are exact (code x scale) or feed
// no addition, so both compute the same bits.
TPAR_HD float mulRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}

TPAR_HD float fmaRn(float x, float y, float z) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(x, y, z);
#else
  return std::fmaf(x, y, z);
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

// What a block's scale is made from: the largest finite magnitude of n values (amax) and
// whether an infinity is among them; NaNs count for neither.
TPAR_HD void wireBlockPeak(const float* x, int n, float* amax, bool* inf) {
  float top = 0.0f;
  bool any_inf = false;
  for (int i = 0; i < n; ++i) {
    if (wire::isInf(x[i])) {
      any_inf = true;
    } else if (!wire::isNan(x[i])) {
      const float a = wire::absf(x[i]);
      top = a > top ? a : top;
    }
  }
  *amax = top;
  *inf = any_inf;
}

// One block: its scale from the values, then every value's code (n <= the block's size;
// missing values count as zero).
template <WireFormat F>
TPAR_HD uint16_t wireBlockScale(const float* x, int n) {
  float amax;
  bool inf;
  wireBlockPeak(x, n, &amax, &inf);
  return wireScale<F>(amax, inf);
}

// A block of the kernels (wire_two_shot.cuh) is 4, 8 or 16 lanes' 16-byte vectors of 8 values,
// within one warp's run: 32, 64 or 128 values per bf16 scale (docs/WIRE.md, "The block size").
TPAR_HD constexpr bool wireKernelBlockValid(int block) {
  return block == 32 || block == 64 || block == 128;
}
// The 16-byte vectors of 8 values of one block: the lanes that agree on its scale.
TPAR_HD constexpr int wireBlockVecs(int block) { return block / 8; }
// Blocks in one warp's run of 32 vectors: the unit the formats' schedule aligns chunks, slices
// and steps to (NOTE [wire schedule in runs of a warp]).
TPAR_HD constexpr int wireBlockAlign(int block) { return 32 / wireBlockVecs(block); }

// The block the kernels send with format f. Each format has its own, so that a larger block,
// fewer scale bytes and accesses for more error, can be taken where it pays for one format
// alone (the error grows the most for INT4: docs/WIRE.md, "Accuracy"). FP8 sends blocks of
// 128: timed faster than 32 at every rank count, with the least growth of error, within the
// bound its tests hold (docs/WIRE.md, "The block size"); INT8 and INT4 at 128 exceed theirs and
// send blocks of 32, the most accurate.
TPAR_HD constexpr int wireKernelBlock(WireFormat f) {
  return f == WireFormat::kFp8    ? 128
         : f == WireFormat::kInt8 ? 32
                                  : 32;
}

// Bits of one code of format f (WireCodes<F>::kBits, for a format known only at run time).
TPAR_HD constexpr int wireCodeBits(WireFormat f) {
  return f == WireFormat::kFp8    ? WireCodes<WireFormat::kFp8>::kBits
         : f == WireFormat::kInt8 ? WireCodes<WireFormat::kInt8>::kBits
                                  : WireCodes<WireFormat::kInt4>::kBits;
}

// Bytes one kernel block of format f takes in an area: its codes and its bf16 scale.
TPAR_HD constexpr uint64_t wireAreaBlockBytes(WireFormat f) {
  return uint64_t(wireKernelBlock(f)) * wireCodeBits(f) / 8 + 2;
}

// NOTE [wire pieces by the bytes that travel]
// The most values of format f that one launch of n ranks carries in an area of `area` bytes
// (the scatter or the gather half, which the lossless schedule fills with a piece's 16-bit
// values): n chunks of whole runs of a warp (NOTE [wire schedule in runs of a warp]) whose codes
// and scales fit the area. A format sends about half (FP8, INT8) or a little over a quarter
// (INT4) of the lossless bytes, so the same area holds a call about twice or three and a half
// times as long. A call that fits runs as one launch instead of two or more, each a fill and a
// drain of the pipeline: at 12 MiB that ran faster at 2, 4 and 8 virtual ranks with every
// format timed. Longer calls: INT4, whose longest call holds three and a half lossless pieces,
// cuts them into pieces of up to that length (as few as it takes, of one length); FP8 and INT8,
// whose longest is a little under two, keep pieces of the lossless length. With at most 8 steps
// and steps in parts (NOTE [wire steps in parts that fit the staged scales]) the long pieces ran
// INT4 faster at 2, 4 and 8 virtual ranks from 32 to 128 MiB, and FP8 slower, its pieces only
// a third longer (docs/PERFORMANCE.md, "Long pieces for INT4, release stores for the flags";
// before those two changes the long pieces had been even or slower: "Longer pieces and the
// receive area").
TPAR_HD uint64_t wirePieceValues(WireFormat f, int n, uint64_t area) {
  const uint64_t align = wireBlockAlign(wireKernelBlock(f));
  const uint64_t chunk = area / (uint64_t(n) * wireAreaBlockBytes(f)) / align * align;
  return uint64_t(n) * chunk * wireKernelBlock(f);
}

// Bytes on the wire per value in the kernels' blocks: the codes and the block's scale.
template <WireFormat F>
constexpr double wireBytesPerValue() {
  return static_cast<double>(wireAreaBlockBytes(F)) / wireKernelBlock(F);
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

// NOTE [wire codec fast paths]
// The kernels code one 16-byte vector of 8 values per thread. Written value by value, the
// codec tests every value for NaN and infinity and divides each by the scale with an IEEE
// division, whose inline sequence and slow-path branch the compiler repeats per value.
// WireVec gives the same bits with the tests taken once per vector:
//  * magnitude: the largest magnitude as the largest of the values' magnitude bits (for floats
//    >= 0 the integer order is the float order); a NaN or infinity when one is there, and then
//    the value-by-value loop finds the block's part of the scale;
//  * encode: where every |x| / s is at most 1024 (no code is larger) and s lies in
//    [2^-96, 2^96], x / s as the division's correctly rounded quotient from the correctly
//    rounded reciprocal r = 1/s (once per vector): q0 = x r, then q = q0 + (x - s q0) r with
//    both steps fused multiply-adds (correctedQuotient). With r within half an ulp of 1/s and
//    q0 within one ulp of x / s, q is x / s rounded to nearest even (Markstein's correction
//    theorem; the sweep bench/experiments/wire_codec_sweep.cc checks every pair of
//    significands), so the codes equal wireEncode's. The bounds keep r, q0 and the remainder in
//    fp32's normal range wherever the quotient could reach a nonzero code. Elsewhere, and with
//    a NaN or infinity in the vector (whose magnitude then fails the bound), each value takes
//    wireEncode;
//  * decode: with no NaN code among the vector's codes and no infinity in the block (the
//    scale's sign bit), each code's value times s, the integers' codes turned into floats by
//    placing them in the mantissa of 2^23 and subtracting (exact, and full rate where an
//    integer-to-float conversion is not); otherwise wireDecode per value.
// Every operation is an IEEE one rounded to nearest, named as such (the host and the GPU
// compute the same bits); the products code x s are exact, so the reduction may fuse them
// into its additions. Unit tests compare WireVec with wireEncode and wireDecode bit for bit.
namespace wire {

// Whether any 8-bit (kBits 8) or 4-bit field of v is zero: the borrow of subtracting one from
// each field reaches its top bit exactly when the field was zero or borrowed into, and the
// lowest zero field always does.
template <int kBits>
TPAR_HD bool anyFieldZero(uint32_t v) {
  constexpr uint32_t ones = kBits == 8 ? 0x01010101u : 0x11111111u;
  constexpr uint32_t tops = kBits == 8 ? 0x80808080u : 0x88888888u;
  return ((v - ones) & ~v & tops) != 0;
}

// x / s from r, 1 / s rounded to nearest: q0 = x r, corrected once by the exact remainder
// x - s q0. Within the fast path's bounds this is x / s rounded to nearest even.
TPAR_HD float correctedQuotient(float x, float s, float r) {
  const float q0 = mulRn(x, r);
  return fmaRn(fmaRn(-s, q0, x), r, q0);
}

// The bits of the float 2^23 + byte i (0..3) of w: one byte permute on the GPU.
TPAR_HD uint32_t magicByte(uint32_t w, int i) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(w, 0x4B000000u, 0x7440u | static_cast<uint32_t>(i));
#else
  return 0x4B000000u | ((w >> (8 * i)) & 0xFFu);
#endif
}

}  // namespace wire

template <WireFormat F>
struct WireVec {
  using C = WireCodes<F>;
  static constexpr int kPerWord = 32 / C::kBits;
  static constexpr int kWords = 8 / kPerWord;  // 2 (FP8, INT8) or 1 (INT4)
  static constexpr float kMinFastScale = 0x1p-96f;
  static constexpr float kMaxFastScale = 0x1p96f;
  static constexpr float kMaxFastQuotient = 1024.0f;  // above every format's largest code
  // A word of codes that are all the NaN code.
  static constexpr uint32_t kNanFields =
      uint32_t(C::kNan) * (C::kBits == 8 ? 0x01010101u : 0x11111111u);

  // The largest magnitude of 8 values, as the largest of their magnitude bits (for floats >= 0
  // the integer order is the float order): a NaN or infinity when one is among them.
  TPAR_HD static float magnitude(const float* x) {
    uint32_t m = 0;
    TPAR_HD_UNROLL
    for (int i = 0; i < 8; ++i) {
      const uint32_t a = wire::floatBits(x[i]) & 0x7FFFFFFFu;
      m = a > m ? a : m;
    }
    return wire::bitsFloat(m);
  }

  // The vector's part of its block's scale, from its values and their magnitude m: the largest
  // finite magnitude (amax) and whether an infinity is there, as wireBlockScale counts them.
  TPAR_HD static void scalePart(const float* x, float m, float* amax, bool* inf) {
    if (wire::floatBits(m) < 0x7F800000u) {
      *amax = m;
      *inf = false;
      return;
    }
    wireBlockPeak(x, 8, amax, inf);
  }

  // Whether encode takes the fast path for values of magnitude m (as magnitude returns it)
  // under a scale of value s: the fast path's bounds, false where m is NaN or infinite.
  TPAR_HD static bool fastEncode(float m, float s) {
    return s >= kMinFastScale && s <= kMaxFastScale && m <= wire::mulRn(s, kMaxFastQuotient);
  }

  // The codes of 8 values under `scale` (wireScale's bits) into kWords words, m their
  // magnitude (magnitude). The same bits as wireEncode<F> per value.
  TPAR_HD static void encode(const float* x, uint16_t scale, float m, uint32_t* w) {
    const float s = wire::bf16Value(static_cast<uint16_t>(scale & 0x7FFFu));
    if (fastEncode(m, s)) {
      const float r = wire::divRn(1.0f, s);
      const float top = (scale & 0x8000u) != 0 ? C::kMaxWithInf : C::kMax;
      float y[8];
      TPAR_HD_UNROLL
      for (int i = 0; i < 8; ++i) {
        // Never NaN here, so the clamp may be min and max.
        y[i] = fminf(fmaxf(wire::correctedQuotient(x[i], s, r), -top), top);
        if (F == WireFormat::kFp8) {
          // A zero keeps its sign (the correction adds +0 to -0).
          y[i] = wire::bitsFloat((wire::floatBits(y[i]) & 0x7FFFFFFFu) |
                                 (wire::floatBits(x[i]) & 0x80000000u));
        } else {
          y[i] = rintf(y[i]);
        }
      }
      TPAR_HD_UNROLL
      for (int k = 0; k < kWords; ++k) {
        uint32_t word = 0;
        if constexpr (F == WireFormat::kFp8) {
          // Two codes per conversion (one instruction from sm_89 on).
          TPAR_HD_UNROLL
          for (int p = 0; p < 2; ++p) {
            const float2 pair = make_float2(y[4 * k + 2 * p], y[4 * k + 2 * p + 1]);
            const uint32_t two = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
            word |= two << (16 * p);
          }
        } else {
          TPAR_HD_UNROLL
          for (int i = 0; i < kPerWord; ++i)
            word |= uint32_t(C::encode(y[k * kPerWord + i])) << (i * C::kBits);
        }
        w[k] = word;
      }
      return;
    }
    TPAR_HD_UNROLL
    for (int k = 0; k < kWords; ++k) {
      uint32_t word = 0;
      TPAR_HD_UNROLL
      for (int i = 0; i < kPerWord; ++i)
        word |= uint32_t(wireEncode<F>(x[k * kPerWord + i], scale)) << (i * C::kBits);
      w[k] = word;
    }
  }

  // Code i (0..7) of the words.
  TPAR_HD static uint32_t code(const uint32_t* w, int i) {
    constexpr uint32_t mask = (1u << C::kBits) - 1;
    return (w[i / kPerWord] >> ((i % kPerWord) * C::kBits)) & mask;
  }

  // Whether wireDecode's NaN and infinity rules leave every code of the words to code x s.
  TPAR_HD static bool plainCodes(const uint32_t* w, uint16_t scale) {
    bool nan = false;
    TPAR_HD_UNROLL
    for (int k = 0; k < kWords; ++k)
      nan |= wire::anyFieldZero<C::kBits>(w[k] ^ kNanFields);
    return !nan && (scale & 0x8000u) == 0;
  }

  // The 8 values of the codes under `scale`: wireDecode<F>'s bits.
  TPAR_HD static void decode(const uint32_t* w, uint16_t scale, float* x) {
    if (plainCodes(w, scale)) {
      const float s = wire::bf16Value(scale);
      if constexpr (F == WireFormat::kFp8) {
        // Two codes per conversion (one instruction from sm_89 on).
        TPAR_HD_UNROLL
        for (int k = 0; k < 4; ++k) {
          const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
              static_cast<__nv_fp8x2_storage_t>(w[k / 2] >> (16 * (k % 2))), __NV_E4M3);
          __half_raw lo, hi;
          lo.x = h.x;
          hi.x = h.y;
          x[2 * k] = wire::mulRn(__half2float(__half(lo)), s);
          x[2 * k + 1] = wire::mulRn(__half2float(__half(hi)), s);
        }
      } else if constexpr (F == WireFormat::kInt8) {
        // Offset binary in the low mantissa bits of 2^23: 2^23 + code + 128, exactly.
        TPAR_HD_UNROLL
        for (int i = 0; i < 8; ++i) {
          const uint32_t o = w[i / 4] ^ 0x80808080u;
          x[i] = wire::mulRn(wire::bitsFloat(wire::magicByte(o, i % 4)) - 8388736.0f, s);
        }
      } else {
        // The same with 2^23 + code + 8, the even codes' nibbles and the odd ones' as bytes.
        const uint32_t o = w[0] ^ 0x88888888u;
        const uint32_t even = o & 0x0F0F0F0Fu, odd = (o >> 4) & 0x0F0F0F0Fu;
        TPAR_HD_UNROLL
        for (int b = 0; b < 4; ++b) {
          x[2 * b] = wire::mulRn(wire::bitsFloat(wire::magicByte(even, b)) - 8388616.0f, s);
          x[2 * b + 1] = wire::mulRn(wire::bitsFloat(wire::magicByte(odd, b)) - 8388616.0f, s);
        }
      }
      return;
    }
    TPAR_HD_UNROLL
    for (int i = 0; i < 8; ++i) x[i] = wireDecode<F>(static_cast<uint8_t>(code(w, i)), scale);
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
