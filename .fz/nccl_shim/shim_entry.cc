// The shim's own entry points besides communicator creation (shim_init.cc): the all-reduce
// route, groups, errors, the end of a communicator, and the tparShim* queries.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>

#include "api/internal.h"
#include "comm_table.h"
#include "real_nccl.h"
#include "settings.h"
#include "shim_common.h"

namespace tpar {
namespace shim {
namespace {

std::string ncclTypeName(int t) {
  static const char* const kNames[] = {"int8",    "uint8",   "int32",    "uint32",
                                       "int64",   "uint64",  "float16",  "float32",
                                       "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  if (t >= 0 && t < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[t];
  return "datatype " + std::to_string(t);
}

std::string ncclOpName(int op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "avg"};
  if (op >= 0 && op < 5) return kNames[op];
  return "op " + std::to_string(op) + " (ncclRedOpCreatePreMulSum)";
}

// The algorithm tparAllReduce will run for this call: what the C API answers, so that the
// shim and the communicator cannot disagree. tparAlgoAuto when the communicator refuses.
tparAlgo_t algorithmOf(tparComm_t tpar, uint64_t bytes, tparDataType_t dtype) {
  tparAlgo_t algo = tparAlgoAuto;
  if (tparCommSelectAlgorithmForType(tpar, bytes, dtype, &algo) != tparSuccess) return tparAlgoAuto;
  return algo;
}

Route routeOf(const ShimSettings& s, const ShimComm* c, size_t count, int datatype, int op) {
  AllReduceCall call;
  call.nccl_datatype = datatype;
  call.nccl_op = op;
  call.count = count;
  call.in_group = groupDepth() > 0;
  call.has_tpar = c != nullptr && c->tpar != nullptr;
  return decideRoute(s.policy, call, [&](uint64_t bytes, tparDataType_t dtype) {
    return algorithmOf(c->tpar, bytes, dtype) == tparAlgoNccl;
  });
}

// TPAR_DEBUG=info: each decision once per communicator, size, datatype, op and route.
void logDecision(ShimComm* c, ncclComm_t comm, size_t count, int datatype, int op, Route route) {
  const uint64_t key = (static_cast<uint64_t>(count) << 24) ^
                       (static_cast<uint64_t>(datatype & 0xff) << 16) ^
                       (static_cast<uint64_t>(op & 0xff) << 8) ^ static_cast<uint64_t>(route);
  {
    std::lock_guard<std::mutex> lock(c->log_mu);
    if (!c->logged.insert(key).second) return;
  }
  std::string where = "NCCL (" + std::string(routeName(route)) + ")";
  if (route == Route::kTpar) {
    tparDataType_t dtype = tparFloat32;
    tparDataTypeOfNccl(datatype, &dtype);
    where = std::string("tpar:") +
            tparAlgoName(algorithmOf(c->tpar, uint64_t(count) * elementBytes(dtype), dtype));
  }
  TPAR_INFO(kLogNccl, "libtpar_nccl.so: comm %p rank %s: all-reduce of %zu x %s %s -> %s",
            static_cast<void*>(comm), rankText(*c).c_str(), count, ncclTypeName(datatype).c_str(),
            ncclOpName(op).c_str(), where.c_str());
}

void logSummary(const char* what, ncclComm_t comm, const ShimComm& c) {
  uint64_t total = 0;
  std::string nccl;
  for (int r = 0; r < kRouteCount; ++r) {
    const uint64_t n = c.calls[r].load();
    total += n;
    if (r != static_cast<int>(Route::kTpar) && n != 0)
      nccl += std::string(nccl.empty() ? "" : ", ") + routeName(static_cast<Route>(r)) + " " +
              std::to_string(n);
  }
  TPAR_INFO(kLogNccl, "libtpar_nccl.so: comm %p rank %s %s: %" PRIu64 " all-reduces, %" PRIu64
            " through tpar, %" PRIu64 " to NCCL%s%s%s",
            static_cast<void*>(comm), rankText(c).c_str(), what, total,
            c.calls[static_cast<int>(Route::kTpar)].load(),
            total - c.calls[static_cast<int>(Route::kTpar)].load(), nccl.empty() ? "" : " (",
            nccl.c_str(), nccl.empty() ? "" : ")");
}

ncclResult_t runTpar(tparComm_t tpar, const void* send, void* recv, size_t count, int datatype,
                     int op, cudaStream_t stream) {
  tparDataType_t dtype = tparFloat32;
  tparRedOp_t top = tparSum;
  tparDataTypeOfNccl(datatype, &dtype);  // decideRoute checked both
  tparRedOpOfNccl(op, &top);
  const tparResult_t r = tparAllReduce(send, recv, count, dtype, top, tpar, stream);
  if (r == tparSuccess) return ncclSuccess;
  return shimFail(ncclResultOf(r),
                  std::string("libtpar_nccl.so: tpar's all-reduce failed: ") + tparGetLastError(tpar));
}

}  // namespace
}  // namespace shim
}  // namespace tpar

using namespace tpar::shim;

extern "C" {

TPAR_SHIM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream) {
  const ShimSettings& s = shimSettings();
  if (!s.policy.disabled) {
    bool taken = false;
    ncclResult_t rc = ncclSuccess;
    commTable().withComm(comm, [&](ShimComm* c) {
      const Route route = routeOf(s, c, count, datatype, op);
      if (c == nullptr) {
        commTable().countUnknown(route);
        return;
      }
      c->calls[static_cast<int>(route)].fetch_add(1, std::memory_order_relaxed);
      if (s.log_info) logDecision(c, comm, count, datatype, op, route);
      if (route == Route::kTpar) {
        taken = true;
        rc = runTpar(c->tpar, sendbuff, recvbuff, count, datatype, op, stream);
      }
    });
    if (taken) return rc;
  }
  auto real = TPAR_REAL(ncclAllReduce);
  if (real == nullptr) return missing<ncclResult_t>("ncclAllReduce");
  return forwardResult<ncclResult_t>(
      [&] { return real(sendbuff, recvbuff, count, datatype, op, comm, stream); });
}

TPAR_SHIM_EXPORT ncclResult_t ncclGroupStart() {
  auto real = TPAR_REAL(ncclGroupStart);
  if (real == nullptr) return missing<ncclResult_t>("ncclGroupStart");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] { return real(); });
  if (rc == ncclSuccess && !shimSettings().policy.disabled) ++groupDepth();
  return rc;
}

// NCCL leaves the group on every ncclGroupEnd inside one, whatever it returns.
TPAR_SHIM_EXPORT ncclResult_t ncclGroupEnd() {
  auto real = TPAR_REAL(ncclGroupEnd);
  if (real == nullptr) return missing<ncclResult_t>("ncclGroupEnd");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] { return real(); });
  if (groupDepth() > 0) --groupDepth();
  return rc;
}

#if TPAR_NCCL_HAS_SIM_INFO
TPAR_SHIM_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  auto real = TPAR_REAL(ncclGroupSimulateEnd);
  if (real == nullptr) return missing<ncclResult_t>("ncclGroupSimulateEnd");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] { return real(simInfo); });
  if (groupDepth() > 0) --groupDepth();
  return rc;
}
#endif

TPAR_SHIM_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  if (auto real = TPAR_REAL(ncclGetErrorString)) return real(result);
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (libtpar_nccl.so found no NCCL)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

TPAR_SHIM_EXPORT const char* ncclGetLastError(ncclComm_t comm) {
  if (const char* ours = shimLastError()) return ours;
  if (auto real = TPAR_REAL(ncclGetLastError)) return real(comm);
  return realNccl().error.c_str();
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  auto real = TPAR_REAL(ncclCommGetAsyncError);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommGetAsyncError");
  const ncclResult_t rc = forwardResult<ncclResult_t>([&] { return real(comm, asyncError); });
  if (rc != ncclSuccess || asyncError == nullptr || *asyncError != ncclSuccess ||
      shimSettings().policy.disabled) {
    return rc;
  }
  // tpar's kernels record their errors (a timeout, ranks that disagreed) in host memory; they
  // surface here, where NCCL's users look for asynchronous errors.
  commTable().withComm(comm, [&](ShimComm* c) {
    tparResult_t err = tparSuccess;
    if (c == nullptr || c->tpar == nullptr || tparCommGetAsyncError(c->tpar, &err) != tparSuccess ||
        err == tparSuccess) {
      return;
    }
    *asyncError = ncclResultOf(err);
    shimFail(*asyncError, std::string("libtpar_nccl.so: tpar's all-reduce on this communicator "
                                      "failed: ") +
                              tparGetErrorString(err) + ". " + tparGetLastError(c->tpar));
  });
  return rc;
}

TPAR_SHIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!shimSettings().policy.disabled) {
    if (std::unique_ptr<ShimComm> c = commTable().take(comm)) {
      logSummary("destroyed", comm, *c);
      if (c->tpar != nullptr) tparCommDestroy(c->tpar);
    }
  }
  auto real = TPAR_REAL(ncclCommDestroy);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommDestroy");
  return forwardResult<ncclResult_t>([&] { return real(comm); });
}

// tpar's waiters are released first: an aborted NCCL communicator must not leave a tpar kernel
// waiting for a peer that will never come.
TPAR_SHIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!shimSettings().policy.disabled) {
    if (std::unique_ptr<ShimComm> c = commTable().take(comm)) {
      logSummary("aborted", comm, *c);
      if (c->tpar != nullptr) tparCommAbort(c->tpar);
    }
  }
  auto real = TPAR_REAL(ncclCommAbort);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommAbort");
  return forwardResult<ncclResult_t>([&] { return real(comm); });
}

#if TPAR_NCCL_HAS_CONFIG
// After ncclCommFinalize the communicator runs no more collectives: its tpar communicator goes
// now (tparCommDestroy waits for its work, as finalizing does); the entry stays until destroy.
TPAR_SHIM_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (!shimSettings().policy.disabled) {
    if (tparComm_t tpar = commTable().detachTpar(comm, "finalized")) tparCommDestroy(tpar);
  }
  auto real = TPAR_REAL(ncclCommFinalize);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommFinalize");
  return forwardResult<ncclResult_t>([&] { return real(comm); });
}
#endif

// Revoking stops in-flight work: tpar's too.
TPAR_SHIM_EXPORT ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (!shimSettings().policy.disabled) {
    if (tparComm_t tpar = commTable().detachTpar(comm, "revoked")) tparCommAbort(tpar);
  }
  auto real = TPAR_REAL(ncclCommRevoke);
  if (real == nullptr) return missing<ncclResult_t>("ncclCommRevoke");
  return forwardResult<ncclResult_t>([&] { return real(comm, revokeFlags); });
}

TPAR_SHIM_EXPORT int tparShimGetStats(void* comm, tparShimStats_t* out) {
  if (out == nullptr) return -1;
  return commTable().stats(static_cast<ncclComm_t>(comm), out) ? 0 : -1;
}

TPAR_SHIM_EXPORT const char* tparShimRouteName(int route) {
  return routeName(static_cast<Route>(route));
}

TPAR_SHIM_EXPORT int tparShimQueryRoute(void* comm, size_t count, int datatype, int op) {
  const ShimSettings& s = shimSettings();
  if (s.policy.disabled) return static_cast<int>(Route::kDisabled);
  return commTable().withComm(static_cast<ncclComm_t>(comm), [&](ShimComm* c) {
    return static_cast<int>(routeOf(s, c, count, datatype, op));
  });
}

TPAR_SHIM_EXPORT const char* tparShimNcclPath(void) {
  const RealNccl& real = realNccl();
  if (real.handle != nullptr) return real.path.c_str();
  shimFail(ncclInvalidUsage, real.error);
  return nullptr;
}

TPAR_SHIM_EXPORT void* tparShimRealNccl(const char** path) {
  const RealNccl& real = realNccl();
  if (path != nullptr) *path = real.handle != nullptr ? real.path.c_str() : real.error.c_str();
  return real.handle;
}

}  // extern "C"
