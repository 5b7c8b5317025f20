#include "tools/tpar/common/measure.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "api/internal.h"
// The specification of the wire formats' results, which the GPU tests check bit for bit too.
#include "tests/common/wire_reference.h"

namespace tpar_cli {
namespace {

// Inputs whose sums are exact in every datatype: small integers, |sum| <= 8 * ranks (<= 128,
// exact in bf16). `seed` moves the pattern, so that a check on fresh inputs cannot pass on a
// stale output.
__host__ __device__ inline float inputValue(size_t i, int rank, unsigned seed) {
  return static_cast<float>(
             static_cast<int>((i * 7 + rank * 3 + seed * 5 + (i >> 10)) % 17) - 8);
}

__device__ inline void storeAs(void* p, size_t i, int dtype, float v) {
  if (dtype == tparFloat32) static_cast<float*>(p)[i] = v;
  else if (dtype == tparFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
}

__device__ inline float loadAs(const void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) return static_cast<const float*>(p)[i];
  if (dtype == tparFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__global__ void fillInputs(void* buf, size_t count, int dtype, int rank, unsigned seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    storeAs(buf, i, dtype, inputValue(i, rank, seed));
}

__global__ void countWrong(const void* out, size_t count, int dtype, int op, int nranks,
                           unsigned seed, unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = inputValue(i, 0, seed);
    for (int r = 1; r < nranks; ++r) {
      const float v = inputValue(i, r, seed);
      want = op == tparMax ? fmaxf(want, v) : op == tparMin ? fminf(want, v) : want + v;
    }
    local += loadAs(out, i, dtype) != want;
  }
  if (local) atomicAdd(wrong, local);
}

__global__ void emptyKernel() {}

// The parameter of launchBare's kernel: as large and aligned as tpar's, so that the driver
// copies as many argument bytes per launch.
struct alignas(alignof(tpar::kernels::AllReduceArgs)) BareArgs {
  unsigned char bytes[sizeof(tpar::kernels::AllReduceArgs)];
};
static_assert(sizeof(BareArgs) == sizeof(tpar::kernels::AllReduceArgs),
              "the bare launch must pass as many parameter bytes as tpar's kernels");

__global__ void bareKernel(BareArgs) {}

__device__ inline uint64_t globalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins until flag[0] is set or `timeout_ns` passed; a timeout is recorded in flag[1].
__global__ void spinUntilReleased(volatile unsigned* flag, uint64_t timeout_ns) {
  const uint64_t start = globalTimerNs();
  while (flag[0] == 0) {
    if (globalTimerNs() - start > timeout_ns) {
      flag[1] = 1;
      return;
    }
    __nanosleep(256);
  }
}

}  // namespace

cudaError_t setDevice(int dev) {
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess || cur == dev) return e;
  return cudaSetDevice(dev);
}

Ranks::~Ranks() {
  for (size_t r = 0; r < devs.size(); ++r) {
    cudaSetDevice(devs[r]);
    if (r < in.size()) cudaFree(in[r]);
    if (r < out.size()) cudaFree(out[r]);
    if (r < streams.size()) cudaStreamDestroy(streams[r]);
  }
  if (wrong) cudaFreeHost(wrong);
}

std::string Ranks::alloc(const std::vector<int>& d, size_t bytes) {
  devs = d;
  for (int dev : devs) {
    TPAR_CLI_CUDA(cudaSetDevice(dev));
    cudaStream_t s;
    TPAR_CLI_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams.push_back(s);
    void* a = nullptr;
    void* b = nullptr;
    TPAR_CLI_CUDA(cudaMalloc(&a, bytes + 64));
    in.push_back(a);
    TPAR_CLI_CUDA(cudaMalloc(&b, bytes + 64));
    out.push_back(b);
  }
  TPAR_CLI_CUDA(cudaSetDevice(devs[0]));
  TPAR_CLI_CUDA(cudaMallocHost(&wrong, sizeof(*wrong)));
  // Load this file's kernels now: a first launch behind a waiting all-reduce of another rank
  // of the same GPU can deadlock under lazy module loading (NOTE [preload]).
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    fillInputs<<<1, 32, 0, streams[r]>>>(in[r], 0, tparBfloat16, 0, 0);
    countWrong<<<1, 32, 0, streams[r]>>>(out[r], 0, tparBfloat16, tparSum, 1, 0, wrong);
    emptyKernel<<<1, 32, 0, streams[r]>>>();
    TPAR_CLI_CUDA(cudaGetLastError());
  }
  return sync();
}

std::string Ranks::sync() {
  for (size_t r = 0; r < devs.size(); ++r) TPAR_CLI_CUDA(cudaStreamSynchronize(streams[r]));
  return "";
}

std::string Ranks::fill(const std::vector<void*>& bufs, const std::vector<void*>& poisoned,
                        size_t count, tparDataType_t dtype, unsigned seed) {
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    fillInputs<<<256, 256, 0, streams[r]>>>(bufs[r], count, dtype,
                                            first_rank + static_cast<int>(r), seed);
    TPAR_CLI_CUDA(cudaGetLastError());
    if (!poisoned.empty())
      TPAR_CLI_CUDA(cudaMemsetAsync(poisoned[r], 0xA7, count * tpar::elementBytes(dtype), streams[r]));
  }
  return sync();
}

std::string Ranks::countWrongIn(const std::vector<void*>& bufs, size_t count, tparDataType_t dtype,
                                long long* result, tparRedOp_t op, unsigned seed) {
  *wrong = 0;
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    countWrong<<<128, 256, 0, streams[r]>>>(
        bufs[r], count, dtype, op, world > 0 ? world : static_cast<int>(devs.size()), seed,
        wrong);
    TPAR_CLI_CUDA(cudaGetLastError());
  }
  if (std::string e = sync(); !e.empty()) return e;
  *result = static_cast<long long>(*wrong);
  return "";
}

std::string Ranks::countWireWrongIn(const std::vector<void*>& bufs, size_t count,
                                    tparDataType_t dtype, int wire, long long* result,
                                    tparRedOp_t op, unsigned seed) {
  if ((dtype != tparFloat16 && dtype != tparBfloat16) || wire <= tparWireNone ||
      wire >= tparNumWires)
    return "no wire format applies to this call";
  const auto format = static_cast<tpar::kernels::WireFormat>(wire);
  const int n = world > 0 ? world : static_cast<int>(devs.size());
  std::vector<std::vector<uint16_t>> got(devs.size(), std::vector<uint16_t>(count));
  for (size_t r = 0; r < devs.size(); ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(devs[r]));
    TPAR_CLI_CUDA(cudaMemcpy(got[r].data(), bufs[r], count * 2, cudaMemcpyDeviceToHost));
  }
  // The reference of whole wire blocks (a segment starting at a multiple of the block encodes
  // the blocks the whole buffer does), segments spread over the host's cores.
  constexpr size_t kSegment = size_t{1} << 16;
  const size_t segments = (count + kSegment - 1) / kSegment;
  const unsigned workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 32));
  std::vector<unsigned long long> wrong(workers, 0);
  auto work = [&](unsigned w) {
    std::vector<std::vector<float>> in(n);
    for (size_t sg = w; sg < segments; sg += workers) {
      const size_t a = sg * kSegment, b = std::min(count, a + kSegment);
      for (int r = 0; r < n; ++r) {
        in[r].resize(b - a);
        for (size_t i = a; i < b; ++i) in[r][i - a] = inputValue(i, r, seed);
      }
      const std::vector<float> want =
          tpar::ref::wireAllReduce(format, tpar::kernels::wireKernelBlock(format),
                                   tpar::ref::WireAlgo::kTwoShot, in, op);
      for (size_t i = a; i < b; ++i) {
        uint16_t bits;
        if (dtype == tparBfloat16) {
          const __nv_bfloat16 v = __float2bfloat16_rn(want[i - a]);
          std::memcpy(&bits, &v, 2);
        } else {
          const __half v = __float2half_rn(want[i - a]);
          std::memcpy(&bits, &v, 2);
        }
        for (size_t r = 0; r < got.size(); ++r) wrong[w] += got[r][i] != bits;
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned w = 1; w < workers; ++w) threads.emplace_back(work, w);
  work(0);
  for (std::thread& t : threads) t.join();
  long long total = 0;
  for (unsigned long long x : wrong) total += static_cast<long long>(x);
  *result = total;
  return "";
}

double Timing::maxUs() const {
  double m = 0;
  for (double u : rank_us) m = std::max(m, u);
  return m;
}

std::string timeCalls(Ranks& rk, const TimingPlan& plan, const std::function<std::string()>& issue,
                      Timing* out) {
  const size_t n = rk.devs.size();
  const bool graph = plan.graph_launches > 0;
  // One iteration: `agg` calls, then (eager, blocking) a wait for them.
  auto iteration = [&]() -> std::string {
    for (int a = 0; a < plan.agg; ++a) {
      if (std::string e = issue(); !e.empty()) return e;
      if (!graph && (plan.blocking == 1 || plan.blocking == 2))
        if (std::string e = rk.sync(); !e.empty()) return e;
    }
    if (!graph && plan.blocking == 3) return rk.sync();
    return "";
  };
  for (int i = 0; i < plan.warmup; ++i)
    if (std::string e = iteration(); !e.empty()) return e;
  if (std::string e = rk.sync(); !e.empty()) return e;

  std::vector<cudaGraphExec_t> execs(n, nullptr);
  std::vector<cudaEvent_t> starts(n, nullptr), dones(n, nullptr);
  cudaEvent_t go = nullptr;
  auto cleanup = [&] {
    for (auto e : execs)
      if (e) cudaGraphExecDestroy(e);
    for (auto e : starts)
      if (e) cudaEventDestroy(e);
    for (auto e : dones)
      if (e) cudaEventDestroy(e);
    if (go) cudaEventDestroy(go);
  };
  auto fail = [&](const std::string& e) {
    cleanup();
    return e;
  };
  if (graph) {
    // Every rank's stream captures at once (NCCL needs one group call over all ranks). Relaxed
    // mode: switching the current device while other streams of this thread capture is then
    // allowed.
    for (size_t r = 0; r < n; ++r) {
      setDevice(rk.devs[r]);
      cudaError_t e = cudaStreamBeginCapture(rk.streams[r], cudaStreamCaptureModeRelaxed);
      if (e != cudaSuccess) return fail(std::string("graph capture: ") + cudaGetErrorString(e));
    }
    std::string err;
    for (int i = 0; i < plan.iters && err.empty(); ++i) err = iteration();
    for (size_t r = 0; r < n; ++r) {
      cudaGraph_t g = nullptr;
      setDevice(rk.devs[r]);
      cudaError_t e = cudaStreamEndCapture(rk.streams[r], &g);
      if (e == cudaSuccess && err.empty()) e = cudaGraphInstantiate(&execs[r], g, 0);
      if (g) cudaGraphDestroy(g);
      if (e != cudaSuccess && err.empty()) err = std::string("graph capture: ") + cudaGetErrorString(e);
    }
    if (!err.empty()) return fail(err);
    // Upload every rank's graph before any of them runs: an upload may wait for the device,
    // and done by a first launch behind another rank's spinning all-reduce it would keep this
    // rank from arriving (tpar.h, "Virtual ranks and other work"). Then one untimed replay.
    for (size_t r = 0; r < n; ++r) {
      setDevice(rk.devs[r]);
      cudaError_t e = cudaGraphUpload(execs[r], rk.streams[r]);
      if (e != cudaSuccess) return fail(std::string("cudaGraphUpload: ") + cudaGetErrorString(e));
    }
    if (std::string e = rk.sync(); !e.empty()) return fail(e);
    for (size_t r = 0; r < n; ++r) {
      setDevice(rk.devs[r]);
      cudaError_t e = cudaGraphLaunch(execs[r], rk.streams[r]);
      if (e != cudaSuccess) return fail(std::string("cudaGraphLaunch: ") + cudaGetErrorString(e));
    }
    if (std::string e = rk.sync(); !e.empty()) return fail(e);
  }
  // Every rank starts when rank 0's stream passes `go`; each rank's time runs from its own
  // start event (events of different GPUs cannot be compared) to the end of its last call.
  for (size_t r = 0; r < n; ++r) {
    setDevice(rk.devs[r]);
    if (cudaEventCreate(&starts[r]) != cudaSuccess || cudaEventCreate(&dones[r]) != cudaSuccess)
      return fail("cudaEventCreate failed");
  }
  setDevice(rk.devs[0]);
  if (cudaEventCreateWithFlags(&go, cudaEventDisableTiming) != cudaSuccess)
    return fail("cudaEventCreate failed");
  cudaEventRecord(go, rk.streams[0]);
  for (size_t r = 0; r < n; ++r) {
    setDevice(rk.devs[r]);
    cudaStreamWaitEvent(rk.streams[r], go, 0);
    cudaEventRecord(starts[r], rk.streams[r]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (graph) {
    for (int l = 0; l < plan.graph_launches; ++l) {
      for (size_t r = 0; r < n; ++r) {
        setDevice(rk.devs[r]);
        cudaError_t e = cudaGraphLaunch(execs[r], rk.streams[r]);
        if (e != cudaSuccess) return fail(std::string("cudaGraphLaunch: ") + cudaGetErrorString(e));
      }
    }
  } else {
    for (int i = 0; i < plan.iters; ++i)
      if (std::string e = iteration(); !e.empty()) return fail(e);
  }
  const auto t1 = std::chrono::steady_clock::now();
  for (size_t r = 0; r < n; ++r) {
    setDevice(rk.devs[r]);
    cudaEventRecord(dones[r], rk.streams[r]);
  }
  const double calls = static_cast<double>(plan.iters) * plan.agg *
                       (graph ? plan.graph_launches : 1);
  out->rank_us.assign(n, 0.0);
  for (size_t r = 0; r < n; ++r) {
    setDevice(rk.devs[r]);
    cudaError_t e = cudaEventSynchronize(dones[r]);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, starts[r], dones[r]);
    if (e != cudaSuccess) return fail(std::string("timing events: ") + cudaGetErrorString(e));
    out->rank_us[r] = 1000.0 * ms / calls;
  }
  out->cpu_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / calls;
  cleanup();
  return rk.sync();
}

StreamHold::~StreamHold() {
  if (flag_ == nullptr) return;
  flag_[0] = 1;  // no spin may outlive the flag: release them all, wait for every device
  for (int dev : devs_) {
    cudaSetDevice(dev);
    cudaDeviceSynchronize();
  }
  cudaFreeHost(const_cast<unsigned*>(flag_));
}

std::string StreamHold::init(Ranks& rk) {
  TPAR_CLI_CUDA(setDevice(rk.devs[0]));
  void* p = nullptr;
  TPAR_CLI_CUDA(cudaHostAlloc(&p, 2 * sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
  flag_ = static_cast<volatile unsigned*>(p);
  devs_ = rk.devs;
  flag_[0] = 0;
  flag_[1] = 0;
  for (int dev : rk.devs) {
    TPAR_CLI_CUDA(setDevice(dev));
    cudaFuncAttributes attr;
    TPAR_CLI_CUDA(cudaFuncGetAttributes(&attr, spinUntilReleased));
    TPAR_CLI_CUDA(cudaFuncGetAttributes(&attr, bareKernel));
  }
  return "";
}

std::string StreamHold::hold(Ranks& rk, unsigned timeout_ms) {
  flag_[0] = 0;
  flag_[1] = 0;
  for (size_t r = 0; r < rk.devs.size(); ++r) {
    TPAR_CLI_CUDA(setDevice(rk.devs[r]));
    spinUntilReleased<<<1, 1, 0, rk.streams[r]>>>(flag_, uint64_t{timeout_ms} * 1000000);
    TPAR_CLI_CUDA(cudaGetLastError());
  }
  return "";
}

void StreamHold::release() { flag_[0] = 1; }

bool StreamHold::timedOut() const { return flag_[1] != 0; }

std::string launchBare(Ranks& rk, int calls, bool overlap, int blocks, int threads) {
  BareArgs args{};
  void* params[] = {&args};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.attrs = overlap ? attr : nullptr;
  config.numAttrs = overlap ? 1 : 0;
  // Call by call over the ranks, as the all-reduces are issued (Backend::allReduce).
  for (int c = 0; c < calls; ++c) {
    for (size_t r = 0; r < rk.devs.size(); ++r) {
      TPAR_CLI_CUDA(setDevice(rk.devs[r]));
      config.stream = rk.streams[r];
      TPAR_CLI_CUDA(cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(bareKernel), params));
    }
  }
  return "";
}

bool tparLaunchOverlap(int dev) { return tpar::launchOverlapOnDevice(dev); }

std::string timeIt(Ranks& rk, int iters, int warmup, bool graph,
                   const std::function<std::string()>& issue, double* us) {
  TimingPlan plan;
  plan.iters = iters;
  plan.warmup = warmup;
  plan.graph_launches = graph ? 1 : 0;
  Timing t;
  if (std::string e = timeCalls(rk, plan, issue, &t); !e.empty()) return e;
  *us = t.maxUs();
  return "";
}

std::string timeFloor(Ranks& rk, int iters, double* us) {
  return timeIt(rk, iters, 2, true, [&]() -> std::string {
    for (size_t r = 0; r < rk.devs.size(); ++r) {
      setDevice(rk.devs[r]);
      emptyKernel<<<1, 32, 0, rk.streams[r]>>>();
    }
    return std::string();
  }, us);
}

}  // namespace tpar_cli
