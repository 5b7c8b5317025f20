#include "tools/tpar/common/commands.h"

#include <cstdio>

#include "api/internal.h"
#include "tools/tpar/common/exit_codes.h"

namespace tpar_cli {

int runCli(CLI::App& app, int argc, char** argv,
           const std::vector<std::pair<CLI::App*, Action>>& commands,
           const Action& no_subcommand) {
  const std::string footer = exitCodeHelp();
  app.footer(footer);
  for (const auto& [sub, action] : commands) {
    // A subcommand's own footer (what the codes mean for it) comes first.
    const std::string own = sub->get_footer();
    sub->footer(own.empty() ? footer : own + "\n\n" + footer);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version are "errors" with exit code 0. CLI11's codes for real errors (105,
    // 109, ...) are its own: every usage error exits kExitUsage.
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  for (const auto& [sub, action] : commands) {
    if (!sub->parsed()) continue;
    // A malformed TPAR_* variable fails every communicator init, so it is a usage error, found
    // before a command probes GPUs (on a machine without one that would exit kExitNoGpu and hide
    // it). `env` and `info` show the settings and name every malformed one themselves.
    const std::string name = sub->get_name();
    const tpar::Env* env = nullptr;
    if (name != "env" && name != "info" && tpar::processEnv(&env) != tparSuccess) {
      std::fprintf(stderr, "tpar %s: %s\n", name.c_str(), tparGetLastError(nullptr));
      return kExitUsage;
    }
    return action();
  }
  return no_subcommand();  // runDefault starts with `info`
}

std::string commandLineOf(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

}  // namespace tpar_cli
