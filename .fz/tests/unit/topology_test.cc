// Topology from hwloc XML fixtures (tests/fixtures/topology, written by
// scripts/make_topology_fixtures.py): link classes, islands, signatures, bus-id selection and
// errors; islands from hand-made link matrices; the live path's argument checks; the FNV-1a
// hash that signatures are made with.
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/error.h"
#include "base/hash.h"
#include "tools/tpar/doctor/doctor.h"
#include "topology/topology.h"

namespace tpar {
namespace {

using L = LinkClass;
using Islands = std::vector<std::vector<int>>;

std::string fixture(const std::string& name) {
  return std::string(TPAR_SOURCE_DIR) + "/tests/fixtures/topology/" + name;
}

Topology load(const std::string& name, const std::vector<std::string>& ids = {}) {
  Topology t;
  const tparResult_t res = loadTopologyXml(fixture(name), ids, &t);
  EXPECT_EQ(tparSuccess, res) << name << ": " << lastError();
  return t;
}

// What a failed call must leave alone.
Topology sentinel() {
  Topology t;
  t.source = "untouched";
  t.links = {{L::kSameDevice}};
  t.gpus.resize(1);
  t.islands = {{0}};
  return t;
}

void expectUntouched(const Topology& t) {
  EXPECT_EQ("untouched", t.source);
  EXPECT_EQ(1u, t.links.size());
  EXPECT_EQ(1u, t.gpus.size());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A hand-made n x n matrix: `fill` everywhere off the diagonal.
Topology matrix(int n, L fill) {
  Topology t;
  t.links.assign(n, std::vector<L>(n, fill));
  for (int r = 0; r < n; ++r) t.links[r][r] = L::kSameDevice;
  return t;
}

void setLink(Topology* t, int a, int b, L c) { t->links[a][b] = t->links[b][a] = c; }

struct FixtureCase {
  const char* file;
  size_t gpus;
  Islands islands;
};

const std::vector<FixtureCase>& fixtureCases() {
  static const std::vector<FixtureCase> cases = {
      {"pcie_4switch_2socket_8gpu.xml", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {"rootport_2socket_8gpu.xml", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {"one_switch_8gpu.xml", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {"nvswitch_8gpu.xml", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}},
      {"two_gpu.xml", 2, {{0, 1}}},
      {"no_p2p_4gpu.xml", 4, {{0, 1, 2, 3}}},
      {"switch_cascade_2socket_8gpu.xml", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
      {"nvswitch_dgx2_16gpu.xml", 16, {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
  };
  return cases;
}

TEST(TopologyFixture, EveryFixtureLoadsWithItsGpusAndIslands) {
  for (const FixtureCase& c : fixtureCases()) {
    SCOPED_TRACE(c.file);
    const Topology t = load(c.file);
    ASSERT_EQ(c.gpus, t.gpus.size());
    ASSERT_EQ(c.gpus, t.links.size());
    EXPECT_EQ(c.islands, t.islands);
    EXPECT_EQ(std::string("xml:") + fixture(c.file), t.source);
    for (size_t a = 0; a < c.gpus; ++a) {
      EXPECT_EQ(L::kSameDevice, t.links[a][a]);
      EXPECT_GE(t.gpus[a].numa_node, 0);
      EXPECT_GE(t.gpus[a].package, 0);
      for (size_t b = 0; b < c.gpus; ++b) EXPECT_EQ(t.links[a][b], t.links[b][a]);
    }
    // Bus order, lower case, as stored.
    for (size_t r = 1; r < c.gpus; ++r) EXPECT_LT(t.gpus[r - 1].bus_id, t.gpus[r].bus_id);
  }
}

TEST(TopologyFixture, SwitchPairsOverTwoSocketsShowPairsInsideSocketIslands) {
  const Topology t = load("pcie_4switch_2socket_8gpu.xml");
  EXPECT_EQ("0000:18:00.0", t.gpus[0].bus_id);
  EXPECT_EQ("0000:bc:00.0", t.gpus[7].bus_id);
  EXPECT_EQ(L::kSameSwitch, t.links[0][1]);
  EXPECT_EQ(L::kSameSwitch, t.links[6][7]);
  EXPECT_EQ(L::kAcrossNuma, t.links[0][2]);  // two host bridges of socket 0 (NODE)
  EXPECT_EQ(L::kAcrossNuma, t.links[3][4]);  // across the sockets (SYS)
  EXPECT_EQ(0, t.gpus[3].package);
  EXPECT_EQ(1, t.gpus[4].package);
  EXPECT_EQ(0, t.gpus[0].numa_node);
  EXPECT_EQ(1, t.gpus[7].numa_node);
  const std::string text = describeTopology(t);
  EXPECT_TRUE(contains(text, "island 0: ranks 0 1 2 3")) << text;
  EXPECT_TRUE(contains(text, "island 1: ranks 4 5 6 7")) << text;
  EXPECT_TRUE(contains(text, "PIX")) << text;
  EXPECT_TRUE(contains(text, "NODE")) << text;
  EXPECT_TRUE(contains(text, "SYS")) << text;
  EXPECT_TRUE(contains(text, "0000:9a:00.0")) << text;
}

TEST(TopologyFixture, RootPortsGiveHostBridgeNodeAndSysLinks) {
  const Topology t = load("rootport_2socket_8gpu.xml");
  EXPECT_EQ(L::kSameHostBridge, t.links[0][1]);
  EXPECT_EQ(L::kAcrossNuma, t.links[1][2]);
  EXPECT_EQ(L::kAcrossNuma, t.links[0][7]);
  EXPECT_EQ(L::kSameHostBridge, t.links[6][7]);
}

TEST(TopologyFixture, SwitchCascadeGivesPixAndPxb) {
  const Topology t = load("switch_cascade_2socket_8gpu.xml");
  EXPECT_EQ(L::kSameSwitch, t.links[0][1]);
  EXPECT_EQ(L::kAcrossSwitches, t.links[0][2]);
  EXPECT_EQ(L::kAcrossSwitches, t.links[1][3]);
  EXPECT_EQ(L::kSameSwitch, t.links[2][3]);
  EXPECT_EQ(L::kAcrossNuma, t.links[3][4]);
  EXPECT_TRUE(contains(describeTopology(t), "PXB"));
}

TEST(TopologyFixture, OneSwitchNvSwitchTwoGpuAndNoP2pLinks) {
  for (const auto& [file, cls] :
       std::vector<std::pair<std::string, L>>{{"one_switch_8gpu.xml", L::kSameSwitch},
                                              {"nvswitch_8gpu.xml", L::kNvLink},
                                              {"two_gpu.xml", L::kSameHostBridge},
                                              {"no_p2p_4gpu.xml", L::kNoP2P}}) {
    SCOPED_TRACE(file);
    const Topology t = load(file);
    for (size_t a = 0; a < t.links.size(); ++a)
      for (size_t b = 0; b < t.links.size(); ++b)
        EXPECT_EQ(a == b ? L::kSameDevice : cls, t.links[a][b]) << a << "," << b;
  }
  EXPECT_TRUE(contains(describeTopology(load("no_p2p_4gpu.xml")), "NOP2P"));
  EXPECT_TRUE(contains(describeTopology(load("nvswitch_8gpu.xml")), " NV "));
}

TEST(TopologyFixture, OnlyNvidiaGpusAreRanks) {
  // The BMC's VGA (ASPEED, class 0300), NVSwitches (NVIDIA, class 0680), GPU audio functions
  // (NVIDIA, class 0403), NICs and NVMe drives all sit in the fixtures' PCIe trees.
  const std::string nvme = fixture("pcie_4switch_2socket_8gpu.xml");
  Topology t = sentinel();
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(nvme, {"0000:58:00.0"}, &t));
  EXPECT_TRUE(contains(lastError(), "0000:58:00.0 in topology XML")) << lastError();
  EXPECT_TRUE(contains(lastError(), "not an NVIDIA GPU")) << lastError();
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(nvme, {"0000:02:00.0"}, &t));  // ASPEED VGA
  EXPECT_EQ(tparInvalidArgument,
            loadTopologyXml(fixture("nvswitch_8gpu.xml"), {"0000:5a:00.0"}, &t));  // NVSwitch
  EXPECT_EQ(tparInvalidArgument,
            loadTopologyXml(fixture("no_p2p_4gpu.xml"), {"0000:01:00.1"}, &t));  // audio
  expectUntouched(t);
}

TEST(TopologyFixture, SignaturesDifferBetweenFixturesAndAreStable) {
  std::set<std::string> seen;
  for (const FixtureCase& c : fixtureCases()) {
    const Topology a = load(c.file);
    const Topology b = load(c.file);
    EXPECT_EQ(a.signature, b.signature) << c.file;
    EXPECT_EQ(0u, a.signature.rfind("v1-", 0)) << a.signature;
    EXPECT_LT(a.signature.size(), 96u);  // tparCommInfo_t::topologySignature
    EXPECT_TRUE(seen.insert(a.signature).second) << c.file << " repeats " << a.signature;
  }
}

TEST(TopologyFixture, SelectsGpusByBusIdInTheGivenOrder) {
  // Upper case as CUDA prints it, out of bus order.
  const Topology t = load("pcie_4switch_2socket_8gpu.xml", {"0000:9A:00.0", "0000:18:00.0"});
  ASSERT_EQ(2u, t.gpus.size());
  EXPECT_EQ("0000:9a:00.0", t.gpus[0].bus_id);
  EXPECT_EQ(1, t.gpus[0].package);
  EXPECT_EQ("0000:18:00.0", t.gpus[1].bus_id);
  EXPECT_EQ(L::kAcrossNuma, t.links[0][1]);
  EXPECT_EQ(Islands({{0, 1}}), t.islands);
  EXPECT_NE(load("pcie_4switch_2socket_8gpu.xml").signature, t.signature);

  // Three GPUs of a cascade: a switch pair and one GPU of the neighbouring switch.
  const Topology c =
      load("switch_cascade_2socket_8gpu.xml", {"0000:05:00.0", "0000:06:00.0", "0000:09:00.0"});
  EXPECT_EQ(Islands({{0, 1}, {2}}), c.islands);
}

TEST(TopologyFixture, UnknownOrMalformedBusIdIsNamed) {
  Topology t = sentinel();
  EXPECT_EQ(tparInvalidArgument,
            loadTopologyXml(fixture("two_gpu.xml"), {"0000:41:00.0", "0000:77:00.0"}, &t));
  EXPECT_TRUE(contains(lastError(), "0000:77:00.0")) << lastError();
  EXPECT_TRUE(contains(lastError(), "two_gpu.xml")) << lastError();
  expectUntouched(t);
  for (const char* bad : {"gpu0", "41:00.0", "0000:41:00.0x", "0000:41:20.0", "-0:41:00.0"}) {
    EXPECT_EQ(tparInvalidArgument, loadTopologyXml(fixture("two_gpu.xml"), {bad}, &t)) << bad;
    EXPECT_TRUE(contains(lastError(), bad)) << lastError();
  }
  expectUntouched(t);
}

TEST(TopologyFixture, MissingAndGarbageFilesFailClearly) {
  Topology t = sentinel();
  const std::string missing = fixture("no_such_machine.xml");
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(missing, {}, &t));
  EXPECT_TRUE(contains(lastError(), "cannot read topology XML " + missing)) << lastError();
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml("", {}, &t));
  EXPECT_TRUE(contains(lastError(), "path is empty")) << lastError();

  const std::string dir = ::testing::TempDir();
  const std::string garbage = dir + "tpar_topology_garbage_" + std::to_string(getpid()) + ".xml";
  std::ofstream(garbage) << "this is not XML { at all <<<\n";
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(garbage, {}, &t));
  EXPECT_TRUE(contains(lastError(), garbage)) << lastError();
  EXPECT_TRUE(contains(lastError(), "not an hwloc XML topology")) << lastError();

  // Well-formed XML of the wrong kind fails the same way.
  std::ofstream(garbage) << "<?xml version=\"1.0\"?>\n<html><body/></html>\n";
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(garbage, {}, &t));
  EXPECT_TRUE(contains(lastError(), "not an hwloc XML topology")) << lastError();
  std::remove(garbage.c_str());
  expectUntouched(t);
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(fixture("two_gpu.xml"), {}, nullptr));
}

TEST(TopologyFixture, VirtualRanksOnOneGpuAreSameDeviceAndOneIsland) {
  const Topology t = load("two_gpu.xml", {"0000:41:00.0", "0000:41:00.0", "0000:41:00.0"});
  ASSERT_EQ(3u, t.links.size());
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) EXPECT_EQ(L::kSameDevice, t.links[a][b]);
  EXPECT_EQ(Islands({{0, 1, 2}}), t.islands);

  // Two ranks on each of two GPUs: one island per GPU.
  const Topology m =
      load("two_gpu.xml", {"0000:41:00.0", "0000:42:00.0", "0000:41:00.0", "0000:42:00.0"});
  EXPECT_EQ(L::kSameDevice, m.links[0][2]);
  EXPECT_EQ(L::kSameHostBridge, m.links[0][1]);
  EXPECT_EQ(Islands({{0, 2}, {1, 3}}), m.islands);
}

TEST(TopologyIslands, EqualLinksMakeOneIsland) {
  for (L c : {L::kNvLink, L::kSameSwitch, L::kSameHostBridge, L::kAcrossNuma, L::kNoP2P}) {
    Topology t = matrix(4, c);
    deriveIslands(&t);
    EXPECT_EQ(Islands({{0, 1, 2, 3}}), t.islands) << linkClassName(c);
  }
  Topology one = matrix(1, L::kNoP2P);
  deriveIslands(&one);
  EXPECT_EQ(Islands({{0}}), one.islands);
  Topology none;
  deriveIslands(&none);
  EXPECT_TRUE(none.islands.empty());
  EXPECT_FALSE(none.signature.empty());
}

TEST(TopologyIslands, SwitchPairsOnOneHostBridgeMakeFourIslands) {
  Topology t = matrix(8, L::kSameHostBridge);
  for (int p = 0; p < 4; ++p) setLink(&t, 2 * p, 2 * p + 1, L::kSameSwitch);
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1}, {2, 3}, {4, 5}, {6, 7}}), t.islands);
}

TEST(TopologyIslands, CoarsestCleanCutWins) {
  // Pairs (PIX), pairs of pairs (PXB), sockets (SYS): the cut below the worst link is taken.
  Topology t = matrix(8, L::kAcrossNuma);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (a != b && a / 4 == b / 4)
        t.links[a][b] = a / 2 == b / 2 ? L::kSameSwitch : L::kAcrossSwitches;
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1, 2, 3}, {4, 5, 6, 7}}), t.islands);

  // The same with both switches of a socket on one host bridge (PHB between the pairs).
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b)
      if (t.links[a][b] == L::kAcrossSwitches) t.links[a][b] = L::kSameHostBridge;
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1, 2, 3}, {4, 5, 6, 7}}), t.islands);
}

TEST(TopologyIslands, AcrossNumaIsSplitBySocketWhenKnown) {
  Topology t = matrix(4, L::kAcrossNuma);
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1, 2, 3}}), t.islands);  // sockets unknown: nothing to cut along
  const std::string unknown = t.signature;
  t.gpus.resize(4);
  const int package[] = {1, 0, 1, 0};
  for (int r = 0; r < 4; ++r) t.gpus[r].package = package[r];
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 2}, {1, 3}}), t.islands);
  EXPECT_NE(unknown, t.signature);
  EXPECT_TRUE(contains(describeTopology(t), "NODE"));
  EXPECT_TRUE(contains(describeTopology(t), "SYS"));

  // NUMA nodes stand in for unknown packages.
  for (int r = 0; r < 4; ++r) {
    t.gpus[r].package = -1;
    t.gpus[r].numa_node = r < 2 ? 0 : 1;
  }
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1}, {2, 3}}), t.islands);
}

TEST(TopologyIslands, NoCleanCutKeepsOneIsland) {
  // A chain of NVLinks (0-1, 1-2) with 0-2 over PCIe: "NVLink-connected" is not an
  // equivalence, so no partition has every inside link better than every crossing one.
  Topology t = matrix(3, L::kSameHostBridge);
  setLink(&t, 0, 1, L::kNvLink);
  setLink(&t, 1, 2, L::kNvLink);
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0, 1, 2}}), t.islands);

  // With a fourth GPU across the sockets, the chain is one island and the fourth another.
  Topology u = matrix(4, L::kNoP2P);
  setLink(&u, 0, 1, L::kNvLink);
  setLink(&u, 1, 2, L::kNvLink);
  setLink(&u, 0, 2, L::kSameHostBridge);
  deriveIslands(&u);
  EXPECT_EQ(Islands({{0, 1, 2}, {3}}), u.islands);
}

TEST(TopologyIslands, AsymmetricOrRaggedMatricesUseTheWorseLink) {
  Topology t = matrix(4, L::kSameHostBridge);
  t.links[0][1] = L::kSameSwitch;  // 1 -> 0 stays PHB: the pair is PHB
  t.links[2][3] = t.links[3][2] = L::kSameSwitch;
  deriveIslands(&t);
  EXPECT_EQ(Islands({{0}, {1}, {2, 3}}), t.islands);
  t.links[3].pop_back();  // 3's own entry missing: treated as no P2P, never read past the end
  t.links[2].resize(2);   // 2 -> 2 and 2 -> 3 missing
  deriveIslands(&t);
  // 2-3 is now no-p2p while 2 and 3 reach 0 over PHB: no clean cut, one island.
  EXPECT_EQ(Islands({{0, 1, 2, 3}}), t.islands);
}

TEST(TopologyIslands, SignatureIsDeterministicAndFollowsEveryLink) {
  Topology a = matrix(4, L::kSameHostBridge);
  Topology b = matrix(4, L::kSameHostBridge);
  deriveIslands(&a);
  deriveIslands(&b);
  EXPECT_EQ(a.signature, b.signature);
  std::set<std::string> seen{a.signature};
  for (int x = 0; x < 4; ++x) {
    for (int y = x + 1; y < 4; ++y) {
      for (L c : {L::kNvLink, L::kSameSwitch, L::kAcrossSwitches, L::kAcrossNuma, L::kNoP2P}) {
        Topology m = matrix(4, L::kSameHostBridge);
        setLink(&m, x, y, c);
        deriveIslands(&m);
        EXPECT_TRUE(seen.insert(m.signature).second) << x << "-" << y << " " << linkClassName(c);
      }
    }
  }
  Topology five = matrix(5, L::kSameHostBridge);
  deriveIslands(&five);
  EXPECT_TRUE(seen.insert(five.signature).second);
}

TEST(TopologyIslands, SignatureOfVirtualRanksIsTheOneTuningFilesCarry) {
  // Tuning files name the topology they were measured on (docs/TUNING.md's example and the
  // H200 record in bench/results carry this one: 8 virtual ranks on one GPU). A change of the
  // hash or of what it covers must come with a new "v<N>-" prefix (docs/TOPOLOGY.md).
  Topology t = matrix(8, L::kSameDevice);
  deriveIslands(&t);
  EXPECT_EQ("v1-98cd4a6b19335ee5", t.signature);
}

TEST(Hash, Fnv1aIsTheStandardSixtyFourBitHash) {
  // Published FNV-1a 64 values: the offset basis and prime are part of every name made with it.
  EXPECT_EQ(0xcbf29ce484222325ull, fnv1a("", 0));
  EXPECT_EQ(0xaf63dc4c8601ec8cull, fnv1a("a", 1));
  EXPECT_EQ(0x85944171f73967e8ull, fnv1a("foobar", 6));
  // fnv1aU64 hashes the value's bytes least significant first, whatever the host's order.
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 100; ++i) {
    const uint64_t seed = rng(), v = rng();
    unsigned char b[8];
    for (int k = 0; k < 8; ++k) b[k] = static_cast<unsigned char>(v >> (8 * k));
    EXPECT_EQ(fnv1a(b, 8, seed), fnv1aU64(seed, v));
  }
}

TEST(TopologyNames, EveryClassHasItsOwnName) {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(L::kNoP2P); ++c)
    names.insert(linkClassName(static_cast<L>(c)));
  EXPECT_EQ(7u, names.size());
  EXPECT_STREQ("switch", linkClassName(L::kSameSwitch));
  EXPECT_STREQ("no-p2p", linkClassName(L::kNoP2P));
}

TEST(TopologyDoctor, SectionShowsIslandsSignatureAndLinkNames) {
  tpar_cli::DoctorResults r;
  EXPECT_TRUE(tpar_cli::topologyJson(r).is_null());  // not gathered: no section at all
  EXPECT_EQ("", tpar_cli::renderTopology(r));
  r.topology = load("pcie_4switch_2socket_8gpu.xml");
  const nlohmann::json j = tpar_cli::topologyJson(r);
  EXPECT_EQ(r.topology.signature, j["signature"]);
  EXPECT_EQ(r.topology.source, j["source"]);
  EXPECT_EQ(Islands({{0, 1, 2, 3}, {4, 5, 6, 7}}), j["islands"].get<Islands>());
  ASSERT_EQ(8u, j["links"].size());
  EXPECT_EQ("same-device", j["links"][0][0]);
  EXPECT_EQ("switch", j["links"][0][1]);
  EXPECT_EQ("across-numa", j["links"][0][7]);
  EXPECT_EQ("0000:bc:00.0", j["bus_ids"][7]);
  const std::string text = tpar_cli::renderTopology(r);
  EXPECT_TRUE(contains(text, "Topology (tpar's view")) << text;
  EXPECT_TRUE(contains(text, "  island 1: ranks 4 5 6 7")) << text;

  tpar_cli::DoctorResults failed;
  failed.topology_error = "rank 0: CUDA device 0 does not exist";
  EXPECT_EQ(failed.topology_error, tpar_cli::topologyJson(failed)["error"]);
  EXPECT_TRUE(contains(tpar_cli::renderTopology(failed), "unknown: rank 0"));
}

TEST(TopologyLive, BadArgumentsAreRejectedWithoutTouchingOut) {
  Topology t = sentinel();
  EXPECT_EQ(tparInvalidArgument, discoverTopology({}, &t));
  EXPECT_TRUE(contains(lastError(), "empty")) << lastError();
  EXPECT_EQ(tparInvalidArgument, discoverTopology({-1}, &t));
  EXPECT_TRUE(contains(lastError(), "CUDA device -1")) << lastError();
  EXPECT_EQ(tparInvalidArgument, discoverTopology({4096}, &t));
  EXPECT_TRUE(contains(lastError(), "CUDA device 4096")) << lastError();
  EXPECT_EQ(tparInvalidArgument, discoverTopology({0}, nullptr));
  expectUntouched(t);
}

TEST(TopologyLive, VirtualRanksOnTheFirstGpu) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    Topology t = sentinel();
    // Without a GPU every device index is a bad argument, and nothing crashes.
    EXPECT_EQ(tparInvalidArgument, discoverTopology({0, 0}, &t));
    EXPECT_TRUE(contains(lastError(), "CUDA device 0 does not exist")) << lastError();
    expectUntouched(t);
    GTEST_SKIP() << "no CUDA GPU: only the no-GPU path was checked";
  }
  Topology t;
  ASSERT_EQ(tparSuccess, discoverTopology({0, 0}, &t)) << lastError();
  EXPECT_EQ(L::kSameDevice, t.links[0][1]);
  EXPECT_EQ(Islands({{0, 1}}), t.islands);
  EXPECT_EQ(t.gpus[0].bus_id, t.gpus[1].bus_id);
  EXPECT_FALSE(t.gpus[0].bus_id.empty());
  EXPECT_FALSE(t.source.empty());
  Topology again;
  ASSERT_EQ(tparSuccess, discoverTopology({0, 0}, &again)) << lastError();
  EXPECT_EQ(t.signature, again.signature);
}

}  // namespace
}  // namespace tpar

namespace tpar {
namespace {

// Found by fuzzing: hwloc 2.9 dereferences a missing complete_cpuset of the Machine object and
// crashes the process. The loader probes the file in a child first and reports it instead.
TEST(TopologyFixture, FileThatCrashesHwlocIsAnErrorNotACrash) {
  Topology out;
  out.signature = "untouched";
  const std::string path =
      std::string(TPAR_SOURCE_DIR) + "/tests/fixtures/bad/hwloc_crash_missing_complete_cpuset.xml";
  EXPECT_EQ(tparInvalidArgument, loadTopologyXml(path, {}, &out));
  EXPECT_NE(std::string::npos, lastError().find(path)) << lastError();
  EXPECT_EQ("untouched", out.signature);
}

TEST(RanksPerGpu, CountsTheRanksThatShareEachGpu) {
  EXPECT_EQ(1, maxRanksPerGpu(Topology{}));
  EXPECT_EQ(1, maxRanksPerGpu(matrix(8, L::kSameSwitch)));
  EXPECT_EQ(8, maxRanksPerGpu(matrix(8, L::kSameDevice)));
  Topology t = matrix(6, L::kNoP2P);  // GPUs {0,1,2}, {3,4}, {5}
  setLink(&t, 0, 1, L::kSameDevice);
  setLink(&t, 0, 2, L::kSameDevice);
  setLink(&t, 1, 2, L::kSameDevice);
  setLink(&t, 3, 4, L::kSameDevice);
  EXPECT_EQ(3, maxRanksPerGpu(t));
}

}  // namespace
}  // namespace tpar
