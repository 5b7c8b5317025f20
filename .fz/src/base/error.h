// Error reporting inside the library: a thread-local last-error text plus the result code.
#ifndef TPAR_BASE_ERROR_H_
#define TPAR_BASE_ERROR_H_

#include <string>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace tpar {

// Records `text` (printf-style) as this thread's last error and returns `code`, so that a
// failure can be reported in one line: `return setError(tparInvalidArgument, "count ...")`.
tparResult_t setError(tparResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Clears this thread's last error (called at the start of every API entry point).
void clearError();

// This thread's last error text ("" when none).
const std::string& lastError();

// Maps a failed CUDA call to tparUnhandledCudaError with the call's text and CUDA's message.
tparResult_t cudaFailure(cudaError_t err, const char* what, const char* file, int line);

}  // namespace tpar

// Returns from the enclosing function (which returns tparResult_t) when a CUDA call fails.
#define TPAR_CUDA_TRY(call)                                                  \
  do {                                                                       \
    cudaError_t tpar_err_ = (call);                                          \
    if (tpar_err_ != cudaSuccess) {                                          \
      return ::tpar::cudaFailure(tpar_err_, #call, __FILE__, __LINE__);      \
    }                                                                        \
  } while (0)

// Returns from the enclosing function when a tpar call fails (its text is already recorded).
#define TPAR_TRY(call)                          \
  do {                                          \
    tparResult_t tpar_res_ = (call);            \
    if (tpar_res_ != tparSuccess) return tpar_res_; \
  } while (0)

#endif  // TPAR_BASE_ERROR_H_
