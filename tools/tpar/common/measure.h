// Driving N ranks of an all-reduce backend from one thread and timing them as every `tpar`
// subcommand does: exact inputs, poisoned outputs, element-by-element checks, and CUDA-graph
// timing from one event before every rank's work to the join of every rank's stream.
#ifndef TPAR_TOOLS_MEASURE_H_
#define TPAR_TOOLS_MEASURE_H_

#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "api/internal.h"
#include "tpar/tpar.h"

// Returns the failed call's text from a function that returns std::string.
#define TPAR_CLI_CUDA(call)                                                          \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) return std::string(#call) + ": " + cudaGetErrorString(e_); \
  } while (0)

namespace tpar_cli {

// cudaSetDevice only when the device changes (virtual ranks never switch).
cudaError_t setDevice(int dev);

// N ranks' streams and buffers for one run. Rank r's input element i is a small integer of
// (i, first_rank + r, seed), so every sum, max and min is exact in every datatype.
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
  // Fills `bufs` with every rank's exact input for `seed`; poisons `poisoned` (may be empty).
  std::string fill(const std::vector<void*>& bufs, const std::vector<void*>& poisoned,
                   size_t count, tparDataType_t dtype, unsigned seed = 0);
  // Elements of `bufs` (every rank) that differ from the exact reduction (`op`) of the inputs
  // of `seed`.
  std::string countWrongIn(const std::vector<void*>& bufs, size_t count, tparDataType_t dtype,
                           long long* result, tparRedOp_t op = tparSum, unsigned seed = 0);
  // Elements of `bufs` (every rank of this process) whose bits differ from what wire format
  // `wire` (tparWire_t) gives for the inputs of `seed` (every rank's, `world` of them): the
  // two-shot of tests/common/wire_reference.h, the kernels' specification, computed on the
  // host. Float16 and bfloat16.
  std::string countWireWrongIn(const std::vector<void*>& bufs, size_t count,
                               tparDataType_t dtype, int wire, long long* result,
                               tparRedOp_t op = tparSum, unsigned seed = 0);
};

// How calls are timed (nccl-tests' -n -w -m -G -z).
struct TimingPlan {
  int iters = 100;          // timed iterations
  int warmup = 10;          // untimed iterations first
  int agg = 1;              // calls per iteration
  int graph_launches = 1;   // replays of one graph of iters x agg calls per rank; 0: eager
  int blocking = 0;         // eager only: 1, 2 wait for every call; 3 for every iteration
};

// Per call, from the start every rank waits for: each rank's time to the end of its last call
// (GPU events), and the host's time to issue the calls (launches, or the eager loop).
struct Timing {
  std::vector<double> rank_us;
  double cpu_us = 0;
  double maxUs() const;
};

// Times `issue` (which enqueues one call on every rank) as `plan` says.
std::string timeCalls(Ranks& rk, const TimingPlan& plan, const std::function<std::string()>& issue,
                      Timing* out);

// Times `iters` repetitions of `issue`, captured in one graph per rank (one replay) or issued
// eagerly; the slowest rank's time per call.
std::string timeIt(Ranks& rk, int iters, int warmup, bool graph,
                   const std::function<std::string()>& issue, double* us);

// The launch floor of this setup: every rank's stream replays empty kernels, all together.
std::string timeFloor(Ranks& rk, int iters, double* us);

// Holds every rank's stream with one spin kernel that waits for release() (tpar bench
// --host-cost): calls enqueued behind it only queue, so their host cost is the enqueue alone.
// The spin gives up after `timeout_ms` (nothing can hang); timedOut() then says the hold ended
// early and the timing is void.
class StreamHold {
 public:
  StreamHold() = default;
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  ~StreamHold();
  // Allocates the flag and loads the spin kernel (NOTE [preload]) on every rank's device.
  std::string init(Ranks& rk);
  std::string hold(Ranks& rk, unsigned timeout_ms);
  void release();
  bool timedOut() const;

 private:
  volatile unsigned* flag_ = nullptr;  // pinned, mapped: [0] release, [1] a spin timed out
  std::vector<int> devs_;
};

// Enqueues `calls` launches per rank of an empty kernel whose parameter is as large as tpar's
// (sizeof(tpar::kernels::AllReduceArgs)), with tpar's launch attributes: programmatic stream
// serialization when `overlap` (src/registry/launcher.cc), grid `blocks` x `threads`.
std::string launchBare(Ranks& rk, int calls, bool overlap, int blocks, int threads);

// Whether tpar launches with programmatic stream serialization on `dev` (TPAR_LAUNCH_OVERLAP
// and compute capability 9.0 or newer, as the communicator decides).
bool tparLaunchOverlap(int dev);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_MEASURE_H_
