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
// The input is small integers, so every sum is exact and each rank's output is checked.
//   tpar_host_ce [--reps N]   (2, 4 and 8 ranks; 1, 4, 16 and 64 MiB; 1, 2, 4 and 8 pieces)
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
    reinterpret_cast<uint4*>(a.host)[v] = y;
  }
}

struct Rank {
  __nv_bfloat16 *in = nullptr, *out = nullptr, *scratch = nullptr;
  char* area = nullptr;  // host: the input's other chunks (M), then the sums of chunk r (M/n)
  cudaStream_t up = nullptr, main = nullptr;
  std::vector<cudaEvent_t> piece;  // per piece: published in `area`
  cudaEvent_t summed = nullptr, done = nullptr;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// One all-reduce of `bytes` over `ranks` in `pieces` pieces per chunk; returns microseconds.
double once(std::vector<Rank>& rk, size_t bytes, int pieces, cudaEvent_t start, cudaEvent_t stop) {
  const int n = static_cast<int>(rk.size());
  const size_t chunk = bytes / n, pw = chunk / pieces;
  CHECK(cudaEventRecord(start, rk[0].main));
  for (Rank& r : rk) {
    CHECK(cudaStreamWaitEvent(r.up, start, 0));
    if (&r != &rk[0]) CHECK(cudaStreamWaitEvent(r.main, start, 0));
  }
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
  for (int me = 0; me < n; ++me) {
    Rank& r = rk[me];
    for (int k = 0; k < pieces; ++k) {
      SumArgs a{};
      for (int s = 0; s < n; ++s) {
        const size_t off = size_t(me) * chunk + size_t(k) * pw;
        if (s == me) {
          a.in[s] = reinterpret_cast<const __nv_bfloat16*>(reinterpret_cast<const char*>(r.in) + off);
          continue;
        }
        CHECK(cudaStreamWaitEvent(r.main, rk[s].piece[k], 0));
        char* dst = reinterpret_cast<char*>(r.scratch) + size_t(s) * pw;
        CHECK(cudaMemcpyAsync(dst, rk[s].area + off, pw, cudaMemcpyHostToDevice, r.main));
        a.in[s] = reinterpret_cast<const __nv_bfloat16*>(dst);
      }
      a.out = reinterpret_cast<__nv_bfloat16*>(reinterpret_cast<char*>(r.out) + size_t(me) * chunk +
                                               size_t(k) * pw);
      a.host = reinterpret_cast<__nv_bfloat16*>(r.area + bytes + size_t(k) * pw);
      a.n = pw / 2;
      a.nranks = n;
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
    CHECK(cudaEventRecord(r.done, r.main));
    if (me != 0) CHECK(cudaStreamWaitEvent(rk[0].main, r.done, 0));
  }
  CHECK(cudaEventRecord(stop, rk[0].main));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  return ms * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i < argc; i += 2) {
    char* end = nullptr;
    const long v = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : -1;
    if (std::strcmp(argv[i], "--reps") != 0 || end == nullptr || *end != '\0' || v < 1 ||
        v > 100000) {
      std::fprintf(stderr, "tpar_host_ce: bad argument '%s'; usage: tpar_host_ce [--reps N]\n",
                   argv[i]);
      return 2;
    }
    reps = static_cast<int>(v);
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
  std::printf("# tpar_host_ce: %s, virtual ranks, copy-engine all-reduce through pinned host "
              "memory, event hand-offs (a lower bound), median us of %d reps after a warm-up; "
              "every rank's output checked once per cell\n",
              prop.name, reps);
  std::printf("%5s %10s %6s %10s %8s\n", "ranks", "bytes", "pieces", "us", "wrong");
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
      r.piece.resize(8);
      for (auto& e : r.piece) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
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
      for (int pieces : {1, 2, 4, 8}) {
        long long wrong = 0;
        for (Rank& r : rk) CHECK(cudaMemset(r.out, 0xFF, bytes));  // poisoned
        once(rk, bytes, pieces, start, stop);
        for (int me = 0; me < n; ++me) {
          CHECK(cudaMemcpy(got.data(), rk[me].out, bytes, cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < bytes / 2; ++i) wrong += __bfloat162float(got[i]) != want[i];
        }
        std::vector<double> t;
        for (int i = 0; i < reps; ++i) t.push_back(once(rk, bytes, pieces, start, stop));
        std::printf("%5d %10zu %6d %10.2f %8lld\n", n, bytes, pieces, median(t), wrong);
        std::fflush(stdout);
      }
    }
    for (Rank& r : rk) {
      CHECK(cudaFree(r.in));
      CHECK(cudaFree(r.out));
      CHECK(cudaFree(r.scratch));
      CHECK(cudaFreeHost(r.area));
      CHECK(cudaStreamDestroy(r.up));
      CHECK(cudaStreamDestroy(r.main));
      for (auto& e : r.piece) CHECK(cudaEventDestroy(e));
      CHECK(cudaEventDestroy(r.summed));
      CHECK(cudaEventDestroy(r.done));
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
  }
  return 0;
}
