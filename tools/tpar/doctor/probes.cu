#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>

#include "core/algorithms.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/doctor/probes.h"
#include "tpar/tpar.h"

namespace tpar_cli {
namespace {

#define PROBE_CUDA(call)                                         \
  do {                                                           \
    cudaError_t e_ = (call);                                     \
    if (e_ != cudaSuccess) {                                     \
      (void)cudaGetLastError();                                  \
      return std::string(#call) + ": " + cudaGetErrorString(e_); \
    }                                                            \
  } while (0)

// Runs `call` only while nothing has failed, and records the first failure in `err`.
#define PROBE_STEP(call)                                                               \
  do {                                                                                 \
    if (err.empty()) {                                                                 \
      cudaError_t e_ = (call);                                                         \
      if (e_ != cudaSuccess) err = std::string(#call) + ": " + cudaGetErrorString(e_); \
    }                                                                                  \
  } while (0)

void progress(const std::string& what) {
  std::fprintf(stderr, "tpar doctor: %s\n", what.c_str());
  std::fflush(stderr);
}

// ---------------------------------------------------------------------------------------------
// Kernels

__device__ __forceinline__ unsigned long long globalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void storeStream(int4* dst, size_t n, int seed) {
  const int4 v = make_int4(seed, seed ^ 0x5a5a5a5a, ~seed, seed + 1);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) dst[i] = v;
}

// Four independent loads per step keep enough requests in flight to cover a PCIe round trip.
// The folded value is stored only when it matches one value, so the loads cannot be dropped
// (storing it by chance is harmless).
__global__ void loadStream(const int4* src, size_t n, int* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  int acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const int4 a = __ldcg(src + i), b = __ldcg(src + i + stride);
    const int4 c = __ldcg(src + i + 2 * stride), d = __ldcg(src + i + 3 * stride);
    acc ^= (a.x ^ a.y ^ a.z ^ a.w) + (b.x ^ b.y ^ b.z ^ b.w) + (c.x ^ c.y ^ c.z ^ c.w) +
           (d.x ^ d.y ^ d.z ^ d.w);
  }
  for (; i < n; i += stride) {
    const int4 a = __ldcg(src + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x13572468) *sink = acc;
}

struct PingPongResult {
  unsigned long long elapsed_ns;  // ping only: the timed rounds
  unsigned int rounds_done;
  unsigned int timed_out;
};

// NOTE [doctor ping-pong]: each side spins only on its own flag (local memory, or host memory
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

// Self-test inputs: integers in [-7, 7], so any sum over up to 16 ranks (|sum| <= 112) is
// exact in bf16, fp16 and fp32 whatever the order of additions, and every output element has
// exactly one right answer.
__device__ inline float testValue(size_t i, int rank, unsigned salt) {
  unsigned h =
      static_cast<unsigned>(i) * 2654435761u ^ (static_cast<unsigned>(rank) * 40503u + salt);
  h ^= h >> 13;
  return static_cast<float>(static_cast<int>(h % 15u) - 7);
}

__global__ void fillTest(void* buf, size_t count, int dtype, int rank, unsigned salt) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = testValue(i, rank, salt);
    if (dtype == tparFloat32)
      static_cast<float*>(buf)[i] = v;
    else
      static_cast<__nv_bfloat16*>(buf)[i] = __float2bfloat16_rn(v);
  }
}

// Counts output elements that differ from the exact sum; the poisoned (NaN) outputs of an
// element nobody wrote never compare equal.
__global__ void checkTest(const void* out, size_t count, int dtype, int nranks, unsigned salt,
                          unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = 0.f;
    for (int r = 0; r < nranks; ++r) want += testValue(i, r, salt);
    const float got = dtype == tparFloat32
                          ? static_cast<const float*>(out)[i]
                          : __bfloat162float(static_cast<const __nv_bfloat16*>(out)[i]);
    bad += !(got == want);
  }
  if (bad) atomicAdd(wrong, bad);
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

// Times a kernel on `side` that stores into (or loads from) `bytes` at `target`.
std::string measureBandwidth(const DeviceSide& side, void* target, bool write,
                             const ProbePlan& plan, double* gbps) {
  const size_t n = plan.bandwidth_bytes / sizeof(int4);
  const int blocks = side.sms * 4;
  std::string err;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  PROBE_STEP(cudaSetDevice(side.dev));
  PROBE_STEP(cudaEventCreate(&e0));
  PROBE_STEP(cudaEventCreate(&e1));
  std::vector<double> rates;
  // Rep -1 warms up: first touch of the mapping, clocks up.
  for (int rep = -1; rep < plan.bandwidth_reps && err.empty(); ++rep) {
    PROBE_STEP(cudaEventRecord(e0, side.stream[0]));
    if (write)
      storeStream<<<blocks, 256, 0, side.stream[0]>>>(static_cast<int4*>(target), n, 7);
    else
      loadStream<<<blocks, 256, 0, side.stream[0]>>>(static_cast<const int4*>(target), n,
                                                     reinterpret_cast<int*>(side.scratch + 64));
    PROBE_STEP(cudaGetLastError());
    PROBE_STEP(cudaEventRecord(e1, side.stream[0]));
    PROBE_STEP(cudaEventSynchronize(e1));
    float ms = 0;
    PROBE_STEP(cudaEventElapsedTime(&ms, e0, e1));
    if (err.empty() && rep >= 0 && ms > 0) rates.push_back(plan.bandwidth_bytes / (ms * 1e6));
  }
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  (void)cudaGetLastError();
  *gbps = median(rates);
  return err.empty() ? "" : std::string(write ? "write" : "read") + " probe: " + err;
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
    note(&m->error, measureBandwidth(a, target, true, plan, &m->write_gbps));
    note(&m->error, measureBandwidth(a, target, false, plan, &m->read_gbps));
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

// ---------------------------------------------------------------------------------------------
// Self-test and timing

std::string syncAll(const std::vector<int>& devs) {
  for (int d : std::set<int>(devs.begin(), devs.end())) {
    PROBE_CUDA(cudaSetDevice(d));
    PROBE_CUDA(cudaDeviceSynchronize());
  }
  return "";
}

// Per rank: input, output and a wrong-element counter on the rank's GPU, and its stream.
struct RankBuffers {
  std::vector<int> devs;
  std::vector<void*> in, out;
  std::vector<unsigned long long*> wrong;
  std::vector<cudaStream_t> streams;
  ~RankBuffers() {
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      if (in[r]) cudaFree(in[r]);
      if (out[r]) cudaFree(out[r]);
      if (wrong[r]) cudaFree(wrong[r]);
      if (streams[r]) cudaStreamDestroy(streams[r]);
    }
  }
  std::string alloc(const std::vector<int>& d, size_t bytes) {
    devs = d;
    in.assign(d.size(), nullptr);
    out.assign(d.size(), nullptr);
    wrong.assign(d.size(), nullptr);
    streams.assign(d.size(), nullptr);
    for (size_t r = 0; r < d.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(d[r]));
      PROBE_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      PROBE_CUDA(cudaMalloc(&in[r], bytes));
      PROBE_CUDA(cudaMalloc(&out[r], bytes));
      PROBE_CUDA(cudaMalloc(&wrong[r], sizeof(unsigned long long)));
    }
    return "";
  }
  // Fills every rank's input (or, in place, its output) with its share of a known sum.
  std::string fill(size_t count, tparDataType_t dtype, unsigned salt, bool in_place) {
    const size_t bytes = count * tpar::elementBytes(dtype);
    for (size_t r = 0; r < devs.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(devs[r]));
      fillTest<<<128, 256, 0, streams[r]>>>(in_place ? out[r] : in[r], count, dtype,
                                            static_cast<int>(r), salt);
      if (!in_place) PROBE_CUDA(cudaMemsetAsync(out[r], 0xff, bytes, streams[r]));  // NaN
      PROBE_CUDA(cudaGetLastError());
    }
    return syncAll(devs);
  }
  // Wrong elements over every rank's output.
  std::string check(size_t count, tparDataType_t dtype, unsigned salt, unsigned long long* bad) {
    for (size_t r = 0; r < devs.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(devs[r]));
      PROBE_CUDA(cudaMemsetAsync(wrong[r], 0, sizeof(unsigned long long), streams[r]));
      checkTest<<<128, 256, 0, streams[r]>>>(out[r], count, dtype, static_cast<int>(devs.size()),
                                             salt, wrong[r]);
      PROBE_CUDA(cudaGetLastError());
    }
    *bad = 0;
    for (size_t r = 0; r < devs.size(); ++r) {
      unsigned long long w = 0;
      PROBE_CUDA(cudaSetDevice(devs[r]));
      PROBE_CUDA(cudaMemcpy(&w, wrong[r], sizeof(w), cudaMemcpyDeviceToHost));
      *bad += w;
    }
    return "";
  }
};

std::string selfTestOne(Backend& be, const std::vector<int>& devs, int* checks) {
  if (std::string e = be.init(devs); !e.empty()) return "init: " + e;
  // Odd counts leave partial vectors and uneven per-rank slices; the largest crosses
  // several blocks and, in fp32, the default 8 MiB per-launch split.
  const size_t counts[] = {1, 1031, 32771, 262147, 2097155};
  const size_t max_bytes = 2097155 * 4;
  RankBuffers buf;
  if (std::string e = buf.alloc(devs, max_bytes); !e.empty()) return e;
  static unsigned salt = 0;
  for (tparDataType_t dtype : {tparBfloat16, tparFloat32}) {
    for (size_t count : counts) {
      for (bool in_place : {false, true}) {
        ++salt;
        if (std::string e = buf.fill(count, dtype, salt, in_place); !e.empty()) return e;
        std::vector<const void*> send(devs.size());
        for (size_t r = 0; r < devs.size(); ++r) send[r] = in_place ? buf.out[r] : buf.in[r];
        if (std::string e = be.allReduce(send, buf.out, count, dtype, tparSum, buf.streams);
            !e.empty())
          return e;
        unsigned long long bad = 0;
        if (std::string e = buf.check(count, dtype, salt, &bad); !e.empty()) return e;
        if (std::string e = be.asyncError(); !e.empty()) return e;
        const std::string what = std::to_string(count) + " x " + tparDataTypeName(dtype) +
                                 (in_place ? " in place" : " out of place");
        if (bad) return std::to_string(bad) + " wrong elements (" + what + ")";
        ++*checks;
      }
    }
  }
  return "";
}

// Each rank's `iters` calls are captured in one graph per rank, all graphs launched together,
// timed from an event before the first to the join of every rank's stream.
std::string timeGraphs(Backend& be, RankBuffers& buf, size_t count, int iters, double* us) {
  const size_t n = buf.devs.size();
  std::vector<const void*> send(buf.in.begin(), buf.in.end());
  std::string err;
  for (int i = 0; i < 5 && err.empty(); ++i)
    err = be.allReduce(send, buf.out, count, tparBfloat16, tparSum, buf.streams);
  if (err.empty()) err = syncAll(buf.devs);
  std::vector<cudaGraph_t> graphs(n, nullptr);
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  std::vector<cudaEvent_t> done(n, nullptr);
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<bool> capturing(n, false);
  for (size_t r = 0; r < n; ++r) {
    PROBE_STEP(cudaStreamBeginCapture(buf.streams[r], cudaStreamCaptureModeThreadLocal));
    capturing[r] = err.empty();
  }
  for (int i = 0; i < iters && err.empty(); ++i)
    err = be.allReduce(send, buf.out, count, tparBfloat16, tparSum, buf.streams);
  // Every capture ends, even after a failure, and before any graph is instantiated:
  // instantiating is not permitted while another stream of this thread is still capturing.
  for (size_t r = 0; r < n; ++r)
    if (capturing[r]) cudaStreamEndCapture(buf.streams[r], &graphs[r]);
  for (size_t r = 0; r < n; ++r) {
    PROBE_STEP(graphs[r] ? cudaSuccess : cudaErrorStreamCaptureInvalidated);
    PROBE_STEP(cudaSetDevice(buf.devs[r]));
    PROBE_STEP(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    PROBE_STEP(cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming));
  }
  PROBE_STEP(cudaSetDevice(buf.devs[0]));
  PROBE_STEP(cudaEventCreate(&start));
  PROBE_STEP(cudaEventCreate(&stop));
  for (int timed = 0; timed < 2; ++timed) {  // the untimed launch uploads the graphs
    PROBE_STEP(cudaSetDevice(buf.devs[0]));
    if (timed) PROBE_STEP(cudaEventRecord(start, buf.streams[0]));
    for (size_t r = 0; r < n; ++r) {
      PROBE_STEP(cudaSetDevice(buf.devs[r]));
      if (timed) PROBE_STEP(cudaStreamWaitEvent(buf.streams[r], start, 0));
      PROBE_STEP(cudaGraphLaunch(execs[r], buf.streams[r]));
      PROBE_STEP(cudaEventRecord(done[r], buf.streams[r]));
    }
    PROBE_STEP(cudaSetDevice(buf.devs[0]));
    for (size_t r = 1; r < n; ++r) PROBE_STEP(cudaStreamWaitEvent(buf.streams[0], done[r], 0));
    PROBE_STEP(cudaEventRecord(stop, buf.streams[0]));
    PROBE_STEP(cudaEventSynchronize(stop));
    if (err.empty()) err = syncAll(buf.devs);
  }
  float ms = 0;
  PROBE_STEP(cudaEventElapsedTime(&ms, start, stop));
  if (err.empty()) *us = 1000.0 * ms / iters;
  for (size_t r = 0; r < n; ++r) {
    if (graphs[r]) cudaGraphDestroy(graphs[r]);
    if (execs[r]) cudaGraphExecDestroy(execs[r]);
    if (done[r]) cudaEventDestroy(done[r]);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  (void)cudaGetLastError();
  return err;
}

std::string timeBackend(Backend& be, const std::vector<int>& devs, size_t bytes, int iters,
                        double* us) {
  const size_t count = bytes / 2;
  RankBuffers buf;
  if (std::string e = buf.alloc(devs, bytes); !e.empty()) return e;
  const unsigned salt = 0x7a11;
  if (std::string e = buf.fill(count, tparBfloat16, salt, false); !e.empty()) return e;
  if (std::string e = timeGraphs(be, buf, count, iters, us); !e.empty()) return e;
  // Out of place, so the last replay's output is still the plain sum: check it.
  unsigned long long bad = 0;
  if (std::string e = buf.check(count, tparBfloat16, salt, &bad); !e.empty()) return e;
  if (std::string e = be.asyncError(); !e.empty()) return e;
  if (bad) return std::to_string(bad) + " wrong elements after the timed replays";
  return "";
}

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
  const void* kernels[] = {(const void*)storeStream, (const void*)loadStream,
                           (const void*)pingKernel,  (const void*)pongKernel,
                           (const void*)fillTest,    (const void*)checkTest};
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

void runSelfTests(DoctorResults* r) {
  const std::vector<int>& devs = r->devices;
  for (const char* name : {"tpar:oneshot", "tpar:twoshot", "tpar:staged", "tpar:hier"}) {
    progress(std::string("self-test of ") + name);
    SelfTestResult t;
    t.backend = name;
    std::string why;
    std::unique_ptr<Backend> be = makeBackend(name, &why);
    int checks = 0;
    const std::string err = be ? selfTestOne(*be, devs, &checks) : why;
    t.passed = err.empty();
    t.detail = t.passed ? std::to_string(checks) + " all-reduces checked element by element" : err;
    r->self_tests.push_back(t);
  }
}

void runTimings(const ProbePlan& plan, DoctorResults* r) {
  r->timing_iterations = plan.timing_iterations;
  const bool tested =
      !r->self_tests.empty() && std::all_of(r->self_tests.begin(), r->self_tests.end(),
                                            [](const SelfTestResult& t) { return t.passed; });
  r->timings = {TimingResult{kSmallMessageBytes}, TimingResult{kLargeMessageBytes}};
  std::string why;
  if (!tested) {
    for (TimingResult& t : r->timings) t.tpar_error = "not timed: the self-test failed";
  } else {
    progress("timing tpar");
    std::unique_ptr<Backend> be = makeBackend("tpar", &why);
    const std::string init = be->init(r->devices);
    for (TimingResult& t : r->timings) {
      t.tpar_algo = be->chosen(t.bytes);
      t.tpar_error = init.empty()
                         ? timeBackend(*be, r->devices, t.bytes, plan.timing_iterations, &t.tpar_us)
                         : "init: " + init;
      if (!t.tpar_error.empty()) t.tpar_us = 0;
    }
  }
  std::string nccl_skip;
  if (!r->nccl_requested)
    nccl_skip = "not measured (--no-nccl)";
  else if (usesVirtualRanks(r->devices))
    nccl_skip = "NCCL cannot run two ranks on one GPU";
  else if (r->nccl_version.empty())
    nccl_skip = "no NCCL: " + r->nccl_error;
  if (!nccl_skip.empty()) {
    for (TimingResult& t : r->timings) t.nccl_error = nccl_skip;
    return;
  }
  progress("timing NCCL");
  std::unique_ptr<Backend> nccl = makeBackend("nccl", &why);
  const std::string init = nccl ? nccl->init(r->devices) : why;
  for (TimingResult& t : r->timings) {
    t.nccl_error = init.empty()
                       ? timeBackend(*nccl, r->devices, t.bytes, plan.timing_iterations, &t.nccl_us)
                       : "init: " + init;
    if (!t.nccl_error.empty()) t.nccl_us = 0;
  }
}

}  // namespace tpar_cli
