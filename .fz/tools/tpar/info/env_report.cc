#include "tools/tpar/info/env_report.h"

#include <algorithm>
#include <cstdio>

#include "api/internal.h"

namespace tpar_cli {

std::vector<EnvSetting> envSettings(const tpar::EnvGetter& get) {
  std::vector<EnvSetting> out;
  for (const tpar::EnvVarSpec& spec : tpar::envRegistry()) {
    EnvSetting s;
    s.name = spec.name;
    const char* raw = get(spec.name);
    const bool set = raw != nullptr && raw[0] != '\0';
    s.value = set ? raw : spec.default_value;
    s.source = set ? "environment" : "default";
    if (set) {
      // Only this variable set: a failure is this one's.
      const std::string name = spec.name;
      const std::string value = raw;
      tpar::Env env;
      const tpar::KeepLastError keep;
      if (tpar::parseEnv([&](const char* n) { return name == n ? value.c_str() : nullptr; },
                         &env) != tparSuccess)
        s.error = tparGetLastError(nullptr);
    }
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> unknownTparVariables(const std::vector<std::string>& environment) {
  std::vector<std::string> out;
  for (const std::string& kv : environment) {
    const std::string name = kv.substr(0, kv.find('='));
    if (name.rfind("TPAR_", 0) != 0) continue;
    const auto& reg = tpar::envRegistry();
    if (std::none_of(reg.begin(), reg.end(),
                     [&](const tpar::EnvVarSpec& s) { return name == s.name; }))
      out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string renderEnvSettings(const std::vector<EnvSetting>& settings,
                              const std::vector<std::string>& unknown) {
  std::string s = "# tpar's environment variables: the value in force and where it comes from.\n"
                  "# Fields of tparConfig_t that a program sets override them per communicator.\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%-26s %-14s %s\n", "variable", "value", "source");
  s += line;
  for (const EnvSetting& e : settings) {
    const std::string value = e.value.empty() ? "(empty)" : e.value;
    std::snprintf(line, sizeof(line), "%-26s %-14s %s\n", e.name.c_str(), value.c_str(),
                  e.source.c_str());
    s += line;
    if (!e.error.empty()) s += "  INVALID: " + e.error + "\n";
  }
  for (const std::string& name : unknown)
    s += "# " + name + " is set, but the library does not read it (a typo? scripts may read it)\n";
  return s;
}

}  // namespace tpar_cli
