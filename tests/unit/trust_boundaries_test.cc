// Trust boundaries without a GPU: process identity across PID namespaces (NOTE [identity]), a
// boot id that cannot be read, peers' host-region descriptors (NOTE [host region trust]),
// config bounds, and the agreement of call shapes (NOTE [agreement]). docs/RELIABILITY.md,
// "Trust boundaries", lists each attack and the test that pins it down.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "common/fifo_dir.h"
#include "comm/agreement.h"
#include "base/config.h"
#include "base/error.h"
#include "base/identity.h"
#include "comm/nccl_route.h"
#include "base/user_file.h"
#include "transport/host_region.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string selfExe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// ------------------------------------------------------------------------------------------
// Identity.

// Prints this process's identity for the parent test to compare.
TEST(DISABLED_IdentityChild, PrintsItsIdentity) {
  ProcessIdentity id;
  ASSERT_EQ(tparSuccess, processIdentity(&id)) << lastError();
  std::printf("IDENTITY %llx %llx %d\n", static_cast<unsigned long long>(id.host),
              static_cast<unsigned long long>(id.pid_namespace), id.pid);
}

bool parseIdentity(const std::string& output, ProcessIdentity* id) {
  const size_t at = output.find("IDENTITY ");
  if (at == std::string::npos) return false;
  unsigned long long host = 0, ns = 0;
  int pid = 0;
  if (std::sscanf(output.c_str() + at, "IDENTITY %llx %llx %d", &host, &ns, &pid) != 3) return false;
  *id = ProcessIdentity{host, ns, pid, 0};
  return true;
}

// The same, then stays alive a while: a namespace's inode can be reused once it is gone, so two
// namespaces are compared while both exist.
TEST(DISABLED_IdentityChild, PrintsItsIdentityAndWaits) {
  ProcessIdentity id;
  ASSERT_EQ(tparSuccess, processIdentity(&id)) << lastError();
  std::printf("IDENTITY %llx %llx %d\n", static_cast<unsigned long long>(id.host),
              static_cast<unsigned long long>(id.pid_namespace), id.pid);
  std::fflush(stdout);
  usleep(3000 * 1000);
}

// Runs a child above in a PID namespace of its own (as root, or through a user namespace).
bool identityInNewPidNamespace(ProcessIdentity* id, std::string* why,
                               const char* child = "PrintsItsIdentity") {
  const std::string exe = selfExe();
  const std::vector<std::string> tail = {exe, "--gtest_also_run_disabled_tests",
                                         std::string("--gtest_filter=DISABLED_IdentityChild.") + child};
  for (const std::vector<std::string>& prefix :
       {std::vector<std::string>{"unshare", "--pid", "--fork"},
        std::vector<std::string>{"unshare", "--user", "--map-root-user", "--pid", "--fork"}}) {
    std::vector<std::string> argv = prefix;
    argv.insert(argv.end(), tail.begin(), tail.end());
    std::string output;
    if (tpar_test::runChild(argv, {}, 60, &output) == 0 && parseIdentity(output, id)) return true;
    *why = output;
  }
  return false;
}

// Attack row: two ranks in different PID namespaces (containers of one pod) both have pid 1;
// judged by pid alone they would be one process and use each other's raw pointers.
TEST(Identity, ProcessesInTwoPidNamespacesAreNeverOneProcess) {
  ProcessIdentity a, b, self;
  std::string why;
  if (!identityInNewPidNamespace(&a, &why)) {
    GTEST_SKIP() << "cannot make a PID namespace here (needs root or user namespaces): " << why;
  }
  // Both namespaces alive at once (each child waits 3 s after printing): the kernel may hand a
  // finished namespace's inode to the next one, which would make two sequential ones compare
  // equal without either being wrong.
  std::string why_b;
  bool got_b = false;
  std::thread second([&] { got_b = identityInNewPidNamespace(&b, &why_b, "PrintsItsIdentityAndWaits"); });
  ASSERT_TRUE(identityInNewPidNamespace(&a, &why, "PrintsItsIdentityAndWaits")) << why;
  second.join();
  ASSERT_TRUE(got_b) << why_b;
  ASSERT_EQ(tparSuccess, processIdentity(&self)) << lastError();
  EXPECT_EQ(1, a.pid);
  EXPECT_EQ(1, b.pid);
  EXPECT_TRUE(sameHost(a, b));
  EXPECT_FALSE(samePidNamespace(a, b));
  EXPECT_FALSE(sameProcess(a, b)) << "two pid-1 processes of different namespaces taken as one";
  EXPECT_FALSE(sameProcess(a, self));
  EXPECT_TRUE(sameProcess(self, self));
  // The same pid in the same namespace is the same process; another pid is not.
  ProcessIdentity other = self;
  other.pid += 1;
  EXPECT_TRUE(samePidNamespace(self, other));
  EXPECT_FALSE(sameProcess(self, other));
}

// With the descriptor table full, the boot id cannot be read: an error naming the file, never
// a host identity without it (which other processes would take for another machine).
TEST(DISABLED_IdentityChild, ReportsABootIdItCannotRead) {
  rlimit old;
  ASSERT_EQ(0, getrlimit(RLIMIT_NOFILE, &old));
  const rlimit none = {3, old.rlim_max};  // stdin, stdout and stderr only
  ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &none));
  uint64_t host = 0;
  const tparResult_t res = hostIdentity(&host);
  const std::string error = lastError();
  ASSERT_EQ(0, setrlimit(RLIMIT_NOFILE, &old));
  EXPECT_EQ(tparSystemError, res);
  EXPECT_TRUE(contains(error, "/proc/sys/kernel/random/boot_id")) << error;
  EXPECT_TRUE(contains(error, "Too many open files")) << error;
  // Once descriptors are free again it is read, and it is part of the identity.
  ASSERT_EQ(tparSuccess, hostIdentity(&host)) << lastError();
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  EXPECT_EQ(hostIdentityOf(name, boot.c_str()), host);
  EXPECT_NE(hostIdentityOf(name, ""), host);
}

TEST(Identity, ABootIdThatCannotBeReadIsReportedNotDropped) {
  std::string output;
  const int rc = tpar_test::runChild(
      {selfExe(), "--gtest_also_run_disabled_tests",
       "--gtest_filter=DISABLED_IdentityChild.ReportsABootIdItCannotRead"},
      {}, 60, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_TRUE(contains(output, "[  PASSED  ] 1 test")) << output;
}

TEST(Identity, HostIdentityKeepsHostnameAndBootIdApart) {
  EXPECT_NE(hostIdentityOf("ab", "c"), hostIdentityOf("a", "bc"));
  EXPECT_NE(hostIdentityOf("node1", "boot-a"), hostIdentityOf("node1", "boot-b"));
  EXPECT_EQ(hostIdentityOf("node1", "boot-a"), hostIdentityOf("node1", "boot-a"));
}

// ------------------------------------------------------------------------------------------
// Host regions: what a peer names must be a sealed memfd of the published size.

int sealedMemfd(size_t bytes, int seals) {
  const int fd = memfd_create("tpar-test-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) return -1;
  return fd;
}

// Attack row: openPeerHostRegion given a read-only regular file of 1 GiB opened it read-write
// and mapped it. Here the "peer" is this process, its descriptor a file of our own.
TEST(HostRegionTrust, AReadOnlyRegularFileOfOneGibIsRefusedBeforeAnyMapping) {
  const std::string path = ::testing::TempDir() + "tpar_region_" + std::to_string(getpid());
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0444);
  ASSERT_GE(fd, 0) << strerror(errno);
  const size_t gib = size_t{1} << 30;
  ASSERT_EQ(0, ftruncate(fd, static_cast<off_t>(gib)));  // sparse: no disk space used
  HostRegion region;
  EXPECT_EQ(tparInvalidUsage, openPeerHostRegion(getpid(), fd, gib, &region));
  EXPECT_TRUE(contains(lastError(), "not a tpar host region")) << lastError();
  EXPECT_TRUE(contains(lastError(), "not a memfd")) << lastError();
  EXPECT_EQ(nullptr, region.host) << "mapped anyway";
  close(fd);
  unlink(path.c_str());
}

TEST(HostRegionTrust, OnlyAMemfdSealedAgainstResizingOfTheExactSizePasses) {
  const size_t bytes = 1 << 20;
  const int grow_shrink = F_SEAL_GROW | F_SEAL_SHRINK;
  struct Case {
    int fd;
    size_t published;
    const char* needle;  // nullptr: accepted
  };
  int pipe_fds[2];
  ASSERT_EQ(0, pipe2(pipe_fds, O_CLOEXEC));
  const Case cases[] = {
      {sealedMemfd(bytes, grow_shrink | F_SEAL_SEAL), bytes, nullptr},
      {sealedMemfd(bytes, 0), bytes, "can still be resized"},
      {sealedMemfd(bytes, F_SEAL_GROW), bytes, "can still be resized"},
      {sealedMemfd(bytes, grow_shrink), bytes / 2, "bytes where"},
      {sealedMemfd(bytes / 2, grow_shrink), bytes, "bytes where"},
      {pipe_fds[0], bytes, "not a memory file"},
  };
  for (const Case& c : cases) {
    ASSERT_GE(c.fd, 0) << strerror(errno);
    clearError();
    const tparResult_t res = checkPeerRegionFd(c.fd, c.published, "the peer's region");
    if (c.needle == nullptr) {
      EXPECT_EQ(tparSuccess, res) << lastError();
    } else {
      EXPECT_EQ(tparInvalidUsage, res) << c.needle;
      EXPECT_TRUE(contains(lastError(), c.needle)) << lastError();
    }
    close(c.fd);
  }
  close(pipe_fds[1]);
}

// ------------------------------------------------------------------------------------------
// Config bounds.

// Attack row: config.timeoutMs = 18446744073710 was accepted, and the nanosecond conversion
// wrapped to a 448 microsecond timeout.
TEST(ConfigBounds, TimeoutMsIsBoundedToADayLikeTheEnvironment) {
  Env env;
  ASSERT_EQ(tparSuccess, parseEnv([](const char*) -> const char* { return nullptr; }, &env));
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  ResolvedConfig out;
  for (int64_t bad : {int64_t{18446744073710}, int64_t{86400001}, int64_t{INT64_MAX}, int64_t{-1}}) {
    cfg.timeoutMs = bad;
    out.timeout_ms = 4242;
    EXPECT_EQ(tparInvalidArgument, resolveConfig(&cfg, env, &out)) << bad;
    EXPECT_TRUE(contains(lastError(), "config->timeoutMs")) << lastError();
    EXPECT_EQ(4242, out.timeout_ms) << "written on failure";
  }
  cfg.timeoutMs = 86400000;
  ASSERT_EQ(tparSuccess, resolveConfig(&cfg, env, &out)) << lastError();
  EXPECT_EQ(86400000, out.timeout_ms);
  // The communicator entry points refuse it before touching anything.
  cfg.timeoutMs = 18446744073710;
  const tparComm_t untouched = reinterpret_cast<tparComm_t>(0x1234);
  tparComm_t comms[1] = {untouched};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 1, nullptr, &cfg));
  EXPECT_TRUE(contains(tparGetLastError(nullptr), "timeoutMs")) << tparGetLastError(nullptr);
  EXPECT_EQ(untouched, comms[0]);
}

// ------------------------------------------------------------------------------------------
// Agreement on call shapes (the GPU half: tests/multiprocess, Agreement.*).

// The shape of a rank that sets nothing, on a GPU that hosts 32 blocks.
CallShape baseShape() {
  Env env;
  EXPECT_EQ(tparSuccess, parseEnv([](const char*) -> const char* { return nullptr; }, &env));
  ResolvedConfig cfg;
  EXPECT_EQ(tparSuccess, resolveConfig(nullptr, env, &cfg)) << lastError();
  return describeCallShape(cfg, 32, nullptr);
}

// CallShape's slot for a Shape setting of settings.def.
int64_t& slot(CallShape* s, const char* name) {
  const int i = shapeSettingIndex(name);
  EXPECT_GE(i, 0) << name << " is no Shape setting";
  return s->settings[i < 0 ? 0 : i];
}

// Attack row (its host half): ranks created with different TPAR_MAX_BLOCKS, TPAR_THREADS or
// tuning tables sliced one call differently. Every such setting fails init naming itself, on
// whichever rank differs. (AgreementTable.* in env_test.cc goes over every Shape line.)
TEST(Agreement, EverySettingThatShapesACallIsComparedAndNamed) {
  struct Case {
    const char* needle;
    void (*change)(CallShape*);
    bool tables = false;  // every rank has a tuning table to begin with
  };
  const Case cases[] = {
      {"TPAR_MAX_BLOCKS", [](CallShape* s) { slot(s, "TPAR_MAX_BLOCKS") = 8; }},
      {"TPAR_THREADS", [](CallShape* s) { slot(s, "TPAR_THREADS") = 256; }},
      {"TPAR_ALGO", [](CallShape* s) { slot(s, "TPAR_ALGO") = tparAlgoTwoShotPull; }},
      {"TPAR_ONESHOT_MAX_BYTES", [](CallShape* s) { slot(s, "TPAR_ONESHOT_MAX_BYTES") = 4096; }},
      {"maxBytesPerCall", [](CallShape* s) { slot(s, "TPAR_MAX_BYTES_PER_CALL") = 1 << 20; }},
      {"TPAR_EPOCH_START", [](CallShape* s) { slot(s, "TPAR_EPOCH_START") = 7; }},
      {"tuning table", [](CallShape* s) { s->has_tuning = 0, s->tuning_hash = 0; }, true},
      {"tuning table", [](CallShape* s) { s->tuning_hash = 99; }, true},
  };
  for (const Case& c : cases) {
    for (int odd = 1; odd < 4; ++odd) {
      std::vector<CallShape> shapes(4, baseShape());
      if (c.tables) {
        for (CallShape& s : shapes) s.has_tuning = 1, s.tuning_hash = 1;
      }
      c.change(&shapes[odd]);
      int grid = -1;
      clearError();
      EXPECT_EQ(tparInvalidUsage, agreeOnCallShapes(shapes, &grid)) << c.needle;
      EXPECT_TRUE(contains(lastError(), c.needle)) << lastError();
      EXPECT_TRUE(contains(lastError(), "rank " + std::to_string(odd))) << lastError();
      EXPECT_EQ(-1, grid);
    }
  }
}

TEST(Agreement, TheGridIsTheSmallestAnyRankCanHost) {
  std::vector<CallShape> shapes(3, baseShape());
  shapes[0].grid_blocks = 32;
  shapes[1].grid_blocks = 20;  // a GPU with fewer multiprocessors
  shapes[2].grid_blocks = 28;
  int grid = 0;
  ASSERT_EQ(tparSuccess, agreeOnCallShapes(shapes, &grid)) << lastError();
  EXPECT_EQ(20, grid);
}

TEST(Agreement, TuningTableHashFollowsWhatSelectionReadsOnly) {
  TuningTable t;
  t.signature = "sig";
  t.nranks = 4;
  TuningEntry e;
  e.max_bytes = 65536;
  e.plan.algo = kernels::Algo::kTwoShot;
  t.entries = {e};
  const uint64_t base = tuningTableHash(t);
  TuningTable when = t;
  when.created = "2030-01-01T00:00:00Z";
  when.gpu = "another GPU";
  when.source = "/elsewhere/tuning.json";
  when.entries[0].us = 12.5;
  EXPECT_EQ(base, tuningTableHash(when));
  for (int field = 0; field < 7; ++field) {
    TuningTable x = t;
    TuningEntry& f = x.entries[0];
    switch (field) {
      case 0: f.max_bytes += 16; break;
      case 1: f.plan.algo = kernels::Algo::kStaged; break;
      case 2: f.plan.active_blocks = 4; break;
      case 3: f.plan.threads = 256; break;
      case 4: f.plan.steps = 2; break;
      case 5: f.plan.pull = true; break;
      case 6: f.plan.nccl = true; break;
    }
    EXPECT_NE(base, tuningTableHash(x)) << "field " << field;
  }
  for (int w = tparWireFp8; w < tparNumWires; ++w) {
    TuningTable x = t;
    x.wire_min_bytes[w] = 1 << 20;
    EXPECT_NE(base, tuningTableHash(x)) << "wire " << w;
  }
}

// ------------------------------------------------------------------------------------------
// Files whose path a user gives (NOTE [user files] in base/user_file.h): a FIFO, a device or a
// directory is refused at once, naming where the path came from and what it is. A call that
// could block on the FIFO runs in a child of this binary with a bound, so that a regression
// fails the test instead of hanging it.

using tpar_test::FifoDir;

// Runs one DISABLED_UserFileChild test with the FIFO directory; its exit status (-1 when it was
// still running after 20 s, and was killed).
int runUserFileChild(const std::string& name, const FifoDir& d,
                     const std::vector<std::string>& env, std::string* output) {
  std::vector<std::string> all = env;
  all.push_back(d.env());
  return tpar_test::runChild({selfExe(), "--gtest_also_run_disabled_tests",
                              "--gtest_filter=DISABLED_UserFileChild." + name},
                             all, 20, output);
}

TEST(DISABLED_UserFileChild, OpensTheFifoEveryWay) {
  const std::string fifo = FifoDir::fifoFromEnv();
  ASSERT_FALSE(fifo.empty());
  const std::string refusal = "TPAR_X " + fifo + " is not a regular file (it is a FIFO)";
  int fd = -1;
  EXPECT_EQ(tparInvalidArgument, openUserFile(fifo, UserFileMode::kRead, "TPAR_X", &fd));
  EXPECT_TRUE(contains(lastError(), refusal)) << lastError();
  // For writing without a reader the open itself fails (ENXIO) ...
  EXPECT_EQ(tparInvalidArgument, openUserFile(fifo, UserFileMode::kWrite, "TPAR_X", &fd));
  EXPECT_TRUE(contains(lastError(), refusal)) << lastError();
  // ... and with one it succeeds, and fstat refuses it.
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0) << strerror(errno);
  EXPECT_EQ(tparInvalidArgument, openUserFile(fifo, UserFileMode::kWrite, "TPAR_X", &fd));
  EXPECT_TRUE(contains(lastError(), refusal)) << lastError();
  EXPECT_EQ(tparInvalidArgument, writeUserFile(fifo, "TPAR_X", "never written"));
  char byte;
  EXPECT_EQ(0, read(reader, &byte, 1)) << "something was written into the FIFO";
  close(reader);
  std::string text;
  EXPECT_EQ(tparInvalidArgument, readUserFile(fifo, "TPAR_X", 1024, &text));
  EXPECT_TRUE(contains(lastError(), refusal)) << lastError();
  EXPECT_EQ(tparInvalidArgument, checkUserFile(fifo, "TPAR_X"));
  EXPECT_EQ(-1, fd);
}

TEST(UserFiles, AFifoIsRefusedWithoutBlockingWhetherReadOrWritten) {
  FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  std::string out;
  EXPECT_EQ(0, runUserFileChild("OpensTheFifoEveryWay", d, {}, &out)) << out;
  EXPECT_TRUE(contains(out, "[  PASSED  ] 1 test")) << out;
}

TEST(UserFiles, DirectoriesAndDevicesAreRefusedNamingWhatTheyAre) {
  const std::string dir = ::testing::TempDir();
  for (UserFileMode mode : {UserFileMode::kRead, UserFileMode::kWrite}) {
    int fd = -1;
    EXPECT_EQ(tparInvalidArgument, openUserFile(dir, mode, "--json", &fd));
    EXPECT_TRUE(
        contains(lastError(), "--json " + dir + " is not a regular file (it is a directory)"))
        << lastError();
    EXPECT_EQ(tparInvalidArgument, openUserFile("/dev/null", mode, "--json", &fd));
    EXPECT_TRUE(contains(lastError(), "/dev/null is not a regular file (it is a character device)"))
        << lastError();
    EXPECT_EQ(-1, fd);
  }
  struct stat st;
  ASSERT_EQ(0, stat("/dev/null", &st));
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null was replaced";
  EXPECT_EQ(tparInvalidArgument, openUserFile("", UserFileMode::kRead, "TPAR_X", nullptr));
  EXPECT_TRUE(contains(lastError(), "TPAR_X: the path is empty")) << lastError();
}

TEST(UserFiles, AMissingOutputIsCreatedAndAnExistingOneKeptUntilWritten) {
  FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  const std::string path = d.dir() + "/out.json";
  int fd = -1;
  ASSERT_EQ(tparSuccess, openUserFile(path, UserFileMode::kWrite, "--json", &fd)) << lastError();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(FD_CLOEXEC, fcntl(fd, F_GETFD) & FD_CLOEXEC);
  EXPECT_EQ(0, fcntl(fd, F_GETFL) & O_NONBLOCK);
  close(fd);
  ASSERT_EQ(tparSuccess, writeUserFile(path, "--json", "a longer first content")) << lastError();
  // Opening for writing leaves the contents alone; writing replaces all of them.
  ASSERT_EQ(tparSuccess, openUserFile(path, UserFileMode::kWrite, "--json", &fd)) << lastError();
  close(fd);
  std::string text;
  ASSERT_EQ(tparSuccess, readUserFile(path, "--json", 1024, &text)) << lastError();
  EXPECT_EQ("a longer first content", text);
  ASSERT_EQ(tparSuccess, writeUserFile(path, "--json", "short")) << lastError();
  ASSERT_EQ(tparSuccess, readUserFile(path, "--json", 1024, &text)) << lastError();
  EXPECT_EQ("short", text);
  EXPECT_EQ(tparInvalidArgument, readUserFile(path, "TPAR_X", 4, &text));
  EXPECT_TRUE(contains(lastError(), "TPAR_X " + path + " has 5 bytes, more than the 4 allowed"))
      << lastError();
  const std::string missing = d.dir() + "/missing.json";
  EXPECT_EQ(tparSystemError, readUserFile(missing, "TPAR_X", 1024, &text));
  EXPECT_TRUE(contains(lastError(), "cannot read TPAR_X " + missing)) << lastError();
  EXPECT_EQ(tparSystemError, writeUserFile(d.dir() + "/no/such/dir.json", "--json", "x"));
  EXPECT_TRUE(contains(lastError(), "cannot write --json " + d.dir() + "/no/such/dir.json"))
      << lastError();
}

// TPAR_NCCL_LIBRARY naming a FIFO: dlopen would wait for a writer.
TEST(DISABLED_UserFileChild, LoadsNcclFromTheFifo) {
  std::string why;
  EXPECT_EQ(nullptr, loadNccl(&why));
  std::printf("WHY %s\n", why.c_str());
}

TEST(UserFiles, AnNcclLibraryThatIsAFifoIsRefusedWithoutBlocking) {
  FifoDir d;
  ASSERT_FALSE(d.dir().empty());
  std::string out;
  EXPECT_EQ(0, runUserFileChild("LoadsNcclFromTheFifo", d, {"TPAR_NCCL_LIBRARY=" + d.fifo()}, &out))
      << out;
  EXPECT_TRUE(contains(out, "TPAR_NCCL_LIBRARY=" + d.fifo() + " does not load as NCCL")) << out;
  EXPECT_TRUE(contains(out, d.fifo() + " (not a regular file)")) << out;
}

}  // namespace
}  // namespace tpar
