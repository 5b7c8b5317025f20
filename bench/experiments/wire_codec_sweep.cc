// The wire codec's fast division (WireVec::encode in src/kernels/prims/wire.h, NOTE [wire codec
// fast paths]) against IEEE division, on the host (no GPU):
//  1. every pair of significands: x in [1, 2) (all 2^23 floats) and every bf16 scale s in
//     [1, 2) (128), WireVec's quotient (wire::correctedQuotient, r = 1/s) against x / s, bit
//     for bit.
//     Scaling x and s by powers of two scales every intermediate exactly while they stay
//     normal, so this covers the whole range the fast path admits;
//  2. the edges of that range: scales at 2^-96, 2^-95 and 2^95 (every significand) with
//     random x of every magnitude the bound |x| / s <= 1024 admits, down to subnormals, the
//     codes of each format against wireEncode's.
// Prints the mismatches of each part (0 expected) and exits 1 if there are any.
//   tpar_wire_codec_sweep [--threads N]
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/prims/wire.h"

namespace {

using tpar::kernels::WireFormat;
using tpar::kernels::WireVec;
using tpar::kernels::wireEncode;
namespace wire = tpar::kernels::wire;

// Part 1 for scale significands [m0, m1) of 128..255.
uint64_t sweepSignificands(int m0, int m1) {
  uint64_t bad = 0;
  for (int m = m0; m < m1; ++m) {
    const float s = static_cast<float>(m) / 128.0f;
    const float r = wire::divRn(1.0f, s);
    for (uint32_t bits = 0x3F800000u; bits < 0x40000000u; ++bits) {
      const float x = wire::bitsFloat(bits);
      const float q = wire::correctedQuotient(x, s, r);
      const float want = wire::divRn(x, s);
      if (wire::floatBits(q) != wire::floatBits(want)) {
        if (bad < 5) std::printf("  mismatch: x %a s %a fast %a ieee %a\n", x, s, q, want);
        ++bad;
      }
    }
  }
  return bad;
}

template <WireFormat F>
uint64_t sweepEdges(uint64_t seed, uint64_t* tried) {
  using V = WireVec<F>;
  std::mt19937_64 rng(seed);
  uint64_t bad = 0;
  for (const int e : {-96, -95, 95}) {
    for (int m = 0; m < 128; ++m) {
      const uint16_t scale = static_cast<uint16_t>(((e + 127) << 7) | m);
      const float s = wire::bf16Value(scale);
      for (int t = 0; t < 4096; ++t) {
        // 8 values from 1024 s down to 2^-40 of that and below: the whole admitted range.
        float x[8];
        for (float& v : x) {
          const int k = static_cast<int>(rng() % 200);
          v = std::ldexp(static_cast<float>(rng() % (1u << 24)) / 16777216.0f, 10 - k) * s;
          if (rng() & 1) v = -v;
        }
        const float mag = V::magnitude(x);
        if (!V::fastEncode(mag, s)) continue;
        ++*tried;
        uint32_t got[2], want[2] = {0, 0};
        V::encode(x, scale, mag, got);
        for (int k = 0; k < V::kWords; ++k) {
          for (int i = 0; i < V::kPerWord; ++i)
            want[k] |= uint32_t(wireEncode<F>(x[k * V::kPerWord + i], scale))
                       << (i * tpar::kernels::WireCodes<F>::kBits);
          if (want[k] != got[k]) {
            if (bad < 5) std::printf("  mismatch: scale 0x%04x word %d fast %08x reference %08x\n",
                                     scale, k, got[k], want[k]);
            ++bad;
          }
        }
      }
    }
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: tpar_wire_codec_sweep [--threads N]\n");
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  std::atomic<uint64_t> bad1{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const int m0 = 128 + 128 * t / threads, m1 = 128 + 128 * (t + 1) / threads;
      bad1 += sweepSignificands(m0, m1);
    });
  }
  for (std::thread& th : pool) th.join();
  std::printf("significand pairs: %llu checked, %llu mismatches\n", 128ull << 23,
              static_cast<unsigned long long>(bad1.load()));
  const uint64_t seed = std::random_device{}();
  uint64_t tried[3] = {0, 0, 0};
  const uint64_t bad2 = sweepEdges<WireFormat::kFp8>(seed, &tried[0]) +
                        sweepEdges<WireFormat::kInt8>(seed + 1, &tried[1]) +
                        sweepEdges<WireFormat::kInt4>(seed + 2, &tried[2]);
  std::printf("range edges (seed %llu): fp8 %llu, int8 %llu, int4 %llu vectors on the fast path, "
              "%llu mismatched words\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(tried[0]),
              static_cast<unsigned long long>(tried[1]), static_cast<unsigned long long>(tried[2]),
              static_cast<unsigned long long>(bad2));
  return bad1 + bad2 == 0 ? 0 : 1;
}
