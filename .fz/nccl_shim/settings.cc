#include "settings.h"

#include "api/internal.h"

namespace tpar {
namespace shim {

const ShimSettings& shimSettings() {
  static const ShimSettings settings = [] {
    ShimSettings s;
    const Env* env = nullptr;
    bool parsed = false;
    std::string why;
    {
      const KeepLastError keep;  // the failure goes into the warning, not the caller's last error
      parsed = processEnv(&env) == tparSuccess;
      if (!parsed) why = tparGetLastError(nullptr);
    }
    if (!parsed) {
      s.policy.disabled = true;
      TPAR_WARN("libtpar_nccl.so: every call goes to NCCL unchanged: %s", why.c_str());
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
