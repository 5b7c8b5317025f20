// The flag-line two-shot (the pipelined kernel's schedule, two_shot.cuh) with a compressed wire
// format (docs/WIRE.md): the registry's pipelined+fp8, pipelined+int8 and pipelined+int4.
//
// Chunks, block slices and steps are whole wire blocks of kBlock values (kVecs vectors of
// 16-bit data), counted from the start of the launch, so every rank encodes the same blocks. A
// thread holds one vector (8 values); the kVecs lanes of a block's group (4 at the block of 32)
// agree on its scale by shuffles; each stores its 8 codes (8 bytes, or 4 for INT4) at its
// vector's place in an area, the group's first lane the block's bf16 scale in the area's scale
// array after every code: consecutive lanes write consecutive bytes. Per block:
//   scatter: each rank encodes its contribution once (its own too, in the reduction, so the sum
//            does not depend on which rank reduces);
//   reduce:  the owner decodes the n contributions and adds them in fp32 in rank order, encodes
//            the sum once, publishes (pull) or sends (push) those bytes, and stores their decode;
//   gather:  every other rank decodes the owner's bytes: every rank ends with the same bits.
// That is tests/common/wire_reference.h's two-shot, which the GPU tests compare bit for bit.
// Each format's kernel set is built in a file of its own (wire_fp8.cu, wire_int8.cu,
// wire_int4.cu), so that the three compile in parallel.
// The hand-offs are FlagBox's (NOTE [flag lines]); the check word carries the algorithm key, so
// a rank with another format (or none) fails the call as a mismatch.
#ifndef TPAR_KERNELS_WIRE_TWO_SHOT_CUH_
#define TPAR_KERNELS_WIRE_TWO_SHOT_CUH_

#include "kernels/prims/mailbox.cuh"
#include "kernels/prims/ptx.cuh"
#include "kernels/prims/schedule.h"
#include "kernels/prims/wire.h"

namespace tpar {
namespace kernels {

enum WireRole { kWirePush, kWireReduce, kWireGather };

template <WireFormat F>
struct WireTwoShot {
  static constexpr int kBlock = wireKernelBlock(F);
  static_assert(wireKernelBlockValid(kBlock), "a kernel block is 32, 64 or 128 values");
  using Codes = WireCodes<F>;
  // A thread holds one 16-byte vector of 8 values, so kVecs lanes hold one wire block (a quad at
  // the block of 32); their codes are 8 bytes (FP8, INT8) or 4 (INT4) per vector, contiguous as
  // WireBlock lays out a block.
  static constexpr int kVecs = wireBlockVecs(kBlock);
  static constexpr int kCodeWords = 8 * Codes::kBits / 32;  // per vector: 2 or 1
  static constexpr uint64_t kVecCodeBytes = kCodeWords * 4;
  // NOTE [wire schedule in runs of a warp]
  // Chunks, block slices and steps start on multiples of one warp's run of wire blocks (32
  // vectors: 8 blocks of 32 values), so that no warp's codes straddle one more line of the link
  // than they fill. With the plain formulas a step width off a multiple of 8 blocks ran far
  // slower per byte on virtual ranks (docs/PERFORMANCE.md, "Wire formats: an aligned
  // schedule"). The cost is up to one run less a block of padding per chunk, inside the half of
  // the region the lossless schedule sizes for the same piece: codes and scales take 34 of a
  // 32-value block's 64 bytes (the property test AlignedWireChunksFitTheHalfTheLosslessPieceUses).
  static constexpr uint64_t kAlign = wireBlockAlign(kBlock);

  struct Call {
    const AllReduceArgs& a;
    const FlagBox& box;
    int n, me;
    bool pull, aligned;
    uint64_t vecs;    // vectors of this launch
    uint64_t chunk;   // wire blocks per rank's chunk
    uint64_t scales;  // offset of the scale array in an area
    uint64_t goff;    // the gather phase's areas
    char* own;
    uint16_t* sm[3];  // shared memory for the scales of the reduction, the gather and the push
    uint4* runs;           // the reduction's slots (NOTE [wire codes in 16-byte runs])
    uint32_t* push_words;  // the push's slots
    uint32_t* sum_words;   // the wide reduction's slots for its sums' codes
  };

  struct Coded {
    uint32_t w[kCodeWords];
    uint16_t scale;
  };

  // The lane's codec (NOTE [wire codec fast paths]): wireEncode's and wireDecode's bits with
  // the tests for NaN and infinity taken once per vector.
  using Codec = WireVec<F>;

  // Codes and scale of each lane's 8 values: the block's scale from the largest finite
  // magnitude and whether an infinity is there, over the block's kVecs lanes (every lane of the
  // warp takes part in the shuffles).
  __device__ static Coded encode(const float* x) {
    const float m = Codec::magnitude(x);
    float amax;
    bool has_inf;
    Codec::scalePart(x, m, &amax, &has_inf);
    uint32_t inf = has_inf ? 1u : 0u;
#pragma unroll
    for (int k = 1; k < kVecs; k <<= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, k));
#pragma unroll
    for (int k = 1; k < kVecs; k <<= 1) inf |= __shfl_xor_sync(0xFFFFFFFFu, inf, k);
    Coded c;
    c.scale = wireScale<F>(amax, inf != 0);
    Codec::encode(x, c.scale, m, c.w);
    return c;
  }

  __device__ static void decode(const Coded& c, float* x) { Codec::decode(c.w, c.scale, x); }

  // acc = decode(c) when first, else op(acc, decode(c)), element by element. Decoded whole
  // first: for sm_90 that spilled fewer bytes than adding each value as it was decoded.
  __device__ static void addDecoded(const Coded& c, bool first, const RuntimeOp& op, float* acc) {
    float y[8];
    Codec::decode(c.w, c.scale, y);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = first ? y[i] : op(acc[i], y[i]);
  }

  template <typename T>
  __device__ static void load(const void* base, uint64_t v, uint64_t count, bool aligned,
                              float* x) {
    const Vec u = loadUser<T>(base, v, count, aligned);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = ElemTraits<T>::toFloat(u, i);
  }

  template <typename T>
  __device__ static void store(void* base, uint64_t v, uint64_t count, bool aligned,
                               const float* x) {
    Vec u{{0, 0, 0, 0}};
#pragma unroll
    for (int i = 0; i < 8; ++i) ElemTraits<T>::fromFloat(u, i, x[i]);
    storeUser<T>(base, v, count, aligned, u);
  }

  // Vector v's codes at v's place.
  __device__ static void putCodes(char* area, uint64_t v, const Coded& x) {
    char* p = area + v * kVecCodeBytes;
    if (kCodeWords == 2) {
      asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(x.w[0]),
                   "r"(x.w[kCodeWords - 1])
                   : "memory");
    } else {
      *reinterpret_cast<volatile uint32_t*>(p) = x.w[0];
    }
  }

  __device__ static void putScale(const Call& c, char* area, uint64_t block, uint16_t scale) {
    *reinterpret_cast<volatile uint16_t*>(area + c.scales + block * 2) = scale;
  }

  // Vector v's codes and, from the block's first lane, its block's scale.
  __device__ static void put(const Call& c, char* area, uint64_t v, const Coded& x) {
    putCodes(area, v, x);
    if (v % kVecs == 0) putScale(c, area, v / kVecs, x.scale);
  }

  __device__ static Coded getCodes(const char* area, uint64_t v) {
    Coded x;
    const char* p = area + v * kVecCodeBytes;
    if (kCodeWords == 2) {
      uint32_t a, b;
      asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "l"(p) : "memory");
      x.w[0] = a;
      x.w[kCodeWords - 1] = b;
    } else {
      x.w[0] = *reinterpret_cast<const volatile uint32_t*>(p);
    }
    return x;
  }

  __device__ static uint16_t getScale(const Call& c, const char* area, uint64_t block) {
    return *reinterpret_cast<const volatile uint16_t*>(area + c.scales + block * 2);
  }

  __device__ static Coded get(const Call& c, const char* area, uint64_t v) {
    Coded x = getCodes(area, v);
    x.scale = getScale(c, area, v / kVecs);
    return x;
  }

  __device__ static char* area(const Call& c, int r) { return c.box.area(r); }

  // Every loop below walks whole warps (the blocks' shuffles need every lane): `base` is the
  // warp's first index, lanes past the end take part with zeros and store nothing.

  // NOTE [wire scales in shared memory]
  // A block's scale is 2 bytes beside 16 or 32 bytes of codes, in an array of its own: stored
  // and loaded beside each warp's codes, every warp moves 16 bytes of scales per request, and
  // across the host link such small requests cost nearly what full ones do. So each group stages
  // the scales of its step in shared memory: a sender's quads put theirs there and the group
  // stores them after its codes, each destination's run in consecutive 2-byte pieces; a reader's
  // group loads every source's run the same way before it decodes. Both happen before the
  // phase's commit (its group barrier and fence order them like the codes) or after its await.
  // Where a step's runs do not fit (wider slices than the launches make), scales go beside the
  // codes as before.
  static constexpr int kSmemScales = 2048;

  // NOTE [wire scales in 16-byte pieces]
  // The staged scales move between an area and shared memory 8 at a time, one 16-byte access
  // per thread, where every run of a step's scales is whole 16-byte pieces in both: a step's
  // blocks, its first block and a chunk multiples of 8, the scale array and the gather's areas
  // 16-byte aligned (blocks of 32 values always are, by NOTE [wire schedule in runs of a warp];
  // FP8's blocks of 128 seldom). With a 2-byte access per thread a warp moves 64 bytes per
  // instruction, for INT4 as many instructions as its codes take in runs (NOTE [wire codes in
  // 16-byte runs]). A piece that starts inside the data may carry scales of blocks past its end
  // (within the chunk's array), which no one reads. Timed with the sums' runs against the
  // kernel before on one H100: INT8 and INT4 faster at 2 and 4 ranks on the host transport
  // (docs/PERFORMANCE.md, "Scales and sums in 16-byte accesses").
  static constexpr int kScaleRun = 8;
  __device__ static bool scaleRuns(const Call& c, uint64_t nb, uint64_t s0) {
    return nb % kScaleRun == 0 && s0 % kScaleRun == 0 && c.chunk % kScaleRun == 0 &&
           c.scales % 16 == 0 && c.goff % 16 == 0;
  }
  __device__ static void getScales(const Call& c, const char* area, uint64_t block, uint16_t* sm) {
    const Vec v = loadVolatile(area + c.scales + block * 2);
    *reinterpret_cast<uint4*>(sm) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
  }
  __device__ static void putScales(const Call& c, char* area, uint64_t block, const uint16_t* sm) {
    const uint4 r = *reinterpret_cast<const uint4*>(sm);
    storeVolatile(area + c.scales + block * 2, Vec{{r.x, r.y, r.z, r.w}});
  }

  // NOTE [wire codes in 16-byte runs]
  // A vector's codes are 8 bytes (FP8, INT8) or 4 (INT4), so a warp moving one vector per lane
  // sends 256 or 128 bytes per instruction. The link alone moves 4-, 8- and 16-byte accesses
  // alike (tpar_host_link's width table), but the kernel issues a request per instruction per
  // warp, and with runs of kRun = 16 / kVecCodeBytes vectors per lane every phase moves 512
  // bytes per instruction: the push encodes a run's vectors one per lane into the warp's
  // slot of shared memory and stores each lane's run as one 16-byte store; the reduction loads
  // each peer's run (four peers in flight) into the warp's slots and adds from there, and its
  // sums leave the same way as the push's codes, through a slot of their own; the gather loads
  // a lane's run and decodes its vectors one by one. Timed against one vector per
  // lane on one H100, every format ran faster at 2, 4 and 8 ranks on the host transport
  // (docs/PERFORMANCE.md, "16-byte code accesses merged"). A run stays inside one peer's
  // positions and one wire block's scale because chunks, slices and steps are whole warp runs
  // (NOTE [wire schedule in runs of a warp]) and kRun divides kVecs. The runs need the scales
  // staged (they are not beside the codes) and groups small enough for the slots (kPushWarps
  // warps for the push, kRunWarps warps and up to kRunPeers + 1 ranks for the reduction);
  // other calls take the loops of a vector per lane. The slots took half of kSmemScales'
  // former 4096 so that the kernel's static shared memory stays under 48 KiB (47,116 bytes
  // with the sums' slots, for sm_90).
  static constexpr int kRun = static_cast<int>(16 / kVecCodeBytes);
  static_assert(kVecs % kRun == 0, "a run of codes lies in one wire block");
  static constexpr int kRunWarps = 8;
  static constexpr int kRunPeers = 7;
  static constexpr int kPushWarps = 4;

  // Our input's vectors of the other chunks at the positions of `pp` (vectors), encoded.
  template <typename T>
  __device__ static void scatter(const Call& c, const CallContext& ctx, const PeerPositions& pp,
                                 uint32_t t, uint32_t nt, const Group& g, uint16_t* sm) {
    const uint32_t lane = t & 31;
    const uint64_t nb = pp.width / kVecs, s0 = pp.s0 / kVecs;
    const bool staged = nb * uint64_t(c.n - 1) <= uint64_t(kSmemScales);
    // Runs of kRun vectors per lane (NOTE [wire codes in 16-byte runs]): each iteration's codes
    // go to the warp's slot, then each lane stores its run, contiguous at its destination.
    const uint32_t pairs = pp.pairs();
    if (staged && nt <= 32u * kPushWarps) {
      uint32_t* words = c.push_words + (t / 32) * 128;
      for (uint32_t base = (t - lane) * kRun; base < pairs; base += nt * kRun) {
#pragma unroll 1
        for (int q = 0; q < kRun; ++q) {
          const uint32_t u = base + 32u * q + lane;
          uint64_t j = 0;
          const int o = u < pairs ? pp.peer(u, &j) : 0;
          const uint64_t v = uint64_t(o) * c.chunk * kVecs + j;
          const bool in = u < pairs && v < c.vecs;
          float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          if (in) load<T>(c.a.send, v, c.a.count, c.aligned, x);
          const Coded e = encode(x);
#pragma unroll
          for (int w = 0; w < kCodeWords; ++w) words[(32u * q + lane) * kCodeWords + w] = e.w[w];
          if (in && j % kVecs == 0) sm[uint64_t(u / pp.width) * nb + (j / kVecs - s0)] = e.scale;
        }
        // Every thread goes on to the group's barrier below, as the loop of a vector per lane
        // does; the warp decides together (a lane's view of an earlier failure may differ from
        // its neighbours', and the warp's barriers below need every lane).
        if (__any_sync(0xFFFFFFFFu, ctx.failed)) break;
        __syncwarp();
        const uint32_t ur = base + lane * kRun;
        if (ur < pairs) {
          uint64_t j;
          const int o = pp.peer(ur, &j);
          const uint64_t v = uint64_t(o) * c.chunk * kVecs + j;
          if (v < c.vecs) {
            char* dst = (c.pull ? c.own : area(c, o)) +
                        (c.pull ? v : uint64_t(c.me) * c.chunk * kVecs + j) * kVecCodeBytes;
            const uint4 r = reinterpret_cast<const uint4*>(words)[lane];
            storeVolatile(dst, Vec{{r.x, r.y, r.z, r.w}});
          }
        }
        __syncwarp();  // the next run's codes go where these were
      }
    }
    for (uint32_t base = t - lane; !(staged && nt <= 32u * kPushWarps) && base < pairs;
         base += nt) {
      const uint32_t u = base + lane;
      uint64_t j = 0;
      const int o = u < pp.pairs() ? pp.peer(u, &j) : 0;
      const uint64_t v = uint64_t(o) * c.chunk * kVecs + j;
      const bool in = u < pp.pairs() && v < c.vecs;
      float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (in) load<T>(c.a.send, v, c.a.count, c.aligned, x);
      const Coded e = encode(x);
      if (ctx.failed) break;
      if (!in) continue;
      char* dst = c.pull ? c.own : area(c, o);
      const uint64_t at = c.pull ? v : uint64_t(c.me) * c.chunk * kVecs + j;
      if (staged) {
        putCodes(dst, at, e);
        if (j % kVecs == 0) sm[uint64_t(u / pp.width) * nb + (j / kVecs - s0)] = e.scale;
      } else {
        put(c, dst, at, e);
      }
    }
    if (!staged) return;
    g.sync();
    if (ctx.failed) return;
    if (scaleRuns(c, nb, s0)) {
      // Whole pieces of 8 (a piece of blocks past the data carries scales no one reads).
      for (uint64_t i = uint64_t(t) * kScaleRun; i < nb * uint64_t(c.n - 1);
           i += uint64_t(nt) * kScaleRun) {
        const int o = ahead(c.me, 1 + static_cast<int>(i / nb), c.n);
        const uint64_t b = s0 + i % nb;
        if ((uint64_t(o) * c.chunk + b) * kVecs >= c.vecs) continue;
        if (c.pull) {
          putScales(c, c.own, uint64_t(o) * c.chunk + b, sm + i);
        } else {
          putScales(c, area(c, o), uint64_t(c.me) * c.chunk + b, sm + i);
        }
      }
      return;
    }
    for (uint64_t i = t; i < nb * uint64_t(c.n - 1); i += nt) {
      const int o = ahead(c.me, 1 + static_cast<int>(i / nb), c.n);
      const uint64_t b = s0 + i % nb;
      if ((uint64_t(o) * c.chunk + b) * kVecs >= c.vecs) continue;
      if (c.pull) {
        putScale(c, c.own, uint64_t(o) * c.chunk + b, sm[i]);
      } else {
        putScale(c, area(c, o), uint64_t(c.me) * c.chunk + b, sm[i]);
      }
    }
  }

  // Our own vector v, coded and decoded as the peers' are (zeros where !in, so that the block's
  // shuffles see every lane), added to acc in rank order.
  template <typename T>
  __device__ static void addOwn(const Call& c, uint64_t v, bool in, bool first, RuntimeOp op,
                                float* acc, float* x) {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = 0.0f;
    if (in) load<T>(c.a.send, v, c.a.count, c.aligned, x);
    decode(encode(x), x);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = first ? x[i] : op(acc[i], x[i]);
  }

  // The sum of vector v (position j of our chunk; zeros where !in, so that the block's
  // shuffles see every lane): encoded once, sent or published, its scale staged, its decode
  // stored.
  template <typename T>
  __device__ static void sumOut(const Call& c, uint64_t j, uint64_t v, bool in, uint64_t nb,
                                uint64_t s0, uint16_t* sm, float* acc, float* x) {
    const bool staged = nb * uint64_t(c.n) <= uint64_t(kSmemScales);
    if (!in) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
    }
    const Coded e = encode(acc);
    if (!in) return;
    if (staged) {
      // Our own run of sm is free (we read no scales of ours): the sums' scales go there.
      if (j % kVecs == 0) sm[uint64_t(c.me) * nb + (j / kVecs - s0)] = e.scale;
      if (c.pull) {
        putCodes(c.own + c.goff, v, e);
      } else {
        for (int i = 1; i < c.n; ++i) putCodes(area(c, ahead(c.me, i, c.n)) + c.goff, v, e);
      }
    } else if (c.pull) {
      put(c, c.own + c.goff, v, e);
    } else {
      for (int i = 1; i < c.n; ++i) put(c, area(c, ahead(c.me, i, c.n)) + c.goff, v, e);
    }
    decode(e, x);
    store<T>(c.a.recv, v, c.a.count, c.aligned, x);
  }

  // sumOut for the wide reduction (scales staged): the sum's codes go to slot `u` of the warp's
  // words, which the run stores after its kRun vectors, every lane's (zeros encoded where !in).
  template <typename T>
  __device__ static void sumToRun(const Call& c, uint64_t j, uint64_t v, bool in, uint64_t nb,
                                  uint64_t s0, uint16_t* sm, uint32_t* words, uint32_t u,
                                  float* acc, float* x) {
    if (!in) {
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
    }
    const Coded e = encode(acc);
#pragma unroll
    for (int w = 0; w < kCodeWords; ++w) words[u * kCodeWords + w] = e.w[w];
    if (!in) return;
    if (j % kVecs == 0) sm[uint64_t(c.me) * nb + (j / kVecs - s0)] = e.scale;
    decode(e, x);
    store<T>(c.a.recv, v, c.a.count, c.aligned, x);
  }

  // Our chunk's vectors [j0, j1) (a multiple of kVecs apart), warp by warp: decode every rank's,
  // add in rank order, encode the sum once, send or publish it, store its decode.
  template <typename T, int kMax>
  __device__ static void reduce(const Call& c, uint64_t j0, uint64_t j1, uint32_t t,
                                uint32_t nt, const Group& g, uint16_t* sm) {
    const RuntimeOp op{c.a.op};
    const uint32_t lane = t & 31;
    const uint64_t s0 = j0 / kVecs, nb = (j1 - j0) / kVecs;
    const bool staged = nb * uint64_t(c.n) <= uint64_t(kSmemScales);
    const bool pieces = scaleRuns(c, nb, s0);
    if (staged && pieces) {
      for (uint64_t i = uint64_t(t) * kScaleRun; i < nb * uint64_t(c.n);
           i += uint64_t(nt) * kScaleRun) {
        const int s = static_cast<int>(i / nb);
        const uint64_t b = s0 + i % nb;
        if (s != c.me) {
          if (c.pull) {
            getScales(c, area(c, s), uint64_t(c.me) * c.chunk + b, sm + i);
          } else {
            getScales(c, c.own, uint64_t(s) * c.chunk + b, sm + i);
          }
        }
      }
      g.sync();
    } else if (staged) {
      for (uint64_t i = t; i < nb * uint64_t(c.n); i += nt) {
        const int s = static_cast<int>(i / nb);
        const uint64_t b = s0 + i % nb;
        if (s != c.me)
          sm[i] = c.pull ? getScale(c, area(c, s), uint64_t(c.me) * c.chunk + b)
                         : getScale(c, c.own, uint64_t(s) * c.chunk + b);
      }
      g.sync();
    }
    // Runs of kRun vectors per lane from each peer (NOTE [wire codes in 16-byte runs]), staged
    // in the warp's slots; each of the run's kRun iterations then reads its lane's codes there
    // and sums them as the loop of a vector per lane below does.
    bool wide = false;
    if constexpr (kMax <= kRunPeers + 1) wide = staged && nt <= 32u * kRunWarps;
    if (wide) {
      uint4* slots = c.runs + (t / 32) * kRunPeers * 32;
      uint32_t* sums = c.sum_words + (t / 32) * 128;
      for (uint64_t base = j0 + uint64_t(t - lane) * kRun; base < j1;
           base += uint64_t(nt) * kRun) {
        const uint64_t jr = base + uint64_t(lane) * kRun;
        const uint64_t vr = uint64_t(c.me) * c.chunk * kVecs + jr;
        const bool rin = jr < j1 && vr < c.vecs;
#pragma unroll 1
        for (int sb = 0; sb < c.n; sb += 4) {
          uint4 r[4];
#pragma unroll
          for (int d = 0; d < 4; ++d) {
            const int s = sb + d;
            r[d] = make_uint4(0, 0, 0, 0);
            if (s < c.n && s != c.me && rin) {
              const char* src = c.pull ? area(c, s) + vr * kVecCodeBytes
                                       : c.own + (uint64_t(s) * c.chunk * kVecs + jr) *
                                                     kVecCodeBytes;
              const Vec l = loadVolatile(src);
              r[d] = make_uint4(l.w[0], l.w[1], l.w[2], l.w[3]);
            }
          }
#pragma unroll
          for (int d = 0; d < 4; ++d) {
            const int s = sb + d;
            if (s < c.n && s != c.me) slots[(s < c.me ? s : s - 1) * 32 + lane] = r[d];
          }
        }
        __syncwarp();
#pragma unroll 1
        for (int q = 0; q < kRun; ++q) {
          const uint64_t j = base + 32u * q + lane;
          const uint64_t v = uint64_t(c.me) * c.chunk * kVecs + j;
          const bool in = j < j1 && v < c.vecs;
          // Vector j's codes: in the run of lane `from`, at word `at` of it (consecutive lanes
          // read consecutive words: no bank conflicts).
          const uint32_t from = (32u / kRun) * q + lane / kRun;
          const uint32_t at = (lane % kRun) * kCodeWords;
          float acc[8], x[8];
#pragma unroll 1
          for (int s = 0; s < c.n; ++s) {
            if (s == c.me) {
              addOwn<T>(c, v, in, s == 0, op, acc, x);
            } else if (in) {
              const uint32_t* w =
                  reinterpret_cast<const uint32_t*>(&slots[(s < c.me ? s : s - 1) * 32 + from]);
              Coded e;
#pragma unroll
              for (int k = 0; k < kCodeWords; ++k) e.w[k] = w[at + k];
              e.scale = sm[uint64_t(s) * nb + (j / kVecs - s0)];
              addDecoded(e, s == 0, op, acc);
            }
          }
          sumToRun<T>(c, j, v, in, nb, s0, sm, sums, 32u * q + lane, acc, x);
        }
        __syncwarp();
        // Each lane's run of sums, contiguous at its place: one 16-byte store per destination.
        if (rin) {
          const uint4 r = reinterpret_cast<const uint4*>(sums)[lane];
          const Vec o{{r.x, r.y, r.z, r.w}};
          if (c.pull) {
            storeVolatile(c.own + c.goff + vr * kVecCodeBytes, o);
          } else {
            for (int i = 1; i < c.n; ++i)
              storeVolatile(area(c, ahead(c.me, i, c.n)) + c.goff + vr * kVecCodeBytes, o);
          }
        }
        __syncwarp();  // the next run's loads and sums go where these were
      }
    }
    for (uint64_t base = j0 + (t - lane); !wide && base < j1; base += nt) {
      const uint64_t j = base + lane;
      const uint64_t v = uint64_t(c.me) * c.chunk * kVecs + j;
      const bool in = j < j1 && v < c.vecs;
      float acc[8], x[8];
      // NOTE [wire reads in flight]
      // Reads across the host link are round trips: the reduce loads peers' codes kAhead at a
      // time before it decodes them (added in rank order all the same), and the gather keeps
      // kDepth loads in flight per thread, where one at a time left each warp waiting a round
      // trip per peer (docs/PERFORMANCE.md, "Wire formats: reads in flight"). The lossless
      // kernel loads every peer at once; here 4 at a time spilled tens of bytes per thread for
      // sm_90, 2 (with the gather's 2) a few, in the 8-bit formats only.
      constexpr int kAhead = kMax < 2 ? kMax : 2;
      for (int b = 0; b < c.n; b += kAhead) {
        Coded cs[kAhead];
#pragma unroll
        for (int d = 0; d < kAhead; ++d) {
          const int s = b + d;
          if (s < c.n && s != c.me && in) {
            const char* src = c.pull ? area(c, s) : c.own;
            const uint64_t at = c.pull ? v : uint64_t(s) * c.chunk * kVecs + j;
            cs[d] = staged ? getCodes(src, at) : get(c, src, at);
          }
        }
#pragma unroll
        for (int d = 0; d < kAhead; ++d) {
          const int s = b + d;
          if (s >= c.n) break;
          if (s == c.me) {
            addOwn<T>(c, v, in, s == 0, op, acc, x);
          } else if (in) {
            if (staged) cs[d].scale = sm[uint64_t(s) * nb + (j / kVecs - s0)];
            addDecoded(cs[d], s == 0, op, acc);
          }
        }
      }
      sumOut<T>(c, j, v, in, nb, s0, sm, acc, x);
    }
    if (!staged) return;
    g.sync();
    const uint64_t dests = c.pull ? 1 : uint64_t(c.n - 1);
    for (uint64_t i = uint64_t(t) * kScaleRun; pieces && i < nb * dests;
         i += uint64_t(nt) * kScaleRun) {
      const uint64_t b = uint64_t(c.me) * c.chunk + s0 + i % nb;
      if (b * kVecs >= c.vecs) continue;
      char* dst = c.pull ? c.own : area(c, ahead(c.me, 1 + static_cast<int>(i / nb), c.n));
      putScales(c, dst + c.goff, b, sm + uint64_t(c.me) * nb + i % nb);
    }
    for (uint64_t i = t; !pieces && i < nb * dests; i += nt) {
      const uint64_t b = uint64_t(c.me) * c.chunk + s0 + i % nb;
      if (b * kVecs >= c.vecs) continue;
      char* dst = c.pull ? c.own : area(c, ahead(c.me, 1 + static_cast<int>(i / nb), c.n));
      putScale(c, dst + c.goff, b, sm[uint64_t(c.me) * nb + i % nb]);
    }
    g.sync();  // the next step's scales go where these were
  }

  // The other ranks' reduced vectors at the positions of `pp`, decoded into the output (no
  // shuffles: any lane may stop).
  template <typename T>
  __device__ static void gather(const Call& c, const PeerPositions& pp, uint32_t t, uint32_t nt,
                                const Group& g, uint16_t* sm) {
    const uint64_t nb = pp.width / kVecs, s0 = pp.s0 / kVecs;
    const bool staged = nb * uint64_t(c.n - 1) <= uint64_t(kSmemScales);
    if (staged && scaleRuns(c, nb, s0)) {
      for (uint64_t i = uint64_t(t) * kScaleRun; i < nb * uint64_t(c.n - 1);
           i += uint64_t(nt) * kScaleRun) {
        const int o = ahead(c.me, 1 + static_cast<int>(i / nb), c.n);
        getScales(c, (c.pull ? area(c, o) : c.own) + c.goff, uint64_t(o) * c.chunk + s0 + i % nb,
                  sm + i);
      }
      g.sync();
    } else if (staged) {
      for (uint64_t i = t; i < nb * uint64_t(c.n - 1); i += nt) {
        const int o = ahead(c.me, 1 + static_cast<int>(i / nb), c.n);
        sm[i] = getScale(c, (c.pull ? area(c, o) : c.own) + c.goff,
                         uint64_t(o) * c.chunk + s0 + i % nb);
      }
      g.sync();
    }
    // kDepth loads in flight per thread before their decodes and stores (NOTE [wire reads in
    // flight]).
    constexpr int kDepth = 2;
    const uint32_t pairs = pp.pairs();
    // Runs of kRun vectors per lane (NOTE [wire codes in 16-byte runs]): one load and one scale
    // per run.
    constexpr int kRunDepth = 1;  // 16 bytes in flight per thread, as the vector loop's two loads
    if (staged && pp.width % kRun == 0 && pp.s0 % kRun == 0) {
      const uint32_t runs = pairs / kRun;
      for (uint32_t r0 = t; r0 < runs; r0 += kRunDepth * nt) {
        uint32_t x[kRunDepth][4];
        uint16_t sc[kRunDepth];
        uint64_t vv[kRunDepth];
#pragma unroll
        for (int d = 0; d < kRunDepth; ++d) {
          const uint32_t r = r0 + d * nt;
          vv[d] = c.vecs;
          if (r < runs) {
            uint64_t j;
            const uint32_t u = r * kRun;
            const int o = pp.peer(u, &j);
            const uint64_t v = uint64_t(o) * c.chunk * kVecs + j;
            if (v < c.vecs) {
              vv[d] = v;
              const char* src = (c.pull ? area(c, o) : c.own) + c.goff + v * kVecCodeBytes;
              const Vec l = loadVolatile(src);
#pragma unroll
              for (int w = 0; w < 4; ++w) x[d][w] = l.w[w];
              sc[d] = sm[uint64_t(u / pp.width) * nb + (j / kVecs - s0)];
            }
          }
        }
#pragma unroll
        for (int d = 0; d < kRunDepth; ++d) {
          // One vector at a time (not unrolled: four decodes at once spilled for sm_90), its
          // codes shifted to the front of the run's words.
#pragma unroll 1
          for (int q = 0; q < kRun; ++q) {
            if (vv[d] + q < c.vecs) {
              Coded e;
#pragma unroll
              for (int w = 0; w < kCodeWords; ++w) e.w[w] = x[d][w];
              e.scale = sc[d];
              float y[8];
              decode(e, y);
              store<T>(c.a.recv, vv[d] + q, c.a.count, c.aligned, y);
            }
#pragma unroll
            for (int w = 0; w + kCodeWords < 4; ++w) x[d][w] = x[d][w + kCodeWords];
          }
        }
      }
      g.sync();  // the next step's scales go where these were
      return;
    }
    for (uint32_t u0 = t; u0 < pairs; u0 += kDepth * nt) {
      Coded x[kDepth];
      uint64_t vv[kDepth];
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        const uint32_t u = u0 + d * nt;
        vv[d] = c.vecs;
        if (u < pairs) {
          uint64_t j;
          const int o = pp.peer(u, &j);
          const uint64_t v = uint64_t(o) * c.chunk * kVecs + j;
          if (v < c.vecs) {
            vv[d] = v;
            const char* src = (c.pull ? area(c, o) : c.own) + c.goff;
            if (staged) {
              x[d] = getCodes(src, v);
              x[d].scale = sm[uint64_t(u / pp.width) * nb + (j / kVecs - s0)];
            } else {
              x[d] = get(c, src, v);
            }
          }
        }
      }
#pragma unroll
      for (int d = 0; d < kDepth; ++d) {
        if (vv[d] < c.vecs) {
          float y[8];
          decode(x[d], y);
          store<T>(c.a.recv, vv[d], c.a.count, c.aligned, y);
        }
      }
    }
    if (staged) g.sync();  // the next step's scales go where these were
  }

  // NOTE [wire steps in parts that fit the staged scales]
  // A step whose blocks, times the ranks whose scales a role stages, exceed kSmemScales could
  // not stage them and took the loops of a vector per lane with the scales beside the codes:
  // with a raised piece limit INT4 at 8 ranks ran its widest steps at INT8's speed
  // (docs/PERFORMANCE.md, "Scales and sums in 16-byte accesses"). Such a step runs as parts of
  // kSmemScales / n blocks rounded down to whole scale pieces (which are whole warp runs too,
  // NOTE [wire schedule in runs of a warp]), one after another inside the step's hand-offs: to
  // the peers the parts are the one step (one commit, one await). Steps that fit run whole, as
  // before.
  static_assert(kScaleRun % kAlign == 0, "a part of whole scale pieces is whole warp runs");
  __device__ static uint64_t partBlocks(int n, int staged_ranks, uint64_t nb) {
    if (nb * uint64_t(staged_ranks) <= uint64_t(kSmemScales)) return nb;
    const uint64_t part = uint64_t(kSmemScales) / uint64_t(n) / kScaleRun * kScaleRun;
    return part > 0 ? part : nb;
  }

  template <typename T, int kMax>
  __device__ static bool role(const Call& c, const CallContext& ctx, const Slice& s, int steps,
                              int r, int k, const Group& g, Waiter& w) {
    uint64_t s0, s1;  // wire blocks of the slice's step k; the loops take vectors
    alignedStepRange(s, steps, k, kAlign, &s0, &s1);
    const uint32_t done = static_cast<uint32_t>(k + 1);
    // The reduction stages every rank's scales, the push and the gather the peers'.
    const uint64_t part = partBlocks(c.n, r == kWireReduce ? c.n : c.n - 1, s1 - s0);
    if (r == kWirePush) {
      for (uint64_t p0 = s0; p0 < s1; p0 += part) {
        if (p0 > s0) g.sync();  // the part before stores its scales from where these go
        const uint64_t p1 = p0 + part < s1 ? p0 + part : s1;
        const PeerPositions pp{c.n, c.me, kVecs * p0, static_cast<uint32_t>(kVecs * (p1 - p0))};
        scatter<T>(c, ctx, pp, g.t, g.threads, g, c.sm[2]);
      }
      c.box.commit(kScatterPhase, done, g);
      return true;
    }
    if (r == kWireReduce) {
      if (!c.box.await(kScatterPhase, done, g, w)) return false;
      for (uint64_t p0 = s0; p0 < s1; p0 += part) {
        const uint64_t p1 = p0 + part < s1 ? p0 + part : s1;
        reduce<T, kMax>(c, kVecs * p0, kVecs * p1, g.t, g.threads, g, c.sm[0]);
      }
      c.box.commit(kGatherPhase, done, g);
      return true;
    }
    if (!c.box.await(kGatherPhase, done, g, w)) return false;
    for (uint64_t p0 = s0; p0 < s1; p0 += part) {
      const uint64_t p1 = p0 + part < s1 ? p0 + part : s1;
      const PeerPositions pp{c.n, c.me, kVecs * p0, static_cast<uint32_t>(kVecs * (p1 - p0))};
      gather<T>(c, pp, g.t, g.threads, g, c.sm[1]);
    }
    return true;
  }

  template <typename T, int kMax>
  __device__ static void run(const AllReduceArgs& a, const CallContext& ctx) {
    // 16-bit data only: the host never launches these for fp32 (wirePlan); should one
    // run, it fails the call rather than leave the output unwritten.
    if constexpr (ElemTraits<T>::kPerVec != 8) {
      if (threadIdx.x == 0) recordError(a, tparInternalError);
    } else {
      runWire<T, kMax>(a, ctx);
    }
  }

  template <typename T, int kMax>
  __device__ static void runWire(const AllReduceArgs& a, const CallContext& ctx) {
    const int grid = activeBlocks(a);
    const int steps = a.steps > 1 ? a.steps : 1;
    const bool pull = a.pull != 0;
    const FlagBox box(a, ctx, grid, steps, pull);
    const uint64_t blocks = (a.count + kBlock - 1) / kBlock;
    const Slice s = alignedBlockSlice(blocks, a.nranks, grid, blockIdx.x, kAlign);
    const uint64_t codes = uint64_t(a.nranks) * s.chunk * kVecs * kVecCodeBytes;
    __shared__ __align__(16) uint16_t s_scales[3][kSmemScales];
    __shared__ uint4 s_runs[kRunWarps * kRunPeers * 32];
    __shared__ uint32_t s_push[kPushWarps * 128];
    __shared__ uint32_t s_sums[kRunWarps * 128];
    Call c{a,      box,   a.nranks, a.rank, pull, a.vec_aligned != 0, (a.count + 7) / 8, s.chunk,
           codes, box.gatherOffset(s.chunk, a.nranks), box.area(a.rank),
           {s_scales[0], s_scales[1], s_scales[2]}, s_runs, s_push, s_sums};
    Waiter w(a);
    __shared__ uint32_t s_bad[3];
    const bool overlap = steps > 1;
    if (!overlap) {
      if (s.width() == 0) return;
      if (threadIdx.x == 0) s_bad[0] = 0;
      const Group whole{0, static_cast<int>(blockDim.x), static_cast<int>(threadIdx.x), s_bad};
      for (int k = 0; k < steps; ++k) role<T, kMax>(c, ctx, s, steps, kWirePush, k, whole, w);
      for (int k = 0; k < steps; ++k)
        if (!role<T, kMax>(c, ctx, s, steps, kWireReduce, k, whole, w)) return;
      for (int k = 0; k < steps; ++k)
        if (!role<T, kMax>(c, ctx, s, steps, kWireGather, k, whole, w)) return;
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
      if (!role<T, kMax>(c, ctx, s, steps, r, k, g, w)) return;
  }
};

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_WIRE_TWO_SHOT_CUH_
