// Every environment variable tpar reads, declared once with its type, default and meaning.
//
// NOTE [settings table]
// A setting is one line of settings.def, and everything that handles it follows from that line:
//   - its EnvVarSpec in envRegistry() (name, type, default, choices, description), from which
//     docs/env.md (`tpar env --markdown`, kept in step by a unit test) and `tpar env` follow;
//   - its Env member, and how parseEnv reads it: the reader with its bounds, and what the error
//     (which names the variable and the value) says a value must be;
//   - its scope: whether resolveConfig copies it into a communicator's ResolvedConfig, and
//     whether it shapes a call on the device, which makes it a slot of CallShape that every
//     rank must match (NOTE [agreement]; the message names the variable);
//   - the tparConfig_t field that overrides it, with its bounds and error.
// Before this table a setting was written out five times (registry text, a parser branch, Env,
// ResolvedConfig and its copy, CallShape and its comparison), and a copy that was missed failed
// quietly: a shape setting left out of CallShape lets ranks that differ in it hang. Now adding
// a setting is one line, and the unit tests go over every line (its default parses, a
// malformed value fails naming it, a Shape setting that differs on one rank fails init).
#ifndef TPAR_BASE_ENV_H_
#define TPAR_BASE_ENV_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
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

// The registry, in documentation order (the order of settings.def).
const std::vector<EnvVarSpec>& envRegistry();

// The readers of settings.def: each turns a variable's text into a Value (read: false when the
// text is malformed or out of bounds) and prints a value the way the agreement's messages show
// it (show; only Shape settings are printed, as the int64_t that CallShape carries).
struct ReaderBase {
  std::string show(int64_t value) const { return std::to_string(value); }
};
// A decimal integer in lo..hi that is a multiple of step.
struct IntReader : ReaderBase {
  using Value = int64_t;
  int64_t lo, hi, step;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
// A size (parseBytes) in lo..hi.
struct BytesReader : ReaderBase {
  using Value = uint64_t;
  uint64_t lo, hi;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
// "auto" (-1) or a size up to hi.
struct BytesOrAutoReader : ReaderBase {
  using Value = int64_t;
  uint64_t hi;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
  std::string show(int64_t value) const;
};
struct BoolReader : ReaderBase {
  using Value = bool;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
// A public algorithm name or alias (algorithm_list.h), any case.
struct AlgoReader : ReaderBase {
  using Value = int;  // tparAlgo_t
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
  std::string show(int64_t value) const;
};
// One of spec.choices, any case; the value is its position.
struct ChoiceReader : ReaderBase {
  using Value = int;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
// A wire format (wireFromName in algorithm_list.h), any case.
struct WireReader : ReaderBase {
  using Value = int;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
struct LogLevelReader : ReaderBase {  // parseLogLevel
  using Value = int;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
struct LogSubsysReader : ReaderBase {  // parseLogSubsys
  using Value = uint32_t;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};
// Any text, taken as given (paths are checked where they are opened).
struct TextReader : ReaderBase {
  using Value = std::string;
  bool read(const EnvVarSpec& spec, const std::string& text, Value* out) const;
};

constexpr IntReader readInt(int64_t lo, int64_t hi, int64_t step = 1) {
  IntReader r{};
  r.lo = lo, r.hi = hi, r.step = step;
  return r;
}
constexpr BytesReader readBytes(uint64_t lo, uint64_t hi) {
  BytesReader r{};
  r.lo = lo, r.hi = hi;
  return r;
}
constexpr BytesOrAutoReader readBytesOrAuto(uint64_t hi) {
  BytesOrAutoReader r{};
  r.hi = hi;
  return r;
}
constexpr BoolReader readBool() { return {}; }
constexpr AlgoReader readAlgo() { return {}; }
constexpr ChoiceReader readChoice() { return {}; }
constexpr WireReader readWire() { return {}; }
constexpr LogLevelReader readLogLevel() { return {}; }
constexpr LogSubsysReader readLogSubsys() { return {}; }
constexpr TextReader readText() { return {}; }

// Whether every value `reader` can give fits a member of type T (static_assert'ed for every line
// of settings.def, so that a bound widened past its member fails the build).
template <class T, class Reader>
constexpr bool readerFits(const Reader&) {
  return true;
}
template <class T>
constexpr bool readerFits(const IntReader& r) {
  return std::is_integral_v<T> && r.lo <= r.hi && r.hi >= 0 &&
         r.lo >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         static_cast<uint64_t>(r.hi) <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}
template <class T>
constexpr bool readerFits(const BytesReader& r) {
  return std::is_integral_v<T> && r.hi <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}
template <class T>
constexpr bool readerFits(const BytesOrAutoReader& r) {
  return std::is_integral_v<T> && std::is_signed_v<T> &&
         r.hi <= static_cast<uint64_t>(std::numeric_limits<T>::max());
}

// Parsed values: one member per line of settings.def. A default-constructed Env holds every
// line's default, as parseEnv gives it when nothing is set.
struct Env {
  Env();
#define TPAR_SETTING(name, field, type, ...) type field{};
#include "base/settings.def"
#undef TPAR_SETTING
  bool log_level_set = false;         // TPAR_DEBUG was given
  std::vector<std::string> set_vars;  // "NAME=value" for every variable that was set
};

// Every line's name, in table order; settingIndex finds a line by its name (-1: none).
inline constexpr const char* kSettingNames[] = {
#define TPAR_SETTING(name, ...) name,
#include "base/settings.def"
#undef TPAR_SETTING
};
inline constexpr int kNumSettings =
    static_cast<int>(sizeof(kSettingNames) / sizeof(kSettingNames[0]));
constexpr int settingIndex(std::string_view name) {
  for (int i = 0; i < kNumSettings; ++i)
    if (name == kSettingNames[i]) return i;
  return -1;
}

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
