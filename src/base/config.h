// A communicator's settings: tparConfig_t fields override environment variables, which override
// built-in defaults. Resolved once at init and immutable afterwards.
#ifndef TPAR_BASE_CONFIG_H_
#define TPAR_BASE_CONFIG_H_

#include <cstdint>
#include <string>

#include "base/env.h"
#include "tpar/tpar.h"

namespace tpar {

struct ResolvedConfig {
  uint64_t max_bytes_per_call = 0;
  int64_t timeout_ms = 0;
  int64_t bootstrap_timeout_ms = 0;
  bool bootstrap_allow_other_users = false;
  tparAlgo_t forced_algo = tparAlgoAuto;
  int transport = 0;  // 0 auto, 1 host memory, 2 GPU memory only (tparConfig_t::transport)
  bool allow_shared_device = false;
  int64_t one_shot_max_bytes = -1;  // -1: built-in by rank count
  int max_blocks = 0;               // 0: derived
  int threads = 0;
  uint32_t epoch_start = 0;
  bool launch_overlap = true;
  std::string tuning_file;  // TPAR_TUNING_FILE; empty: tuningFilePath's default
  std::string topo_file;    // TPAR_TOPO_FILE; empty: the live machine
};

// Validates `user` (may be null) and merges it over `env`. Bad fields fail with
// tparInvalidArgument naming the field.
tparResult_t resolveConfig(const tparConfig_t* user, const Env& env, ResolvedConfig* out);

}  // namespace tpar

#endif  // TPAR_BASE_CONFIG_H_
