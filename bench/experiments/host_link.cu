// How fast one GPU's PCIe link to pinned host memory moves data, by copy engine and by the SMs:
// the question behind "use the copy engines for large host-staged messages" (docs/PERFORMANCE.md,
// "Host-staged transport"). For each size: cudaMemcpyAsync device to host, host to device, and
// both at once on two streams; then `tpar doctor`'s probe kernels, whose threads store 16-byte
// vectors into host memory or load them from it (four loads in flight per thread), with the whole
// GPU (4 blocks per SM x 256 threads, as the doctor probes the link) and with the few blocks
// of a host-staged all-reduce plan (8, 16, 32 blocks x 512 threads); and the mixed pairs, the
// copy engine one way while the SMs go the other; and the message in 1 to 64 copies back to back
// (dma-chain, one direction; dma-chain2, both; the blocks column is the count of copies), what
// each copy costs beyond its bytes. Median GB/s over the reps.
// A second table times the SMs' accesses by width (2, 4, 8 and 16 bytes per thread, so 64 to
// 512 bytes per warp instruction), loads with 4 or 16 in flight per thread: whether the link
// moves fewer bytes per second in a warp's narrower accesses, as a compressed wire format's
// codes (4 or 8 bytes per thread) and scales (2) are, and whether more loads in flight make up
// for it. The wire kernel's own plan is 32 blocks of 512 threads.
// --backing says where the two host buffers come from (bench/experiments/host_backing.h;
// default hostalloc, as the link probes of `tpar doctor` and `tpar bench` allocate them); --only
// keeps the rows named (a comma-separated list of the first column's words, e.g.
// sm-store,sm-load,sm-both, which skips the second table; "widths" keeps only the second).
//   tpar_host_link [--device N] [--reps N] [--backing NAME] [--only LIST]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/experiments/host_backing.h"
#include "tools/tpar/doctor/stream_kernels.cuh"

namespace {

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,             \
                   cudaGetErrorString(e_));                                       \
      std::exit(4);                                                               \
    }                                                                             \
  } while (0)

// Access of W bytes: the type a thread loads or stores.
template <int W> struct Word;
template <> struct Word<2> { using T = unsigned short; };
template <> struct Word<4> { using T = unsigned int; };
template <> struct Word<8> { using T = uint2; };
template <> struct Word<16> { using T = uint4; };

__device__ __forceinline__ unsigned fold(unsigned short x) { return x; }
__device__ __forceinline__ unsigned fold(unsigned x) { return x; }
__device__ __forceinline__ unsigned fold(uint2 x) { return x.x ^ x.y; }
__device__ __forceinline__ unsigned fold(uint4 x) { return x.x ^ x.y ^ x.z ^ x.w; }

template <int W>
__device__ __forceinline__ typename Word<W>::T wordOf(unsigned seed) {
  if constexpr (W == 2) return static_cast<unsigned short>(seed);
  else if constexpr (W == 4) return seed;
  else if constexpr (W == 8) return make_uint2(seed, ~seed);
  else return make_uint4(seed, ~seed, seed ^ 0x5a5a5a5au, seed + 1);
}

// Grid-strided stores of W-byte words over n words.
template <int W>
__global__ void storeWidth(typename Word<W>::T* dst, size_t n, unsigned seed) {
  const typename Word<W>::T v = wordOf<W>(seed);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = v;
}

// Grid-strided loads of W-byte words, D independent loads in flight per thread (the folded
// value is stored only when it matches one value, so the loads cannot be dropped).
template <int W, int D>
__global__ void loadWidth(const typename Word<W>::T* src, size_t n, int* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  unsigned acc = 0;
  for (; i + (D - 1) * stride < n; i += D * stride) {
    typename Word<W>::T x[D];
#pragma unroll
    for (int d = 0; d < D; ++d) x[d] = __ldcg(src + i + d * stride);
#pragma unroll
    for (int d = 0; d < D; ++d) acc += fold(x[d]);
  }
  for (; i < n; i += stride) acc += fold(__ldcg(src + i));
  if (acc == 0x13572468u) *sink = static_cast<int>(acc);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Bufs {
  char* dev = nullptr;
  char* dev2 = nullptr;
  char* host = nullptr;
  char* host2 = nullptr;
  int* sink = nullptr;
  cudaStream_t s[2] = {nullptr, nullptr};
  cudaEvent_t e[4] = {nullptr, nullptr, nullptr, nullptr};
};

void launchStore(int width, char* dst, size_t words, int blocks, int threads, cudaStream_t s) {
  switch (width) {
    case 2:
      storeWidth<2><<<blocks, threads, 0, s>>>(reinterpret_cast<unsigned short*>(dst), words, 7u);
      break;
    case 4:
      storeWidth<4><<<blocks, threads, 0, s>>>(reinterpret_cast<unsigned*>(dst), words, 7u);
      break;
    case 8:
      storeWidth<8><<<blocks, threads, 0, s>>>(reinterpret_cast<uint2*>(dst), words, 7u);
      break;
    default:
      storeWidth<16><<<blocks, threads, 0, s>>>(reinterpret_cast<uint4*>(dst), words, 7u);
  }
}

template <int W>
void launchLoadW(int depth, const char* src, size_t words, int blocks, int threads, int* sink,
                 cudaStream_t s) {
  const auto* p = reinterpret_cast<const typename Word<W>::T*>(src);
  if (depth > 4) {
    loadWidth<W, 16><<<blocks, threads, 0, s>>>(p, words, sink);
  } else {
    loadWidth<W, 4><<<blocks, threads, 0, s>>>(p, words, sink);
  }
}

void launchLoad(int width, int depth, const char* src, size_t words, int blocks, int threads,
                int* sink, cudaStream_t s) {
  switch (width) {
    case 2: launchLoadW<2>(depth, src, words, blocks, threads, sink, s); break;
    case 4: launchLoadW<4>(depth, src, words, blocks, threads, sink, s); break;
    case 8: launchLoadW<8>(depth, src, words, blocks, threads, sink, s); break;
    default: launchLoadW<16>(depth, src, words, blocks, threads, sink, s);
  }
}

// One timed rep of `what` over `bytes`; returns GB/s (both directions counted for "both").
double rep(const Bufs& b, const std::string& what, size_t bytes, int blocks, int threads) {
  const size_t n = bytes / sizeof(int4);
  CHECK(cudaEventRecord(b.e[0], b.s[0]));
  CHECK(cudaStreamWaitEvent(b.s[1], b.e[0], 0));
  double moved = double(bytes);
  if (what == "dma-d2h") {
    CHECK(cudaMemcpyAsync(b.host, b.dev, bytes, cudaMemcpyDeviceToHost, b.s[0]));
  } else if (what == "dma-h2d") {
    CHECK(cudaMemcpyAsync(b.dev, b.host, bytes, cudaMemcpyHostToDevice, b.s[0]));
  } else if (what == "dma-both") {
    CHECK(cudaMemcpyAsync(b.host, b.dev, bytes, cudaMemcpyDeviceToHost, b.s[0]));
    CHECK(cudaMemcpyAsync(b.dev2, b.host2, bytes, cudaMemcpyHostToDevice, b.s[1]));
    moved *= 2;
  } else if (what == "sm-store") {
    tpar_cli::storeStream<<<blocks, threads, 0, b.s[0]>>>(reinterpret_cast<int4*>(b.host), n, 7);
  } else if (what == "sm-load") {
    tpar_cli::loadStream<<<blocks, threads, 0, b.s[0]>>>(reinterpret_cast<const int4*>(b.host), n, b.sink);
  } else if (what == "sm-both") {
    tpar_cli::storeStream<<<blocks, threads, 0, b.s[0]>>>(reinterpret_cast<int4*>(b.host), n, 7);
    tpar_cli::loadStream<<<blocks, threads, 0, b.s[1]>>>(reinterpret_cast<const int4*>(b.host2), n, b.sink);
    moved *= 2;
  } else if (what == "dma-chain" || what == "dma-chain2") {
    // The message in `blocks` back-to-back copies on one stream (chain2: both directions, a
    // stream each): what each copy costs beyond its bytes.
    const size_t piece = bytes / blocks;
    for (int k = 0; k < blocks; ++k) {
      CHECK(cudaMemcpyAsync(b.host + k * piece, b.dev + k * piece, piece, cudaMemcpyDeviceToHost, b.s[0]));
      if (what == "dma-chain2")
        CHECK(cudaMemcpyAsync(b.dev2 + k * piece, b.host2 + k * piece, piece, cudaMemcpyHostToDevice, b.s[1]));
    }
    if (what == "dma-chain2") moved *= 2;
  } else if (what == "ce-up+sm-ld") {
    // The copy engine writes while the SMs read: the split a copy-engine publish with an
    // SM reduction would run.
    CHECK(cudaMemcpyAsync(b.host, b.dev, bytes, cudaMemcpyDeviceToHost, b.s[0]));
    tpar_cli::loadStream<<<blocks, threads, 0, b.s[1]>>>(reinterpret_cast<const int4*>(b.host2), n, b.sink);
    moved *= 2;
  } else if (what.rfind("w", 0) == 0) {
    // "wW-store", "wW-loadD", "wW-bothD": W-byte accesses (the width table).
    const int width = std::atoi(what.c_str() + 1);
    const std::string op = what.substr(what.find('-') + 1);
    const bool st = op == "store" || op.rfind("both", 0) == 0;
    const bool ld = op != "store";
    const int depth = ld ? std::atoi(op.c_str() + 4) : 0;  // after "load" or "both"
    const size_t words = bytes / width;
    if (st) launchStore(width, b.host, words, blocks, threads, b.s[0]);
    if (ld) launchLoad(width, depth, st ? b.host2 : b.host, words, blocks, threads, b.sink,
                       st ? b.s[1] : b.s[0]);
    if (st && ld) moved *= 2;
  } else if (what == "sm-st+ce-dn") {
    tpar_cli::storeStream<<<blocks, threads, 0, b.s[0]>>>(reinterpret_cast<int4*>(b.host), n, 7);
    CHECK(cudaMemcpyAsync(b.dev2, b.host2, bytes, cudaMemcpyHostToDevice, b.s[1]));
    moved *= 2;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(b.e[1], b.s[1]));
  CHECK(cudaStreamWaitEvent(b.s[0], b.e[1], 0));
  CHECK(cudaEventRecord(b.e[2], b.s[0]));
  CHECK(cudaEventSynchronize(b.e[2]));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, b.e[0], b.e[2]));
  return ms > 0 ? moved / (ms * 1e6) : 0;
}

// Whether row `what` is kept by --only (empty: every row).
bool kept(const std::string& only, const std::string& what) {
  if (only.empty()) return true;
  std::string list = "," + only + ",";
  return list.find("," + what + ",") != std::string::npos;
}

int usage(const char* why, const char* arg) {
  std::fprintf(stderr, "tpar_host_link: %s '%s'; usage: tpar_host_link [--device N] [--reps N] "
               "[--backing hostalloc|memfd|memfd-thp|anon-thp|hugetlb|cumem] [--only LIST]\n",
               why, arg);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0, reps = 10;
  std::string backing = "hostalloc", only;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage("missing the value of", argv[i]);
    const char* val = argv[i + 1];
    if (flag == "--backing") {
      if (!host_backing::known(val)) return usage("unknown --backing", val);
      backing = val;
    } else if (flag == "--only") {
      only = val;
    } else if (flag == "--device" || flag == "--reps") {
      char* end = nullptr;
      const long v = std::strtol(val, &end, 10);
      if (end == val || *end != '\0' || v < 0 || v > 1000000) return usage("bad value of", argv[i]);
      (flag == "--device" ? device : reps) = int(v);
    } else {
      return usage("bad argument", argv[i]);
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "tpar_host_link: --reps must be 1 or more\n");
    return 2;
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 3;
  }
  if (device >= ndev) {
    std::fprintf(stderr, "tpar_host_link: --device %d, but this machine has %d GPU(s)\n", device,
                 ndev);
    return 2;
  }
  CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0;
  CHECK(cudaDriverGetVersion(&driver));
  const size_t max_bytes = size_t(64) << 20;
  Bufs b;
  CHECK(cudaMalloc(&b.dev, max_bytes));
  CHECK(cudaMalloc(&b.dev2, max_bytes));
  CHECK(cudaMalloc(&b.sink, sizeof(int)));
  host_backing::Buf hb[2];
  for (int k = 0; k < 2; ++k) {
    const std::string why = host_backing::alloc(backing, max_bytes, device, 1 + k, &hb[k]);
    if (!why.empty()) {
      std::printf("# --backing %s not available here: %s\n", backing.c_str(), why.c_str());
      for (auto& x : hb) host_backing::release(&x);
      return 5;
    }
  }
  b.host = hb[0].dev;
  b.host2 = hb[1].dev;
  CHECK(cudaMemset(b.dev, 3, max_bytes));
  CHECK(cudaMemset(b.dev2, 4, max_bytes));
  for (auto& s : b.s) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (auto& e : b.e) CHECK(cudaEventCreate(&e));

  std::printf("# tpar_host_link: %s (%d SMs), CUDA driver API %d, pinned host memory "
              "(--backing %s), %d reps per cell after one warm-up, median GB/s\n",
              prop.name, prop.multiProcessorCount, driver, backing.c_str(), reps);
  for (int k = 0; k < 2; ++k)
    std::printf("# host buffer %d: %s\n", k, host_backing::pageState(hb[k].host, hb[k].mapped).c_str());
  std::printf("# 'both' cells count the bytes of both directions\n");
  struct Shape {
    std::string what;
    int blocks, threads;
  };
  const int whole = prop.multiProcessorCount * 4;
  std::vector<Shape> shapes = {{"dma-d2h", 0, 0},         {"dma-h2d", 0, 0},
                               {"dma-both", 0, 0},        {"sm-store", whole, 256},
                               {"sm-load", whole, 256},   {"sm-both", whole, 256},
                               {"sm-store", 8, 512},      {"sm-load", 8, 512},
                               {"sm-store", 16, 512},     {"sm-load", 16, 512},
                               {"sm-store", 32, 512},     {"sm-load", 32, 512},
                               {"sm-both", 32, 512},      {"sm-both", 64, 256},
                               {"ce-up+sm-ld", whole, 256}, {"ce-up+sm-ld", 32, 512},
                               {"sm-st+ce-dn", whole, 256}, {"sm-st+ce-dn", 32, 512},
                               {"dma-chain", 1, 0},       {"dma-chain", 4, 0},
                               {"dma-chain", 16, 0},      {"dma-chain", 64, 0},
                               {"dma-chain2", 4, 0},      {"dma-chain2", 16, 0},
                               {"dma-chain2", 64, 0}};
  const size_t sizes[] = {size_t(256) << 10, size_t(1) << 20, size_t(4) << 20,
                          size_t(16) << 20, size_t(64) << 20};
  std::printf("%-10s %7s %7s", "what", "blocks", "threads");
  for (size_t s : sizes) std::printf(" %9zuK", s >> 10);
  std::printf("\n");
  for (const Shape& sh : shapes) {
    if (!kept(only, sh.what)) continue;
    std::printf("%-10s %7d %7d", sh.what.c_str(), sh.blocks, sh.threads);
    for (size_t bytes : sizes) {
      std::vector<double> r;
      for (int i = -1; i < reps; ++i) {
        const double g = rep(b, sh.what, bytes, sh.blocks, sh.threads);
        if (i >= 0) r.push_back(g);
      }
      std::printf(" %10.1f", median(r));
    }
    std::printf("\n");
  }
  // The width table: each access width with the wire kernel's plan (32 x 512) and the whole
  // GPU; loads and both directions with 4 and with 16 loads in flight per thread.
  std::printf("\n# by access width: wW-store, wW-loadD, wW-bothD (W bytes per thread, D loads "
              "in flight per thread; both: the store and the load kernels at once)\n");
  std::printf("%-10s %7s %7s", "what", "blocks", "threads");
  for (size_t s : sizes) std::printf(" %9zuK", s >> 10);
  std::printf("\n");
  for (int width : only.empty() || only == "widths" ? std::vector<int>{2, 4, 8, 16}
                                                    : std::vector<int>{}) {
    for (const auto& [blocks, threads] : {std::pair<int, int>{32, 512}, {whole, 256}}) {
      for (const char* op : {"store", "load4", "load16", "both4", "both16"}) {
        const std::string what = "w" + std::to_string(width) + "-" + op;
        std::printf("%-10s %7d %7d", what.c_str(), blocks, threads);
        for (size_t bytes : sizes) {
          std::vector<double> r;
          for (int i = -1; i < reps; ++i) {
            const double g = rep(b, what, bytes, blocks, threads);
            if (i >= 0) r.push_back(g);
          }
          std::printf(" %10.1f", median(r));
        }
        std::printf("\n");
      }
    }
  }
  for (auto& x : hb) host_backing::release(&x);
  return 0;
}
