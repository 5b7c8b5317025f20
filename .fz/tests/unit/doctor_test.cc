// `tpar doctor` without a GPU: its verdict, tables and JSON are pure functions of recorded
// probe results, checked here on machines the CI never runs on.
#include "tools/tpar/doctor/doctor.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "tools/tpar/common/commands.h"
#include "tools/tpar/doctor/nvml.h"

namespace tpar_cli {
namespace {

bool anyContains(const std::vector<std::string>& lines, const std::string& what) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(what) != std::string::npos; });
}

std::string joined(const Verdict& v) {
  std::string s = v.headline + "\n";
  for (const std::string& d : v.details) s += d + "\n";
  return s;
}

// A machine of `n` GPUs as the probes would record it: every pair with peer access over one
// PCIe switch, both self-tests passed, tpar timed against NCCL.
DoctorResults machine(int n, double tpar_small_us = 10.0, double nccl_small_us = 45.0) {
  DoctorResults r;
  r.nvidia_driver = "580.159.04";
  r.cuda_driver = 13000;
  r.cuda_runtime = 13000;
  r.nccl_version = "2.28.9";
  r.host_numa_node = 0;
  for (int i = 0; i < n; ++i) {
    GpuProbe g;
    g.index = i;
    g.name = "NVIDIA RTX PRO 6000 Blackwell Server Edition";
    g.cc_major = 12;
    g.bus_id = "0000:" + std::to_string(10 + i) + ":00.0";
    g.numa_node = i < n / 2 ? 0 : 1;
    g.pcie_gen = g.pcie_gen_max = 5;
    g.pcie_width = g.pcie_width_max = 16;
    g.host = {52.0, 48.0, 1.1, ""};
    r.gpus.push_back(g);
  }
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      PairProbe p;
      p.a = a;
      p.b = b;
      p.topology = "PIX";
      p.peer_access = p.access_supported = true;
      p.performance_rank = 0;
      p.link = {51.0, 45.0, 1.8, ""};
      r.pairs.push_back(p);
    }
  }
  r.devices = chooseDevices(r);
  r.transport = n == 1 ? "same-device" : "peer-access";
  r.one_shot_max_bytes = 256 << 10;
  r.algorithm_table = "256 B-256 KiB oneshot, 512 KiB-64 MiB twoshot";
  r.self_tests = {{"tpar:oneshot", true, "20 all-reduces checked element by element", "oneshot"},
                  {"tpar:twoshot", true, "20 all-reduces checked element by element", "twoshot"}};
  r.timing_iterations = 300;
  TimingResult small;
  small.bytes = kSmallMessageBytes;
  small.tpar_us = tpar_small_us;
  small.tpar_algo = "oneshot";
  small.nccl_us = nccl_small_us;
  TimingResult large;
  large.bytes = kLargeMessageBytes;
  large.tpar_us = 30.0;
  large.tpar_algo = "twoshot";
  large.nccl_us = 120.0;
  r.timings = {small, large};
  return r;
}

void block(DoctorResults* r, int a, int b) {
  for (PairProbe& p : r->pairs) {
    if ((p.a == a && p.b == b) || (p.a == b && p.b == a)) {
      p.peer_access = p.access_supported = false;
      p.topology = "SYS";
      p.nvml_p2p = nvmlP2pStatusText(1);
      p.link = LinkMeasure{};
    }
  }
  r->devices = chooseDevices(*r);
}

TEST(DoctorTopology, NamesLevelsLikeNvidiaSmiTopo) {
  EXPECT_EQ("X", topologyName(3, 3, kNvmlTopologyUnknown, 0));
  EXPECT_EQ("NV4", topologyName(0, 1, kNvmlTopologySingle, 4));
  EXPECT_EQ("NV18", topologyName(0, 1, kNvmlTopologySystem, 18));
  EXPECT_EQ("PIX", topologyName(0, 1, kNvmlTopologySingle, 0));
  EXPECT_EQ("PIX", topologyName(0, 1, kNvmlTopologyInternal, 0));
  EXPECT_EQ("PXB", topologyName(0, 1, kNvmlTopologyMultiple, 0));
  EXPECT_EQ("PHB", topologyName(0, 1, kNvmlTopologyHostBridge, 0));
  EXPECT_EQ("NODE", topologyName(0, 1, kNvmlTopologyNode, 0));
  EXPECT_EQ("SYS", topologyName(0, 1, kNvmlTopologySystem, 0));
  EXPECT_EQ("?", topologyName(0, 1, kNvmlTopologyUnknown, 0));
  EXPECT_EQ("?", topologyName(0, 1, 35, 0));
}

TEST(DoctorTopology, SysfsBusIdIsLowerCaseWithFourDigitDomain) {
  EXPECT_EQ("0000:3b:00.0", sysfsBusId("0000:3B:00.0"));
  EXPECT_EQ("0000:af:1f.1", sysfsBusId("00000000:AF:1F.1"));  // NVML's 8-digit domain
  EXPECT_EQ("", sysfsBusId("3B:00.0"));
  EXPECT_EQ("", sysfsBusId("0000:3B:00.0junk"));
  EXPECT_EQ("", sysfsBusId(""));
}

TEST(DoctorTopology, NvmlP2pStatusInWords) {
  EXPECT_EQ("", nvmlP2pStatusText(0));
  EXPECT_NE(std::string::npos, nvmlP2pStatusText(1).find("chipset"));
  EXPECT_NE(std::string::npos, nvmlP2pStatusText(4).find("registry"));
  EXPECT_NE(std::string::npos, nvmlP2pStatusText(99).find("unknown"));
}

TEST(DoctorDevices, AllGpusWhenEveryPairReachesEveryOther) {
  const DoctorResults r = machine(8);
  EXPECT_EQ((std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}), r.devices);
  EXPECT_TRUE(blockedPairs(r).empty());
  EXPECT_FALSE(usesVirtualRanks(r.devices));
}

TEST(DoctorDevices, EveryGpuEvenWhenAPairIsBlocked) {
  DoctorResults r = machine(4);
  block(&r, 0, 3);
  EXPECT_EQ((std::vector<std::pair<int, int>>{{0, 3}}), blockedPairs(r));
  EXPECT_EQ((std::vector<int>{0, 1, 2, 3}), r.devices);
  DoctorResults two = machine(2);
  block(&two, 0, 1);
  EXPECT_EQ((std::vector<int>{0, 1}), two.devices);
  EXPECT_FALSE(usesVirtualRanks(two.devices));
}

TEST(DoctorDevices, VirtualRanksOnlyOnASingleGpu) {
  EXPECT_EQ((std::vector<int>{0, 0}), machine(1).devices);
  EXPECT_TRUE(usesVirtualRanks(machine(1).devices));
  EXPECT_TRUE(chooseDevices(DoctorResults{}).empty());
}

TEST(DoctorVerdict, P2pEverywhereAndFasterThanNcclExitsZeroWithTheSpeedup) {
  const DoctorResults r = machine(8);
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorOk, v.exit_code) << joined(v);
  EXPECT_EQ("tpar works here: its self-test passed on all 8 GPUs.", v.headline);
  EXPECT_TRUE(anyContains(v.details, "'peer-access' transport")) << joined(v);
  // The plan the communicator follows, as it reported it: never a constant of the doctor's.
  EXPECT_TRUE(anyContains(v.details,
                          "its algorithms there for bfloat16 messages: 256 B-256 KiB oneshot, "
                          "512 KiB-64 MiB twoshot."))
      << joined(v);
  EXPECT_TRUE(anyContains(v.details, "At 64 KiB: tpar 10.0 us, NCCL 45.0 us: tpar is 4.5x faster."))
      << joined(v);
  EXPECT_TRUE(
      anyContains(v.details, "At 512 KiB: tpar 30.0 us, NCCL 120.0 us: tpar is 4.0x faster."))
      << joined(v);
  EXPECT_TRUE(anyContains(v.details, "TPAR_ENGINE_PLUGIN=1")) << joined(v);
  EXPECT_TRUE(anyContains(v.details, "libtpar_nccl.so")) << joined(v);
  EXPECT_FALSE(anyContains(v.details, "not built yet")) << joined(v);
  EXPECT_FALSE(anyContains(v.details, "blocked")) << joined(v);
}

TEST(DoctorVerdict, SaysSoWhenTparIsSlowerThanNccl) {
  const Verdict v = makeVerdict(machine(4, 50.0, 40.0));
  EXPECT_EQ(kDoctorOk, v.exit_code);
  EXPECT_TRUE(anyContains(v.details, "tpar is 1.2x SLOWER than NCCL here")) << joined(v);
}

TEST(DoctorVerdict, BlockedPairNamesItAndTheHostTransportAndExitsZeroWhenTheSelfTestPassed) {
  DoctorResults r = machine(4);
  block(&r, 0, 3);
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorOk, v.exit_code) << joined(v);
  EXPECT_NE(std::string::npos, v.headline.find("works here, through pinned host memory"))
      << v.headline;
  EXPECT_NE(std::string::npos, v.headline.find("all 4 GPUs")) << v.headline;
  EXPECT_TRUE(anyContains(v.details, "blocked between GPU 0 and GPU 3 (SYS, NVML: the chipset"))
      << joined(v);
  EXPECT_TRUE(anyContains(v.details, "ACS")) << joined(v);
  EXPECT_TRUE(anyContains(v.details, "host-staged transport")) << joined(v);
  EXPECT_FALSE(anyContains(v.details, "planned but not built")) << joined(v);
  EXPECT_TRUE(anyContains(v.details, "write 52.0 GB/s, read 48.0 GB/s, one-way 1.10 us"))
      << joined(v);
}

TEST(DoctorVerdict, BlockedPairWithAFailedSelfTestStillFails) {
  DoctorResults r = machine(2);
  block(&r, 0, 1);
  r.self_tests[0].passed = false;
  r.self_tests[0].detail = "3 wrong elements";
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorSelfTestFailed, v.exit_code);
  EXPECT_TRUE(anyContains(v.details, "blocked between GPU 0 and GPU 1")) << joined(v);
}

TEST(DoctorVerdict, NoNcclStillPassesAndSaysWhyThereIsNoComparison) {
  DoctorResults r = machine(2);
  r.nccl_version.clear();
  r.nccl_error = "no loadable NCCL (tried libnccl.so.2)";
  for (TimingResult& t : r.timings) {
    t.nccl_us = 0;
    t.nccl_error = "no NCCL: " + r.nccl_error;
  }
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorOk, v.exit_code);
  EXPECT_TRUE(anyContains(v.details,
                          "At 64 KiB: tpar 10.0 us; NCCL not measured (no NCCL: no "
                          "loadable NCCL"))
      << joined(v);
  EXPECT_FALSE(anyContains(v.details, "faster")) << joined(v);
}

TEST(DoctorVerdict, SingleGpuPassesWithVirtualRanksMarkedNotComparable) {
  DoctorResults r = machine(1);
  for (TimingResult& t : r.timings) {
    t.nccl_us = 0;
    t.nccl_error = "NCCL cannot run two ranks on one GPU";
  }
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorOk, v.exit_code);
  EXPECT_NE(std::string::npos, v.headline.find("2 virtual ranks")) << v.headline;
  EXPECT_TRUE(anyContains(v.details, "not comparable with NCCL")) << joined(v);
  EXPECT_TRUE(anyContains(v.details, "'same-device' transport on 2 virtual ranks on GPU 0"))
      << joined(v);
}

TEST(DoctorVerdict, SelfTestFailureExitsNonZeroWithTheReason) {
  DoctorResults r = machine(2);
  r.self_tests[1] = {"tpar:twoshot", false, "7 wrong elements (32771 x bf16 out of place)"};
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorSelfTestFailed, v.exit_code);
  EXPECT_NE(std::string::npos, v.headline.find("does NOT work here")) << v.headline;
  EXPECT_TRUE(anyContains(v.details, "tpar:twoshot: 7 wrong elements")) << joined(v);
  EXPECT_FALSE(anyContains(v.details, "faster")) << joined(v);
}

TEST(DoctorVerdict, SelfTestThatNeverRanIsAFailure) {
  DoctorResults r = machine(2);
  r.self_tests.clear();
  EXPECT_EQ(kDoctorSelfTestFailed, makeVerdict(r).exit_code);
}

TEST(DoctorVerdict, NoGpuExitsThreeWithAClearMessage) {
  DoctorResults r;
  r.no_gpu = "no NVIDIA driver found (libcuda.so.1: cannot open shared object file)";
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorNoGpu, v.exit_code);
  EXPECT_EQ(3, v.exit_code);  // the command's map (common/exit_codes.h)
  EXPECT_EQ("tpar cannot run here: " + r.no_gpu + ".", v.headline);
  EXPECT_NE(std::string::npos,
            renderReport(r, v).find("Verdict: tpar cannot run here: no NVIDIA driver found"));
}

TEST(DoctorVerdict, WarnsAboutANarrowPcieLinkAndFailedProbes) {
  DoctorResults r = machine(2);
  r.gpus[1].pcie_width = 8;
  r.pairs[0].link.error = "latency probe: no answer within 1000 ms after 0 round trips";
  const Verdict v = makeVerdict(r);
  EXPECT_TRUE(anyContains(v.details, "GPU 1's PCIe link runs at x8 of x16")) << joined(v);
  EXPECT_TRUE(anyContains(v.details, "GPU 0 -> GPU 1 probe: latency probe: no answer"))
      << joined(v);
}

TEST(DoctorJson, HasEverySection) {
  DoctorResults r = machine(4);
  block(&r, 1, 2);
  const nlohmann::json j = doctorJson(r, makeVerdict(r));
  for (const char* key : {"quick", "nccl_requested", "no_gpu", "nvml", "nccl", "host_numa_node",
                          "gpus", "topology", "pairs", "self_test", "timing", "verdict"})
    EXPECT_TRUE(j.contains(key)) << key;
  ASSERT_EQ(4u, j["gpus"].size());
  for (const char* key :
       {"index", "name", "compute_capability", "bus_id", "numa_node", "pcie", "host", "local"})
    EXPECT_TRUE(j["gpus"][0].contains(key)) << key;
  EXPECT_EQ("12.0", j["gpus"][0]["compute_capability"]);
  EXPECT_EQ(52.0, j["gpus"][0]["host"]["write_gbps"].get<double>());
  EXPECT_TRUE(j["gpus"][0]["local"].is_null());  // measured on single-GPU machines only
  ASSERT_EQ(4u, j["topology"].size());
  EXPECT_EQ("X", j["topology"][2][2]);
  EXPECT_EQ("SYS", j["topology"][1][2]);
  EXPECT_EQ("PIX", j["topology"][0][3]);
  ASSERT_EQ(12u, j["pairs"].size());
  for (const char* key :
       {"a", "b", "topology", "peer_access", "performance_rank", "access_supported",
        "native_atomics", "nvml_p2p", "write_gbps", "read_gbps", "latency_us", "error"})
    EXPECT_TRUE(j["pairs"][0].contains(key)) << key;
  EXPECT_EQ("2.28.9", j["nccl"]["version"]);
  EXPECT_EQ((std::vector<int>{0, 1, 2, 3}), j["self_test"]["devices"].get<std::vector<int>>());
  EXPECT_FALSE(j["self_test"]["virtual_ranks"].get<bool>());
  EXPECT_TRUE(j["timing"]["comparable_with_nccl"].get<bool>());
  ASSERT_EQ(2u, j["timing"]["rows"].size());
  EXPECT_EQ(65536u, j["timing"]["rows"][0]["bytes"].get<size_t>());
  EXPECT_DOUBLE_EQ(4.5, j["timing"]["rows"][0]["speedup_vs_nccl"].get<double>());
  EXPECT_EQ(kDoctorOk, j["verdict"]["exit_code"].get<int>());
  EXPECT_TRUE(j["verdict"]["tpar_works"].get<bool>());
  EXPECT_FALSE(j["verdict"]["details"].empty());
}

TEST(DoctorJson, UnmeasuredNumbersAreNullNotZero) {
  DoctorResults r = machine(1);
  r.quick = true;
  r.gpus[0].host.write_gbps = r.gpus[0].host.read_gbps = 0;
  r.timings[0].nccl_us = 0;
  const nlohmann::json j = doctorJson(r, makeVerdict(r));
  EXPECT_TRUE(j["gpus"][0]["host"]["write_gbps"].is_null());
  EXPECT_FALSE(j["gpus"][0]["local"].is_null());
  EXPECT_TRUE(j["timing"]["rows"][0]["nccl_us"].is_null());
  EXPECT_TRUE(j["timing"]["rows"][0]["speedup_vs_nccl"].is_null());
  EXPECT_FALSE(j["timing"]["comparable_with_nccl"].get<bool>());
  EXPECT_TRUE(j["self_test"]["virtual_ranks"].get<bool>());
}

TEST(DoctorReport, TablesNameTheGpusLinksSelfTestAndVerdict) {
  DoctorResults r = machine(2);
  block(&r, 0, 1);
  r.devices = {0, 0};  // as on a one-GPU machine: the report must say so
  const std::string s = renderReport(r, makeVerdict(r));
  EXPECT_NE(std::string::npos, s.find("NVIDIA RTX PRO 6000 Blackwell")) << s;
  EXPECT_NE(std::string::npos, s.find("Gen5 x16")) << s;
  EXPECT_NE(std::string::npos, s.find("GPU0  X     SYS")) << s;
  EXPECT_NE(std::string::npos, s.find("the chipset does not support peer-to-peer")) << s;
  EXPECT_NE(std::string::npos, s.find("tpar:oneshot  PASS")) << s;
  EXPECT_NE(std::string::npos, s.find("NOT comparable with a multi-GPU machine")) << s;
  EXPECT_NE(std::string::npos, s.find("Verdict: tpar works here, through pinned host memory"))
      << s;
}

// A forced algorithm that fell back checked what ran, and the report says that, not PASS.
DoctorResults withHierarchical(bool fixture_ran_hier) {
  DoctorResults r = machine(1);
  r.self_tests.push_back({"tpar:hier", true,
                          "20 all-reduces of twoshot checked element by element", "twoshot",
                          "twoshot (one island)"});
  SelfTestResult fixture{"tpar:hier", true, "20 all-reduces checked element by element", "hier",
                         "", "8 virtual ranks on GPU 0 with the islands of topology fixture "
                             "rootport_2socket_8gpu.xml: islands {0-3} {4-7}"};
  if (!fixture_ran_hier) {
    fixture.passed = false;
    fixture.detail = "the fixture gave this group no islands";
  }
  r.self_tests.push_back(fixture);
  return r;
}

TEST(DoctorReport, AFallbackIsReportedAsSuchNeverAsAPassOfTheForcedAlgorithm) {
  const DoctorResults r = withHierarchical(true);
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorOk, v.exit_code) << joined(v);
  const std::string s = renderReport(r, v);
  EXPECT_NE(std::string::npos,
            s.find("  tpar:hier     fell back to twoshot (one island): 20 all-reduces of twoshot "
                   "checked element by element\n"))
      << s;
  // The only PASS of tpar:hier is the fixture's, under its own heading.
  const size_t heading = s.find("Self-test on 8 virtual ranks on GPU 0 with the islands of "
                                "topology fixture rootport_2socket_8gpu.xml: islands {0-3} {4-7}");
  ASSERT_NE(std::string::npos, heading) << s;
  EXPECT_EQ(heading, s.rfind("Self-test on 8 virtual ranks")) << s;
  EXPECT_GT(s.find("tpar:hier     PASS"), heading) << s;
  EXPECT_EQ(s.find("tpar:hier     PASS"), s.rfind("tpar:hier     PASS")) << s;
  EXPECT_TRUE(anyContains(v.details, "tpar:hier cannot run on 2 virtual ranks on GPU 0: it fell "
                                     "back to twoshot (one island)"))
      << joined(v);
  const nlohmann::json j = doctorJson(r, v);
  const auto& results = j["self_test"]["results"];
  ASSERT_EQ(4u, results.size());
  EXPECT_EQ("twoshot", results[2]["ran"]);
  EXPECT_EQ("twoshot (one island)", results[2]["fallback"]);
  EXPECT_EQ("2 virtual ranks on GPU 0", results[2]["where"]);
  EXPECT_EQ("hier", results[3]["ran"]);
  EXPECT_TRUE(results[3]["fallback"].is_null());
  EXPECT_NE(std::string::npos, results[3]["where"].get<std::string>().find("fixture"));
  EXPECT_EQ("256 B-256 KiB oneshot, 512 KiB-64 MiB twoshot",
            j["self_test"]["algorithm_table"].get<std::string>());
}

TEST(DoctorReport, AFixtureWithoutIslandsFailsTheSelfTest) {
  const DoctorResults r = withHierarchical(false);
  const Verdict v = makeVerdict(r);
  EXPECT_EQ(kDoctorSelfTestFailed, v.exit_code);
  EXPECT_NE(std::string::npos, renderReport(r, v).find("tpar:hier     FAIL  the fixture gave"));
}

TEST(DoctorCommand, ParsesItsOptionsAndRefusesOthers) {
  CLI::App app;
  // The action owns the options the parser writes into: keep it alive while parsing.
  const Action run = addDoctorCommand(app, "tpar doctor");
  EXPECT_NO_THROW(app.parse(std::vector<std::string>{"out.json", "--json", "--no-nccl", "--quick",
                                                     "doctor"}));  // reversed argv
  CLI::App other;
  const Action other_run = addDoctorCommand(other, "tpar doctor");
  EXPECT_THROW(other.parse(std::vector<std::string>{"--bogus", "doctor"}), CLI::ParseError);
}

}  // namespace
}  // namespace tpar_cli
