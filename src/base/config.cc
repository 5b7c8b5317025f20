#include "base/config.h"

#include <cinttypes>

#include "base/error.h"

namespace tpar {

tparResult_t resolveConfig(const tparConfig_t* user, const Env& env, ResolvedConfig* out) {
  ResolvedConfig cfg;
  cfg.max_bytes_per_call = env.max_bytes_per_call;
  cfg.timeout_ms = env.timeout_ms;
  cfg.bootstrap_timeout_ms = env.bootstrap_timeout_ms;
  cfg.bootstrap_allow_other_users = env.bootstrap_allow_other_users;
  cfg.forced_algo = static_cast<tparAlgo_t>(env.algo);
  cfg.transport = env.transport;
  cfg.allow_shared_device = env.allow_shared_device;
  cfg.one_shot_max_bytes = env.one_shot_max_bytes;
  cfg.max_blocks = env.max_blocks;
  cfg.threads = env.threads;
  cfg.epoch_start = env.epoch_start;
  cfg.launch_overlap = env.launch_overlap;
  cfg.tuning_file = env.tuning_file;
  cfg.topo_file = env.topo_file;

  if (user != nullptr) {
    // The initializer sets size, magic and version; anything else means the struct was not
    // initialized with TPAR_CONFIG_INITIALIZER (or comes from an incompatible header).
    if (user->size != sizeof(tparConfig_t) || user->magic != TPAR_CONFIG_MAGIC) {
      return setError(tparInvalidArgument,
                      "config was not initialized with TPAR_CONFIG_INITIALIZER (size %zu, "
                      "magic 0x%x; expected %zu, 0x%x)",
                      user->size, user->magic, sizeof(tparConfig_t), TPAR_CONFIG_MAGIC);
    }
    if (user->version / 100 != TPAR_VERSION_CODE / 100) {
      return setError(tparInvalidArgument, "config->version %u does not match library %d",
                      user->version, TPAR_VERSION_CODE);
    }
    if (user->maxBytesPerCall != 0) {
      if (user->maxBytesPerCall < (64u << 10) || user->maxBytesPerCall > (1ull << 30)) {
        return setError(tparInvalidArgument,
                        "config->maxBytesPerCall %zu is outside 64 KiB .. 1 GiB",
                        user->maxBytesPerCall);
      }
      cfg.max_bytes_per_call = user->maxBytesPerCall;
    }
    // The same bound as TPAR_TIMEOUT_MS: kernels count the timeout in nanoseconds in 64 bits,
    // and a day is far beyond any wait worth bounding.
    if (user->timeoutMs < 0 || user->timeoutMs > kMaxTimeoutMs) {
      return setError(tparInvalidArgument,
                      "config->timeoutMs %" PRId64 " is outside 1..%" PRId64
                      " (24 hours; 0 takes TPAR_TIMEOUT_MS)",
                      user->timeoutMs, kMaxTimeoutMs);
    }
    if (user->timeoutMs > 0) cfg.timeout_ms = user->timeoutMs;
    if (user->algorithm != TPAR_CONFIG_UNDEF_INT) {
      if (user->algorithm < 0 || user->algorithm >= tparNumAlgos) {
        return setError(tparInvalidArgument, "config->algorithm %d is not a tparAlgo_t",
                        user->algorithm);
      }
      cfg.forced_algo = static_cast<tparAlgo_t>(user->algorithm);
    }
    if (user->allowSharedDevice != TPAR_CONFIG_UNDEF_INT) {
      if (user->allowSharedDevice != 0 && user->allowSharedDevice != 1) {
        return setError(tparInvalidArgument, "config->allowSharedDevice %d is not 0, 1 or -1",
                        user->allowSharedDevice);
      }
      cfg.allow_shared_device = user->allowSharedDevice == 1;
    }
    if (user->transport != TPAR_CONFIG_UNDEF_INT) {
      if (user->transport < 0 || user->transport > 2) {
        return setError(tparInvalidArgument,
                        "config->transport %d is not 0 (auto), 1 (host), 2 (p2p) or -1 (env)",
                        user->transport);
      }
      cfg.transport = user->transport;
    }
  }
  // Keep pieces 16-byte multiples so that chunking preserves vector alignment.
  cfg.max_bytes_per_call &= ~uint64_t{15};
  *out = cfg;
  return tparSuccess;
}

}  // namespace tpar
