// The doctor's link probes: bandwidth and latency kernels between GPUs, host memory and a
// GPU's own memory. The self-test and timing are in self_test.cu.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "tools/tpar/doctor/probe_util.h"
#include "tools/tpar/doctor/probes.h"
#include "tools/tpar/doctor/stream_kernels.cuh"
#include "tpar/tpar.h"

namespace tpar_cli {
namespace {

// ---------------------------------------------------------------------------------------------
// Kernels

__device__ __forceinline__ unsigned long long globalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct PingPongResult {
  unsigned long long elapsed_ns;  // ping only: the timed rounds
  unsigned int rounds_done;
  unsigned int timed_out;
};

// NOTE [doctor ping-pong]
// Each side spins only on its own flag (local memory, or host memory
// in the host probe) and writes only the other side's, so one round = two one-way hand-offs
// over the link under test. Flag values grow from `base`, which the host raises past every
// earlier run's values, and waits compare for equality: a value left by an earlier run (even
// one that timed out) never satisfies a wait, so flags are never reset. Both sides give up
// after `timeout_ns` and say so in their result.
__global__ void pingKernel(volatile unsigned* peer_flag, const volatile unsigned* my_flag,
                           unsigned base, int warmup, int rounds, unsigned long long timeout_ns,
                           PingPongResult* out) {
  const unsigned long long deadline = globalTimerNs() + timeout_ns;
  unsigned long long start = 0;
  for (int i = 1; i <= warmup + rounds; ++i) {
    if (i == warmup + 1) start = globalTimerNs();
    const unsigned v = base + static_cast<unsigned>(i);
    *peer_flag = v;
    while (*my_flag != v) {
      if (globalTimerNs() > deadline) {
        *out = PingPongResult{0, static_cast<unsigned>(i - 1), 1};
        return;
      }
    }
  }
  *out = PingPongResult{globalTimerNs() - start, static_cast<unsigned>(warmup + rounds), 0};
}

__global__ void pongKernel(volatile unsigned* peer_flag, const volatile unsigned* my_flag,
                           unsigned base, int total, unsigned long long timeout_ns,
                           PingPongResult* out) {
  const unsigned long long deadline = globalTimerNs() + timeout_ns;
  for (int i = 1; i <= total; ++i) {
    const unsigned v = base + static_cast<unsigned>(i);
    while (*my_flag != v) {
      if (globalTimerNs() > deadline) {
        *out = PingPongResult{0, static_cast<unsigned>(i - 1), 1};
        return;
      }
    }
    *peer_flag = v;
  }
  *out = PingPongResult{0, static_cast<unsigned>(total), 0};
}

// ---------------------------------------------------------------------------------------------
// Link probes

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

struct DeviceSide {
  int dev = 0;
  int sms = 1;
  cudaStream_t stream[2] = {nullptr, nullptr};  // two, for a ping-pong within one GPU
  unsigned* scratch = nullptr;                  // flag 0 at [0], flag 1 at [32], read sink at [64]
  void* buffer = nullptr;                       // bandwidth target
};

// What a bandwidth probe runs: stores into the target, loads from it, or both at once (half
// the blocks storing into its first half on one stream while the other half load its second
// half on another: LinkMeasure::both_gbps).
enum class Traffic { kStore, kLoad, kBoth };

// Times kernels on `side` that move plan.bandwidth_bytes to or from `target` as `traffic` says.
std::string measureBandwidth(const DeviceSide& side, void* target, Traffic traffic,
                             const ProbePlan& plan, double* gbps) {
  const bool both = traffic == Traffic::kBoth;
  const size_t n = plan.bandwidth_bytes / sizeof(int4) / (both ? 2 : 1);
  const int blocks = side.sms * (both ? 2 : 4);
  int4* stores = static_cast<int4*>(target);
  const int4* loads = static_cast<const int4*>(target) + (both ? n : 0);
  int* sink = reinterpret_cast<int*>(side.scratch + 64);
  std::string err;
  cudaEvent_t e0 = nullptr, e1 = nullptr, e2 = nullptr;
  PROBE_STEP(cudaSetDevice(side.dev));
  PROBE_STEP(cudaEventCreate(&e0));
  PROBE_STEP(cudaEventCreate(&e1));
  PROBE_STEP(cudaEventCreate(&e2));
  std::vector<double> rates;
  // Rep -1 warms up: first touch of the mapping, clocks up.
  for (int rep = -1; rep < plan.bandwidth_reps && err.empty(); ++rep) {
    PROBE_STEP(cudaEventRecord(e0, side.stream[0]));
    if (traffic != Traffic::kLoad) {
      storeStream<<<blocks, 256, 0, side.stream[0]>>>(stores, n, 7);
      PROBE_STEP(cudaGetLastError());
    }
    if (traffic != Traffic::kStore) {
      // Both at once: the loads on the second stream, started with the stores.
      cudaStream_t s = both ? side.stream[1] : side.stream[0];
      if (both) PROBE_STEP(cudaStreamWaitEvent(s, e0, 0));
      loadStream<<<blocks, 256, 0, s>>>(loads, n, sink);
      PROBE_STEP(cudaGetLastError());
      if (both) {
        PROBE_STEP(cudaEventRecord(e1, s));
        PROBE_STEP(cudaStreamWaitEvent(side.stream[0], e1, 0));
      }
    }
    PROBE_STEP(cudaEventRecord(e2, side.stream[0]));
    PROBE_STEP(cudaEventSynchronize(e2));
    float ms = 0;
    PROBE_STEP(cudaEventElapsedTime(&ms, e0, e2));
    if (err.empty() && rep >= 0 && ms > 0)
      rates.push_back(double(n) * sizeof(int4) * (both ? 2 : 1) / (ms * 1e6));
  }
  for (cudaEvent_t e : {e0, e1, e2})
    if (e) cudaEventDestroy(e);
  (void)cudaGetLastError();
  *gbps = median(rates);
  const char* what = traffic == Traffic::kStore  ? "write"
                     : traffic == Traffic::kLoad ? "read"
                                                 : "both-ways";
  return err.empty() ? "" : std::string(what) + " probe: " + err;
}

// One-way latency: ping on `a` spins on `a_flag` and writes `b_flag`; pong on `b` the reverse.
std::string measureLatency(const DeviceSide& a, const DeviceSide& b, unsigned* a_flag,
                           unsigned* b_flag, const ProbePlan& plan, PingPongResult* results,
                           double* one_way_us) {
  static unsigned base = 0;
  const int warmup = std::max(10, plan.latency_rounds / 10);
  const int total = warmup + plan.latency_rounds;
  // On one GPU ping and pong need different streams to run concurrently.
  cudaStream_t pong_stream = &a == &b ? b.stream[1] : b.stream[0];
  std::vector<double> samples;
  for (int rep = 0; rep < plan.latency_reps; ++rep) {
    base += static_cast<unsigned>(total) + 1;
    results[0] = results[1] = PingPongResult{0, 0, 0};
    // Pong first: it only waits, so ping's clock never includes pong's launch.
    PROBE_CUDA(cudaSetDevice(b.dev));
    pongKernel<<<1, 1, 0, pong_stream>>>(a_flag, b_flag, base, total, plan.timeout_ns, &results[1]);
    PROBE_CUDA(cudaGetLastError());
    PROBE_CUDA(cudaSetDevice(a.dev));
    pingKernel<<<1, 1, 0, a.stream[0]>>>(b_flag, a_flag, base, warmup, plan.latency_rounds,
                                         plan.timeout_ns, &results[0]);
    PROBE_CUDA(cudaGetLastError());
    PROBE_CUDA(cudaStreamSynchronize(a.stream[0]));
    PROBE_CUDA(cudaStreamSynchronize(pong_stream));
    if (results[0].timed_out || results[1].timed_out) {
      return "latency probe: no answer within " + std::to_string(plan.timeout_ns / 1000000) +
             " ms after " + std::to_string(results[0].rounds_done) + " round trips";
    }
    samples.push_back(results[0].elapsed_ns / 1e3 / plan.latency_rounds / 2);
  }
  *one_way_us = median(samples);
  return "";
}

void note(std::string* errors, const std::string& e) {
  if (e.empty()) return;
  if (!errors->empty()) *errors += "; ";
  *errors += e;
}

void measureLink(const DeviceSide& a, const DeviceSide& b, void* target, unsigned* a_flag,
                 unsigned* b_flag, const ProbePlan& plan, PingPongResult* results, LinkMeasure* m) {
  if (plan.bandwidth) {
    note(&m->error, measureBandwidth(a, target, Traffic::kStore, plan, &m->write_gbps));
    note(&m->error, measureBandwidth(a, target, Traffic::kLoad, plan, &m->read_gbps));
    note(&m->error, measureBandwidth(a, target, Traffic::kBoth, plan, &m->both_gbps));
  }
  if (b_flag == nullptr) {
    note(&m->error, "latency not measured: no peer access back from GPU " + std::to_string(b.dev));
    return;
  }
  note(&m->error, measureLatency(a, b, a_flag, b_flag, plan, results, &m->latency_us));
}

std::string setUp(const ProbePlan& plan, int dev, DeviceSide* s) {
  s->dev = dev;
  PROBE_CUDA(cudaSetDevice(dev));
  PROBE_CUDA(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, dev));
  for (auto& st : s->stream) PROBE_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  PROBE_CUDA(cudaMalloc(&s->scratch, 4096));
  PROBE_CUDA(cudaMemset(s->scratch, 0, 4096));
  if (plan.bandwidth) {
    PROBE_CUDA(cudaMalloc(&s->buffer, plan.bandwidth_bytes));
    PROBE_CUDA(cudaMemset(s->buffer, 0x3c, plan.bandwidth_bytes));
  }
  return "";
}

void tearDown(DeviceSide* s) {
  cudaSetDevice(s->dev);
  for (auto st : s->stream)
    if (st) cudaStreamDestroy(st);
  if (s->scratch) cudaFree(s->scratch);
  if (s->buffer) cudaFree(s->buffer);
}

// Pinned host memory the link probes use, mapped into every GPU: the host-link bandwidth
// buffer, the ping-pong flags, and the results every GPU writes.
struct HostProbeMemory {
  void* buffer = nullptr;
  unsigned* flags = nullptr;          // flag 0 at [0], flag 1 at [32]: separate lines
  PingPongResult* results = nullptr;
  HostProbeMemory() = default;
  HostProbeMemory(const HostProbeMemory&) = delete;
  HostProbeMemory& operator=(const HostProbeMemory&) = delete;
  ~HostProbeMemory() {
    if (buffer) cudaFreeHost(buffer);
    if (flags) cudaFreeHost(flags);
    if (results) cudaFreeHost(results);
    (void)cudaGetLastError();
  }
  std::string alloc(const ProbePlan& plan) {
    const unsigned how = cudaHostAllocMapped | cudaHostAllocPortable;
    PROBE_CUDA(cudaHostAlloc(&flags, 4096, how));
    std::fill(flags, flags + 1024, 0u);
    PROBE_CUDA(cudaHostAlloc(&results, 2 * sizeof(PingPongResult), how));
    if (plan.bandwidth) {
      PROBE_CUDA(cudaHostAlloc(&buffer, plan.bandwidth_bytes, how));
      std::fill(static_cast<char*>(buffer), static_cast<char*>(buffer) + plan.bandwidth_bytes,
                0x3c);
    }
    return "";
  }
};

}  // namespace

ProbePlan probePlan(bool quick) {
  ProbePlan p;
  if (quick) {
    p.bandwidth = false;
    p.latency_rounds = 200;
    p.timing_iterations = 100;
  }
  return p;
}

std::string preloadDoctorKernels(const std::vector<int>& devices) {
  std::vector<const void*> kernels = {(const void*)storeStream, (const void*)loadStream,
                                      (const void*)pingKernel, (const void*)pongKernel};
  for (const void* k : selfTestKernels()) kernels.push_back(k);
  for (int d : std::set<int>(devices.begin(), devices.end())) {
    PROBE_CUDA(cudaSetDevice(d));
    for (const void* k : kernels) {
      cudaFuncAttributes attr;
      PROBE_CUDA(cudaFuncGetAttributes(&attr, k));
    }
  }
  return "";
}

void probeLinks(const ProbePlan& plan, DoctorResults* r) {
  const int n = static_cast<int>(r->gpus.size());
  std::vector<DeviceSide> sides(n);
  HostProbeMemory host;
  std::vector<std::pair<int, int>> enabled;
  auto setUpAll = [&]() -> std::string {
    for (int d = 0; d < n; ++d)
      if (std::string e = setUp(plan, d, &sides[d]); !e.empty()) return e;
    if (std::string e = host.alloc(plan); !e.empty()) return e;
    for (const PairProbe& p : r->pairs) {
      if (!p.peer_access) continue;
      PROBE_CUDA(cudaSetDevice(p.a));
      cudaError_t e = cudaDeviceEnablePeerAccess(p.b, 0);
      if (e == cudaSuccess)
        enabled.emplace_back(p.a, p.b);
      else if (e != cudaErrorPeerAccessAlreadyEnabled)
        PROBE_CUDA(e);
      (void)cudaGetLastError();
    }
    return "";
  };
  const std::string setup_error = setUpAll();
  if (!setup_error.empty()) {
    for (GpuProbe& g : r->gpus) g.host.error = "not measured: " + setup_error;
  } else {
    for (GpuProbe& g : r->gpus) {
      progress("GPU " + std::to_string(g.index) + " <-> host memory");
      DeviceSide& s = sides[g.index];
      measureLink(s, s, host.buffer, host.flags, host.flags + 32, plan, host.results, &g.host);
    }
    if (n == 1) {
      progress("GPU 0 <-> its own memory");
      DeviceSide& s = sides[0];
      measureLink(s, s, s.buffer, s.scratch, s.scratch + 32, plan, host.results, &r->gpus[0].local);
    }
    for (PairProbe& p : r->pairs) {
      if (!p.peer_access) continue;
      progress("GPU " + std::to_string(p.a) + " -> GPU " + std::to_string(p.b));
      // The pong answers into a's memory: without access back, only bandwidth is measured.
      const bool back = std::any_of(r->pairs.begin(), r->pairs.end(), [&](const PairProbe& q) {
        return q.a == p.b && q.b == p.a && q.peer_access;
      });
      measureLink(sides[p.a], sides[p.b], sides[p.b].buffer, sides[p.a].scratch,
                  back ? sides[p.b].scratch : nullptr, plan, host.results, &p.link);
    }
  }
  // tpar's own communicators enable what they need; leave the process as it was.
  for (auto [a, b] : enabled) {
    cudaSetDevice(a);
    cudaDeviceDisablePeerAccess(b);
  }
  for (DeviceSide& s : sides) tearDown(&s);
}

std::string probeHostLink(int dev, const ProbePlan& plan, LinkMeasure* m) {
  *m = LinkMeasure{};
  if (std::string e = preloadDoctorKernels({dev}); !e.empty()) {
    m->error = "preload: " + e;
    return m->error;
  }
  DeviceSide side;
  HostProbeMemory host;
  std::string e = setUp(plan, dev, &side);
  if (e.empty()) e = host.alloc(plan);
  if (!e.empty())
    m->error = "not measured: " + e;
  else
    measureLink(side, side, host.buffer, host.flags, host.flags + 32, plan, host.results, m);
  tearDown(&side);
  return m->error;
}

}  // namespace tpar_cli
