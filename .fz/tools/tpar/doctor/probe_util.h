// What the doctor's GPU files (probes.cu, self_test.cu) share: CUDA error handling that records
// the failed call as text, and progress lines on stderr.
#ifndef TPAR_TOOLS_DOCTOR_PROBE_UTIL_H_
#define TPAR_TOOLS_DOCTOR_PROBE_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

// Returns the failed call and CUDA's text from the enclosing function (which returns a string).
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

namespace tpar_cli {

inline void progress(const std::string& what) {
  std::fprintf(stderr, "tpar doctor: %s\n", what.c_str());
  std::fflush(stderr);
}

// The self-test's kernels (self_test.cu), for preloadDoctorKernels.
std::vector<const void*> selfTestKernels();

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_DOCTOR_PROBE_UTIL_H_
