// Host-memory hand-off experiments for the host-staged transport (docs/PERFORMANCE.md, "Host-staged transport").
//
// N virtual ranks (N streams on one GPU), each with a region of flag slots and payload, in
// pinned host memory mapped into the GPU or in device memory. Each round every rank signals
// every peer and waits for all of them (an all-to-all barrier), optionally after publishing a
// payload (two-shot pull's phase: write B bytes into its own region, fence, flag; then read a
// 1/N slice of every peer's payload). Times per round, two ways:
//   persistent: one kernel per rank runs R rounds (the link's cost alone);
//   per-kernel: one kernel per round, K kernels per rank captured in a graph (the bench's way),
//               so kernel boundaries and launches are in the time.
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o host_sync bench/experiments/host_sync.cu
// Run:   ./host_sync   (prints one line per case)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

constexpr int kMaxN = 8;
constexpr int kMaxBlocks = 32;
// Region: flag slots [block][sender] (uint32, a 32-byte line per block), then payload.
constexpr size_t kFlagBytes = kMaxBlocks * 32;
constexpr size_t kPayloadMax = 8u << 20;

enum Flags : int {
  kPull = 1,      // flag in the sender's own region (thread p polls peer p's region)
  kAcquire = 2,   // polls with ld.acquire.sys (else ld.volatile)
  kFence = 4,     // __threadfence_system() before the flag (after the payload)
  kOnePoller = 8, // push only: lane 0 polls the whole flag line with two 16-byte loads
  kReaderFence = 16,  // each polling lane runs fence.acq_rel.sys once its flag arrived
  kReaderAcquire = 32,  // each polling lane runs one ld.acquire.sys of its flag once it arrived
  kStagger = 64,  // per-lane polls, two loads in flight, the second issued stagger_ns after the first
};

struct Args {
  char* region[kMaxN];
  uint32_t* epoch;  // device memory, one word per block
  uint32_t* fail;   // device memory
  int rank, n, rounds, flags;
  uint64_t payload;  // bytes each rank publishes per round
  uint32_t stagger_ns;  // kStagger: delay between the two polls in flight
};

__device__ __forceinline__ uint32_t ldv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t lda(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint4 ldv4(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void stv(uint32_t* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void stv4(void* p, uint4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t* slot(char* region, int block, int sender) {
  return reinterpret_cast<uint32_t*>(region + block * 32) + sender;
}

__device__ __forceinline__ bool reached(uint32_t v, uint32_t target) {
  return static_cast<int32_t>(v - target) >= 0;
}

// Bounds a poll: after two seconds it records the failure and tells the caller to stop.
struct Spin {
  uint32_t* fail;
  uint64_t spins = 0, t0 = 0;
  __device__ bool expired() {
    if ((++spins & 1023) != 0) return false;
    if (t0 == 0) t0 = now();
    if (now() - t0 <= 2000000000ull) return false;
    atomicExch(fail, 1u);
    return true;
  }
};

__global__ void __launch_bounds__(512) roundsKernel(Args a) {
  const int b = blockIdx.x;
  const uint32_t e0 = *reinterpret_cast<volatile uint32_t*>(&a.epoch[b]);
  const bool pull = a.flags & kPull;
  const uint64_t t_start = now();
  __shared__ uint32_t s_sum;
  if (threadIdx.x == 0) s_sum = 0;
  uint32_t sum = 0;
  // This block's share of the payload.
  const uint64_t vecs = a.payload / 16;
  const uint64_t per_block = (vecs + gridDim.x - 1) / gridDim.x;
  const uint64_t v0 = b * per_block;
  const uint64_t v1 = v0 + per_block < vecs ? v0 + per_block : vecs;
  for (int r = 0; r < a.rounds; ++r) {
    const uint32_t target = e0 + 1 + r;
    char* own = a.region[a.rank];
    if (a.payload > 0) {
      for (uint64_t v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
        stv4(own + kFlagBytes + v * 16, make_uint4(target, v, target, v));
      }
    }
    __syncthreads();
    if (a.flags & kFence) {
      if (threadIdx.x == 0) __threadfence_system();
      __syncthreads();
    }
    // Signal.
    if (pull) {
      if (threadIdx.x == 0) stv(slot(own, b, 0), target);
    } else if (threadIdx.x < a.n && threadIdx.x != a.rank) {
      stv(slot(a.region[threadIdx.x], b, a.rank), target);
    }
    // Wait.
    if ((a.flags & kOnePoller) && !pull) {
      if (threadIdx.x == 0) {
        const uint32_t* line = slot(own, b, 0);
        Spin spin{a.fail};
        for (;;) {
          const uint4 x = ldv4(line);
          const uint4 y = ldv4(line + 4);
          const uint32_t w[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w};
          bool all = true;
          for (int p = 0; p < a.n; ++p) all = all && (p == a.rank || reached(w[p], target));
          if (all) break;
          if (spin.expired()) break;
        }
      }
    } else if (threadIdx.x < a.n && threadIdx.x != a.rank) {
      const uint32_t* f = pull ? slot(a.region[threadIdx.x], b, 0) : slot(own, b, threadIdx.x);
      Spin spin{a.fail};
      if (a.flags & kStagger) {
        // Two polls in flight, apart by stagger_ns: a flag that lands is seen by whichever poll
        // leaves next, on average a quarter of a round trip sooner than with one.
        uint32_t x0 = ldv(f);
        __nanosleep(a.stagger_ns);
        uint32_t x1 = ldv(f);
        for (;;) {
          if (reached(x0, target)) break;
          x0 = ldv(f);
          if (reached(x1, target)) break;
          x1 = ldv(f);
          if (spin.expired()) break;
        }
      } else {
        while (!reached((a.flags & kAcquire) ? lda(f) : ldv(f), target)) {
          if (spin.expired()) break;
        }
      }
      if (a.flags & kReaderFence) asm volatile("fence.acq_rel.sys;" ::: "memory");
      if (a.flags & kReaderAcquire) (void)lda(f);
    }
    __syncthreads();
    // Read a 1/n slice of every peer's payload (two-shot pull's reduce-scatter reads).
    if (a.payload > 0) {
      const uint64_t slice = (v1 - v0 + a.n - 1) / a.n;
      const uint64_t s0 = v0 + a.rank * slice;
      for (int p = 0; p < a.n; ++p) {
        if (p == a.rank) continue;
        for (uint64_t v = s0 + threadIdx.x; v < s0 + slice && v < v1; v += blockDim.x) {
          const uint4 x = ldv4(a.region[p] + kFlagBytes + v * 16);
          // A peer may already publish the next round (no parity halves here).
          sum += ((x.x == target || x.x == target + 1) && x.y == static_cast<uint32_t>(v)) ? 0u : 1u;
        }
      }
    }
  }
  if (sum) atomicAdd(&s_sum, sum);
  __syncthreads();
  if (threadIdx.x == 0) {
    if (s_sum) atomicAdd(a.fail + 1, s_sum);  // payload arrived late: the protocol is broken
    a.epoch[b] = e0 + a.rounds;
  }
  (void)t_start;
}

__global__ void emptyKernel() {}

struct Setup {
  int n;
  bool host;
  std::vector<char*> host_ptr, region;
  std::vector<uint32_t*> epoch;
  uint32_t* fail;
  std::vector<cudaStream_t> streams;
  cudaEvent_t e0, e1;
  std::vector<cudaEvent_t> joins;
};

static void setup(Setup& s, int n, bool host) {
  s.n = n;
  s.host = host;
  const size_t bytes = kFlagBytes + kPayloadMax;
  for (int r = 0; r < n; ++r) {
    char* h = nullptr;
    char* d = nullptr;
    if (host) {
      CK(cudaHostAlloc(reinterpret_cast<void**>(&h), bytes, cudaHostAllocPortable | cudaHostAllocMapped));
      std::memset(h, 0, bytes);
      CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), h, 0));
    } else {
      CK(cudaMalloc(&d, bytes));
      CK(cudaMemset(d, 0, bytes));
    }
    s.host_ptr.push_back(h);
    s.region.push_back(d);
    uint32_t* ep;
    CK(cudaMalloc(&ep, kMaxBlocks * 4));
    CK(cudaMemset(ep, 0, kMaxBlocks * 4));
    s.epoch.push_back(ep);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    s.streams.push_back(st);
    cudaEvent_t j;
    CK(cudaEventCreateWithFlags(&j, cudaEventDisableTiming));
    s.joins.push_back(j);
  }
  CK(cudaMalloc(&s.fail, 8));
  CK(cudaMemset(s.fail, 0, 8));
  CK(cudaEventCreate(&s.e0));
  CK(cudaEventCreate(&s.e1));
}

static void teardown(Setup& s) {
  CK(cudaDeviceSynchronize());
  for (int r = 0; r < s.n; ++r) {
    if (s.host) CK(cudaFreeHost(s.host_ptr[r])); else CK(cudaFree(s.region[r]));
    CK(cudaFree(s.epoch[r]));
    CK(cudaStreamDestroy(s.streams[r]));
    CK(cudaEventDestroy(s.joins[r]));
  }
  CK(cudaFree(s.fail));
  CK(cudaEventDestroy(s.e0));
  CK(cudaEventDestroy(s.e1));
}

static uint32_t g_stagger_ns = 0;

static Args argsFor(const Setup& s, int r, int rounds, int flags, uint64_t payload) {
  Args a{};
  for (int p = 0; p < s.n; ++p) a.region[p] = s.region[p];
  a.epoch = s.epoch[r];
  a.fail = s.fail;
  a.rank = r;
  a.n = s.n;
  a.rounds = rounds;
  a.flags = flags;
  a.payload = payload;
  a.stagger_ns = g_stagger_ns;
  return a;
}

// Launches work(r, stream) on every rank's stream between two events on stream 0; returns ms.
template <typename F>
static float timed(Setup& s, F work) {
  CK(cudaEventRecord(s.e0, s.streams[0]));
  for (int r = 1; r < s.n; ++r) CK(cudaStreamWaitEvent(s.streams[r], s.e0, 0));
  for (int r = 0; r < s.n; ++r) work(r, s.streams[r]);
  for (int r = 1; r < s.n; ++r) {
    CK(cudaEventRecord(s.joins[r], s.streams[r]));
    CK(cudaStreamWaitEvent(s.streams[0], s.joins[r], 0));
  }
  CK(cudaEventRecord(s.e1, s.streams[0]));
  CK(cudaEventSynchronize(s.e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, s.e0, s.e1));
  return ms;
}

static void checkFail(Setup& s, const char* what) {
  uint32_t f[2];
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(f, s.fail, 8, cudaMemcpyDeviceToHost));
  if (f[0] || f[1]) {
    std::printf("FAILED %s: timeout=%u late=%u\n", what, f[0], f[1]);
    std::exit(1);
  }
}

// Per-round microseconds, persistent kernels.
static double persistent(Setup& s, int blocks, int threads, int flags, uint64_t payload, int rounds) {
  auto launch = [&](int rounds_) {
    return timed(s, [&](int r, cudaStream_t st) {
      roundsKernel<<<blocks, threads, 0, st>>>(argsFor(s, r, rounds_, flags, payload));
      CK(cudaGetLastError());
    });
  };
  launch(10);
  // Difference of two lengths removes launch and start skew.
  const float a = launch(rounds / 4);
  const float b = launch(rounds);
  checkFail(s, "persistent");
  return (b - a) * 1e3 / (rounds - rounds / 4);
}

// Per-round microseconds, one kernel per round, K kernels per rank in one graph per rank.
static double perKernel(Setup& s, int blocks, int threads, int flags, uint64_t payload, int k, bool empty) {
  std::vector<cudaGraphExec_t> execs(s.n);
  for (int r = 0; r < s.n; ++r) {
    cudaGraph_t g;
    cudaStream_t cap;
    CK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < k; ++i) {
      if (empty) emptyKernel<<<blocks, threads, 0, cap>>>();
      else roundsKernel<<<blocks, threads, 0, cap>>>(argsFor(s, r, 1, flags, payload));
    }
    CK(cudaStreamEndCapture(cap, &g));
    CK(cudaGraphInstantiate(&execs[r], g, 0));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(cap));
  }
  auto go = [&] { return timed(s, [&](int r, cudaStream_t st) { CK(cudaGraphLaunch(execs[r], st)); }); };
  go();
  std::vector<float> t;
  for (int i = 0; i < 5; ++i) t.push_back(go());
  checkFail(s, "per-kernel");
  std::sort(t.begin(), t.end());
  for (auto& e : execs) CK(cudaGraphExecDestroy(e));
  return t[2] * 1e3 / k;
}

static const char* flagName(int f) {
  static char buf[64];
  char st[24] = "";
  if (f & kStagger) std::snprintf(st, sizeof(st), "+stagger%u", g_stagger_ns);
  std::snprintf(buf, sizeof(buf), "%s%s%s%s%s%s%s", (f & kPull) ? "pull" : "push",
                (f & kAcquire) ? "+acq" : "", (f & kFence) ? "+fence" : "",
                (f & kOnePoller) ? "+1poller" : "", (f & kReaderFence) ? "+rfence" : "",
                (f & kReaderAcquire) ? "+racq" : "", st);
  return buf;
}

int main(int argc, char** argv) {
  // "fences": only the reader-side acquire variants, 8 ranks, host memory. "stagger": one poll
  // against two in flight at several delays, 2, 4 and 8 ranks, host memory, rounds alternated.
  const bool fences = argc > 1 && std::strcmp(argv[1], "fences") == 0;
  const bool stagger = argc > 1 && std::strcmp(argv[1], "stagger") == 0;
  const int only_n = fences ? 8 : (argc > 1 && !stagger) ? std::atoi(argv[1]) : 0;
  CK(cudaSetDevice(0));
  CK(cudaFuncSetAttribute(roundsKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
  std::printf("%-6s %-4s %-3s %-6s %-22s %8s %12s %12s\n", "mem", "n", "blk", "thr", "flags",
              "payload", "persist_us", "perkernel_us");
  const int ns[] = {2, 4, 8};
  if (stagger) {
    const uint32_t delays[] = {0, 150, 300, 500, 800, 1200};
    for (int n : ns) {
      Setup s;
      setup(s, n, true);
      for (int round = 0; round < 3; ++round) {
        for (uint32_t d : delays) {
          g_stagger_ns = d;
          const int flags = d == 0 ? 0 : kStagger;
          const double p = persistent(s, 1, 64, flags, 0, 2000);
          const double k = perKernel(s, 1, 64, flags, 0, 200, false);
          std::printf("%-6s %-4d %-3d %-6d %-22s %8d %12.2f %12.2f\n", "host", n, 1, 64,
                      flagName(flags), 0, p, k);
          std::fflush(stdout);
        }
      }
      teardown(s);
    }
    return 0;
  }
  for (int mem = fences ? 1 : 0; mem < 2; ++mem) {
    const bool host = mem == 1;
    for (int n : ns) {
      if (only_n && n != only_n) continue;
      Setup s;
      setup(s, n, host);
      const double floor = perKernel(s, 1, 64, 0, 0, 200, true);
      std::printf("%-6s %-4d %-3d %-6d %-22s %8s %12s %12.2f\n", host ? "host" : "device", n, 1, 64,
                  "empty-kernel", "-", "-", floor);
      struct Case { int blocks, threads, flags; uint64_t payload; };
      std::vector<Case> cases = {
          {1, 64, 0, 0}, {1, 64, kOnePoller, 0}, {1, 64, kPull, 0}, {1, 64, kPull | kAcquire, 0},
          {1, 64, kFence, 0}, {8, 64, 0, 0}, {8, 64, kPull, 0}, {32, 64, kPull, 0},
          {1, 512, kPull | kFence, 4096}, {1, 512, kPull | kFence, 12288},
          {1, 512, kPull | kFence | kAcquire, 12288},
          {4, 512, kPull | kFence, 114688}, {8, 512, kPull | kFence, 114688},
          {8, 512, kPull | kFence, 1u << 20}, {16, 512, kPull | kFence, 1u << 20},
          {32, 512, kPull | kFence, 1u << 20},
      };
      if (fences) {
        cases = {{1, 64, 0, 0},
                 {1, 64, kFence, 0},
                 {1, 64, kReaderFence, 0},
                 {1, 64, kFence | kReaderFence, 0},
                 {1, 64, kFence | kReaderAcquire, 0},
                 {2, 64, kFence | kReaderAcquire, 0},
                 {1, 512, kPull | kFence, 12288},
                 {1, 512, kPull | kFence | kReaderFence, 12288}};
      }
      for (const Case& c : cases) {
        const double p = persistent(s, c.blocks, c.threads, c.flags, c.payload, 2000);
        const double k = perKernel(s, c.blocks, c.threads, c.flags, c.payload, 200, false);
        std::printf("%-6s %-4d %-3d %-6d %-22s %8llu %12.2f %12.2f\n", host ? "host" : "device", n,
                    c.blocks, c.threads, flagName(c.flags),
                    static_cast<unsigned long long>(c.payload), p, k);
        std::fflush(stdout);
      }
      teardown(s);
    }
  }
  return 0;
}
