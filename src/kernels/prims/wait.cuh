// Bounded waits (principle 7): every spin of every kernel goes through Waiter.
#ifndef TPAR_KERNELS_PRIMS_WAIT_CUH_
#define TPAR_KERNELS_PRIMS_WAIT_CUH_

#include "kernels/launch.h"
#include "kernels/prims/ptx.cuh"

namespace tpar {
namespace kernels {

// Records the first error of this rank: device word for later kernels, host mirror for
// tparCommGetAsyncError.
__device__ __forceinline__ void recordError(const AllReduceArgs& a, uint32_t code) {
  if (atomicCAS(&a.state->error, 0u, code) == 0u) {
    *reinterpret_cast<volatile uint32_t*>(&a.host_state->error) = code;
    __threadfence_system();
  }
}

// Bounds every spin. Polls cost a few hundred cycles; the clock, the abort word in host memory
// and the error word are read only every kCheckEvery unsuccessful polls.
class Waiter {
 public:
  __device__ explicit Waiter(const AllReduceArgs& a) : a_(a) {}

  // Returns false when the caller must give up (error already recorded).
  __device__ __forceinline__ bool keepWaiting() {
    if ((++spins_ & (kCheckEvery - 1)) != 0) return true;
    if (*reinterpret_cast<volatile uint32_t*>(&a_.state->error) != 0) return false;
    if (*reinterpret_cast<volatile uint32_t*>(&a_.host_state->abort) != 0) {
      recordError(a_, tparRemoteError);
      return false;
    }
    // The clock starts at the first check: a wait that ends within kCheckEvery polls (nearly
    // all of them) never reads it.
    const uint64_t now = globalTimerNs();
    if (start_ == 0) start_ = now;
    if (now - start_ > a_.timeout_ns) {
      recordError(a_, tparTimeout);
      return false;
    }
    if (spins_ > 4 * kCheckEvery) __nanosleep(64);
    return true;
  }

 private:
  static constexpr uint32_t kCheckEvery = 256;
  const AllReduceArgs& a_;
  uint64_t start_ = 0;
  uint32_t spins_ = 0;
};

}  // namespace kernels
}  // namespace tpar

#endif  // TPAR_KERNELS_PRIMS_WAIT_CUH_
