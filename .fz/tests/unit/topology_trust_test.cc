// Topology files as untrusted input: hwloc's NVLink matrix (NOTE [NVLink matrix]), a format the
// installed hwloc cannot read, and the crash guard (NOTE [topology crash guard]): no fork in the
// caller's process, no dependence on its SIGCHLD disposition, a bound on the helper.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "base/error.h"
#include "topology/topology.h"
#include "topology/xml_probe.h"

namespace tpar {
namespace {

using L = LinkClass;

std::string fixture(const std::string& name) {
  return std::string(TPAR_SOURCE_DIR) + "/tests/fixtures/topology/" + name;
}
std::string badFixture(const std::string& name) {
  return std::string(TPAR_SOURCE_DIR) + "/tests/fixtures/bad/" + name;
}

std::string readAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tempPath(const std::string& stem) {
  return ::testing::TempDir() + "tpar_" + stem + "_" + std::to_string(getpid());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Attack row: hwloc's own DGX-2 topology (here a fixture written for tpar, with NVLink only in
// the NVLinkBandwidth matrix, as hwloc's NVML backend records it) must be one NVSwitch island
// of 16, not two PCIe islands of 8.
TEST(TopologyNvLinkMatrix, DgxTwoIsOneNvSwitchIslandOfSixteen) {
  Topology t;
  ASSERT_EQ(tparSuccess, loadTopologyXml(fixture("nvswitch_dgx2_16gpu.xml"), {}, &t)) << lastError();
  ASSERT_EQ(16u, t.gpus.size());
  ASSERT_EQ(1u, t.islands.size()) << describeTopology(t);
  EXPECT_EQ(16u, t.islands[0].size());
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) {
      EXPECT_EQ(a == b ? L::kSameDevice : L::kNvLink, t.links[a][b]) << a << "-" << b;
    }
  }
  // The PCIe tree alone still says two sockets: the matrix is what joins them.
  EXPECT_NE(t.gpus[0].package, t.gpus[15].package);
}

// A matrix of direct GPU-to-GPU links (no switches) joins exactly the listed pairs. Made from
// the eight-GPU switch-pair fixture (4 islands of 2 by PCIe, 2 by socket): NVLink between GPUs
// 0-1 and 2-3 only.
TEST(TopologyNvLinkMatrix, DirectLinksJoinOnlyTheListedPairs) {
  std::string xml = readAll(fixture("pcie_4switch_2socket_8gpu.xml"));
  Topology plain;
  ASSERT_EQ(tparSuccess, loadTopologyXml(fixture("pcie_4switch_2socket_8gpu.xml"), {}, &plain));
  // The GPUs' gp_index values, in bus order, from the file itself.
  std::vector<std::string> gps;
  for (size_t at = xml.find("pci_type=\"0302 [10de:"); at != std::string::npos;
       at = xml.find("pci_type=\"0302 [10de:", at + 1)) {
    const size_t gp = xml.rfind("gp_index=\"", at) + 10;
    gps.push_back(xml.substr(gp, xml.find('"', gp) - gp));
  }
  ASSERT_EQ(8u, gps.size());
  std::string idx, vals;
  for (const std::string& g : gps) idx += g + " ";
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      const bool link = a != b && a / 2 == b / 2 && a < 4;
      vals += std::string(link ? "50000" : "0") + " ";
    }
  }
  const std::string matrix = "  <distances2 type=\"PCIDev\" nbobjs=\"8\" kind=\"9\" name=\"NVLinkBandwidth\" "
                             "indexing=\"gp\">\n    <indexes length=\"" + std::to_string(idx.size()) +
                             "\">" + idx + "</indexes>\n    <u64values length=\"" +
                             std::to_string(vals.size()) + "\">" + vals + "</u64values>\n  </distances2>\n";
  xml.insert(xml.find("  <support "), matrix);
  const std::string path = tempPath("direct_nvlink.xml");
  std::ofstream(path) << xml;
  Topology t;
  ASSERT_EQ(tparSuccess, loadTopologyXml(path, {}, &t)) << lastError();
  std::remove(path.c_str());
  for (int a = 0; a < 8; ++a) {
    for (int b = 0; b < 8; ++b) {
      const bool link = a != b && a / 2 == b / 2 && a < 4;
      EXPECT_EQ(link ? L::kNvLink : plain.links[a][b], t.links[a][b]) << a << "-" << b;
    }
  }
}

// Attack row: a topology in hwloc 3's format is refused with a message that says so, not as
// "not an hwloc XML topology".
TEST(TopologyFormat, AFormatThreeFileIsRefusedNamingTheFormatAndTheInstalledHwloc) {
  const std::string path = badFixture("hwloc3_format_2gpu.xml");
  Topology t;
  t.source = "untouched";
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(path, {}, &t));
  const std::string e = lastError();
  EXPECT_TRUE(contains(e, path)) << e;
  EXPECT_TRUE(contains(e, "format 3.0")) << e;
  EXPECT_TRUE(contains(e, "reads formats up to 2.x")) << e;
  EXPECT_FALSE(contains(e, "not an hwloc XML topology")) << e;
  EXPECT_EQ("untouched", t.source);
  // The same machine in format 2.x loads (the refusal is about the format alone).
  EXPECT_EQ(tparSuccess, checkXmlFormatVersion(readAll(fixture("two_gpu.xml")), "two_gpu.xml"));
  EXPECT_EQ(tparSuccess, checkXmlFormatVersion("<topology><object/></topology>", "v1"));
  EXPECT_EQ(tparSuccess, checkXmlFormatVersion("<topology version=\"2.1\">", "v2.1"));
  EXPECT_EQ(tparInvalidArgument, checkXmlFormatVersion("<topology\nversion='4.0'>", "v4"));
}

TEST(TopologyFormat, AFifoOrADirectoryIsRefusedWithoutBlocking) {
  const std::string fifo = tempPath("topology_fifo");
  ASSERT_EQ(0, mkfifo(fifo.c_str(), 0600)) << strerror(errno);
  Topology t;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(fifo, {}, &t));
  EXPECT_TRUE(contains(lastError(), "not a regular file")) << lastError();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  unlink(fifo.c_str());
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(::testing::TempDir(), {}, &t));
  EXPECT_TRUE(contains(lastError(), "not a regular file")) << lastError();
}

// ------------------------------------------------------------------------------------------
// The crash guard.

std::atomic<int> g_forks{0};

// Attack row: the guard forked the caller's (multi-threaded) process. pthread_atfork handlers
// run in every fork() of the process, and never for posix_spawn's exec-only child.
TEST(TopologyCrashGuard, LoadingAFileForksNothingInThisProcess) {
  ASSERT_FALSE(probeHelperPath().empty()) << "tpar-hwloc-probe is not next to libtpar";
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork([] { g_forks.fetch_add(1); }, nullptr, nullptr); });
  const int before = g_forks.load();
  Topology t;
  EXPECT_EQ(tparSuccess, loadTopologyXml(fixture("two_gpu.xml"), {}, &t)) << lastError();
  EXPECT_EQ(tparInvalidArgument,
            loadTopologyXml(badFixture("hwloc_crash_missing_complete_cpuset.xml"), {}, &t));
  EXPECT_EQ(before, g_forks.load()) << "loadTopologyXml forked this process";
}

// Attack row: the application ignores SIGCHLD (children are then reaped by the kernel and
// waitpid fails), then loads a topology file. Run in a child process, whose dispositions are
// its own.
TEST(DISABLED_TopologyCrashGuardChild, WorksWithSigchldIgnored) {
  ASSERT_NE(SIG_ERR, signal(SIGCHLD, SIG_IGN));
  Topology t;
  EXPECT_EQ(tparSuccess, loadTopologyXml(fixture("two_gpu.xml"), {}, &t)) << lastError();
  EXPECT_EQ(2u, t.gpus.size());
  const std::string crash = badFixture("hwloc_crash_missing_complete_cpuset.xml");
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(crash, {}, &t));
  EXPECT_TRUE(contains(lastError(), "crashes hwloc")) << lastError();
}

TEST(TopologyCrashGuard, WorksWhenTheApplicationIgnoresSigchld) {
  std::string output;
  const int rc = tpar_test::runChild({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                      "--gtest_filter=DISABLED_TopologyCrashGuardChild.*"},
                                     {}, 120, &output);
  EXPECT_EQ(0, rc) << output;
  EXPECT_TRUE(contains(output, "[  PASSED  ] 1 test")) << output;
}

TEST(TopologyCrashGuard, AFileThatCrashesHwlocIsRefusedNamingIt) {
  Topology t;
  const std::string crash = badFixture("hwloc_crash_missing_complete_cpuset.xml");
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(crash, {}, &t));
  EXPECT_TRUE(contains(lastError(), crash)) << lastError();
  EXPECT_TRUE(contains(lastError(), "crashes hwloc")) << lastError();
}

// A helper that never answers is killed at the bound, and the file refused.
TEST(TopologyCrashGuard, AHelperThatHangsIsKilledAtTheBound) {
  const std::string script = tempPath("hanging_probe.sh");
  const std::string pidfile = tempPath("hanging_probe.pid");
  std::ofstream(script) << "#!/bin/sh\necho $$ > " << pidfile << "\nexec sleep 60\n";
  ASSERT_EQ(0, chmod(script.c_str(), 0700));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(tparInvalidArgument,
            probeTopologyXml(readAll(fixture("two_gpu.xml")), "two_gpu.xml", script, 500));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(contains(lastError(), "did not finish loading it within 500 ms")) << lastError();
  EXPECT_LT(took, std::chrono::seconds(3));
  const pid_t pid = std::atoi(readAll(pidfile).c_str());
  ASSERT_GT(pid, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(0, kill(pid, 0)) << "the helper " << pid << " still runs";
  std::remove(script.c_str());
  std::remove(pidfile.c_str());
}

}  // namespace
}  // namespace tpar
