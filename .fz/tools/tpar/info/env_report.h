// `tpar env`: every variable of the registry (src/base/settings.def) with the value in force and where
// it came from, the malformed ones, and TPAR_* variables that nothing reads (typos).
#ifndef TPAR_TOOLS_ENV_REPORT_H_
#define TPAR_TOOLS_ENV_REPORT_H_

#include <string>
#include <vector>

#include "api/internal.h"

namespace tpar_cli {

struct EnvSetting {
  std::string name;
  std::string value;   // in force: as set, or the registry's default
  std::string source;  // "environment" or "default"
  std::string error;   // why a set value is malformed ("" when it is accepted)
};

// One entry per registered variable, in registry order, each checked on its own so that every
// malformed value is named (communicator init stops at the first).
std::vector<EnvSetting> envSettings(const tpar::EnvGetter& get);

// Names of the form TPAR_* in `environment` ("NAME=value" entries) that the registry lacks.
std::vector<std::string> unknownTparVariables(const std::vector<std::string>& environment);

// The table `tpar env` prints.
std::string renderEnvSettings(const std::vector<EnvSetting>& settings,
                              const std::vector<std::string>& unknown);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_ENV_REPORT_H_
