#include "tools/tpar/bench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tpar_cli {
namespace {

#define BENCH_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "tpar bench: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      return 2;                                                                            \
    }                                                                                      \
  } while (0)

// Inputs whose sums are exact in every datatype: small integers, |sum| <= 8 * ranks.
__device__ inline float inputValue(size_t i, int rank) {
  return static_cast<float>(static_cast<int>((i * 7 + rank * 3 + (i >> 10)) % 17) - 8);
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

__global__ void fillInputs(void* buf, size_t count, int dtype, int rank) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    storeAs(buf, i, dtype, inputValue(i, rank));
}

__global__ void countWrong(const void* out, size_t count, int dtype, int nranks,
                           unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = 0.f;
    for (int r = 0; r < nranks; ++r) want += inputValue(i, r);
    local += loadAs(out, i, dtype) != want;
  }
  if (local) atomicAdd(wrong, local);
}

// The kernel driver's version string ("580.159.04"), from the proc file it publishes.
std::string nvidiaDriver() {
  // "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  std::getline(f, line);
  std::stringstream ss(line);
  std::string tok;
  while (ss >> tok) {
    if (!tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) &&
        tok.find('.') != std::string::npos)
      return tok;
  }
  return "unknown";
}

__global__ void emptyKernel() {}

// The launch floor of this setup: every rank's stream replays a graph of `iters` empty kernels,
// all ranks together, timed like the all-reduces. No all-reduce launched this way can be faster.
int timeEmpty(const std::vector<int>& devs, int iters, double* us) {
  const int n = static_cast<int>(devs.size());
  std::vector<cudaStream_t> streams(n);
  std::vector<cudaGraphExec_t> execs(n);
  for (int r = 0; r < n; ++r) {
    BENCH_CUDA(cudaSetDevice(devs[r]));
    BENCH_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    cudaGraph_t g;
    BENCH_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; ++i) emptyKernel<<<1, 32, 0, streams[r]>>>();
    BENCH_CUDA(cudaStreamEndCapture(streams[r], &g));
    BENCH_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
    cudaGraphDestroy(g);
    BENCH_CUDA(cudaGraphLaunch(execs[r], streams[r]));
  }
  BENCH_CUDA(cudaSetDevice(devs[0]));
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  std::vector<cudaEvent_t> done(n);
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (auto& e : done) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventRecord(start, streams[0]));
  for (int r = 1; r < n; ++r) BENCH_CUDA(cudaStreamWaitEvent(streams[r], start, 0));
  for (int r = 0; r < n; ++r) {
    BENCH_CUDA(cudaGraphLaunch(execs[r], streams[r]));
    BENCH_CUDA(cudaEventRecord(done[r], streams[r]));
  }
  for (int r = 1; r < n; ++r) BENCH_CUDA(cudaStreamWaitEvent(streams[0], done[r], 0));
  BENCH_CUDA(cudaEventRecord(stop, streams[0]));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  *us = 1000.0 * ms / iters;
  for (auto e : done) cudaEventDestroy(e);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (int r = 0; r < n; ++r) {
    cudaGraphExecDestroy(execs[r]);
    cudaStreamDestroy(streams[r]);
  }
  return 0;
}

size_t elemSize(tparDataType_t d) { return d == tparFloat32 ? 4 : 2; }

struct Row {
  int nranks;
  std::string algo;
  std::string chosen;
  size_t bytes;
  size_t count;
  double us_out;
  double us_in;
  unsigned long long wrong;
};

std::string gpuName(int dev) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "unknown";
  return p.name;
}

// Times `iters` calls per rank captured in one graph per rank (or issued eagerly), from an
// event before the first rank's work to the join of every rank's stream.
int timeCalls(const std::vector<tparComm_t>& comms, const std::vector<cudaStream_t>& streams,
              const std::vector<void*>& in, const std::vector<void*>& out, size_t count,
              tparDataType_t dtype, int iters, int warmup, bool graph, double* us) {
  const int n = static_cast<int>(comms.size());
  auto issue = [&](int r, int k) -> int {
    for (int i = 0; i < k; ++i) {
      if (tparAllReduce(in[r], out[r], count, dtype, tparSum, comms[r], streams[r]) != tparSuccess) {
        std::fprintf(stderr, "tpar bench: tparAllReduce: %s\n", tparGetLastError(comms[r]));
        return 2;
      }
    }
    return 0;
  };
  for (int r = 0; r < n; ++r)
    if (int rc = issue(r, warmup)) return rc;
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  if (graph) {
    for (int r = 0; r < n; ++r) {
      cudaGraph_t g;
      BENCH_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
      if (int rc = issue(r, iters)) return rc;
      BENCH_CUDA(cudaStreamEndCapture(streams[r], &g));
      BENCH_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
      cudaGraphDestroy(g);
    }
    // One untimed replay: first launches upload the graph.
    for (int r = 0; r < n; ++r) BENCH_CUDA(cudaGraphLaunch(execs[r], streams[r]));
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  cudaEvent_t start, stop;
  std::vector<cudaEvent_t> done(n);
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (auto& e : done) BENCH_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  BENCH_CUDA(cudaEventRecord(start, streams[0]));
  for (int r = 1; r < n; ++r) BENCH_CUDA(cudaStreamWaitEvent(streams[r], start, 0));
  for (int r = 0; r < n; ++r) {
    if (graph) {
      BENCH_CUDA(cudaGraphLaunch(execs[r], streams[r]));
    } else if (int rc = issue(r, iters)) {
      return rc;
    }
    BENCH_CUDA(cudaEventRecord(done[r], streams[r]));
  }
  for (int r = 1; r < n; ++r) BENCH_CUDA(cudaStreamWaitEvent(streams[0], done[r], 0));
  BENCH_CUDA(cudaEventRecord(stop, streams[0]));
  BENCH_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
  *us = 1000.0 * ms / iters;
  for (auto e : done) cudaEventDestroy(e);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (auto e : execs)
    if (e) cudaGraphExecDestroy(e);
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    tparCommGetAsyncError(comms[r], &async);
    if (async != tparSuccess) {
      std::fprintf(stderr, "tpar bench: rank %d failed: %s\n", r, tparGetErrorString(async));
      return 2;
    }
  }
  return 0;
}

int benchRanks(const BenchOptions& opt, int nranks, int ngpus, std::vector<Row>* rows) {
  std::vector<int> devs(nranks);
  for (int r = 0; r < nranks; ++r) devs[r] = ngpus >= nranks ? r : 0;
  std::vector<size_t> sizes = opt.sizes;
  if (sizes.empty()) {
    for (double b = static_cast<double>(opt.min_bytes); b <= opt.max_bytes * 1.0001; b *= opt.factor)
      sizes.push_back(static_cast<size_t>(b));
  }
  const size_t es = elemSize(opt.dtype);
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  if (opt.graph) {
    double floor_us = 0;
    if (int rc = timeEmpty(devs, opt.iters, &floor_us)) return rc;
    rows->push_back(Row{nranks, "floor", "empty", 0, 0, floor_us, floor_us, 0});
    std::printf("%6d %-8s %-8s %12d %12d %10.2f %8s %8s %10.2f %7d\n", nranks, "floor", "empty", 0,
                0, floor_us, "-", "-", floor_us, 0);
  }
  for (tparAlgo_t algo : opt.algos) {
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.allowSharedDevice = ngpus < nranks ? 1 : 0;
    cfg.algorithm = algo;
    std::vector<tparComm_t> comms(nranks);
    if (tparCommInitAllConfig(comms.data(), nranks, devs.data(), &cfg) != tparSuccess) {
      std::fprintf(stderr, "tpar bench: init: %s\n", tparGetLastError(nullptr));
      return 2;
    }
    std::vector<cudaStream_t> streams(nranks);
    std::vector<void*> in(nranks), out(nranks);
    for (int r = 0; r < nranks; ++r) {
      BENCH_CUDA(cudaSetDevice(devs[r]));
      BENCH_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      BENCH_CUDA(cudaMalloc(&in[r], max_bytes + 16));
      BENCH_CUDA(cudaMalloc(&out[r], max_bytes + 16));
    }
    unsigned long long* wrong = nullptr;
    BENCH_CUDA(cudaSetDevice(devs[0]));
    BENCH_CUDA(cudaMallocHost(&wrong, sizeof(*wrong)));
    for (size_t bytes : sizes) {
      const size_t count = std::max<size_t>(1, bytes / es);
      Row row{nranks, tparAlgoName(algo), "", count * es, count, 0, 0, 0};
      tparAlgo_t chosen;
      tparCommSelectAlgorithm(comms[0], count * es, &chosen);
      row.chosen = tparAlgoName(chosen);
      for (int r = 0; r < nranks; ++r) {
        BENCH_CUDA(cudaSetDevice(devs[r]));
        fillInputs<<<256, 256, 0, streams[r]>>>(in[r], count, opt.dtype, r);
        BENCH_CUDA(cudaMemsetAsync(out[r], 0xA7, count * es, streams[r]));
      }
      BENCH_CUDA(cudaDeviceSynchronize());
      // Out of place: time, then check the last call's output on every rank.
      if (int rc = timeCalls(comms, streams, in, out, count, opt.dtype, opt.iters, opt.warmup,
                             opt.graph, &row.us_out))
        return rc;
      *wrong = 0;
      for (int r = 0; r < nranks; ++r) {
        BENCH_CUDA(cudaSetDevice(devs[r]));
        countWrong<<<128, 256, 0, streams[r]>>>(out[r], count, opt.dtype, nranks, wrong);
      }
      for (int r = 0; r < nranks; ++r) {
        BENCH_CUDA(cudaSetDevice(devs[r]));
        BENCH_CUDA(cudaDeviceSynchronize());
      }
      row.wrong = *wrong;
      // In place: the sum grows every call, so time only (its correctness is the tests' job).
      if (int rc = timeCalls(comms, streams, out, out, count, opt.dtype, opt.iters, opt.warmup,
                             opt.graph, &row.us_in))
        return rc;
      rows->push_back(row);
      const double algbw = row.bytes / (row.us_out * 1e-6) / 1e9;
      std::printf("%6d %-8s %-8s %12zu %12zu %10.2f %8.2f %8.2f %10.2f %7llu\n", nranks,
                  row.algo.c_str(), row.chosen.c_str(), row.bytes, row.count, row.us_out, algbw,
                  algbw * 2.0 * (nranks - 1) / nranks, row.us_in, row.wrong);
      std::fflush(stdout);
    }
    cudaFreeHost(wrong);
    for (int r = 0; r < nranks; ++r) {
      cudaSetDevice(devs[r]);
      cudaFree(in[r]);
      cudaFree(out[r]);
      cudaStreamDestroy(streams[r]);
      tparCommDestroy(comms[r]);
    }
  }
  return 0;
}

}  // namespace

int runBench(const BenchOptions& opt) {
  int ngpus = 0;
  cudaError_t err = cudaGetDeviceCount(&ngpus);
  if (err != cudaSuccess || ngpus == 0) {
    std::printf("tpar bench: no CUDA GPU on this machine (%s); nothing to measure.\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 0;
  }
  std::vector<int> rank_counts = opt.rank_list;
  if (rank_counts.empty()) rank_counts.push_back(opt.ranks > 0 ? opt.ranks : (ngpus > 1 ? ngpus : 8));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const std::string gpu = gpuName(0);
  for (int n : rank_counts) {
    if (n > ngpus) {
      std::printf("# %d virtual ranks on one %s: %d streams share its SMs and memory; times show\n"
                  "# protocol cost, not a multi-GPU machine's. NCCL cannot run ranks on one GPU.\n",
                  n, gpu.c_str(), n);
    } else {
      std::printf("# %d ranks on %d GPUs (%s)\n", n, n, gpu.c_str());
    }
  }
  std::printf("# dtype %s, op sum, %s timing, %d iterations after %d warm-up\n",
              tparDataTypeName(opt.dtype), opt.graph ? "CUDA-graph" : "eager", opt.iters,
              opt.warmup);
  std::printf("#\n# %4s %-8s %-8s %12s %12s %10s %8s %8s %10s %7s\n", "ranks", "algo", "chosen",
              "size(B)", "count", "time(us)", "algbw", "busbw", "inplace", "#wrong");
  std::vector<Row> rows;
  for (int n : rank_counts) {
    if (int rc = benchRanks(opt, n, ngpus, &rows)) return rc;
  }
  unsigned long long total_wrong = 0;
  for (const Row& r : rows) total_wrong += r.wrong;
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << "{\n  \"tool\": \"tpar bench\",\n  \"commit\": \"" << TPAR_GIT_COMMIT << "\",\n"
      << "  \"command\": \"" << opt.command_line << "\",\n  \"gpu\": \"" << gpu << "\",\n"
      << "  \"gpus\": " << ngpus << ",\n  \"cuda_driver\": " << driver << ",\n"
      << "  \"nvidia_driver\": \"" << nvidiaDriver() << "\",\n"
      << "  \"cuda_runtime\": " << runtime << ",\n  \"dtype\": \"" << tparDataTypeName(opt.dtype)
      << "\",\n  \"timing\": \"" << (opt.graph ? "graph" : "eager") << "\",\n  \"iters\": "
      << opt.iters << ",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << "    {\"ranks\": " << r.nranks << ", \"virtual\": " << (r.nranks > ngpus ? "true" : "false")
        << ", \"algo\": \"" << r.algo << "\", \"chosen\": \"" << r.chosen << "\", \"bytes\": "
        << r.bytes << ", \"count\": " << r.count << ", \"us_out_of_place\": " << r.us_out
        << ", \"us_in_place\": " << r.us_in << ", \"wrong\": " << r.wrong << "}"
        << (i + 1 < rows.size() ? "," : "") << "\n";
    }
    f << "  ]\n}\n";
    std::printf("# wrote %s\n", opt.json_path.c_str());
  }
  std::printf("# %s: %llu wrong elements\n", total_wrong ? "FAILED" : "ok", total_wrong);
  return total_wrong ? 1 : 0;
}

}  // namespace tpar_cli
