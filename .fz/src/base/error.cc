#include "base/error.h"

#include <cstdarg>
#include <cstdio>

namespace tpar {
namespace {
thread_local std::string t_last_error;
}  // namespace

tparResult_t setError(tparResult_t code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  t_last_error = buf;
  return code;
}

void clearError() { t_last_error.clear(); }

const std::string& lastError() { return t_last_error; }

tparResult_t cudaFailure(cudaError_t err, const char* what, const char* file, int line) {
  // Leave no sticky "last error" in the runtime for the caller to trip over later.
  (void)cudaGetLastError();
  // Without a driver at all the runtime reports an "insufficient" one.
  int driver = 0;
  const bool no_driver = err == cudaErrorInsufficientDriver &&
                         cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0;
  return setError(tparUnhandledCudaError, "%s failed: %s (%s) at %s:%d", what,
                  cudaGetErrorName(err),
                  no_driver ? "no NVIDIA driver found" : cudaGetErrorString(err), file, line);
}

}  // namespace tpar
