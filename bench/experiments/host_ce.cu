// What an all-reduce through pinned host memory would take if the copy engines moved its data,
// for ranks sharing one GPU: the question behind "a copy-engine path for large host messages"
// (docs/PERFORMANCE.md, "Copy engines for the host transport"). Not tpar's protocol: ranks hand
// off with CUDA events (one process), which costs less than any cross-process flag, so the times
// are a lower bound on what such a path could reach, to be set against `tpar bench --transport
// host` in the same run.
//
// Per rank r, message M in n chunks, each chunk in P pieces:
//   stream up:   for each piece k: copy engine, the input's piece k of every other chunk into
//                r's area in host memory (device to host); an event per piece;
//   stream main: for each piece k: wait for every peer's piece k, copy engine, chunk r's piece k
//                of every peer into device scratch (host to device), a kernel sums the n pieces
//                in rank order (fp32, one rounding) into the output and stores the sum into r's
//                host area (SM stores, 1/n of the message); then, after every peer's sums, copy
//                engine, each peer's summed chunk into the output (host to device).
// That is `--mode ce`. `--mode mixed` gives each direction of the link to the engine that moved
// more of it when both ran at once ("Copy engines for the host transport": a copy engine storing
// while a plan's blocks load ran ahead of SM loads and stores together): the copy engines write,
// the SMs read.
//   stream up:   as above;
//   stream main: for each piece k: wait for every peer's piece k, a kernel loads chunk r's piece
//                k of every peer from their host areas (SM loads), sums in rank order into the
//                output; then, after every peer's sums of piece k, a kernel loads them from the
//                host (SM loads) into the output;
//   stream down: for each piece k, after its sum: copy engine, the summed piece into r's host
//                area (device to host).
// The input is small integers, so every sum is exact and each rank's output is checked.
//   tpar_host_ce [--reps N] [--mode ce|mixed|both]   (2, 4 and 8 ranks; 1, 4, 16 and 64 MiB;
//                                                     1, 2, 4 and 8 pieces; both modes: both)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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

constexpr int kMaxRanks = 8;

struct SumArgs {
  const __nv_bfloat16* in[kMaxRanks];  // rank order; [me] is the rank's own input
  __nv_bfloat16* out;                  // device output
  __nv_bfloat16* host;                 // the rank's host area for its sums
  size_t n;                            // elements, a multiple of 8
  int nranks;
};

__global__ void sumPieces(const SumArgs a) {
  const size_t vecs = a.n / 8;
  for (size_t v = blockIdx.x * size_t(blockDim.x) + threadIdx.x; v < vecs;
       v += size_t(gridDim.x) * blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int s = 0; s < a.nranks; ++s) {
      const uint4 x = reinterpret_cast<const uint4*>(a.in[s])[v];
      const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&x);
      for (int i = 0; i < 8; ++i) acc[i] += __bfloat162float(e[i]);
    }
    uint4 y;
    __nv_bfloat16* o = reinterpret_cast<__nv_bfloat16*>(&y);
    for (int i = 0; i < 8; ++i) o[i] = __float2bfloat16(acc[i]);
    reinterpret_cast<uint4*>(a.out)[v] = y;
    if (a.host != nullptr) reinterpret_cast<uint4*>(a.host)[v] = y;
  }
}

// Copies of up to kMaxRanks - 1 pieces of `n` elements each, from `src` (host, SM loads) to
// `dst` (device).
struct GatherArgs {
  const __nv_bfloat16* src[kMaxRanks];
  __nv_bfloat16* dst[kMaxRanks];
  size_t n;
  int count;
};

__global__ void gatherPieces(const GatherArgs a) {
  const size_t vecs = a.n / 8;
  for (int c = 0; c < a.count; ++c)
    for (size_t v = blockIdx.x * size_t(blockDim.x) + threadIdx.x; v < vecs;
         v += size_t(gridDim.x) * blockDim.x)
      reinterpret_cast<uint4*>(a.dst[c])[v] = reinterpret_cast<const uint4*>(a.src[c])[v];
}

struct Rank {
  __nv_bfloat16 *in = nullptr, *out = nullptr, *scratch = nullptr;
  char* area = nullptr;  // host: the input's other chunks (M), then the sums of chunk r (M/n)
  cudaStream_t up = nullptr, main = nullptr, down = nullptr;
  std::vector<cudaEvent_t> piece;  // per piece: published in `area`
  std::vector<cudaEvent_t> reduced, posted;  // mixed, per piece: summed, then in `area`
  cudaEvent_t summed = nullptr, done = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Both modes: every stream of every rank starts after `start`.
void begin(std::vector<Rank>& rk, cudaEvent_t start) {
  CHECK(cudaEventRecord(start, rk[0].main));
  for (Rank& r : rk) {
    CHECK(cudaStreamWaitEvent(r.up, start, 0));
    CHECK(cudaStreamWaitEvent(r.down, start, 0));
    if (&r != &rk[0]) CHECK(cudaStreamWaitEvent(r.main, start, 0));
  }
}

// Both modes, stream up: each rank's input, but for its own chunk, into its host area by the
// copy engine, piece by piece (an event per piece).
void publish(std::vector<Rank>& rk, size_t chunk, size_t pw, int pieces) {
  const int n = static_cast<int>(rk.size());
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int k = 0; k < pieces; ++k) {
      // The other chunks' piece k: one 2D copy (rows are chunks), own chunk skipped by two.
      const char* src = reinterpret_cast<const char*>(r.in);
      auto rows = [&](int c0, int c1) {
        if (c1 <= c0) return;
        const size_t off = size_t(c0) * chunk + size_t(k) * pw;
        CHECK(cudaMemcpy2DAsync(r.area + off, chunk, src + off, chunk, pw, c1 - c0,
                                cudaMemcpyDeviceToHost, r.up));
      };
      rows(me + 1, n);
      rows(0, me);
      CHECK(cudaEventRecord(r.piece[k], r.up));
    }
  }
}

// Both modes: `stop` after every rank's main stream; returns the microseconds since `start`.
double finish(std::vector<Rank>& rk, cudaEvent_t start, cudaEvent_t stop) {
  for (size_t me = 0; me < rk.size(); ++me) {
    CHECK(cudaEventRecord(rk[me].done, rk[me].main));
    if (me != 0) CHECK(cudaStreamWaitEvent(rk[0].main, rk[me].done, 0));
  }
  CHECK(cudaEventRecord(stop, rk[0].main));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms * 1e3;
}

// Both modes: the sum of chunk `me`'s piece k, our own input and each peer's piece, which
// `peer(s, off)` gives once the main stream has waited for it.
template <typename Peer>
SumArgs sumOf(std::vector<Rank>& rk, int me, int k, size_t chunk, size_t pw, Peer peer) {
  Rank& r = rk[me];
  const int n = static_cast<int>(rk.size());
  const size_t off = size_t(me) * chunk + size_t(k) * pw;
  SumArgs a{};
  for (int s = 0; s < n; ++s) {
    if (s == me) {
      a.in[s] = reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<const char*>(r.in) + off);
      continue;
    }
    CHECK(cudaStreamWaitEvent(r.main, rk[s].piece[k], 0));
    a.in[s] = peer(s, off);
  }
  a.out = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(r.out) + off);
  a.host = nullptr;
  a.n = pw / 2;
  a.nranks = n;
  return a;
}

// One all-reduce of `bytes` over `ranks` in `pieces` pieces per chunk; returns microseconds.
double once(std::vector<Rank>& rk, size_t bytes, int pieces, cudaEvent_t start, cudaEvent_t stop) {
  const int n = static_cast<int>(rk.size());
  const size_t chunk = bytes / n, pw = chunk / pieces;
  begin(rk, start);
  publish(rk, chunk, pw, pieces);
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int k = 0; k < pieces; ++k) {
      SumArgs a = sumOf(rk, me, k, chunk, pw, [&](int s, size_t off) {
        char* dst = reinterpret_cast<char*>(r.scratch) + size_t(s) * pw;
        CHECK(cudaMemcpyAsync(dst, rk[s].area + off, pw, cudaMemcpyHostToDevice, r.main));
        return reinterpret_cast<const __nv_bfloat16*>(dst);
      });
      a.host = reinterpret_cast<__nv_bfloat16*>(r.area + bytes + size_t(k) * pw);
      sumPieces<<<64, 256, 0, r.main>>>(a);
      CHECK(cudaGetLastError());
    }
    CHECK(cudaEventRecord(r.summed, r.main));
  }
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int s = 0; s < n; ++s) {
      if (s == me) continue;
      CHECK(cudaStreamWaitEvent(r.main, rk[s].summed, 0));
      CHECK(cudaMemcpyAsync(reinterpret_cast<char*>(r.out) + size_t(s) * chunk, rk[s].area + bytes,
                            chunk, cudaMemcpyHostToDevice, r.main));
    }
  }
  return finish(rk, start, stop);
}

// The same all-reduce with the copy engines writing and the SMs reading (--mode mixed).
double onceMixed(std::vector<Rank>& rk, size_t bytes, int pieces, cudaEvent_t start,
                 cudaEvent_t stop) {
  const int n = static_cast<int>(rk.size());
  const size_t chunk = bytes / n, pw = chunk / pieces;
  begin(rk, start);
  publish(rk, chunk, pw, pieces);
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int k = 0; k < pieces; ++k) {
      const SumArgs a = sumOf(rk, me, k, chunk, pw, [&](int s, size_t off) {
        return reinterpret_cast<const __nv_bfloat16*>(rk[s].area + off);
      });
      sumPieces<<<32, 512, 0, r.main>>>(a);
      CHECK(cudaGetLastError());
      CHECK(cudaEventRecord(r.reduced[k], r.main));
      CHECK(cudaStreamWaitEvent(r.down, r.reduced[k], 0));
      CHECK(cudaMemcpyAsync(r.area + bytes + size_t(k) * pw, a.out, pw, cudaMemcpyDeviceToHost,
                            r.down));
      CHECK(cudaEventRecord(r.posted[k], r.down));
    }
  }
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int k = 0; k < pieces; ++k) {
      GatherArgs g{};
      for (int s = 0; s < n; ++s) {
        if (s == me) continue;
        CHECK(cudaStreamWaitEvent(r.main, rk[s].posted[k], 0));
        g.src[g.count] =
            reinterpret_cast<const __nv_bfloat16*>(rk[s].area + bytes + size_t(k) * pw);
        g.dst[g.count] = reinterpret_cast<__nv_bfloat16*>(
            reinterpret_cast<char*>(r.out) + size_t(s) * chunk + size_t(k) * pw);
        ++g.count;
      }
      g.n = pw / 2;
      gatherPieces<<<32, 512, 0, r.main>>>(g);
      CHECK(cudaGetLastError());
    }
  }
  return finish(rk, start, stop);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  bool run_ce = true, run_mixed = true;
  for (int i = 1; i < argc; i += 2) {
    const char* val = i + 1 < argc ? argv[i + 1] : "";
    bool ok = false;
    if (std::strcmp(argv[i], "--reps") == 0) {
      char* end = nullptr;
      const long v = std::strtol(val, &end, 10);
      ok = end != val && *end == '\0' && v >= 1 && v <= 100000;
      if (ok) reps = static_cast<int>(v);
    } else if (std::strcmp(argv[i], "--mode") == 0) {
      ok = std::strcmp(val, "ce") == 0 || std::strcmp(val, "mixed") == 0 ||
           std::strcmp(val, "both") == 0;
      if (ok) {
        run_ce = std::strcmp(val, "mixed") != 0;
        run_mixed = std::strcmp(val, "ce") != 0;
      }
    }
    if (!ok) {
      std::fprintf(stderr,
                   "tpar_host_ce: bad argument '%s %s'; usage: tpar_host_ce [--reps N (1..100000)] "
                   "[--mode ce|mixed|both]\n",
                   argv[i], val);
      return 2;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 3;
  }
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const size_t max_bytes = size_t(64) << 20;
  std::printf("# tpar_host_ce: %s, virtual ranks, all-reduce through pinned host memory with "
              "the copy engines moving both directions (ce) or writing while the SMs read "
              "(mixed), event hand-offs (a lower bound), median us of %d reps after a warm-up; "
              "every rank's output checked once per cell\n",
              prop.name, reps);
  std::printf("%6s %5s %10s %6s %10s %8s\n", "mode", "ranks", "bytes", "pieces", "us", "wrong");
  for (int n : {2, 4, 8}) {
    std::vector<Rank> rk(n);
    std::vector<std::vector<__nv_bfloat16>> host_in(n);
    for (int me = 0; me < n; ++me) {
      Rank& r = rk[me];
      CHECK(cudaMalloc(&r.in, max_bytes));
      CHECK(cudaMalloc(&r.out, max_bytes));
      CHECK(cudaMalloc(&r.scratch, max_bytes));
      CHECK(cudaHostAlloc(reinterpret_cast<void**>(&r.area), 2 * max_bytes, cudaHostAllocMapped));
      CHECK(cudaStreamCreateWithFlags(&r.up, cudaStreamNonBlocking));
      CHECK(cudaStreamCreateWithFlags(&r.main, cudaStreamNonBlocking));
      CHECK(cudaStreamCreateWithFlags(&r.down, cudaStreamNonBlocking));
      r.piece.resize(8);
      r.reduced.resize(8);
      r.posted.resize(8);
      for (auto* v : {&r.piece, &r.reduced, &r.posted})
        for (auto& e : *v) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      CHECK(cudaEventCreateWithFlags(&r.summed, cudaEventDisableTiming));
      CHECK(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming));
      // Small integers: sums of up to 8 ranks stay exact in bf16.
      host_in[me].resize(max_bytes / 2);
      for (size_t i = 0; i < host_in[me].size(); ++i)
        host_in[me][i] = __float2bfloat16(float(int((i * 7 + me * 13) % 15) - 7));
      CHECK(cudaMemcpy(r.in, host_in[me].data(), max_bytes, cudaMemcpyHostToDevice));
    }
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<__nv_bfloat16> got(max_bytes / 2);
    std::vector<float> want(max_bytes / 2, 0.0f);
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < want.size(); ++i) want[i] += __bfloat162float(host_in[s][i]);
    for (size_t bytes : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20, size_t(64) << 20}) {
      for (int mixed = 0; mixed < 2; ++mixed) {
        if (mixed ? !run_mixed : !run_ce) continue;
        auto run = mixed ? onceMixed : once;
        for (int pieces : {1, 2, 4, 8}) {
          long long wrong = 0;
          for (Rank& r : rk) CHECK(cudaMemset(r.out, 0xFF, bytes));  // poisoned
          run(rk, bytes, pieces, start, stop);
          for (int me = 0; me < n; ++me) {
            CHECK(cudaMemcpy(got.data(), rk[me].out, bytes, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < bytes / 2; ++i) wrong += __bfloat162float(got[i]) != want[i];
          }
          std::vector<double> t;
          for (int i = 0; i < reps; ++i) t.push_back(run(rk, bytes, pieces, start, stop));
          std::printf("%6s %5d %10zu %6d %10.2f %8lld\n", mixed ? "mixed" : "ce", n, bytes,
                      pieces, median(t), wrong);
          std::fflush(stdout);
        }
      }
    }
    for (Rank& r : rk) {
      CHECK(cudaFree(r.in));
      CHECK(cudaFree(r.out));
      CHECK(cudaFree(r.scratch));
      CHECK(cudaFreeHost(r.area));
      CHECK(cudaStreamDestroy(r.up));
      CHECK(cudaStreamDestroy(r.main));
      CHECK(cudaStreamDestroy(r.down));
      for (auto* v : {&r.piece, &r.reduced, &r.posted})
        for (auto& e : *v) CHECK(cudaEventDestroy(e));
      CHECK(cudaEventDestroy(r.summed));
      CHECK(cudaEventDestroy(r.done));
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
  }
  return 0;
}
