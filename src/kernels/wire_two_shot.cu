// The flag-line two-shot (the pipelined kernel's schedule, two_shot.cuh) with a compressed wire
// format (docs/WIRE.md): the registry's pipelined+fp8, pipelined+int8 and pipelined+int4.
//
// The unit of work is a wire block of kBlock values (4 vectors of 16-bit data), counted from the
// start of the launch: chunks, block slices and steps are whole wire blocks, so every rank
// encodes the same blocks. A thread holds one wire block: it loads its values, encodes them
// (WireBlock: kCodeVecs vectors of codes and a bf16 scale), and stores the codes at block w's
// place in an area and the scale in the area's scale array after every code. Per block:
//   scatter: each rank encodes its contribution once (its own too, in the reduction, so the sum
//            does not depend on which rank reduces);
//   reduce:  the owner decodes the n contributions and adds them in fp32 in rank order, encodes
//            the sum once, publishes (pull) or sends (push) those bytes, and stores their decode;
//   gather:  every other rank decodes the owner's bytes: every rank ends with the same bits.
// That is tests/common/wire_reference.h's two-shot, which the GPU tests compare bit for bit.
// The hand-offs are FlagBox's (NOTE [flag lines]); the check word carries the algorithm key, so
// a rank with another format (or none) fails the call as a mismatch.
#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/schedule.h"
#include "kernels/prims/wire.h"

namespace tpar {
namespace kernels {
namespace {

enum WireRole { kWirePush, kWireReduce, kWireGather };

template <WireFormat F>
struct WireTwoShot {
  static constexpr int kBlock = 32;
  using Blk = WireBlock<F, kBlock>;
  static constexpr int kCodeVecs = Blk::kWords / 4;  // INT4: 1, FP8 and INT8: 2
  static constexpr uint64_t kCodeBytes = uint64_t(kCodeVecs) * kVecBytes;

  struct Call {
    const AllReduceArgs& a;
    const FlagBox& box;
    int n, me;
    bool pull, aligned;
    uint64_t blocks;  // wire blocks of this launch
    uint64_t chunk;   // wire blocks per rank's chunk
    uint64_t scales;  // offset of the scale array in an area
    uint64_t goff;    // the gather phase's areas
    char* own;
  };

  // Wire block w of a 16-bit buffer: 4 vectors; values past `count` read as zero.
  template <typename T>
  __device__ static void load(const void* base, uint64_t w, uint64_t count, bool aligned,
                              float* x) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const Vec v = loadUser<T>(base, w * 4 + q, count, aligned);
#pragma unroll
      for (int i = 0; i < 8; ++i) x[q * 8 + i] = ElemTraits<T>::toFloat(v, i);
    }
  }

  template <typename T>
  __device__ static void store(void* base, uint64_t w, uint64_t count, bool aligned,
                               const float* x) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      Vec v{{0, 0, 0, 0}};
#pragma unroll
      for (int i = 0; i < 8; ++i) ElemTraits<T>::fromFloat(v, i, x[q * 8 + i]);
      storeUser<T>(base, w * 4 + q, count, aligned, v);
    }
  }

  __device__ static void put(const Call& c, char* area, uint64_t w, const uint32_t* words,
                             uint16_t scale) {
#pragma unroll
    for (int q = 0; q < kCodeVecs; ++q) {
      storeVolatile(area + w * kCodeBytes + q * kVecBytes,
                    Vec{{words[4 * q], words[4 * q + 1], words[4 * q + 2], words[4 * q + 3]}});
    }
    *reinterpret_cast<volatile uint16_t*>(area + c.scales + w * 2) = scale;
  }

  __device__ static void get(const Call& c, const char* area, uint64_t w, float* x) {
    uint32_t words[Blk::kWords];
#pragma unroll
    for (int q = 0; q < kCodeVecs; ++q) {
      const Vec v = loadVolatile(area + w * kCodeBytes + q * kVecBytes);
#pragma unroll
      for (int i = 0; i < 4; ++i) words[4 * q + i] = v.w[i];
    }
    const uint16_t scale = *reinterpret_cast<const volatile uint16_t*>(area + c.scales + w * 2);
    Blk::decode(words, scale, x, kBlock);
  }

  __device__ static char* area(const Call& c, int r) { return c.box.area(r); }

  // Our input's blocks of the other chunks at the positions of `pp`, encoded.
  template <typename T>
  __device__ static void scatter(const Call& c, const CallContext& ctx, const PeerPositions& pp,
                                 uint32_t t, uint32_t nt) {
    for (uint32_t u = t; u < pp.pairs(); u += nt) {
      uint64_t j;
      const int o = pp.peer(u, &j);
      const uint64_t w = uint64_t(o) * c.chunk + j;
      if (w >= c.blocks) continue;
      float x[kBlock];
      uint32_t words[Blk::kWords];
      load<T>(c.a.send, w, c.a.count, c.aligned, x);
      const uint16_t scale = Blk::encode(x, kBlock, words);
      if (ctx.failed) break;
      if (c.pull) {
        put(c, c.own, w, words, scale);
      } else {
        put(c, area(c, o), uint64_t(c.me) * c.chunk + j, words, scale);
      }
    }
  }

  // Our chunk's blocks [j0, j1) in steps of nt: decode every rank's, add in rank order, encode
  // the sum once, send or publish it, store its decode.
  template <typename T>
  __device__ static void reduce(const Call& c, uint64_t j0, uint64_t j1, uint32_t nt) {
    const RuntimeOp op{c.a.op};
    for (uint64_t j = j0; j < j1; j += nt) {
      const uint64_t w = uint64_t(c.me) * c.chunk + j;
      if (w >= c.blocks) break;
      float acc[kBlock], x[kBlock];
      uint32_t words[Blk::kWords];
      for (int s = 0; s < c.n; ++s) {
        if (s == c.me) {
          load<T>(c.a.send, w, c.a.count, c.aligned, x);
          const uint16_t scale = Blk::encode(x, kBlock, words);
          Blk::decode(words, scale, x, kBlock);
        } else {
          get(c, c.pull ? area(c, s) : c.own, c.pull ? w : uint64_t(s) * c.chunk + j, x);
        }
#pragma unroll
        for (int i = 0; i < kBlock; ++i) acc[i] = s == 0 ? x[i] : op(acc[i], x[i]);
      }
      const uint16_t scale = Blk::encode(acc, kBlock, words);
      if (c.pull) {
        put(c, c.own + c.goff, w, words, scale);
      } else {
        for (int i = 1; i < c.n; ++i) put(c, area(c, ahead(c.me, i, c.n)) + c.goff, w, words, scale);
      }
      Blk::decode(words, scale, x, kBlock);
      store<T>(c.a.recv, w, c.a.count, c.aligned, x);
    }
  }

  // The other ranks' reduced blocks at the positions of `pp`, decoded into the output.
  template <typename T>
  __device__ static void gather(const Call& c, const PeerPositions& pp, uint32_t t, uint32_t nt) {
    for (uint32_t u = t; u < pp.pairs(); u += nt) {
      uint64_t j;
      const int o = pp.peer(u, &j);
      const uint64_t w = uint64_t(o) * c.chunk + j;
      if (w >= c.blocks) continue;
      float x[kBlock];
      get(c, (c.pull ? area(c, o) : c.own) + c.goff, w, x);
      store<T>(c.a.recv, w, c.a.count, c.aligned, x);
    }
  }

  template <typename T>
  __device__ static bool role(const Call& c, const CallContext& ctx, const Slice& s, int steps,
                              int r, int k, const Group& g, Waiter& w) {
    uint64_t s0, s1;
    stepRange(s, steps, k, &s0, &s1);
    const PeerPositions pp{c.n, c.me, s0, static_cast<uint32_t>(s1 - s0)};
    const uint32_t done = static_cast<uint32_t>(k + 1);
    if (r == kWirePush) {
      scatter<T>(c, ctx, pp, g.t, g.threads);
      c.box.commit(kScatterPhase, done, g);
      return true;
    }
    if (r == kWireReduce) {
      if (!c.box.await(kScatterPhase, done, g, w)) return false;
      reduce<T>(c, s0 + g.t, s1, g.threads);
      c.box.commit(kGatherPhase, done, g);
      return true;
    }
    if (!c.box.await(kGatherPhase, done, g, w)) return false;
    gather<T>(c, pp, g.t, g.threads);
    return true;
  }

  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    // 16-bit data only: the host never launches these for fp32 (wireAlgorithmFor); should one
    // run, it fails the call rather than leave the output unwritten.
    if constexpr (ElemTraits<T>::kPerVec != 8) {
      if (threadIdx.x == 0) recordError(a, tparInternalError);
    } else {
      runWire<T>(a, ctx);
    }
  }

  template <typename T>
  __device__ static void runWire(const AllReduceArgs& a, const CallContext& ctx) {
    const int grid = activeBlocks(a);
    const int steps = a.steps > 1 ? a.steps : 1;
    const bool pull = a.pull != 0;
    const FlagBox box(a, ctx, grid, steps, pull);
    const uint64_t blocks = (a.count + kBlock - 1) / kBlock;
    const Slice s = blockSlice(blocks, a.nranks, grid, blockIdx.x, 1);
    const uint64_t codes = uint64_t(a.nranks) * s.chunk * kCodeBytes;
    Call c{a, box, a.nranks, a.rank, pull, a.vec_aligned != 0, blocks, s.chunk, codes,
           box.gatherOffset(s.chunk, a.nranks), box.area(a.rank)};
    Waiter w(a);
    __shared__ uint32_t s_bad[3];
    const bool overlap = steps > 1;
    if (!overlap) {
      if (s.width() == 0) return;
      if (threadIdx.x == 0) s_bad[0] = 0;
      const Group whole{0, static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), s_bad};
      for (int k = 0; k < steps; ++k) role<T>(c, ctx, s, steps, kWirePush, k, whole, w);
      for (int k = 0; k < steps; ++k)
        if (!role<T>(c, ctx, s, steps, kWireReduce, k, whole, w)) return;
      for (int k = 0; k < steps; ++k)
        if (!role<T>(c, ctx, s, steps, kWireGather, k, whole, w)) return;
      return;
    }
    // Groups of whole warps, as the lossless kernel: a quarter push, a quarter gather, the rest
    // reduce (the launch gives at least 4 warps).
    if (threadIdx.x == 0) s_bad[0] = s_bad[1] = s_bad[2] = 0;
    __syncthreads();
    if (s.width() == 0) return;
    const int warps = static_cast<int>(blockDim.x) / 32;
    const int quarter = warps / 4;
    const int warp = static_cast<int>(threadIdx.x) / 32;
    const int r = warp < quarter ? kWirePush : warp < warps - quarter ? kWireReduce : kWireGather;
    const int first_warp = r == kWirePush ? 0 : r == kWireReduce ? quarter : warps - quarter;
    const int group_warps = r == kWireReduce ? warps - 2 * quarter : quarter;
    const Group g{1 + r, group_warps * 32, static_cast<int>(threadIdx.x) - first_warp * 32,
                  &s_bad[r]};
    for (int k = 0; k < steps; ++k)
      if (!role<T>(c, ctx, s, steps, r, k, g, w)) return;
  }
};

}  // namespace

extern const KernelSet pipelinedFp8Kernels = makeKernelSet<WireTwoShot<WireFormat::kFp8>>();
extern const KernelSet pipelinedInt8Kernels = makeKernelSet<WireTwoShot<WireFormat::kInt8>>();
extern const KernelSet pipelinedInt4Kernels = makeKernelSet<WireTwoShot<WireFormat::kInt4>>();

}  // namespace kernels
}  // namespace tpar
