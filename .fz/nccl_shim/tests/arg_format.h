// One call as text, "ncclAllReduce(p:0x1000,p:0x2000,42,9,0,p:0x3000,p:0x4000)": written by the
// stand-in NCCL for each call it receives, and by the forwarding test for the call it made, so
// that equal text means every argument arrived intact.
#ifndef TPAR_NCCL_SHIM_TESTS_ARG_FORMAT_H_
#define TPAR_NCCL_SHIM_TESTS_ARG_FORMAT_H_

#include <cinttypes>
#include <cstdio>
#include <string>
#include <tuple>
#include <type_traits>

#include "api/internal.h"  // fnv1a
#include "nccl_api_gates.h"

namespace tpar_shim_test {

inline std::string argText(const ncclUniqueId& id) {
  // Every byte counts: FNV-1a over all 128.
  const uint64_t h = tpar::fnv1a(id.internal, sizeof(id.internal));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "id:%016" PRIx64, h);
  return buf;
}

#if TPAR_NCCL_HAS_DEVICE_API
inline std::string argText(const ncclTeam_t& t) {
  return "team:" + std::to_string(t.nRanks) + "/" + std::to_string(t.rank) + "/" +
         std::to_string(t.stride);
}
#endif

#if TPAR_NCCL_HAS_DEVICE_API && TPAR_NCCL_DECLARES(ncclGetMultimemDevicePointer)
// Passed by value since NCCL 2.29: its one field, the multicast base address.
inline std::string argText(const ncclMultimemHandle_t& m) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "mm:%p", m.mcBasePtr);
  return buf;
}
#endif

template <typename T>
std::string argText(const T& v) {
  if constexpr (std::is_pointer_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "p:%p", reinterpret_cast<const void*>(v));
    return buf;
  } else if constexpr (std::is_enum_v<T>) {
    return std::to_string(static_cast<long long>(v));
  } else {
    static_assert(std::is_integral_v<T>, "a parameter type of nccl.h without a formatter");
    return std::to_string(v);
  }
}

template <typename... A>
std::string callText(const char* name, const std::tuple<A...>& args) {
  std::string out = std::string(name) + "(";
  std::apply(
      [&](const auto&... a) {
        bool first = true;
        ((out += (first ? "" : ","), out += argText(a), first = false), ...);
      },
      args);
  return out + ")";
}

}  // namespace tpar_shim_test

#endif  // TPAR_NCCL_SHIM_TESTS_ARG_FORMAT_H_
