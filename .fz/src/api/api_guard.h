// The guard of every extern "C" entry point: no exception crosses the C API; each becomes the
// result and last-error text a caller can read.
#ifndef TPAR_API_API_GUARD_H_
#define TPAR_API_API_GUARD_H_

#include <exception>
#include <new>

#include "base/error.h"
#include "tpar/tpar.h"

namespace tpar {

template <typename F>
tparResult_t guarded(F&& body) {
  clearError();
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return setError(tparSystemError, "out of host memory");
  } catch (const std::exception& e) {
    return setError(tparInternalError, "unexpected exception: %s", e.what());
  } catch (...) {
    return setError(tparInternalError, "unexpected exception");
  }
}

}  // namespace tpar

#endif  // TPAR_API_API_GUARD_H_
