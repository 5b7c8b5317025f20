// Driving N ranks of an all-reduce backend from one thread and timing them as every `tpar`
// subcommand does: exact inputs, poisoned outputs, element-by-element checks, and CUDA-graph
// timing from one event before every rank's work to the join of every rank's stream.
#ifndef TPAR_TOOLS_MEASURE_H_
#define TPAR_TOOLS_MEASURE_H_

#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

// Returns the failed call's text from a function that returns std::string.
#define TPAR_CLI_CUDA(call)                                                          \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) return std::string(#call) + ": " + cudaGetErrorString(e_); \
  } while (0)

namespace tpar_cli {

size_t elemSize(tparDataType_t d);

// cudaSetDevice only when the device changes (virtual ranks never switch).
cudaError_t setDevice(int dev);

// N ranks' streams and buffers for one run. Rank r's input element i is a small integer of
// (i, first_rank + r), so every sum is exact in every datatype.
struct Ranks {
  std::vector<int> devs;
  int first_rank = 0;  // global rank of devs[0] (one process per rank: that rank)
  int world = 0;       // ranks in the communicator (0: devs.size())
  std::vector<cudaStream_t> streams;
  std::vector<void*> in, out;
  unsigned long long* wrong = nullptr;  // pinned, mapped

  Ranks() = default;
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;
  ~Ranks();
  // A stream and two buffers of `bytes` per device.
  std::string alloc(const std::vector<int>& d, size_t bytes);
  std::string sync();
  // Fills `bufs` with every rank's exact input; poisons `poisoned` (may be empty).
  std::string fill(const std::vector<void*>& bufs, const std::vector<void*>& poisoned,
                   size_t count, tparDataType_t dtype);
  // Elements of `bufs` (every rank) that differ from the exact sum.
  std::string countWrongIn(const std::vector<void*>& bufs, size_t count, tparDataType_t dtype,
                           long long* result);
};

// Times `iters` repetitions of `issue` (which enqueues one call on every rank), captured in one
// graph per rank or issued eagerly; from an event before the first rank's work to the join of
// every rank's stream.
template <typename Issue>
std::string timeIt(Ranks& rk, int iters, int warmup, bool graph, Issue issue, double* us) {
  const size_t n = rk.devs.size();
  for (int i = 0; i < warmup; ++i)
    if (std::string e = issue(); !e.empty()) return e;
  if (std::string e = rk.sync(); !e.empty()) return e;
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  auto cleanup = [&] {
    for (auto e : execs)
      if (e) cudaGraphExecDestroy(e);
  };
  if (graph) {
    // Every rank's stream captures at once (NCCL needs one group call over all ranks). Relaxed
    // mode: switching the current device while other streams of this thread capture is then
    // allowed.
    for (size_t r = 0; r < n; ++r) {
      TPAR_CLI_CUDA(setDevice(rk.devs[r]));
      TPAR_CLI_CUDA(cudaStreamBeginCapture(rk.streams[r], cudaStreamCaptureModeRelaxed));
    }
    std::string err;
    for (int i = 0; i < iters && err.empty(); ++i) err = issue();
    for (size_t r = 0; r < n; ++r) {
      cudaGraph_t g = nullptr;
      setDevice(rk.devs[r]);
      cudaError_t e = cudaStreamEndCapture(rk.streams[r], &g);
      if (e == cudaSuccess && err.empty()) e = cudaGraphInstantiate(&execs[r], g, 0);
      if (g) cudaGraphDestroy(g);
      if (e != cudaSuccess && err.empty()) err = std::string("graph capture: ") + cudaGetErrorString(e);
    }
    if (!err.empty()) {
      cleanup();
      return err;
    }
    // One untimed replay: the first launch of a graph uploads it.
    for (size_t r = 0; r < n; ++r) TPAR_CLI_CUDA(cudaGraphLaunch(execs[r], rk.streams[r]));
    if (std::string e = rk.sync(); !e.empty()) return e;
  }
  cudaEvent_t start, stop;
  std::vector<cudaEvent_t> done(n);
  TPAR_CLI_CUDA(cudaSetDevice(rk.devs[0]));
  TPAR_CLI_CUDA(cudaEventCreate(&start));
  TPAR_CLI_CUDA(cudaEventCreate(&stop));
  for (size_t r = 0; r < n; ++r) {
    TPAR_CLI_CUDA(cudaSetDevice(rk.devs[r]));
    TPAR_CLI_CUDA(cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming));
  }
  TPAR_CLI_CUDA(cudaSetDevice(rk.devs[0]));
  TPAR_CLI_CUDA(cudaEventRecord(start, rk.streams[0]));
  for (size_t r = 1; r < n; ++r) TPAR_CLI_CUDA(cudaStreamWaitEvent(rk.streams[r], start, 0));
  if (graph) {
    for (size_t r = 0; r < n; ++r) TPAR_CLI_CUDA(cudaGraphLaunch(execs[r], rk.streams[r]));
  } else {
    for (int i = 0; i < iters; ++i)
      if (std::string e = issue(); !e.empty()) return e;
  }
  for (size_t r = 0; r < n; ++r) TPAR_CLI_CUDA(cudaEventRecord(done[r], rk.streams[r]));
  for (size_t r = 1; r < n; ++r) TPAR_CLI_CUDA(cudaStreamWaitEvent(rk.streams[0], done[r], 0));
  TPAR_CLI_CUDA(cudaEventRecord(stop, rk.streams[0]));
  TPAR_CLI_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  TPAR_CLI_CUDA(cudaEventElapsedTime(&ms, start, stop));
  *us = 1000.0 * ms / iters;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (auto e : done) cudaEventDestroy(e);
  cleanup();
  return rk.sync();
}

// The launch floor of this setup: every rank's stream replays empty kernels, all together.
std::string timeFloor(Ranks& rk, int iters, double* us);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_MEASURE_H_
