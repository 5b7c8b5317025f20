// The `tpar` command's one exit-code map (tools/tpar/common/exit_codes.h), command by command,
// from the built binary. "No GPU" is made on any machine by hiding every GPU
// (CUDA_VISIBLE_DEVICES=""); the codes that need a GPU to reach (1, 4) are in tests/gpu.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/child_process.h"
#include "common/fifo_dir.h"
#include "tools/tpar/common/exit_codes.h"

namespace tpar_cli {
namespace {

const std::vector<std::string> kNoGpu = {"CUDA_VISIBLE_DEVICES="};

int tpar(const std::vector<std::string>& args, const std::vector<std::string>& env,
         std::string* out) {
  std::vector<std::string> argv = {TPAR_CLI_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return tpar_test::runChild(argv, env, 120, out);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CliExitCodes, TheMapIsTheDocumentedOne) {
  EXPECT_EQ(0, kExitOk);
  EXPECT_EQ(1, kExitCheckFailed);
  EXPECT_EQ(2, kExitUsage);
  EXPECT_EQ(3, kExitNoGpu);
  EXPECT_EQ(4, kExitRunError);
  int expect = 0;
  for (const ExitCodeInfo& e : exitCodes()) EXPECT_EQ(expect++, e.code);
  EXPECT_EQ(5, expect);
  const std::string help = exitCodeHelp();
  for (const ExitCodeInfo& e : exitCodes())
    EXPECT_TRUE(contains(help, std::to_string(e.code) + "  " + e.name)) << help;
}

TEST(CliExitCodes, HelpExitsZeroAndListsTheMapForEveryCommand) {
  for (const char* cmd : {"", "info", "bench", "doctor", "verify", "tune", "env"}) {
    std::vector<std::string> args;
    if (*cmd) args.push_back(cmd);
    args.push_back("--help");
    std::string out;
    EXPECT_EQ(kExitOk, tpar(args, {}, &out)) << cmd << "\n" << out;
    EXPECT_TRUE(contains(out, "Exit status:")) << cmd << "\n" << out;
    EXPECT_TRUE(contains(out, "3  no GPU")) << cmd << "\n" << out;
  }
  std::string out;
  EXPECT_EQ(kExitOk, tpar({"--version"}, {}, &out)) << out;
  EXPECT_TRUE(contains(out, "tpar ")) << out;
}

TEST(CliExitCodes, UsageErrorsExitTwoForEveryCommand) {
  struct Case {
    std::vector<std::string> args;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {{"--no-such-option"}, "no-such-option"},
      {{"no-such-command"}, "no-such-command"},
      {{"info", "--bogus"}, "bogus"},
      {{"env", "--bogus"}, "bogus"},
      {{"bench", "--bogus"}, "bogus"},
      {{"bench", "-d", "int32"}, "int32"},
      {{"bench", "-n", "0"}, "iters"},  // CLI11's own range check (its code is 105)
      {{"bench", "-b", "2M", "-e", "1M"}, "--minbytes"},
      {{"bench", "--json", "/nonexistent/dir/out.json"}, "/nonexistent/dir/out.json"},
      {{"doctor", "--bogus"}, "bogus"},
      {{"doctor", "--json", "/nonexistent/dir/out.json"}, "/nonexistent/dir/out.json"},
      {{"verify", "--model", "gpt-5"}, "gpt-5"},
      {{"verify", "--json", "/nonexistent/dir/out.json"}, "/nonexistent/dir/out.json"},
      {{"tune", "--ranks", "1"}, "--ranks"},
      {{"tune", "--output", "/nonexistent/dir/t.json"}, "/nonexistent/dir/t.json"},
      {{"tune", "--wire", "fp9"}, "fp9"},
      {{"tune", "--wire", "fp8", "--procs"}, "--procs"},
      {{"tune", "--wire", "int4", "-d", "float32"}, "--datatype"},
  };
  for (const Case& c : cases) {
    std::string out;
    // With or without a GPU: a usage error is found before anything runs.
    EXPECT_EQ(kExitUsage, tpar(c.args, {}, &out)) << c.args[0] << " " << c.args.back() << "\n"
                                                   << out;
    EXPECT_TRUE(contains(out, c.mentions)) << out;
  }
}

TEST(CliExitCodes, MalformedEnvironmentExitsTwo) {
  for (const char* cmd : {"info", "env"}) {
    std::string out;
    EXPECT_EQ(kExitUsage, tpar({cmd}, {"TPAR_THREADS=7"}, &out)) << cmd << "\n" << out;
    EXPECT_TRUE(contains(out, "TPAR_THREADS")) << out;
  }
}

// The environment is checked in the common entry, before any command looks for a GPU: without
// one, a malformed variable is still a usage error, not "no GPU".
TEST(CliExitCodes, MalformedEnvironmentExitsTwoForEveryCommandBeforeLookingForAGpu) {
  const std::vector<std::vector<std::string>> commands = {
      {}, {"info"}, {"env"}, {"bench", "-n", "1"}, {"doctor", "--quick"}, {"verify"}, {"tune"}};
  std::vector<std::string> env = kNoGpu;
  env.push_back("TPAR_TIMEOUT_MS=abc");
  for (const auto& args : commands) {
    const std::string name = args.empty() ? "tpar" : args[0];
    std::string out;
    EXPECT_EQ(kExitUsage, tpar(args, env, &out)) << name << "\n" << out;
    EXPECT_TRUE(contains(out, "TPAR_TIMEOUT_MS")) << name << "\n" << out;
    EXPECT_FALSE(contains(out, "no CUDA GPU visible")) << name << "\n" << out;
    EXPECT_FALSE(contains(out, "no NVIDIA driver found")) << name << "\n" << out;
  }
}

// NOTE [user files]: an output path that is a FIFO blocked the command in its open; a device
// or a directory is no output either. Each is refused before anything runs, naming the flag (or
// TPAR_TUNING_FILE) and the path. A run that still blocks is killed after 30 s and fails.
TEST(CliExitCodes, OutputPathsThatAreNotRegularFilesExitTwoWithoutBlocking) {
  tpar_test::FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  const std::string fifo = d.fifo();
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    const char* names;  // the flag or variable the message names
    std::string path;
  };
  const std::vector<Case> cases = {
      {{"bench", "-J", fifo}, {}, "--json", fifo},
      {{"bench", "--json", fifo}, {}, "--json", fifo},
      {{"bench", "--json", d.dir()}, {}, "--json", d.dir()},
      {{"doctor", "--json", fifo}, {}, "--json", fifo},
      {{"verify", "--json", fifo}, {}, "--json", fifo},
      {{"verify", "-J", "/dev/null"}, {}, "--json", "/dev/null"},
      {{"tune", "--output", fifo}, {}, "--output", fifo},
      {{"tune", "--output", "/dev/null"}, {}, "--output", "/dev/null"},
      {{"tune"}, {"TPAR_TUNING_FILE=" + fifo}, "TPAR_TUNING_FILE", fifo},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {TPAR_CLI_BINARY};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::vector<std::string> env = kNoGpu;
    env.insert(env.end(), c.env.begin(), c.env.end());
    std::string out;
    const std::string what = c.args[0] + " " + c.names + " " + c.path;
    EXPECT_EQ(kExitUsage, tpar_test::runChild(argv, env, 30, &out)) << what << "\n" << out;
    EXPECT_TRUE(contains(out, std::string(c.names) + ": output file " + c.path +
                                  " is not a regular file (it is "))
        << what << "\n" << out;
  }
  struct stat st;
  ASSERT_EQ(0, stat(fifo.c_str(), &st));
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(0, stat("/dev/null", &st));
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(CliExitCodes, NoGpuExitsThreeForEveryCommandThatNeedsOne) {
  const std::vector<std::vector<std::string>> commands = {
      {},  // `tpar` alone: info, then a short benchmark
      {"info"},
      {"bench", "-n", "1"},
      {"doctor", "--quick"},
      {"verify"},
      {"tune"},
  };
  for (const auto& args : commands) {
    std::string out;
    EXPECT_EQ(kExitNoGpu, tpar(args, kNoGpu, &out))
        << (args.empty() ? "tpar" : args[0]) << "\n" << out;
    EXPECT_TRUE(contains(out, "no NVIDIA driver found") || contains(out, "no CUDA GPU visible"))
        << out;
  }
  // env needs no GPU.
  std::string out;
  EXPECT_EQ(kExitOk, tpar({"env"}, kNoGpu, &out)) << out;
}

TEST(CliExitCodes, NoDriverIsNamedAsSuch) {
  // Without the driver's library the CUDA runtime speaks of an "insufficient" driver; tpar
  // says what is missing.
  int n = -1;
  const std::string why = whyNoGpu(&n, "libcuda-that-does-not-exist.so.1");
  EXPECT_EQ(0, n);
  EXPECT_EQ(0u, why.rfind("no NVIDIA driver found (", 0)) << why;
  EXPECT_TRUE(contains(why, "libcuda-that-does-not-exist.so.1")) << why;
  // On a machine without one, every command says it.
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (libcuda != nullptr) {
    dlclose(libcuda);
    GTEST_SKIP() << "this machine has an NVIDIA driver; the message is checked above";
  }
  for (const char* cmd : {"info", "bench", "doctor", "verify", "tune"}) {
    std::string out;
    EXPECT_EQ(kExitNoGpu, tpar({cmd}, {}, &out)) << cmd << "\n" << out;
    EXPECT_TRUE(contains(out, "no NVIDIA driver found")) << cmd << "\n" << out;
    EXPECT_FALSE(contains(out, "insufficient")) << cmd << "\n" << out;
  }
}

TEST(CliExitCodes, EnvShowsTheValueInForceAndItsSource) {
  std::string out;
  ASSERT_EQ(kExitOk, tpar({"env"}, {"TPAR_TIMEOUT_MS=1234", "TPAR_TYPO_VARIABLE=1"}, &out))
      << out;
  bool from_env = false, from_default = false;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string name, value, source;
    f >> name >> value >> source;
    if (name == "TPAR_TIMEOUT_MS") from_env = value == "1234" && source == "environment";
    if (name == "TPAR_BOOTSTRAP_TIMEOUT_MS") from_default = value == "120000" && source == "default";
  }
  EXPECT_TRUE(from_env) << out;
  EXPECT_TRUE(from_default) << out;
  EXPECT_TRUE(contains(out, "TPAR_TYPO_VARIABLE is set, but the library does not read it")) << out;
}

}  // namespace
}  // namespace tpar_cli
