// A stand-in for NCCL in the CPU tests, built as libnccl.so.2: every function of nccl_api.def
// records its call (the arguments as text, arg_format.h) and returns what the test asked for.
// On success a few write their outputs, as NCCL would, so that the shim's own flows go on:
// communicator handles, the group's size, rank and device, the version. Nothing else happens:
// collectives move no data.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "arg_format.h"

namespace {

std::mutex g_mu;
std::vector<std::string> g_log;
ncclResult_t g_result = ncclSuccess;
int g_nranks = 1;
int g_rank = 0;
int g_device = 0;
uintptr_t g_last_comm = 0xc0de0000;

enum Id {
#define TPAR_NCCL_FORWARD(ret, name, params, args) kId_##name,
#define TPAR_NCCL_OWN(ret, name, params, args) kId_##name,
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
};

ncclComm_t newComm() {
  g_last_comm += 0x100;
  return reinterpret_cast<ncclComm_t>(g_last_comm);
}

// What a successful call writes besides its result; nothing unless specialized.
template <int kId>
struct Effect {
  template <typename... A>
  static void run(A...) {}
};
template <>
struct Effect<kId_ncclGetVersion> {
  static void run(int* v) { *v = NCCL_VERSION_CODE; }
};
template <>
struct Effect<kId_ncclGetUniqueId> {
  static void run(ncclUniqueId* id) { std::memset(id, 0x5a, sizeof(*id)); }
};
template <>
struct Effect<kId_ncclCommInitRank> {
  static void run(ncclComm_t* c, int, ncclUniqueId, int) {
    if (c != nullptr) *c = newComm();
  }
};
template <>
struct Effect<kId_ncclCommInitAll> {
  static void run(ncclComm_t* c, int n, const int*) {
    for (int i = 0; c != nullptr && i < n; ++i) c[i] = newComm();
  }
};
#if TPAR_NCCL_HAS_CONFIG
template <>
struct Effect<kId_ncclCommInitRankConfig> {
  static void run(ncclComm_t* c, int, ncclUniqueId, int, ncclConfig_t*) { *c = newComm(); }
};
template <>
struct Effect<kId_ncclCommInitRankScalable> {
  static void run(ncclComm_t* c, int, int, int, ncclUniqueId*, ncclConfig_t*) { *c = newComm(); }
};
template <>
struct Effect<kId_ncclCommSplit> {
  static void run(ncclComm_t, int color, int, ncclComm_t* c, ncclConfig_t*) {
    *c = color == NCCL_SPLIT_NOCOLOR ? nullptr : newComm();
  }
};
template <>
struct Effect<kId_ncclCommShrink> {
  static void run(ncclComm_t, int*, int, ncclComm_t* c, ncclConfig_t*, int) { *c = newComm(); }
};
#endif
template <>
struct Effect<kId_ncclCommCount> {
  static void run(ncclComm_t, int* n) { *n = g_nranks; }
};
template <>
struct Effect<kId_ncclCommUserRank> {
  static void run(ncclComm_t, int* r) { *r = g_rank; }
};
template <>
struct Effect<kId_ncclCommCuDevice> {
  static void run(ncclComm_t, int* d) { *d = g_device; }
};
template <>
struct Effect<kId_ncclCommGetAsyncError> {
  static void run(ncclComm_t, ncclResult_t* e) { *e = ncclSuccess; }
};

// The result of every call: the configured code, the function's own name for text, 4242 for
// numbers, a fixed team.
template <typename R>
R standinResult(const char* name) {
  if constexpr (std::is_same_v<R, ncclResult_t>) {
    return g_result;
  } else if constexpr (std::is_void_v<R>) {
    return;
  } else if constexpr (std::is_same_v<R, const char*>) {
    return name;
  } else if constexpr (std::is_integral_v<R>) {
    return R(4242);
  } else {
    return R{7, 8, 9};  // ncclTeam_t
  }
}

template <typename... A>
void record(const char* name, const std::tuple<A...>& args) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_log.push_back(tpar_shim_test::callText(name, args));
}

}  // namespace

#define TPAR_STANDIN_EXPORT extern "C" __attribute__((visibility("default")))

// nccl.h marks ncclResetDebugInit deprecated; defining it is what a stand-in must do.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define TPAR_NCCL_FORWARD(ret, name, params, args)                  \
  TPAR_STANDIN_EXPORT ret name params {                             \
    record(#name, std::make_tuple args);                            \
    if (g_result == ncclSuccess) Effect<kId_##name>::run args;      \
    return standinResult<ret>(#name);                               \
  }
#define TPAR_NCCL_OWN TPAR_NCCL_FORWARD
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN

// What the tests read and set.
TPAR_STANDIN_EXPORT void standinClearLog() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_log.clear();
}

TPAR_STANDIN_EXPORT void standinSetResult(int result) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_result = static_cast<ncclResult_t>(result);
}

TPAR_STANDIN_EXPORT void standinSetGroup(int nranks, int rank, int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_nranks = nranks;
  g_rank = rank;
  g_device = device;
}

TPAR_STANDIN_EXPORT int standinLogSize() {
  std::lock_guard<std::mutex> lock(g_mu);
  return static_cast<int>(g_log.size());
}

// Line i of the log, copied into a buffer of the caller ("" past the end).
TPAR_STANDIN_EXPORT void standinLogLine(int i, char* out, int len) {
  std::lock_guard<std::mutex> lock(g_mu);
  const std::string line = i >= 0 && i < static_cast<int>(g_log.size()) ? g_log[i] : "";
  std::snprintf(out, len, "%s", line.c_str());
}

#if TPAR_STANDIN_NEWER
// The stand-in of an NCCL newer than the shim (NOTE [unknown NCCL functions]): one API function
// no row of nccl_api.def has, with its profiling alias as NCCL exports them, and one internal
// function without an alias, which is not API.
TPAR_STANDIN_EXPORT ncclResult_t ncclStandinFutureCall(int) { return ncclSuccess; }
TPAR_STANDIN_EXPORT ncclResult_t pncclStandinFutureCall(int v) { return ncclStandinFutureCall(v); }
TPAR_STANDIN_EXPORT void ncclStandinInternalOnly() {}
#endif
