#include "base/env.h"

#include <cerrno>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <utility>

#include "base/algorithm_list.h"
#include "base/error.h"

namespace tpar {

const std::vector<EnvVarSpec>& envRegistry() {
  static const std::vector<EnvVarSpec> kRegistry = {
      {"TPAR_TIMEOUT_MS", EnvType::kInt, "30000", nullptr,
       "Bound on every wait inside a collective; a wait past it records tparTimeout."},
      {"TPAR_BOOTSTRAP_TIMEOUT_MS", EnvType::kInt, "120000", nullptr,
       "Bound on the rendezvous of tparCommInitRank (all ranks must arrive within it)."},
      {"TPAR_BOOTSTRAP_ALLOW_OTHER_USERS", EnvType::kBool, "0", nullptr,
       "Let processes of other users that hold the uniqueId join a rendezvous (0: only the "
       "user that called tparGetUniqueId; see docs/RELIABILITY.md, trust boundaries)."},
      {"TPAR_MAX_BYTES_PER_CALL", EnvType::kBytes, "8M", nullptr,
       "Largest message one kernel launch handles; larger calls are split. Workspace is 4x this."},
      {"TPAR_ALGO", EnvType::kChoice, "auto", publicAlgoChoices(),
       "Force an all-reduce algorithm for every call (hier without equal islands: twoshot)."},
      {"TPAR_TRANSPORT", EnvType::kChoice, "auto", "auto|host|p2p",
       "Where receive regions live: auto (GPU memory; pinned host memory when a pair of GPUs "
       "lacks peer-to-peer), host (always pinned host memory), p2p (always GPU memory)."},
      {"TPAR_ALLOW_SHARED_DEVICE", EnvType::kBool, "0", nullptr,
       "Allow several ranks of one process on one GPU (virtual ranks, for tests)."},
      {"TPAR_ONESHOT_MAX_BYTES", EnvType::kBytes, "auto", nullptr,
       "Largest message for which auto selection picks one-shot (auto: built-in per rank count)."},
      {"TPAR_MAX_BLOCKS", EnvType::kInt, "0", nullptr,
       "Largest grid per call and rank (0: 32, and less when ranks share a GPU)."},
      {"TPAR_THREADS", EnvType::kInt, "512", nullptr,
       "Threads per block of the all-reduce kernels (a multiple of 32, 64..512)."},
      {"TPAR_DEBUG", EnvType::kChoice, "warn", "none|version|warn|info|trace",
       "Log level (any case; debug is read as trace): version prints the version once, info "
       "init, transport and algorithm choices, trace every call (docs/LOGGING.md)."},
      {"TPAR_DEBUG_SUBSYS", EnvType::kString, "ALL", nullptr,
       "Subsystems that log at info and trace: INIT, COLL, BOOTSTRAP, TOPO, TRANSPORT, TUNING, "
       "ENV, NCCL, comma-separated, or ALL; ^ first excludes those listed."},
      {"TPAR_DEBUG_FILE", EnvType::kString, "", nullptr,
       "File for log messages instead of stderr; %h becomes the host name, %p the process id."},
      {"TPAR_LAUNCH_OVERLAP", EnvType::kBool, "1", nullptr,
       "Let a call's launch overlap the end of the previous kernel (GPUs of sm_90 and newer)."},
      {"TPAR_EPOCH_START", EnvType::kInt, "0", nullptr,
       "First call epoch (testing: start near 2^32 to cross the counter wrap)."},
      {"TPAR_TUNING_FILE", EnvType::kString, "", nullptr,
       "Tuning table to use (written by `tpar tune`); empty: the per-machine file in the cache "
       "directory."},
      {"TPAR_TOPO_FILE", EnvType::kString, "", nullptr,
       "hwloc XML file to use instead of the live machine's topology, for tests and for "
       "machines that hide it."},
      {"TPAR_NCCL_LIBRARY", EnvType::kString, "", nullptr,
       "NCCL library (path or file name) to load for tparCommSetNcclComm, the tpar command and "
       "the calls libtpar_nccl.so forwards; empty: the copy already loaded in the process, if "
       "any, then known install locations (docs/nccl_shim.md)."},
      {"TPAR_SHIM_DISABLE", EnvType::kBool, "0", nullptr,
       "libtpar_nccl.so: forward every call to the real NCCL unchanged (no tpar communicator, no "
       "setup collectives); set it alike on every rank."},
      {"TPAR_SHIM_ALLOW_UNKNOWN_NCCL", EnvType::kBool, "0", nullptr,
       "libtpar_nccl.so: keep running (with a warning) when the real NCCL exports functions the "
       "shim does not know; by default the process stops at load, naming them, because a "
       "program looking them up in the shim would find them missing (docs/nccl_shim.md)."},
      {"TPAR_SHIM_MAX_BYTES", EnvType::kBytes, "8M", nullptr,
       "libtpar_nccl.so: largest all-reduce (bytes) it offers to tpar; larger ones go to NCCL. "
       "0: none (every all-reduce to NCCL, communicators still set up)."},
      {"TPAR_ENGINE_PLUGIN", EnvType::kBool, "0", nullptr,
       "Read by the Python package's vLLM and SGLang plugins: 1 makes tpar the engine's custom "
       "all-reduce (docs/integration.md); the library itself ignores it."},
      {"TPAR_ENGINE_NVLINK", EnvType::kBool, "0", nullptr,
       "Read by the Python engine plugins: 1 gives tpar also groups whose GPUs are all joined by "
       "NVLink (by default those keep the engine's own custom all-reduce)."},
      {"TPAR_ENGINE_MAX_BYTES", EnvType::kBytes, "8M", nullptr,
       "Read by the Python engine plugins: largest message the engine hands to tpar (larger "
       "ones stay on NCCL)."},
  };
  return kRegistry;
}

bool parseInt(const std::string& text, int64_t* out) {
  // Decimal only: base 0 would read "010" as 8 (octal); no leading blanks or '+' either.
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-'))
    return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

bool parseBytes(const std::string& text, uint64_t* out) {
  if (text.empty() || text[0] == '-' || !std::isdigit(static_cast<unsigned char>(text[0])))
    return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str()) return false;
  std::string suffix(end);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "B") {
    mult = 1;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    mult = 1ull << 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    mult = 1ull << 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    mult = 1ull << 30;
  } else {
    return false;
  }
  if (v > std::numeric_limits<uint64_t>::max() / mult) return false;
  *out = v * mult;
  return true;
}

bool parseBool(const std::string& text, bool* out) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "1" || t == "true" || t == "yes" || t == "on") {
    *out = true;
    return true;
  }
  if (t == "0" || t == "false" || t == "no" || t == "off") {
    *out = false;
    return true;
  }
  return false;
}

bool parseLogLevel(const std::string& text, LogLevel* out) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::pair<const char*, LogLevel> kLevels[] = {
      {"none", LogLevel::kNone},   {"version", LogLevel::kVersion}, {"warn", LogLevel::kWarn},
      {"info", LogLevel::kInfo},   {"trace", LogLevel::kTrace},     {"debug", LogLevel::kTrace},
  };
  for (const auto& [name, level] : kLevels) {
    if (t == name) {
      *out = level;
      return true;
    }
  }
  return false;
}

bool parseLogSubsys(const std::string& text, uint32_t* out) {
  static const std::pair<const char*, uint32_t> kNames[] = {
      {"INIT", kLogInit},   {"COLL", kLogColl},     {"BOOTSTRAP", kLogBootstrap},
      {"TOPO", kLogTopo},   {"TRANSPORT", kLogTransport}, {"TUNING", kLogTuning},
      {"ENV", kLogEnv},     {"NCCL", kLogNccl},     {"ALL", kLogAll},
  };
  const bool invert = !text.empty() && text[0] == '^';
  std::stringstream ss(invert ? text.substr(1) : text);
  std::string item;
  uint32_t mask = 0;
  bool any = false;
  while (std::getline(ss, item, ',')) {
    for (auto& c : item) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    bool known = false;
    for (const auto& [name, bit] : kNames) {
      if (item == name) {
        mask |= bit;
        known = true;
      }
    }
    if (!known) return false;
    any = true;
  }
  if (!any) return false;
  *out = invert ? ~mask : mask;
  return true;
}

namespace {

std::string lowerCase(const std::string& value) {
  std::string lower;
  for (char c : value) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

int choiceIndex(const char* choices, const std::string& value) {
  const std::string lower = lowerCase(value);
  std::stringstream ss(choices);
  std::string item;
  for (int i = 0; std::getline(ss, item, '|'); ++i) {
    if (item == lower) return i;
  }
  return -1;
}

tparResult_t badValue(const EnvVarSpec& spec, const std::string& value, const char* expected) {
  return setError(tparInvalidArgument, "environment variable %s='%s' is not %s", spec.name,
                  value.c_str(), expected);
}

}  // namespace

tparResult_t parseEnv(const EnvGetter& get, Env* out) {
  Env env;
  for (const EnvVarSpec& spec : envRegistry()) {
    const char* raw = get(spec.name);
    const bool is_set = raw != nullptr && raw[0] != '\0';
    const std::string value = is_set ? raw : spec.default_value;
    if (is_set) env.set_vars.push_back(std::string(spec.name) + "=" + value);
    const std::string name = spec.name;
    int64_t i = 0;
    uint64_t b = 0;
    bool flag = false;
    if (name == "TPAR_TIMEOUT_MS" || name == "TPAR_BOOTSTRAP_TIMEOUT_MS") {
      if (!parseInt(value, &i) || i <= 0 || i > kMaxTimeoutMs)
        return badValue(spec, value, "a whole number of milliseconds in 1..86400000");
      (name == "TPAR_TIMEOUT_MS" ? env.timeout_ms : env.bootstrap_timeout_ms) = i;
    } else if (name == "TPAR_MAX_BYTES_PER_CALL") {
      if (!parseBytes(value, &b) || b < (64u << 10) || b > (1ull << 30))
        return badValue(spec, value, "a size between 64K and 1G");
      env.max_bytes_per_call = b;
    } else if (name == "TPAR_ALGO") {
      tparAlgo_t algo;  // a name of NOTE [algorithm descriptor], or an older alias of one
      if (!publicAlgoFromName(lowerCase(value).c_str(), &algo))
        return badValue(spec, value, (std::string("one of ") + spec.choices).c_str());
      env.algo = algo;
    } else if (name == "TPAR_TRANSPORT") {
      int idx = choiceIndex(spec.choices, value);
      if (idx < 0) return badValue(spec, value, (std::string("one of ") + spec.choices).c_str());
      env.transport = idx;  // the order of choices matches tparConfig_t::transport
    } else if (name == "TPAR_BOOTSTRAP_ALLOW_OTHER_USERS") {
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
      env.bootstrap_allow_other_users = flag;
    } else if (name == "TPAR_ALLOW_SHARED_DEVICE") {
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
      env.allow_shared_device = flag;
    } else if (name == "TPAR_ONESHOT_MAX_BYTES") {
      if (value == "auto") {
        env.one_shot_max_bytes = -1;
      } else {
        if (!parseBytes(value, &b) || b > (1ull << 30))
          return badValue(spec, value, "'auto' or a size up to 1G");
        env.one_shot_max_bytes = static_cast<int64_t>(b);
      }
    } else if (name == "TPAR_MAX_BLOCKS") {
      if (!parseInt(value, &i) || i < 0 || i > 1024)
        return badValue(spec, value, "a block count in 0..1024");
      env.max_blocks = static_cast<int>(i);
    } else if (name == "TPAR_THREADS") {
      if (!parseInt(value, &i) || i < 64 || i > 512 || i % 32 != 0)
        return badValue(spec, value, "a multiple of 32 in 64..512");
      env.threads = static_cast<int>(i);
    } else if (name == "TPAR_DEBUG") {
      LogLevel level = LogLevel::kWarn;
      if (!parseLogLevel(value, &level))
        return badValue(spec, value, "one of none|version|warn|info|trace (any case)");
      env.log_level = static_cast<int>(level);
      env.log_level_set = is_set;
    } else if (name == "TPAR_DEBUG_SUBSYS") {
      if (!parseLogSubsys(value, &env.log_subsys))
        return badValue(spec, value,
                        "a list of INIT, COLL, BOOTSTRAP, TOPO, TRANSPORT, TUNING, ENV, NCCL or "
                        "ALL (^ first: all but those)");
    } else if (name == "TPAR_DEBUG_FILE") {
      env.log_file = value;  // opened (and checked) when the first message is written
    } else if (name == "TPAR_LAUNCH_OVERLAP") {
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
      env.launch_overlap = flag;
    } else if (name == "TPAR_EPOCH_START") {
      if (!parseInt(value, &i) || i < 0 || i > 0xFFFFFFFFll)
        return badValue(spec, value, "a 32-bit unsigned number");
      env.epoch_start = static_cast<uint32_t>(i);
    } else if (name == "TPAR_TUNING_FILE") {
      env.tuning_file = value;  // any path; whether it exists is checked where it is read
    } else if (name == "TPAR_TOPO_FILE") {
      env.topo_file = value;
    } else if (name == "TPAR_NCCL_LIBRARY") {
      env.nccl_library = value;  // loaded (and checked) only when NCCL is needed
    } else if (name == "TPAR_SHIM_DISABLE") {
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
      env.shim_disable = flag;
    } else if (name == "TPAR_SHIM_ALLOW_UNKNOWN_NCCL") {
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
      env.shim_allow_unknown_nccl = flag;
    } else if (name == "TPAR_SHIM_MAX_BYTES") {
      if (!parseBytes(value, &b) || b > (1ull << 40))
        return badValue(spec, value, "a size up to 1024G");
      env.shim_max_bytes = b;
    } else if (name == "TPAR_ENGINE_PLUGIN") {
      // Used by python/tpar/integrations; checked here so that a typo fails loudly.
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
    } else if (name == "TPAR_ENGINE_NVLINK") {
      // Used by python/tpar/integrations; checked here so that a typo fails loudly.
      if (!parseBool(value, &flag)) return badValue(spec, value, "a boolean (0/1)");
    } else if (name == "TPAR_ENGINE_MAX_BYTES") {
      if (!parseBytes(value, &b) || b == 0 || b > (1ull << 30))
        return badValue(spec, value, "a size between 1 and 1G");
    } else {
      return setError(tparInternalError, "environment variable %s has no parser", spec.name);
    }
  }
  *out = std::move(env);
  return tparSuccess;
}

tparResult_t processEnv(const Env** out) {
  static std::once_flag once;
  static Env env;
  static tparResult_t result = tparSuccess;
  static std::string error_text;
  std::call_once(once, [] {
    result = parseEnv([](const char* n) { return std::getenv(n); }, &env);
    if (result != tparSuccess) error_text = lastError();
  });
  if (result != tparSuccess) return setError(result, "%s", error_text.c_str());
  *out = &env;
  return tparSuccess;
}

std::string envMarkdown() {
  std::ostringstream md;
  md << "# Environment variables\n\n"
     << "Generated from the registry in `src/base/env.cc` by `tpar env --markdown`; a unit test\n"
     << "checks that this file matches it. Every variable is read once per process; a malformed\n"
     << "value makes communicator creation fail with `tparInvalidArgument` naming it.\n"
     << "Fields of `tparConfig_t` that are set take precedence over the variables.\n\n"
     << "| variable | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const EnvVarSpec& spec : envRegistry()) {
    const char* type = "";
    std::string choices;
    switch (spec.type) {
      case EnvType::kInt: type = "integer"; break;
      case EnvType::kBytes: type = "size (K/M/G)"; break;
      case EnvType::kBool: type = "boolean"; break;
      case EnvType::kChoice: choices = spec.choices; break;
      case EnvType::kString: type = "string"; break;
    }
    if (!choices.empty()) {
      // '|' would split the markdown cell.
      for (auto& c : choices) if (c == '|') c = '/';
      type = choices.c_str();
    }
    // An empty default would render as two stray backticks.
    const std::string def =
        spec.default_value[0] != '\0' ? std::string("`") + spec.default_value + "`" : "(empty)";
    md << "| `" << spec.name << "` | " << type << " | " << def << " | " << spec.description
       << " |\n";
  }
  return md.str();
}

}  // namespace tpar
