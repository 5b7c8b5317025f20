#include "settings.h"

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

namespace tpar {
namespace shim {

const ShimSettings& shimSettings() {
  static const ShimSettings settings = [] {
    ShimSettings s;
    const Env* env = nullptr;
    if (processEnv(&env) != tparSuccess) {
      s.policy.disabled = true;
      TPAR_WARN("libtpar_nccl.so: every call goes to NCCL unchanged: %s", lastError().c_str());
      clearError();
      return s;
    }
    s.policy.disabled = env->shim_disable;
    s.policy.max_bytes = env->shim_max_bytes;
    s.log_info = logEnabled(LogLevel::kInfo, kLogNccl);
    s.setup_timeout_ms = env->bootstrap_timeout_ms;
    s.nccl_library = env->nccl_library;
    s.allow_unknown_nccl = env->shim_allow_unknown_nccl;
    return s;
  }();
  return settings;
}

}  // namespace shim
}  // namespace tpar
