#include "base/env.h"

#include <cerrno>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <utility>

#include "base/algorithm_list.h"
#include "base/error.h"

namespace tpar {

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

// One line of settings.def as parseEnv uses it.
struct SettingRow {
  EnvVarSpec spec;
  const char* expected;  // nullptr: "one of <choices>"
  // Reads `text` into the line's Env member; false when the reader refuses it.
  bool (*read)(const EnvVarSpec& spec, const std::string& text, Env* env);
};

const std::vector<SettingRow>& settingRows() {
#define TPAR_SETTING(name, field, type, kind, default_value, choices, reader, expected, scope, \
                     override, description)                                               \
  {{name, EnvType::k##kind, default_value, choices, description}, expected,                 \
   [](const EnvVarSpec& spec, const std::string& text, Env* env) {                          \
     constexpr auto r = reader;                                                             \
     static_assert(readerFits<type>(r), name ": the reader's bounds exceed the member");    \
     typename std::remove_const_t<decltype(r)>::Value v{};                                  \
     if (!r.read(spec, text, &v)) return false;                                             \
     env->field = static_cast<type>(std::move(v));                                          \
     return true;                                                                           \
   }},
  static const std::vector<SettingRow> kRows = {
#include "base/settings.def"
  };
#undef TPAR_SETTING
  return kRows;
}

tparResult_t badValue(const SettingRow& row, const std::string& value) {
  const std::string expected =
      row.expected != nullptr ? row.expected : std::string("one of ") + row.spec.choices;
  return setError(tparInvalidArgument, "environment variable %s='%s' is not %s", row.spec.name,
                  value.c_str(), expected.c_str());
}

}  // namespace

bool IntReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  int64_t v = 0;
  if (!parseInt(text, &v) || v < lo || v > hi || v % step != 0) return false;
  *out = v;
  return true;
}

bool BytesReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  uint64_t v = 0;
  if (!parseBytes(text, &v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool BytesOrAutoReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  if (text == "auto") {
    *out = -1;
    return true;
  }
  uint64_t v = 0;
  if (!parseBytes(text, &v) || v > hi) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

std::string BytesOrAutoReader::show(int64_t value) const {
  return value < 0 ? "auto" : std::to_string(value);
}

bool BoolReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  return parseBool(text, out);
}

bool AlgoReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  tparAlgo_t algo;  // a name of NOTE [algorithm descriptor], or an older alias of one
  if (!publicAlgoFromName(lowerCase(text).c_str(), &algo)) return false;
  *out = algo;
  return true;
}

std::string AlgoReader::show(int64_t value) const {
  return publicAlgoName(static_cast<tparAlgo_t>(value));
}

bool ChoiceReader::read(const EnvVarSpec& spec, const std::string& text, Value* out) const {
  const int idx = choiceIndex(spec.choices, text);
  if (idx < 0) return false;
  *out = idx;
  return true;
}

bool WireReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  return wireFromName(lowerCase(text).c_str(), out);
}

bool LogLevelReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  LogLevel level = LogLevel::kWarn;
  if (!parseLogLevel(text, &level)) return false;
  *out = static_cast<int>(level);
  return true;
}

bool LogSubsysReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  return parseLogSubsys(text, out);
}

bool TextReader::read(const EnvVarSpec&, const std::string& text, Value* out) const {
  *out = text;
  return true;
}

const std::vector<EnvVarSpec>& envRegistry() {
  static const std::vector<EnvVarSpec> kRegistry = [] {
    std::vector<EnvVarSpec> specs;
    for (const SettingRow& row : settingRows()) specs.push_back(row.spec);
    return specs;
  }();
  return kRegistry;
}

Env::Env() {
  // Every default parses (a unit test reads each line's default as if it were set).
  for (const SettingRow& row : settingRows()) row.read(row.spec, row.spec.default_value, this);
}

tparResult_t parseEnv(const EnvGetter& get, Env* out) {
  constexpr int kDebug = settingIndex("TPAR_DEBUG");
  static_assert(kDebug >= 0, "Env::log_level_set records whether TPAR_DEBUG was given");
  Env env;
  const std::vector<SettingRow>& rows = settingRows();
  for (size_t i = 0; i < rows.size(); ++i) {
    const SettingRow& row = rows[i];
    const char* raw = get(row.spec.name);
    const bool is_set = raw != nullptr && raw[0] != '\0';
    const std::string value = is_set ? raw : row.spec.default_value;
    if (is_set) env.set_vars.push_back(std::string(row.spec.name) + "=" + value);
    if (!row.read(row.spec, value, &env)) return badValue(row, value);
    if (static_cast<int>(i) == kDebug) env.log_level_set = is_set;
  }
  *out = std::move(env);
  return tparSuccess;
}

tparResult_t processEnv(const Env** out) {
  // Never destroyed: a detached thread (the bootstrap service, the log) may read the settings
  // while the process exits, after static destructors have run.
  struct Parsed {
    Env env;
    tparResult_t result = tparSuccess;
    std::string error_text;
  };
  static std::once_flag once;
  static Parsed* parsed = nullptr;
  std::call_once(once, [] {
    Parsed* p = new Parsed;
    p->result = parseEnv([](const char* n) { return std::getenv(n); }, &p->env);
    if (p->result != tparSuccess) p->error_text = lastError();
    parsed = p;
  });
  if (parsed->result != tparSuccess)
    return setError(parsed->result, "%s", parsed->error_text.c_str());
  *out = &parsed->env;
  return tparSuccess;
}

std::string envMarkdown() {
  std::ostringstream md;
  md << "# Environment variables\n\n"
     << "Generated from the settings table `src/base/settings.def` by `tpar env --markdown`; a\n"
     << "unit test checks that this file matches it. Every variable is read once per process; a\n"
     << "malformed value makes communicator creation fail with `tparInvalidArgument` naming it.\n"
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
