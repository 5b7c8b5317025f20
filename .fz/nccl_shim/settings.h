// The shim's settings, read once per process from tpar's environment registry (src/base/settings.def).
#ifndef TPAR_NCCL_SHIM_SETTINGS_H_
#define TPAR_NCCL_SHIM_SETTINGS_H_

#include <cstdint>
#include <string>

#include "route.h"

namespace tpar {
namespace shim {

struct ShimSettings {
  RoutePolicy policy;          // TPAR_SHIM_DISABLE, TPAR_SHIM_MAX_BYTES
  bool log_info = false;       // TPAR_DEBUG=info or trace, NCCL among TPAR_DEBUG_SUBSYS
  int64_t setup_timeout_ms = 120000;  // TPAR_BOOTSTRAP_TIMEOUT_MS: bound of each setup collective
  std::string nccl_library;    // TPAR_NCCL_LIBRARY
  bool allow_unknown_nccl = false;  // TPAR_SHIM_ALLOW_UNKNOWN_NCCL
};

// A malformed variable makes the shim pass every call through (policy.disabled), with one
// warning naming the variable: NCCL keeps working, tpar is not used.
const ShimSettings& shimSettings();

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_SETTINGS_H_
