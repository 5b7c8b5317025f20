// Shared by the shim's entry points: export marking, the shim's own last-error text, results
// for missing functions, the group depth of the calling thread.
#ifndef TPAR_NCCL_SHIM_SHIM_COMMON_H_
#define TPAR_NCCL_SHIM_SHIM_COMMON_H_

#include <string>
#include <type_traits>

#include "nccl_api_gates.h"
#include "tpar/tpar.h"

#define TPAR_SHIM_EXPORT __attribute__((visibility("default")))

namespace tpar {
namespace shim {

// Records `text` as this thread's last error (what ncclGetLastError returns until a later call
// fails inside the real NCCL) and returns `code`.
ncclResult_t shimFail(ncclResult_t code, const std::string& text);

// A failure reported by the real NCCL: its own text is the last error from now on.
inline void noteRealResult(ncclResult_t rc) {
  extern thread_local bool t_error_is_ours;
  if (rc != ncclSuccess && rc != ncclInProgress) t_error_is_ours = false;
}
template <typename T>
void noteRealResult(const T&) {}

// Our text when the thread's last failure was the shim's own, else null.
const char* shimLastError();

// The result of a row whose function the real NCCL lacks (or no NCCL at all), with the reason
// recorded.
void noteMissing(const char* name);
template <typename R>
R missing(const char* name) {
  noteMissing(name);
  if constexpr (std::is_same_v<R, ncclResult_t>) {
    return ncclInvalidUsage;
  } else if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_integral_v<R>) {
    return R(-1);
  } else {
    return R{};
  }
}

// Calls `call` (a forward to the real NCCL) and notes an error it reports.
template <typename R, typename F>
R forwardResult(F&& call) {
  if constexpr (std::is_void_v<R>) {
    call();
  } else {
    R r = call();
    noteRealResult(r);
    return r;
  }
}

// ncclResult_t for a tparResult_t: codes 1..7 mean the same; tparTimeout (a peer that never
// arrived) is reported as ncclRemoteError.
ncclResult_t ncclResultOf(tparResult_t r);

// Depth of ncclGroupStart minus ncclGroupEnd on this thread (both succeeded).
int& groupDepth();

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_SHIM_COMMON_H_
