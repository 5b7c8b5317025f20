// The work after the all-reduce in the fused kernels (docs/FUSED.md), shared by their
// schedules: the block reductions, the row groups' exchange (NOTE [row groups]), the quantized
// formats, and normSlice, the residual add + RMSNorm + quantization of one slice of a row.
#ifndef TPAR_KERNELS_NORM_EPILOGUE_CUH_
#define TPAR_KERNELS_NORM_EPILOGUE_CUH_

#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include "kernels/prims/mailbox.cuh"

namespace tpar {
namespace kernels {
namespace norm {


// The block's reduction of one value per thread by `op` (sum, max), in a fixed order (warps by
// shuffle, then thread 0 over the warps' results), so every rank, with the same block size, gets
// the same bits. Every thread of the block calls it; every thread gets the result.
template <class Op>
__device__ __forceinline__ float blockReduce(float v, Op op) {
  __shared__ float s_warp[kMaxThreads / 32];
  __shared__ float s_total;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) s_warp[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0;  // the identity of both: the maxima reduced are of absolute values
    for (int i = 0; i < static_cast<int>(blockDim.x + 31) / 32; ++i) t = op(t, s_warp[i]);
    s_total = t;
  }
  __syncthreads();
  const float t = s_total;
  __syncthreads();  // s_warp and s_total are reused by the next row
  return t;
}

__device__ __forceinline__ float blockSum(float v) {
  return blockReduce(v, [](float x, float y) { return x + y; });
}
__device__ __forceinline__ float blockMax(float v) {
  return blockReduce(v, [](float x, float y) { return fmaxf(x, y); });
}

// The quantized formats of tpar.h (tparNormQuant_t), element by element: e4m3 with saturation
// to 448, e2m1 with saturation to 6, both rounding to nearest even.
__device__ __forceinline__ uint32_t e4m3(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ float e4m3Value(uint32_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}
__device__ __forceinline__ uint32_t e2m1(float x) {
  return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest) & 0xFu;
}
constexpr float kFp8Max = 448.0f;
constexpr float kFp4Max = 6.0f;

// Stores `n` bytes (8 or 4) of `packed` at `p` + off: one store where aligned, else byte by byte.
__device__ __forceinline__ void storeBytes(void* p, uint64_t off, uint64_t packed, int n,
                                           bool aligned) {
  char* at = static_cast<char*>(p) + off;
  if (aligned && n == 8) {
    *reinterpret_cast<uint2*>(at) = make_uint2(static_cast<uint32_t>(packed),
                                               static_cast<uint32_t>(packed >> 32));
  } else if (aligned && n == 4) {
    *reinterpret_cast<uint32_t*>(at) = static_cast<uint32_t>(packed);
  } else {
    for (int i = 0; i < n; ++i) at[i] = static_cast<char>((packed >> (8 * i)) & 0xFF);
  }
}

// Where block scale `block` of row `row` goes in vLLM's swizzled NVFP4 scale tensor (tpar.h).
__device__ __forceinline__ uint64_t nvfp4ScaleOffset(uint64_t row, uint64_t block,
                                                     uint64_t blocks) {
  const uint64_t k_tiles = (blocks + 3) / 4;
  const uint64_t m_tile = row / 128, r = row % 128, k_tile = block / 4;
  return ((((m_tile * k_tiles + k_tile) * 32 + r % 32) * 4 + r / 32) * 4) + block % 4;
}

// NOTE [row groups]
// A launch with fewer rows than blocks gives each row to a group of `e.group` blocks, each with
// a slice of `e.slice` vectors of the row (the last one shorter), so that a one-token call still
// pushes and reduces from the whole grid. The norm needs the row's sum of squares (and, for
// FP8 per token, its maximum): each block writes its own block total into its slot of the
// control page (WorkspaceLayout::kRowPartialsOffset), tagged with the call's epoch in the same
// 8-byte word, and every block of the row polls the group's slots until all carry this epoch,
// then adds them in slot order: every block of every rank gets the same bits. The host gives
// groups only when rows * group <= the grid and <= kRowPartialSlots, so each block holds one
// slice and all of a row's blocks are resident together (every block of a launch is). A slot
// is rewritten by the next launch, which starts after this one completed (stream order);
// with the tag in the word itself a reader needs no fence. A block that gives up records the
// error, which ends its siblings' waits (Waiter).
__device__ __forceinline__ volatile uint64_t* rowPartials(const AllReduceArgs& a, int set) {
  char* page = reinterpret_cast<char*>(a.state) - WorkspaceLayout::kStateOffset;
  return reinterpret_cast<volatile uint64_t*>(page + WorkspaceLayout::kRowPartialsOffset) +
         set * WorkspaceLayout::kRowPartialSlots;
}

// The row's total by `op` of its group's block totals (`mine` is this block's, the same on every
// thread), in slot order, into *total. Every thread of the block calls it; false (the same on
// every thread) on give-up.
template <class Op>
__device__ __forceinline__ bool acrossRow(float mine, uint32_t unit, uint32_t group, int set, Op op,
                                       const AllReduceArgs& a, const CallContext& ctx, Waiter& w,
                                       float* total) {
  if (group <= 1) {
    *total = mine;
    return true;
  }
  __shared__ float s_part[WorkspaceLayout::kRowPartialSlots];
  __shared__ uint32_t s_fail;
  volatile uint64_t* slots = rowPartials(a, set);
  if (threadIdx.x == 0) {
    s_fail = 0;
    slots[unit] = (uint64_t(ctx.epoch) << 32) | __float_as_uint(mine);
  }
  __syncthreads();
  const uint32_t first = unit - unit % group;
  if (threadIdx.x < group) {
    uint64_t x = slots[first + threadIdx.x];
    while (static_cast<uint32_t>(x >> 32) != ctx.epoch) {
      if (!w.keepWaiting()) {
        s_fail = 1;
        break;
      }
      x = slots[first + threadIdx.x];
    }
    s_part[threadIdx.x] = __uint_as_float(static_cast<uint32_t>(x));
  }
  __syncthreads();
  const bool ok = s_fail == 0;
  float t = s_part[0];
  for (uint32_t i = 1; i < group; ++i) t = op(t, s_part[i]);
  __syncthreads();  // s_part and s_fail are reused by the next exchange
  *total = t;
  return ok;
}

// The row groups' exchange for work unit `unit` of a group of `group` blocks (acrossRow), the
// identity for whole rows: normSlice's `across`.
struct GroupAcross {
  const AllReduceArgs& a;
  const CallContext& ctx;
  Waiter& w;
  uint32_t unit, group;
  template <class Op>
  __device__ __forceinline__ bool operator()(int set, float mine, Op op, float* total) const {
    if (group <= 1) {
      *total = mine;
      return true;
    }
    return acrossRow(mine, unit, group, set, op, a, ctx, w, total);
  }
};

// The sum of every rank's vector v in rank order (our own from the input, the peers' from
// slots src(s)), rounded to the datatype as the plain all-reduce writes it, the slots
// released: normSlice's `sumOf`. False on give-up.
template <typename T, int kMax, class Box, class Src>
__device__ __forceinline__ bool sumInRankOrder(const Box& box, int n, int me, Src src,
                                               const AllReduceArgs& a, uint64_t v,
                                               bool aligned, Waiter& w, Vec* sum) {
  Acc<T> acc;
  if (!reduceFrom<T, kMax, IdentityCodec>(
          box, n, me, src,
          [&] {
            return IdentityCodec::template encode<Box::kReservesWord>(
                loadUser<T>(a.send, v, a.count, aligned));
          },
          RuntimeOp{tparSum}, w, &acc))
    return false;
  releaseFrom<kMax>(box, n, me, src);
  *sum = acc.round();
  return true;
}

// What a schedule does with each vector's y after normSlice stored it (two-shot: send it and r
// to the peers): emit(v, keep, y), keep where r is. Nothing for one-shot.
struct NoEmit {
  __device__ __forceinline__ void operator()(uint64_t, const void*, const Vec&) const {}
};

// Everything after the all-reduce for one slice [c0, c1) of a row: sumOf(c, &sum) gives the
// reduced vector c of the row (false on give-up); then r, its sum of squares, the norm, out
// and the quantized copy (docs/FUSED.md, "What a call computes"). `across(set, mine, op, &t)`
// combines the block totals of the row's group (acrossRow; the identity for whole rows).
// Every thread of the block calls it; false (the same on every thread) on give-up.
template <typename T, class SumOf, class Across, class Emit = NoEmit>
__device__ __forceinline__ bool normSlice(const NormArgs& e, uint32_t row, uint32_t c0,
                                          uint32_t c1, bool first_of_row, SumOf sumOf,
                                          Across across, Emit emit = Emit()) {
  using E = ElemTraits<T>;
  constexpr int kPer = E::kPerVec;
  const uint32_t row_vecs = e.hidden / kPer;
  const uint64_t count = uint64_t(e.rows) * e.hidden;
  const bool e_aligned = e.aligned != 0;
  // Where r is kept (and waits for its norm): residual_out, else the residual in place, else
  // the output, which the norm then overwrites.
  void* keep = e.residual_out != nullptr ? e.residual_out
               : e.residual != nullptr   ? e.residual
                                         : e.out;
  bool bad = false;
  float squares = 0;
  // r goes to memory and is read back for the norm: holding this thread's r, its residual or
  // its weight in registers across the waits made the 8-rank pull and 16-rank push variants
  // spill (ptxas, sm_90).
  for (uint32_t c = c0 + threadIdx.x; c < c1 && !bad; c += blockDim.x) {
    const uint64_t v = uint64_t(row) * row_vecs + c;
    Vec sum;
    if (!sumOf(c, v, &sum)) {
      bad = true;
      break;
    }
    Vec r = sum;
    const Vec res = e.residual != nullptr ? loadUser<T>(e.residual, v, count, e_aligned) : sum;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const float z = e.residual != nullptr ? E::toFloat(res, i) + E::toFloat(sum, i)
                                            : E::toFloat(sum, i);
      squares += z * z;
      E::fromFloat(r, i, z);
    }
    storeUser<T>(keep, v, count, e_aligned, r);
  }
  if (__syncthreads_or(bad)) return false;
  float sq;
  if (!across(0, blockSum(squares), [](float x, float y) { return x + y; }, &sq)) return false;
  const float inv = rsqrtf(sq / static_cast<float>(e.hidden) + e.eps);
  // y of vector c of this row: from r (kept above) and the weight, as the engines round it.
  auto normed = [&](uint32_t c) {
    const uint64_t v = uint64_t(row) * row_vecs + c;
    const Vec r = loadUser<T>(keep, v, count, e_aligned);  // this thread's own store
    const Vec wt = loadUser<T>(e.weight, c, e.hidden, e_aligned);
    Vec y = r;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      Vec t = r;
      E::fromFloat(t, i, E::toFloat(r, i) * inv);  // rounded to the datatype first
      E::fromFloat(y, i, E::toFloat(t, i) * E::toFloat(wt, i));
    }
    return y;
  };
  const int quant = e.quant;
  const bool q_aligned = e.quant_aligned != 0;
  float amax = 0;
  // A uniform trip count: NVFP4's block of 16 values spans the vectors of two neighbouring
  // lanes (c0 is even), whose maxima meet by shuffle, so every lane of a warp takes every step.
  for (uint32_t base = c0; base < c1; base += blockDim.x) {
    const uint32_t c = base + threadIdx.x;
    const bool active = c < c1;
    const uint64_t v = uint64_t(row) * row_vecs + c;
    Vec y{};
    if (active) {
      y = normed(c);
      if (e.out != nullptr) storeUser<T>(e.out, v, count, e_aligned, y);
      emit(v, keep, y);
    }
    if (quant == tparNormQuantFp8Static) {
      if (active) {
        const float s = e.scale[0];
        uint64_t packed = 0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) packed |= uint64_t(e4m3(E::toFloat(y, i) / s)) << (8 * i);
        storeBytes(e.quant_out, v * kPer, packed, kPer, q_aligned);
      }
    } else if (quant == tparNormQuantFp8PerToken) {
      if (active)
        for (int i = 0; i < kPer; ++i) amax = fmaxf(amax, fabsf(E::toFloat(y, i)));
    } else if (quant == tparNormQuantNvfp4) {
      float vmax = 0;
      if (active)
        for (int i = 0; i < kPer; ++i) vmax = fmaxf(vmax, fabsf(E::toFloat(y, i)));
      vmax = fmaxf(vmax, __shfl_xor_sync(0xFFFFFFFFu, vmax, 1));
      if (active) {
        const float g = e.scale[0];
        const uint32_t s8 = e4m3(fminf(g * (vmax / kFp4Max), kFp8Max));
        const float sv = e4m3Value(s8);
        const float mult = sv == 0.0f ? 0.0f : g / sv;
        uint64_t packed = 0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) packed |= uint64_t(e2m1(E::toFloat(y, i) * mult)) << (4 * i);
        storeBytes(e.quant_out, v * kPer / 2, packed, kPer / 2, q_aligned);
        if (c % 2 == 0) {
          e.block_scale[nvfp4ScaleOffset(e.row0 + row, c / 2, e.hidden / 16)] =
              static_cast<uint8_t>(s8);
        }
      }
    }
  }
  if (quant == tparNormQuantFp8PerToken) {
    float m;
    if (!across(1, blockMax(amax), [](float x, float y) { return fmaxf(x, y); }, &m)) return false;
    const float s = fmaxf(m / kFp8Max, 1.0f / (kFp8Max * 512.0f));
    if (threadIdx.x == 0 && first_of_row) e.scale[row] = s;
    // Without a residual or residual_out, r was kept in out and is y now: read it back.
    const bool y_in_out = keep == e.out;
    for (uint32_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
      const uint64_t v = uint64_t(row) * row_vecs + c;
      const Vec y = y_in_out ? loadUser<T>(e.out, v, count, e_aligned) : normed(c);
      uint64_t packed = 0;
#pragma unroll
      for (int i = 0; i < kPer; ++i) packed |= uint64_t(e4m3(E::toFloat(y, i) / s)) << (8 * i);
      storeBytes(e.quant_out, v * kPer, packed, kPer, q_aligned);
    }
  }
  return true;
}

}  // namespace norm
}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_NORM_EPILOGUE_CUH_
