// The rows of nccl_api.def that the shim passes on unchanged, the profiling aliases (p<name>)
// of every row, and the shim's error state.
#include <cstdio>

#include "real_nccl.h"
#include "shim_common.h"

namespace tpar {
namespace shim {

thread_local bool t_error_is_ours = false;
namespace {
thread_local std::string t_error;
}  // namespace

ncclResult_t shimFail(ncclResult_t code, const std::string& text) {
  t_error = text;
  t_error_is_ours = true;
  return code;
}

const char* shimLastError() { return t_error_is_ours ? t_error.c_str() : nullptr; }

void noteMissing(const char* name) {
  const RealNccl& real = realNccl();
  if (real.handle == nullptr) {
    shimFail(ncclInvalidUsage, real.error);
  } else {
    shimFail(ncclInvalidUsage, std::string(name) + " is not in the NCCL libtpar_nccl.so forwards to (" +
                                   real.path + "); it was built against a newer nccl.h");
  }
}

ncclResult_t ncclResultOf(tparResult_t r) {
  if (r == tparSuccess) return ncclSuccess;
  if (r >= tparUnhandledCudaError && r <= tparInProgress) return static_cast<ncclResult_t>(r);
  if (r == tparTimeout) return ncclRemoteError;
  return ncclInternalError;
}

int& groupDepth() {
  thread_local int depth = 0;
  return depth;
}

}  // namespace shim
}  // namespace tpar

// A forwarded row: the real function with the caller's arguments, untouched.
// nccl.h marks ncclResetDebugInit deprecated; its alias still has to call it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define TPAR_NCCL_FORWARD(ret, name, params, args)                                          \
  extern "C" TPAR_SHIM_EXPORT ret name params {                                             \
    using Fn = ret(*) params;                                                               \
    auto fn = reinterpret_cast<Fn>(::tpar::shim::realFunction(::tpar::shim::Api::k_##name)); \
    if (fn == nullptr) return ::tpar::shim::missing<ret>(#name);                            \
    return ::tpar::shim::forwardResult<ret>([&] { return fn args; });                      \
  }                                                                                         \
  extern "C" TPAR_SHIM_EXPORT ret p##name params { return name args; }
// An own row is defined in shim_entry.cc or shim_init.cc; here only its alias. The library is
// linked with -Bsymbolic, so the alias reaches the shim's function even where another NCCL
// exports the same name.
#define TPAR_NCCL_OWN(ret, name, params, args) \
  extern "C" TPAR_SHIM_EXPORT ret p##name params { return name args; }
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
