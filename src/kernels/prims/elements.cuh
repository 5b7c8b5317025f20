// Element types, the reduction op, the fp32 accumulator, the caller's buffers, and the two
// slots an algorithm is templated on besides its mailbox: the codec (what travels) and the
// epilogue (what the owner of a reduced chunk does with it).
#ifndef TPAR_KERNELS_PRIMS_ELEMENTS_CUH_
#define TPAR_KERNELS_PRIMS_ELEMENTS_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/launch.h"
#include "kernels/prims/ptx.cuh"

namespace tpar {
namespace kernels {

template <typename T>
struct ElemTraits;

struct Bf16Tag {};
struct F16Tag {};

template <>
struct ElemTraits<float> {
  static constexpr int kPerVec = 4;
  static constexpr int kBytes = 4;
  __device__ static float toFloat(const Vec& v, int i) { return __uint_as_float(v.w[i]); }
  __device__ static void fromFloat(Vec& v, int i, float x) { v.w[i] = __float_as_uint(x); }
};

// Two 16-bit elements per 32-bit word; Conv converts one to and from fp32.
template <class Conv>
struct Elem16Traits {
  static constexpr int kPerVec = 8;
  static constexpr int kBytes = 2;
  __device__ static float toFloat(const Vec& v, int i) {
    return Conv::toFloat(static_cast<uint16_t>((v.w[i >> 1] >> ((i & 1) * 16)) & 0xFFFFu));
  }
  __device__ static void fromFloat(Vec& v, int i, float x) {
    const uint32_t h = Conv::fromFloat(x);
    const int shift = (i & 1) * 16;
    v.w[i >> 1] = (v.w[i >> 1] & ~(0xFFFFu << shift)) | (h << shift);
  }
};

struct Bf16Conv {
  __device__ static float toFloat(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
  __device__ static uint32_t fromFloat(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct F16Conv {
  __device__ static float toFloat(uint16_t b) { return __half2float(__ushort_as_half(b)); }
  __device__ static uint32_t fromFloat(float x) { return __half_as_ushort(__float2half_rn(x)); }
};
template <>
struct ElemTraits<Bf16Tag> : Elem16Traits<Bf16Conv> {};
template <>
struct ElemTraits<F16Tag> : Elem16Traits<F16Conv> {};

// The reduction op as a type. RuntimeOp, a select per element, keeps one kernel for all three
// ops (a kernel per op would triple the kernels and init's preload).
struct RuntimeOp {
  int op;  // tparRedOp_t
  __device__ __forceinline__ float operator()(float x, float y) const {
    return op == tparSum ? x + y : (op == tparMax ? fmaxf(x, y) : fminf(x, y));
  }
};

// fp32 accumulator of one vector. Accumulation order is fixed (rank 0 first) on every rank, and the
// result is rounded once at the end (docs/DESIGN.md principle 6). Every codec accumulates in it:
// what travels may be narrower, the sum never is.
template <typename T, typename Op = RuntimeOp>
struct Acc {
  static constexpr int kN = ElemTraits<T>::kPerVec;
  float x[kN];

  // Rank s's contribution, in rank order: rank 0's initializes.
  __device__ __forceinline__ void take(int s, const Vec& v, Op op) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const float y = ElemTraits<T>::toFloat(v, i);
      x[i] = s == 0 ? y : op(x[i], y);
    }
  }
  __device__ __forceinline__ Vec round() const {
    Vec v{{0, 0, 0, 0}};
#pragma unroll
    for (int i = 0; i < kN; ++i) ElemTraits<T>::fromFloat(v, i, x[i]);
    return v;
  }
};

// The caller's buffers: any element-aligned pointer, any count.
// Loads vector `v` of the caller's buffer; elements past `count` read as zero (never a sentinel
// word, since a zero half makes the word differ from 0xFFFFFFFF). kWide = false moves a whole
// vector as four 32-bit words instead of one 128-bit access (the caller says why).
template <typename T, bool kWide = true>
__device__ __forceinline__ Vec loadUser(const void* base, uint64_t v, uint64_t count,
                                        bool aligned) {
  constexpr int kN = ElemTraits<T>::kPerVec;
  constexpr int kB = ElemTraits<T>::kBytes;
  const uint64_t e0 = v * kN;
  if (!kWide && aligned && e0 + kN <= count)
    return *reinterpret_cast<const Vec*>(static_cast<const char*>(base) + v * kVecBytes);
  if (aligned && e0 + kN <= count) {
    // Through uint4, whose 16-byte alignment makes this one 128-bit load: a Vec's words are only
    // 4-byte aligned, and a Vec access compiles to four 32-bit ones. (Aligning Vec itself gives
    // the same loads but costs registers and spills wherever Vecs are held.)
    const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const char*>(base) + v * kVecBytes);
    return Vec{{q.x, q.y, q.z, q.w}};
  }
  Vec out{{0, 0, 0, 0}};
  for (int i = 0; i < kN; ++i) {
    if (e0 + i < count) {
      const char* p = static_cast<const char*>(base) + (e0 + i) * kB;
      uint32_t bits = kB == 4 ? *reinterpret_cast<const uint32_t*>(p)
                              : uint32_t(*reinterpret_cast<const uint16_t*>(p));
      if (kB == 4) {
        out.w[i] = bits;
      } else {
        out.w[i >> 1] |= bits << ((i & 1) * 16);
      }
    }
  }
  return out;
}

template <typename T, bool kWide = true>
__device__ __forceinline__ void storeUser(void* base, uint64_t v, uint64_t count, bool aligned,
                                          const Vec& val) {
  constexpr int kN = ElemTraits<T>::kPerVec;
  constexpr int kB = ElemTraits<T>::kBytes;
  const uint64_t e0 = v * kN;
  if (!kWide && aligned && e0 + kN <= count) {
    *reinterpret_cast<Vec*>(static_cast<char*>(base) + v * kVecBytes) = val;
    return;
  }
  if (aligned && e0 + kN <= count) {
    // One 128-bit store, as in loadUser.
    *reinterpret_cast<uint4*>(static_cast<char*>(base) + v * kVecBytes) =
        make_uint4(val.w[0], val.w[1], val.w[2], val.w[3]);
    return;
  }
  for (int i = 0; i < kN; ++i) {
    if (e0 + i < count) {
      char* p = static_cast<char*>(base) + (e0 + i) * kB;
      if (kB == 4) {
        *reinterpret_cast<uint32_t*>(p) = val.w[i];
      } else {
        *reinterpret_cast<uint16_t*>(p) =
            static_cast<uint16_t>((val.w[i >> 1] >> ((i & 1) * 16)) & 0xFFFFu);
      }
    }
  }
}

// Codec: what travels.
constexpr uint32_t kSentinel = 0xFFFFFFFFu;
constexpr uint32_t kEscaped = 0xFFBFFFFFu;

__device__ __forceinline__ uint32_t escapeWord(uint32_t x) { return x == kSentinel ? kEscaped : x; }

// encode() runs on every vector a rank contributes (its own too, so every rank reduces the same
// bits) and on a reduced vector before it leaves; decode() on every vector read. Where the
// mailbox reserves a word (NOTE [sentinel protocol]) encode escapes it after converting; a lossy
// codec (FP8, INT8) must keep an escaped NaN a NaN: the escape may only change NaN payload bits.
struct IdentityCodec {
  template <bool kReservesWord>
  __device__ __forceinline__ static Vec encode(Vec v) {
    if (kReservesWord) {
#pragma unroll
      for (int i = 0; i < 4; ++i) v.w[i] = escapeWord(v.w[i]);
    }
    return v;
  }
  __device__ __forceinline__ static Vec decode(const Vec& v) { return v; }
};

// Epilogue: runs on the fp32 accumulator of each reduced vector, on the rank that owns it,
// before the result is rounded, stored and sent (so every rank holds its bits); false gives up.
// kRowVecs > 1 aligns chunks to rows of that many vectors for a row-wise epilogue (residual +
// RMSNorm); scratchBytes: workspace per chunk, between the two phases' areas (hierarchical).
struct IdentityEpilogue {
  static constexpr uint64_t kRowVecs = 1;
  template <typename T>
  __device__ static uint64_t scratchBytes(const AllReduceArgs&, uint64_t /*chunk*/) {
    return 0;
  }
  template <typename T, class Call, class W>
  __device__ __forceinline__ static bool apply(const Call&, uint64_t /*j*/, Acc<T>&, W&) {
    return true;
  }
};

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_ELEMENTS_CUH_
