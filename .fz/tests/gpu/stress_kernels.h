// Kernels of the host-transport stress test (host_transport_test.cc): inputs made on the GPU
// from a per-call seed, and a check of every output element against a reference each rank
// recomputes itself. See NOTE [stress inputs] in stress_kernels.cu.
#ifndef TPAR_TESTS_GPU_STRESS_KERNELS_H_
#define TPAR_TESTS_GPU_STRESS_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace tpar_test {

// Bytes after every output that no all-reduce may write.
constexpr int kStressGuardBytes = 16;

struct StressCounters {
  unsigned long long wrong;      // output elements that differ from the reference
  unsigned long long guard;      // guard bytes written past the end of an output
  unsigned long long first_bad;  // lowest call index with a wrong element or guard byte
};

// Per-rank StressCounters in device memory, starting with nothing wrong.
class StressCounterSet {
 public:
  StressCounterSet() = default;
  StressCounterSet(const StressCounterSet&) = delete;
  StressCounterSet& operator=(const StressCounterSet&) = delete;
  ~StressCounterSet();
  cudaError_t init(int nranks);
  StressCounters* rank(int r) const { return dev_ + r; }
  // "" when no rank counted a wrong element or guard byte; else, for the first such rank, how
  // many and the first bad call (`describe` gives its text from its index). Waits for the GPU.
  std::string failure(const std::function<std::string(unsigned long long)>& describe) const;

 private:
  StressCounters* dev_ = nullptr;
  int nranks_ = 0;
};

// Loads both kernels now. NOTE [preload] (docs/DESIGN.md principle 8): they are launched
// behind spinning all-reduces of other virtual ranks.
cudaError_t preloadStressKernels();

// Writes rank `rank`'s inputs of call `seed` (`count` elements) into `send`, poisons `recv`
// (unless in place) and the guard bytes after recv's `count` elements.
cudaError_t launchStressFill(void* send, void* recv, size_t count, tparDataType_t dtype,
                             uint64_t seed, int rank, bool in_place, cudaStream_t stream);

// Compares `recv` with the all-reduce of every rank's inputs of call `seed` (op over ranks
// 0..nranks-1 in rank order in fp32, rounded once) and checks the guard; counts into *c and
// records `call` as first_bad when anything differs.
cudaError_t launchStressCheck(const void* recv, size_t count, tparDataType_t dtype,
                              tparRedOp_t op, uint64_t seed, int nranks, unsigned long long call,
                              StressCounters* c, cudaStream_t stream);

}  // namespace tpar_test

#endif  // TPAR_TESTS_GPU_STRESS_KERNELS_H_
