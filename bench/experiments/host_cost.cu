// The host cost of one eager tparAllReduce, next to what the CUDA driver alone costs (issue:
// host cost of one call on its own <= 1.5 us).
//
// One thread drives every rank (tparCommInitAll over the first --ranks GPUs). Each rank's
// stream is first held by a kernel that spins until the host lets it go, so launches only
// enqueue and the launch queue never fills; a batch of calls is timed, then the streams are
// released and drained. Printed, in ns per call:
//   tparAllReduce                  the whole C call, per rank and call
//   launch, P-byte params [+pdl]   cudaLaunchKernel / cudaLaunchKernelExC of an empty kernel
//                                  with P bytes of parameters (P = sizeof(AllReduceArgs) is
//                                  what tpar launches), with the programmatic-serialization
//                                  attribute tpar sets on sm_90+ (TPAR_LAUNCH_OVERLAP)
//   paired: ...                    tparAllReduce and a launch of an empty kernel declared and
//                                  launched as tpar's (launch bound, grid-constant argument,
//                                  grid, block, attribute), in alternating batches, and the
//                                  median of their differences
//   paired: runtime / driver ...   the tpar-shaped launch through the runtime (the kernel's host
//                                  entry address) against the same launch through the driver's
//                                  cuLaunchKernelEx, with the kernel's handle resolved once
//                                  (cudaGetKernel, or cudaGetFuncBySymbol for this context)
//   driver calls                   each query tparAllReduce makes, alone
// tparAllReduce minus the launch row with tpar's parameter size and attribute is tpar's own
// cost (checks, plan, arguments) plus its driver queries.
//
// Build (next to a tpar build in BUILD):
//   nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude -Isrc bench/experiments/host_cost.cu \
//        -LBUILD -ltpar -Xlinker -rpath=BUILD -o host_cost
// (or cmake --build BUILD --target tpar_host_cost). Run: ./host_cost [--ranks N] [--bytes N]
//   [--batch N] [--batches N]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/launch.h"  // sizeof(AllReduceArgs) only
#include "tpar/tpar.h"

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define TK(x, comm)                                                                         \
  do {                                                                                      \
    tparResult_t r_ = (x);                                                                  \
    if (r_ != tparSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, tparGetLastError(comm)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

// Spins until *go != 0, or ~2 s at most (never hangs if the host dies mid-batch).
__global__ void hold(volatile int* go, long long max_cycles) {
  const long long t0 = clock64();
  while (*go == 0 && clock64() - t0 < max_cycles) {
  }
}

template <int P>
struct Blob {
  char b[P];
};
template <int P>
__global__ void empty(Blob<P> p) {
  if (p.b[0] == 123 && threadIdx.x == 9999) p.b[1] = 0;  // reads the parameters
}

// An empty kernel declared and launched as tpar's all-reduce kernel is (prims/call.cuh): the
// launch bound, the argument block as a grid constant.
__global__ void __launch_bounds__(tpar::kernels::kMaxThreads, 1)
    tparShaped(const __grid_constant__ tpar::kernels::AllReduceArgs a) {
  if (a.count == 0x123456789ull && threadIdx.x == 9999) __trap();  // reads the argument
}

double nsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

struct Held {
  std::vector<int> devs;
  std::vector<cudaStream_t> streams;
  int* go = nullptr;  // pinned, mapped
  long long cycles = 0;

  void start() {
    *reinterpret_cast<volatile int*>(go) = 0;
    for (size_t r = 0; r < devs.size(); ++r) {
      CK(cudaSetDevice(devs[r]));
      hold<<<1, 1, 0, streams[r]>>>(go, cycles);
      CK(cudaGetLastError());
    }
    CK(cudaSetDevice(devs[0]));
  }
  void release() {
    *reinterpret_cast<volatile int*>(go) = 1;
    for (size_t r = 0; r < devs.size(); ++r) CK(cudaStreamSynchronize(streams[r]));
  }
};

// ns per enqueue of `launch(rank)`, batch calls per rank per batch, the median of the batches.
template <typename F>
double timeHeld(Held& h, int batch, int batches, F&& launch) {
  std::vector<double> per;
  for (int b = 0; b < batches; ++b) {
    h.start();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i)
      for (size_t r = 0; r < h.devs.size(); ++r) launch(static_cast<int>(r));
    per.push_back(nsSince(t0) / (batch * h.devs.size()));
    h.release();
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

template <typename F>
double timeLoop(int iters, F&& f) {
  for (int i = 0; i < 1000; ++i) f();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return nsSince(t0) / iters;
}

// Batches of `a` and of `b` alternating in the same run (a first in even rounds, b in odd), so
// that a drift of the machine falls on both: the medians of each and of a - b per round.
template <typename A, typename B>
void timePaired(Held& h, int batch, int batches, A&& a, B&& b, double out[3]) {
  std::vector<double> ta, tb, d;
  for (int k = 0; k < batches; ++k) {
    double x = 0, y = 0;
    for (int half = 0; half < 2; ++half) {
      const bool run_a = (half == 0) == (k % 2 == 0);
      h.start();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < batch; ++i)
        for (size_t r = 0; r < h.devs.size(); ++r) {
          if (run_a) a(static_cast<int>(r));
          else b(static_cast<int>(r));
        }
      (run_a ? x : y) = nsSince(t0) / (batch * h.devs.size());
      h.release();
    }
    ta.push_back(x);
    tb.push_back(y);
    d.push_back(x - y);
  }
  for (auto* v : {&ta, &tb, &d}) std::sort(v->begin(), v->end());
  out[0] = ta[ta.size() / 2];
  out[1] = tb[tb.size() / 2];
  out[2] = d[d.size() / 2];
}

// One launch of fn on rank r's stream with the programmatic-serialization attribute tpar sets on
// sm_90+, switching device only where ranks are on several GPUs.
void launchPdl(const Held& h, int r, const void* fn, void** params, int blocks, int threads) {
  if (h.devs.size() > 1) CK(cudaSetDevice(h.devs[r]));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = h.streams[r];
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CK(cudaLaunchKernelExC(&config, fn, params));
}

template <int P>
void launchEmpty(const Held& h, int batch, int batches, int blocks, int threads) {
  Blob<P> blob;
  std::memset(&blob, 0, sizeof(blob));
  void* params[] = {&blob};
  const void* fn = reinterpret_cast<const void*>(&empty<P>);
  Held& hh = const_cast<Held&>(h);
  // One GPU: nothing but the launch (the caller's device is already current), so that the
  // rows are the floor a library call on that stream is compared against.
  const bool switch_device = h.devs.size() > 1;
  const double plain = timeHeld(hh, batch, batches, [&](int r) {
    if (switch_device) CK(cudaSetDevice(h.devs[r]));
    CK(cudaLaunchKernel(fn, dim3(blocks), dim3(threads), params, 0, h.streams[r]));
  });
  const double pdl = timeHeld(hh, batch, batches,
                              [&](int r) { launchPdl(h, r, fn, params, blocks, threads); });
  std::printf("%-40s %8.0f\n", (std::string("launch, ") + std::to_string(P) + "-byte params").c_str(),
              plain);
  std::printf("%-40s %8.0f\n",
              (std::string("launch, ") + std::to_string(P) + "-byte params +pdl").c_str(), pdl);
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 0, batch = 200, batches = 50;
  size_t bytes = 12u << 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--bytes")) bytes = std::strtoull(argv[i + 1], nullptr, 0);
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batches")) batches = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--ranks N] [--bytes N] [--batch N] [--batches N]\n", argv[0]);
      return 2;
    }
  }
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (ranks <= 0) ranks = std::min(ndev, 2);
  if (ranks > ndev) {
    std::fprintf(stderr, "--ranks %d, but %d GPUs are visible\n", ranks, ndev);
    return 2;
  }
  Held h;
  for (int r = 0; r < ranks; ++r) h.devs.push_back(r);
  std::vector<tparComm_t> comms(ranks);
  TK(tparCommInitAll(comms.data(), ranks, h.devs.data()), nullptr);
  std::vector<void*> bufs(ranks);
  const size_t count = bytes / 2;
  for (int r = 0; r < ranks; ++r) {
    CK(cudaSetDevice(r));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    h.streams.push_back(s);
    CK(cudaMalloc(&bufs[r], bytes));
    CK(cudaMemset(bufs[r], 0, bytes));
  }
  CK(cudaSetDevice(0));
  CK(cudaHostAlloc(&h.go, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  h.cycles = 2000LL * clock_khz * 1000 / 1000;  // ~2 s
  CK(cudaDeviceSynchronize());

  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int version = 0;
  tparGetVersion(&version);
  std::printf("# %s x%d, tpar %d, %zu bytes bf16 sum, %d batches of %d calls per rank (median)\n",
              prop.name, ranks, version, bytes, batches, batch);
  std::printf("# sizeof(AllReduceArgs) = %zu\n", sizeof(tpar::kernels::AllReduceArgs));
  std::printf("%-40s %8s\n", "what (one thread, streams held)", "ns/call");

  // Warm-up: every path once.
  timeHeld(h, 10, 2, [&](int r) {
    TK(tparAllReduce(bufs[r], bufs[r], count, tparBfloat16, tparSum, comms[r], h.streams[r]),
       comms[r]);
  });
  const double ar = timeHeld(h, batch, batches, [&](int r) {
    TK(tparAllReduce(bufs[r], bufs[r], count, tparBfloat16, tparSum, comms[r], h.streams[r]),
       comms[r]);
  });
  std::printf("%-40s %8.0f\n", "tparAllReduce", ar);
  tparCommInfo_t info;
  TK(tparCommQuery(comms[0], &info), comms[0]);
  launchEmpty<8>(h, batch, batches, info.blocksPerRank, 512);
  launchEmpty<sizeof(tpar::kernels::AllReduceArgs)>(h, batch, batches, info.blocksPerRank, 512);
  launchEmpty<4096>(h, batch, batches, info.blocksPerRank, 512);

  // The call against a launch of a kernel shaped like tpar's, with tpar's grid, block and
  // attribute, in alternating batches: the library's own cost above the launch it makes.
  {
    tpar::kernels::AllReduceArgs args;
    std::memset(&args, 0, sizeof(args));
    void* params[] = {&args};
    // 64 threads: what tpar's one-shot of 12 KiB runs.
    auto shaped = [&](int r) {
      launchPdl(h, r, reinterpret_cast<const void*>(&tparShaped), params, info.blocksPerRank, 64);
    };
    auto call = [&](int r) {
      TK(tparAllReduce(bufs[r], bufs[r], count, tparBfloat16, tparSum, comms[r], h.streams[r]),
         comms[r]);
    };
    double m[3];
    timePaired(h, batch, batches, call, shaped, m);
    std::printf("%-40s %8.0f\n", "paired: tparAllReduce", m[0]);
    std::printf("%-40s %8.0f\n", "paired: tpar-shaped launch +pdl", m[1]);
    std::printf("%-40s %8.0f\n", "paired: median of the differences", m[2]);
  }

  // The same launch through the driver, its kernel handle resolved once: what the runtime's
  // launch adds on top (its lookup of the kernel's entry address, its own checks).
  {
    using LaunchEx = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
    void* sym = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    CK(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &sym, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || sym == nullptr) {
      std::printf("%-40s %8s\n", "paired: driver launch", "n/a");
    } else {
      const auto launch_ex = reinterpret_cast<LaunchEx>(sym);
      const void* entry = reinterpret_cast<const void*>(&tparShaped);
      cudaKernel_t kernel = nullptr;
      CK(cudaGetKernel(&kernel, entry));
      cudaFunction_t func = nullptr;
      CK(cudaGetFuncBySymbol(&func, entry));
      tpar::kernels::AllReduceArgs args;
      std::memset(&args, 0, sizeof(args));
      void* params[] = {&args};
      auto driver = [&](CUfunction f) {
        return [&, f](int r) {
          if (h.devs.size() > 1) CK(cudaSetDevice(h.devs[r]));
          CUlaunchConfig config = {};
          config.gridDimX = info.blocksPerRank;
          config.gridDimY = config.gridDimZ = 1;
          config.blockDimX = 64;
          config.blockDimY = config.blockDimZ = 1;
          config.hStream = reinterpret_cast<CUstream>(h.streams[r]);
          CUlaunchAttribute attr[1];
          attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
          attr[0].value.programmaticStreamSerializationAllowed = 1;
          config.attrs = attr;
          config.numAttrs = 1;
          const CUresult e = launch_ex(&config, f, params, nullptr);
          if (e != CUDA_SUCCESS) {
            std::fprintf(stderr, "cuLaunchKernelEx: error %d\n", static_cast<int>(e));
            std::exit(1);
          }
        };
      };
      auto runtime = [&](int r) { launchPdl(h, r, entry, params, info.blocksPerRank, 64); };
      double m[3];
      timePaired(h, batch, batches, runtime, driver(reinterpret_cast<CUfunction>(kernel)), m);
      std::printf("%-40s %8.0f\n", "paired: runtime launch (entry address)", m[0]);
      std::printf("%-40s %8.0f\n", "paired: driver launch (cudaGetKernel)", m[1]);
      std::printf("%-40s %8.0f\n", "paired: median of the differences", m[2]);
      timePaired(h, batch, batches, runtime, driver(reinterpret_cast<CUfunction>(func)), m);
      std::printf("%-40s %8.0f\n", "paired: runtime launch (entry address)", m[0]);
      std::printf("%-40s %8.0f\n", "paired: driver launch (cudaGetFuncBySymbol)", m[1]);
      std::printf("%-40s %8.0f\n", "paired: median of the differences", m[2]);
      auto call = [&](int r) {
        TK(tparAllReduce(bufs[r], bufs[r], count, tparBfloat16, tparSum, comms[r], h.streams[r]),
           comms[r]);
      };
      timePaired(h, batch, batches, call, driver(reinterpret_cast<CUfunction>(kernel)), m);
      std::printf("%-40s %8.0f\n", "paired: tparAllReduce", m[0]);
      std::printf("%-40s %8.0f\n", "paired: driver launch (cudaGetKernel)", m[1]);
      std::printf("%-40s %8.0f\n", "paired: median of the differences", m[2]);
    }
  }

  // The queries tparAllReduce makes (and candidates to replace them), on rank 0's stream.
  CK(cudaSetDevice(0));
  cudaStream_t s = h.streams[0];
  const int iters = 200000;
  std::printf("%-40s %8.1f\n", "cudaGetDevice", timeLoop(iters, [] {
                int d;
                cudaGetDevice(&d);
              }));
  std::printf("%-40s %8.1f\n", "cudaSetDevice (current)", timeLoop(iters, [] { cudaSetDevice(0); }));
  std::printf("%-40s %8.1f\n", "cudaStreamIsCapturing", timeLoop(iters, [&] {
                cudaStreamCaptureStatus c;
                cudaStreamIsCapturing(s, &c);
              }));
  std::printf("%-40s %8.1f\n", "cudaStreamGetDevice", timeLoop(iters, [&] {
                int d;
                cudaStreamGetDevice(s, &d);
              }));
  std::printf("%-40s %8.1f\n", "cudaStreamGetCaptureInfo", timeLoop(iters, [&] {
                cudaStreamCaptureStatus c;
                cudaStreamGetCaptureInfo(s, &c, nullptr, nullptr, nullptr, nullptr, nullptr);
              }));
  std::printf("%-40s %8.1f\n", "cudaStreamGetId", timeLoop(iters, [&] {
                unsigned long long id;
                cudaStreamGetId(s, &id);
              }));

  for (int r = 0; r < ranks; ++r) {
    tparResult_t async = tparSuccess;
    TK(tparCommGetAsyncError(comms[r], &async), comms[r]);
    if (async != tparSuccess) {
      std::fprintf(stderr, "rank %d: asynchronous error %s\n", r, tparGetErrorString(async));
      return 1;
    }
  }
  for (int r = 0; r < ranks; ++r) TK(tparCommDestroy(comms[r]), nullptr);
  return 0;
}
