// Every environment variable tpar reads, declared once with its type, default and meaning.
//
// The registry below is the single source: Env is parsed from it once per process, docs/env.md
// is generated from it (`tpar env --markdown`), and a unit test keeps the two in step.
#ifndef TPAR_BASE_ENV_H_
#define TPAR_BASE_ENV_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/log.h"
#include "tpar/tpar.h"

namespace tpar {

enum class EnvType { kInt, kBytes, kBool, kChoice, kString };

// The largest timeout (TPAR_TIMEOUT_MS, TPAR_BOOTSTRAP_TIMEOUT_MS, tparConfig_t::timeoutMs):
// 24 hours.
constexpr int64_t kMaxTimeoutMs = 86400000;

struct EnvVarSpec {
  const char* name;
  EnvType type;
  const char* default_value;  // as a user would write it
  const char* choices;        // for kChoice: "a|b|c"; else nullptr
  const char* description;    // one line
};

// The registry, in documentation order.
const std::vector<EnvVarSpec>& envRegistry();

// Parsed values. Defaults come from the registry.
struct Env {
  int64_t timeout_ms = 0;
  int64_t bootstrap_timeout_ms = 0;
  bool bootstrap_allow_other_users = false;
  uint64_t max_bytes_per_call = 0;
  int algo = tparAlgoAuto;            // tparAlgo_t
  int transport = 0;                  // 0 auto, 1 host, 2 p2p (tparConfig_t::transport)
  bool allow_shared_device = false;
  int64_t one_shot_max_bytes = -1;    // -1: built-in table by rank count
  int max_blocks = 0;                 // 0: derived from occupancy
  int threads = 0;
  int log_level = 2;                  // LogLevel: 0 none, 1 version, 2 warn, 3 info, 4 trace
  bool log_level_set = false;         // TPAR_DEBUG was given
  uint32_t log_subsys = kLogAll;      // LogSubsys bits that print at info and trace
  std::string log_file;               // TPAR_DEBUG_FILE, unexpanded; empty: stderr
  uint32_t epoch_start = 0;
  bool launch_overlap = true;
  std::string tuning_file;            // empty: the per-machine file in the cache directory
  std::string topo_file;              // empty: discover the live machine's topology
  std::string nccl_library;           // empty: search for NCCL (comm/nccl_route.h)
  bool shim_disable = false;          // libtpar_nccl.so: pure pass-through
  bool shim_allow_unknown_nccl = false;  // libtpar_nccl.so: run on an NCCL with unknown functions
  uint64_t shim_max_bytes = 0;        // libtpar_nccl.so: largest all-reduce offered to tpar
  std::vector<std::string> set_vars;  // "NAME=value" for every variable that was set
};

using EnvGetter = std::function<const char*(const char*)>;

// Parses every registered variable through `get` (nullptr result = unset). A malformed value
// fails with tparInvalidArgument naming the variable and the value; nothing is half-applied.
tparResult_t parseEnv(const EnvGetter& get, Env* out);

// The process environment, parsed on first use and cached (including a parse failure, which
// every later communicator init reports again).
tparResult_t processEnv(const Env** out);

// Markdown table of the registry (docs/env.md).
std::string envMarkdown();

// Value parsers shared with the CLI; each returns false on malformed input.
bool parseInt(const std::string& text, int64_t* out);
bool parseBytes(const std::string& text, uint64_t* out);  // 4096, 64K, 8M, 1G (binary units)
bool parseBool(const std::string& text, bool* out);       // 0/1/true/false/yes/no/on/off
// TPAR_DEBUG: none|version|warn|info|trace (debug: the old name of trace), any case.
bool parseLogLevel(const std::string& text, LogLevel* out);
// TPAR_DEBUG_SUBSYS: subsystem names (INIT, COLL, BOOTSTRAP, TOPO, TRANSPORT, TUNING, ENV,
// NCCL; any case) separated by commas, or ALL; a leading ^ selects all but those listed.
bool parseLogSubsys(const std::string& text, uint32_t* out);

}  // namespace tpar

#endif  // TPAR_BASE_ENV_H_
