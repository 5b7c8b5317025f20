// Ranks in separate processes on one GPU, once per transport: the default (CUDA IPC between
// processes) and TPAR_TRANSPORT=host (receive regions in pinned host memory shared between the
// processes). The workers are tests/multiprocess/mp_worker.cc.
//
// TPAR_TEST_WORKER_WRAPPER, when set, is put in front of every worker's command line (split at
// spaces, "{tag}" replaced by a name unique to the worker): scripts/gpu-check.sh --sanitize runs
// each worker under its own compute-sanitizer this way.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "gpu/test_util.h"
#include "multiprocess/resource_check.h"

namespace tpar_test {
namespace {

using Clock = std::chrono::steady_clock;

// A worker process whose pid the test keeps (to wait for it, or kill it).
using Child = ChildProcess;

// Starts a worker, behind TPAR_TEST_WORKER_WRAPPER when that is set.
bool startWorker(Child& child, std::vector<std::string> argv, const std::vector<std::string>& env,
                 const std::string& tag) {
  if (const char* wrapper = std::getenv("TPAR_TEST_WORKER_WRAPPER")) {
    std::vector<std::string> prefix;
    std::istringstream words(wrapper);
    for (std::string w; words >> w;) {
      for (size_t at; (at = w.find("{tag}")) != std::string::npos;) w.replace(at, 5, tag);
      prefix.push_back(w);
    }
    argv.insert(argv.begin(), prefix.begin(), prefix.end());
  }
  return child.start(argv, env);
}

// TPAR_TRANSPORT value of the parameter; "auto" is the default transport.
class MultiProcess : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::string> workerEnv() const {
    std::vector<std::string> env = {"TPAR_ALLOW_SHARED_DEVICE=1",
                                    std::string("TPAR_TRANSPORT=") + GetParam()};
    // A tool in the worker's process opens descriptors, starts threads and takes GPU memory of
    // its own: the leak comparison is then reported, not asserted.
    if (underTool()) env.push_back("TPAR_TEST_LEAKS_REPORT_ONLY=1");
    return env;
  }
  static bool underTool() { return std::getenv("TPAR_TEST_WORKER_WRAPPER") != nullptr; }
  // Part of a file name (compute-sanitizer's log): unique per worker of one run of the binary.
  std::string tag(const std::string& role) const {
    return std::string("mp-") + GetParam() + "-" + role;
  }
};

TEST_P(MultiProcess, TwoProcessesOnOneGpuGetCorrectBitwiseEqualResults) {
  TPAR_REQUIRE_GPU();
  const int n = 2;
  tparUniqueId id;
  TPAR_OK(tparGetUniqueId(&id));
  const std::string hex = idHex(id);
  const uint64_t seed = freshSeed() % 1000000007ull;
  std::vector<Child> procs(n);
  std::vector<std::string> files(n);
  for (int r = 0; r < n; ++r) {
    files[r] = "/tmp/tpar_mp_" + std::to_string(getpid()) + "_" + std::to_string(r);
    ASSERT_TRUE(startWorker(procs[r], {TPAR_MP_WORKER, "check", hex, std::to_string(r), std::to_string(n),
                                std::to_string(seed), files[r]},
                               workerEnv(), tag("check-rank" + std::to_string(r))));
  }
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(0, procs[r].wait(300)) << "rank " << r << ":\n" << procs[r].output();
  const std::string first = readFile(files[0]);
  EXPECT_FALSE(first.empty());
  for (int r = 1; r < n; ++r) EXPECT_EQ(first, readFile(files[r])) << "rank " << r << " differs";
  for (const auto& f : files) unlink(f.c_str());
}

// Four processes on one GPU that take the islands of a two-socket server from a topology
// fixture ({0,1} {2,3}) run the hierarchical kernel across processes, checked in its own order
// of additions and bitwise equal on every rank. Under compute-sanitizer memcheck (which runs
// every MultiProcess test with each worker under the tool) this is where the hierarchical
// kernel with islands meets the sanitizer: virtual ranks of one process cannot run under it.
TEST_P(MultiProcess, FourProcessesOnTwoIslandsRunTheHierarchicalKernel) {
  TPAR_REQUIRE_GPU();
  const int n = 4;
  tparUniqueId id;
  TPAR_OK(tparGetUniqueId(&id));
  const std::string hex = idHex(id);
  const uint64_t seed = freshSeed() % 1000000007ull;
  std::vector<std::string> env = workerEnv();
  env.push_back(std::string("TPAR_TOPO_FILE=") + TPAR_SOURCE_DIR +
                "/tests/fixtures/topology/rootport_2socket_8gpu.xml");
  env.push_back("TPAR_ALGO=hier");
  std::vector<Child> procs(n);
  std::vector<std::string> files(n);
  for (int r = 0; r < n; ++r) {
    files[r] = "/tmp/tpar_mp_hier_" + std::to_string(getpid()) + "_" + std::to_string(r);
    ASSERT_TRUE(startWorker(procs[r], {TPAR_MP_WORKER, "check", hex, std::to_string(r),
                                       std::to_string(n), std::to_string(seed), files[r]},
                            env, tag("hier-rank" + std::to_string(r))));
  }
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(0, procs[r].wait(600)) << "rank " << r << ":\n" << procs[r].output();
  const std::string first = readFile(files[0]);
  EXPECT_FALSE(first.empty());
  // Every call ran the hierarchical kernel: it did not fall back to two-shot.
  std::istringstream lines(first);
  int calls = 0;
  for (std::string line; std::getline(lines, line); ++calls)
    EXPECT_EQ(" hier", line.substr(line.rfind(' '))) << line;
  EXPECT_EQ(6, calls) << first;
  for (int r = 1; r < n; ++r) EXPECT_EQ(first, readFile(files[r])) << "rank " << r << " differs";
  for (const auto& f : files) unlink(f.c_str());
}

int64_t timeoutMsForKillTest() {
  // Under compute-sanitizer the script sets a longer TPAR_TIMEOUT_MS; natively 3 s is ample for
  // a hand-off between two time-sliced processes (~5 ms).
  const char* env = std::getenv("TPAR_TIMEOUT_MS");
  const int64_t v = env != nullptr ? std::atoll(env) : 0;
  return v > 0 ? v : 3000;
}

bool waitForFileWhile(const std::string& path, Child& alive, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  while (access(path.c_str(), F_OK) != 0) {
    if (Clock::now() > deadline || !alive.running()) return access(path.c_str(), F_OK) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A peer process is killed with SIGKILL while both ranks run all-reduces back to back. The
// survivor (mp_worker `survivor`) must report tparTimeout within the configured timeout, destroy
// its communicator cleanly, and afterwards hold no more descriptors, threads, mappings or GPU
// memory than before it joined the group; no file named after tpar may appear in /dev/shm.
TEST_P(MultiProcess, SurvivorOfAKilledPeerTimesOutDestroysCleanlyAndLeaksNothing) {
  TPAR_REQUIRE_GPU();
  const int64_t timeout_ms = timeoutMsForKillTest();
  const std::set<std::string> shm_before = tparShmFiles();
  tparUniqueId id1, id2;
  TPAR_OK(tparGetUniqueId(&id1));
  char dir_template[] = "/tmp/tpar_kill_XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(dir_template));
  const std::string dir = dir_template;
  const std::string seed = std::to_string(freshSeed() % 1000000007ull);
  const std::string timeout = std::to_string(timeout_ms);

  Child survivor, partner, victim;
  ASSERT_TRUE(startWorker(survivor, {TPAR_MP_WORKER, "survivor", idHex(id1), seed, dir, timeout},
                             workerEnv(), tag("survivor")));
  // Group 1: the survivor's partner finishes its checked calls and leaves normally.
  ASSERT_TRUE(
      startWorker(partner, {TPAR_MP_WORKER, "check", idHex(id1), "1", "2", seed, dir + "/partner.result"},
                    workerEnv(), tag("partner")));
  ASSERT_EQ(0, partner.wait(300)) << "partner:\n"
                                  << partner.output() << "\nsurvivor:\n"
                                  << survivor.output();
  std::ofstream(dir + "/phase1-peer-gone") << "\n";
  ASSERT_TRUE(waitForFileWhile(dir + "/baseline", survivor, 300))
      << "the survivor took no baseline:\n"
      << survivor.output();

  // Group 2: the victim runs with the survivor until it is killed at a random moment.
  TPAR_OK(tparGetUniqueId(&id2));
  std::ofstream(dir + "/group2-id.tmp") << idHex(id2) << "\n";
  ASSERT_EQ(0, std::rename((dir + "/group2-id.tmp").c_str(), (dir + "/group2-id").c_str()));
  ASSERT_TRUE(startWorker(victim, {TPAR_MP_WORKER, "victim", idHex(id2), dir, timeout}, workerEnv(),
                           tag("victim")));
  ASSERT_TRUE(waitForFileWhile(dir + "/victim-running", victim, 300))
      << "victim:\n"
      << victim.output() << "\nsurvivor:\n"
      << survivor.output();
  // The worker's own pid: with a wrapper (compute-sanitizer) the spawned process is its parent.
  const pid_t victim_pid = static_cast<pid_t>(std::atol(readFile(dir + "/victim-running").c_str()));
  ASSERT_GT(victim_pid, 0);
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  std::this_thread::sleep_for(std::chrono::milliseconds(10 + rng() % 150));
  const int64_t kill_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  ASSERT_EQ(0, kill(victim_pid, SIGKILL));
  const int victim_status = victim.wait(120);
  std::ofstream(dir + "/victim-dead") << "\n";
  EXPECT_NE(-1, victim_status) << "the victim outlived SIGKILL:\n" << victim.output();

  const int rc = survivor.wait(static_cast<int>(timeout_ms / 1000) + 300);
  const std::string out = survivor.output();
  EXPECT_EQ(0, rc) << out;
  const auto result = parseResult(readFile(dir + "/survivor.result"));
  ASSERT_FALSE(result.empty()) << "no result file:\n" << out;
  EXPECT_EQ(std::to_string(tparTimeout), result.at("error")) << out;
  EXPECT_EQ("none", result.at("cuda_error")) << out;
  EXPECT_EQ(std::to_string(tparSuccess), result.at("destroy")) << out;
  if (!underTool()) EXPECT_EQ("none", result.at("leaks")) << out;
  const double after_kill_s = (std::atoll(result.at("detect_ns").c_str()) - kill_ns) / 1e9;
  const double slack_s = underTool() ? 30.0 : 5.0;  // instrumented code runs many times slower
  EXPECT_GT(after_kill_s, 0.0) << "the survivor failed before the kill:\n" << out;
  EXPECT_LT(after_kill_s, timeout_ms / 1000.0 + slack_s) << out;
  EXPECT_LT(std::atof(result.at("destroy_ms").c_str()), slack_s * 1000) << out;
  std::printf(
      "killed peer: survivor saw %s %.2f s after the kill (timeout %.1f s), destroy %s ms\n"
      "  before: %s\n  after:  %s\n  leaks:  %s\n",
      result.at("error_name").c_str(), after_kill_s, timeout_ms / 1000.0,
      result.at("destroy_ms").c_str(), result.at("before").c_str(), result.at("after").c_str(),
      result.at("leaks").c_str());

  std::string shm_new;
  for (const std::string& f : tparShmFiles())
    if (shm_before.count(f) == 0) shm_new += " " + f;
  EXPECT_EQ("", shm_new) << "files left in /dev/shm";

  for (const char* f : {"/phase1-peer-gone", "/baseline", "/group2-id", "/victim-running",
                        "/victim-dead", "/survivor.result", "/partner.result"})
    unlink((dir + f).c_str());
  rmdir(dir.c_str());
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiProcess, ::testing::Values("auto", "host"),
                         transportParamName);

}  // namespace
}  // namespace tpar_test
