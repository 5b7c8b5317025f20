// Fuzz target for the environment registry parser, tpar::parseEnv (src/base/env.h).
//
// The input is read as NAME=VALUE lines, which is what a process environment holds. Whatever a
// user exports, parseEnv must either succeed with every value inside the range the rest of the
// library relies on, or fail with tparInvalidArgument, leave its output untouched and name a
// variable that the input set (the registry's defaults always parse, so a failure can only be
// about a set variable).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/error.h"
#include "fuzz_check.h"

namespace {

using tpar_fuzz::fail;

// A later line for the same name replaces an earlier one, as a second `export` does. Lines
// without '=' are skipped: an environment cannot hold them.
std::map<std::string, std::string> parseLines(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> vars;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

// What getenv would return for a value: a C environment string ends at its first NUL.
std::string upToNul(const std::string& value) { return std::string(value.c_str()); }

// Marks that a failing parseEnv must leave in place: env.h promises nothing is half-applied.
tpar::Env sentinelEnv() {
  tpar::Env env;
  env.timeout_ms = -12345;
  env.threads = -1;
  env.tuning_file = "\x01sentinel";
  return env;
}

// Every member of the settings table (NOTE [settings table]) compared, not only the marks.
bool isSentinel(const tpar::Env& env) {
  const tpar::Env want = sentinelEnv();
#define TPAR_SETTING(name, field, ...) \
  if (!(env.field == want.field)) return false;
#include "base/settings.def"
#undef TPAR_SETTING
  return env.log_level_set == want.log_level_set && env.set_vars.empty();
}

void checkParsed(const tpar::Env& env, const std::map<std::string, std::string>& vars) {
  // resolveConfig copies these into a communicator's settings without checking them again, and
  // the workspace size and kernel launches take the ranges for granted.
  if (env.timeout_ms <= 0 || env.timeout_ms > 86400000)
    fail("timeout_ms %lld outside 1..86400000", static_cast<long long>(env.timeout_ms));
  if (env.bootstrap_timeout_ms <= 0 || env.bootstrap_timeout_ms > 86400000)
    fail("bootstrap_timeout_ms %lld outside 1..86400000",
         static_cast<long long>(env.bootstrap_timeout_ms));
  if (env.threads < 64 || env.threads > 512 || env.threads % 32 != 0)
    fail("threads %d is not a multiple of 32 in 64..512", env.threads);
  if (env.max_bytes_per_call < (64u << 10) || env.max_bytes_per_call > (1ull << 30))
    fail("max_bytes_per_call %llu outside 64K..1G",
         static_cast<unsigned long long>(env.max_bytes_per_call));
  if (env.one_shot_max_bytes != -1 &&
      (env.one_shot_max_bytes < 0 || env.one_shot_max_bytes > (1ll << 30)))
    fail("one_shot_max_bytes %lld is neither -1 nor in 0..1G",
         static_cast<long long>(env.one_shot_max_bytes));
  if (env.algo < 0 || env.algo >= tparNumAlgos) fail("algo %d is not a tparAlgo_t", env.algo);
  if (env.max_blocks < 0 || env.max_blocks > 1024)
    fail("max_blocks %d outside 0..1024", env.max_blocks);
  if (env.log_level < 0 || env.log_level > 4) fail("log_level %d outside 0..4", env.log_level);

  // set_vars lists exactly the registered variables the input set, in registry order, so that
  // the log of the settings in force is complete and has no stray entries.
  std::vector<std::string> expected_set;
  for (const tpar::EnvVarSpec& spec : tpar::envRegistry()) {
    auto it = vars.find(spec.name);
    if (it == vars.end()) continue;
    const std::string value = upToNul(it->second);
    if (!value.empty()) expected_set.push_back(std::string(spec.name) + "=" + value);
  }
  if (env.set_vars != expected_set)
    fail("set_vars has %zu entries; the input set %zu registered variables", env.set_vars.size(),
         expected_set.size());

  // Paths are taken as given: checking them is the reader's job.
  auto stringVar = [&](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : upToNul(it->second);
  };
  if (env.tuning_file != stringVar("TPAR_TUNING_FILE")) fail("tuning_file is not the input's");
  if (env.topo_file != stringVar("TPAR_TOPO_FILE")) fail("topo_file is not the input's");
}

void checkFailure(tparResult_t result, const tpar::Env& env,
                  const std::map<std::string, std::string>& vars) {
  if (result != tparInvalidArgument)
    fail("parseEnv returned %d; expected tparSuccess or tparInvalidArgument",
         static_cast<int>(result));
  if (!isSentinel(env)) fail("parseEnv failed but changed its output");
  const std::string& why = tpar::lastError();
  if (why.empty()) fail("parseEnv failed with an empty last error");
  for (const tpar::EnvVarSpec& spec : tpar::envRegistry()) {
    auto it = vars.find(spec.name);
    if (it == vars.end() || upToNul(it->second).empty()) continue;
    if (why.find(spec.name) != std::string::npos) return;
  }
  fail("error '%s' names no variable that the input set", why.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::map<std::string, std::string> vars = parseLines(data, size);
  const tpar::EnvGetter get = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  tpar::Env env = sentinelEnv();
  tpar::clearError();
  tparResult_t result = tparSuccess;
  // Bad values are reported through the result; an exception, whatever its cause, is a bug.
  try {
    result = tpar::parseEnv(get, &env);
  } catch (const std::exception& e) {
    fail("parseEnv threw %s", e.what());
  }
  if (result == tparSuccess) {
    checkParsed(env, vars);
  } else {
    checkFailure(result, env, vars);
  }
  return 0;
}
