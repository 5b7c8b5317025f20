// Logging as NCCL users know it (docs/LOGGING.md): levels in any case, subsystems, the log
// file with %h and %p, and the host:pid:tid [rank@device] tpar LEVEL prefix; then what the
// library itself logs, from a child process with the variables set (they are read once).
#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/child_process.h"
#include "common/fifo_dir.h"
#include "base/env.h"
#include "base/log.h"
#include "tpar/tpar.h"

namespace tpar {
namespace {

std::string hostShort() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) out.push_back(l);
  return out;
}

// A prefix as the log writes it: host:pid:tid [rank@device] tpar LEVEL.
const std::regex kLine(R"(^([^:\s]+):(\d+):(\d+) \[(-|\d+)@(-|\d+)\] tpar (WARN|INFO|TRACE) (.*)$)");

TEST(LogSettings, LevelsAreReadInAnyCase) {
  const std::pair<const char*, LogLevel> cases[] = {
      {"none", LogLevel::kNone},   {"VERSION", LogLevel::kVersion}, {"Warn", LogLevel::kWarn},
      {"INFO", LogLevel::kInfo},   {"info", LogLevel::kInfo},       {"TRACE", LogLevel::kTrace},
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kTrace},
  };
  for (const auto& [text, want] : cases) {
    LogLevel got = LogLevel::kNone;
    EXPECT_TRUE(parseLogLevel(text, &got)) << text;
    EXPECT_EQ(want, got) << text;
  }
  LogLevel l;
  for (const char* bad : {"", "loud", "2", "inf"}) EXPECT_FALSE(parseLogLevel(bad, &l)) << bad;
  // Through the registry: an NCCL user's TPAR_DEBUG=TRACE must not make init fail.
  for (const char* v : {"trace", "TRACE", "Info", "VERSION", "debug"}) {
    Env env;
    ASSERT_EQ(tparSuccess, parseEnv([&](const char* n) {
                return std::string(n) == "TPAR_DEBUG" ? v : nullptr;
              }, &env))
        << v;
    EXPECT_TRUE(env.log_level_set);
  }
  Env env;
  EXPECT_EQ(tparInvalidArgument, parseEnv([](const char* n) {
              return std::string(n) == "TPAR_DEBUG" ? "loud" : nullptr;
            }, &env));
}

TEST(LogSettings, SubsystemsSelectAndExclude) {
  uint32_t m = 0;
  ASSERT_TRUE(parseLogSubsys("INIT,COLL", &m));
  EXPECT_EQ(kLogInit | kLogColl, m);
  ASSERT_TRUE(parseLogSubsys("tuning,Transport", &m));
  EXPECT_EQ(kLogTuning | kLogTransport, m);
  ASSERT_TRUE(parseLogSubsys("^COLL", &m));
  EXPECT_EQ(kLogAll & ~kLogColl, m);
  ASSERT_TRUE(parseLogSubsys("ALL", &m));
  EXPECT_EQ(kLogAll, m);
  for (const char* bad : {"", "INIT,,COLL", "NET", "^"}) EXPECT_FALSE(parseLogSubsys(bad, &m)) << bad;
  Env env;
  EXPECT_EQ(tparInvalidArgument, parseEnv([](const char* n) {
              return std::string(n) == "TPAR_DEBUG_SUBSYS" ? "NET" : nullptr;
            }, &env));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("TPAR_DEBUG_SUBSYS"));
}

TEST(LogSettings, FileNameTakesHostAndPid) {
  std::mt19937 rng(std::random_device{}());
  const int pid = std::uniform_int_distribution<int>(1, 4000000)(rng);
  EXPECT_EQ("/tmp/tpar.node7." + std::to_string(pid) + ".log",
            expandLogFileName("/tmp/tpar.%h.%p.log", "node7", pid));
  EXPECT_EQ("a%b-%x", expandLogFileName("a%%b-%x", "h", pid));
  EXPECT_EQ("plain", expandLogFileName("plain", "h", pid));
}

TEST(LogSettings, PrefixNamesHostProcessThreadRankAndDevice) {
  std::smatch m;
  std::string p = logPrefix("node7", 1234, 1240, 3, 5, LogLevel::kInfo) + " hello";
  ASSERT_TRUE(std::regex_match(p, m, kLine)) << p;
  EXPECT_EQ("node7", m[1]);
  EXPECT_EQ("1234", m[2]);
  EXPECT_EQ("1240", m[3]);
  EXPECT_EQ("3", m[4]);
  EXPECT_EQ("5", m[5]);
  EXPECT_EQ("INFO", m[6]);
  p = logPrefix("node7", 1, 2, -1, -1, LogLevel::kWarn) + " x";
  ASSERT_TRUE(std::regex_match(p, m, kLine)) << p;
  EXPECT_EQ("-", m[4]);
  EXPECT_EQ("WARN", m[6]);
}

// The logger itself, in this process: levels, subsystems, the file, the prefix.
TEST(LogOutput, LevelsSubsystemsFileAndPrefix) {
  const std::string pattern = "/tmp/tpar_log_test.%h.%p.log";
  const std::string path = expandLogFileName(pattern, hostShort(), getpid());
  resetLogSettingsForTest("info", "INIT,TUNING", pattern);
  EXPECT_TRUE(logEnabled(LogLevel::kInfo, kLogInit));
  EXPECT_FALSE(logEnabled(LogLevel::kInfo, kLogColl));
  EXPECT_FALSE(logEnabled(LogLevel::kTrace, kLogInit));
  EXPECT_TRUE(logEnabled(LogLevel::kWarn, kLogColl));  // warnings ignore the subsystem list
  std::mt19937 rng(std::random_device{}());
  const int token = std::uniform_int_distribution<int>(1, 1 << 30)(rng);
  {
    LogScope scope(6, 2);
    TPAR_INFO(kLogInit, "init message %d", token);
    TPAR_INFO(kLogColl, "coll message %d", token);
    TPAR_TRACE(kLogInit, "trace message %d", token);
    TPAR_WARN("warn message %d", token);
  }
  TPAR_INFO(kLogTuning, "outside a scope %d", token);
  resetLogSettingsForTest("warn", "ALL", "");  // closes the file
  const auto got = lines(readFile(path));
  unlink(path.c_str());
  ASSERT_EQ(3u, got.size()) << readFile(path);
  const std::string tid = std::to_string(static_cast<int>(syscall(SYS_gettid)));
  const std::string want[][4] = {{"6", "2", "INFO", "init message "},
                                 {"6", "2", "WARN", "warn message "},
                                 {"-", "-", "INFO", "outside a scope "}};
  for (size_t i = 0; i < got.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(got[i], m, kLine)) << got[i];
    EXPECT_EQ(hostShort(), m[1]);
    EXPECT_EQ(std::to_string(getpid()), m[2]);
    EXPECT_EQ(tid, m[3]);
    EXPECT_EQ(want[i][0], m[4]) << got[i];
    EXPECT_EQ(want[i][1], m[5]) << got[i];
    EXPECT_EQ(want[i][2], m[6]) << got[i];
    EXPECT_EQ(want[i][3] + std::to_string(token), m[7]) << got[i];
  }
}

TEST(LogOutput, NoneIsSilentAndTraceShowsEverything) {
  const std::string path = "/tmp/tpar_log_levels_" + std::to_string(getpid()) + ".log";
  resetLogSettingsForTest("NONE", "ALL", path);
  TPAR_WARN("not shown");
  resetLogSettingsForTest("warn", "ALL", "");
  EXPECT_TRUE(lines(readFile(path)).empty());
  resetLogSettingsForTest("TRACE", "^COLL", path);
  TPAR_TRACE(kLogInit, "shown");
  TPAR_TRACE(kLogColl, "excluded");
  resetLogSettingsForTest("warn", "ALL", "");
  const auto got = lines(readFile(path));
  unlink(path.c_str());
  ASSERT_EQ(1u, got.size());
  EXPECT_NE(std::string::npos, got[0].find("tpar TRACE shown")) << got[0];
}

// The library's own messages: a child process of this binary runs the helper below with the
// variables set.
TEST(DISABLED_LogHelper, InitAllOnce) {
  tparComm_t comms[2];
  int ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess) (void)cudaGetLastError();
  // Without a GPU the init fails (logged as a warning); with one it succeeds and is destroyed.
  if (tparCommInitAll(comms, 1, nullptr) == tparSuccess) tparCommDestroy(comms[0]);
  // A bad argument of a later call is not logged; the version line is printed once only.
  if (tparCommInitAll(comms, 1, nullptr) == tparSuccess) tparCommDestroy(comms[0]);
}

std::string runHelper(const std::vector<std::string>& env) {
  char self[4096] = {0};
  EXPECT_GT(readlink("/proc/self/exe", self, sizeof(self) - 1), 0);
  std::string out;
  const int rc = tpar_test::runChild(
      {self, "--gtest_also_run_disabled_tests", "--gtest_filter=DISABLED_LogHelper.InitAllOnce"},
      env, 120, &out);
  EXPECT_EQ(0, rc) << out;
  return out;
}

TEST(LibraryLog, VersionOnceInitAndItsOutcome) {
  // A fresh directory: the one file in it is the child's (its pid is in the name).
  char dir[] = "/tmp/tpar_liblog_XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(dir));
  const std::string out = runHelper({"TPAR_DEBUG=INFO", std::string("TPAR_DEBUG_FILE=") + dir +
                                     "/log.%h.%p", "TPAR_TIMEOUT_MS=4321"});
  std::string text, name;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      name = e->d_name;
      text = readFile(std::string(dir) + "/" + name);
      unlink((std::string(dir) + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir);
  ASSERT_FALSE(text.empty()) << "no log file in " << dir << "\n" << out;
  EXPECT_EQ(0u, name.rfind("log." + hostShort() + ".", 0)) << name;
  int version = 0, env = 0, start = 0, complete = 0, failed = 0, transport = 0, table = 0;
  for (const std::string& l : lines(text)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, kLine)) << l;
    const std::string msg = m[7];
    version += msg.rfind("tpar version ", 0) == 0;
    env += msg == "TPAR_TIMEOUT_MS=4321 set by environment";
    start += msg.rfind("tparCommInitAll START", 0) == 0;
    complete += msg.rfind("init COMPLETE", 0) == 0;
    failed += msg.rfind("tparCommInitAll failed", 0) == 0 && m[6] == "WARN";
    transport += msg.rfind("transport ", 0) == 0;
    table += msg.rfind("algorithm table for 1 ranks", 0) == 0;
  }
  EXPECT_EQ(1, version) << text;  // once, though the helper creates two communicators
  EXPECT_EQ(1, env) << text;
  EXPECT_EQ(2, start) << text;
  EXPECT_EQ(2, complete + failed) << text;
  // A communicator that came up says where its receive regions are and its algorithm table.
  EXPECT_EQ(complete, transport) << text;
  EXPECT_EQ(complete, table) << text;
}

TEST(LibraryLog, DefaultLevelPrintsOnlyWhatWentWrong) {
  const std::string out = runHelper({});
  for (const std::string& l : lines(out)) {
    if (l.find(" tpar ") == std::string::npos) continue;  // gtest's own lines
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, kLine)) << l;
    EXPECT_EQ("WARN", m[6]) << l;  // no version, no info
  }
}

// NOTE [user files]: TPAR_DEBUG_FILE naming a FIFO blocked the first log line in a blocking
// open; the line goes to stderr instead, after a warning that names the variable and the path.
TEST(DISABLED_LogHelper, WarnsOnce) {
  TPAR_WARN("the first line");
  TPAR_WARN("the second line");
}

TEST(LibraryLog, DebugFileThatIsAFifoIsRefusedWithoutBlocking) {
  tpar_test::FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  std::string out;
  const int rc = tpar_test::runChild({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                      "--gtest_filter=DISABLED_LogHelper.WarnsOnce"},
                                     {"TPAR_DEBUG_FILE=" + d.fifo()}, 20, &out);
  EXPECT_EQ(0, rc) << out;  // -1: still blocked after 20 s
  const std::string refusal =
      "TPAR_DEBUG_FILE " + d.fifo() + " is not a regular file (it is a FIFO); logging to stderr";
  EXPECT_NE(std::string::npos, out.find(refusal)) << out;
  EXPECT_EQ(out.find(refusal), out.rfind(refusal)) << "warned more than once\n" << out;
  EXPECT_NE(std::string::npos, out.find("tpar WARN the first line")) << out;
  EXPECT_NE(std::string::npos, out.find("tpar WARN the second line")) << out;
}

}  // namespace
}  // namespace tpar
