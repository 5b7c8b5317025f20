// Every algorithm on virtual ranks with a fixture topology forced onto them (TPAR_TOPO_FILE), so
// that the island and staged paths run on one GPU, with receive regions in GPU memory and (the
// second parent) in pinned host memory (TPAR_TRANSPORT=host). The environment is read once per
// process: the checks run in a child started by the parent test.
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu/test_util.h"

namespace tpar_test {
namespace {

TEST(DISABLED_FixtureTopologyChild, EveryAlgorithmIsCorrectOnTheFixtureIslands) {
  TPAR_REQUIRE_GPU();
  ASSERT_NE(nullptr, std::getenv("TPAR_TOPO_FILE"));
  // 8 GPUs as 4 switch pairs on 2 sockets: 4 ranks (one socket, two switch pairs) and 8 ranks
  // (two sockets).
  for (int n : {4, 8}) {
    for (tparAlgo_t algo : forcedAlgos(true, true)) {
      SCOPED_TRACE(std::string("n ") + std::to_string(n) + " " + tparAlgoName(algo));
      tparConfig_t cfg = sharedDeviceConfig();
      cfg.algorithm = algo;
      VirtualGroup g;
      ASSERT_EQ("", g.init(n, cfg));
      tparCommInfo_t info;
      TPAR_OK(tparCommQuery(g.comm(0), &info));
      ASSERT_EQ(2, info.islands) << "the fixture should give two islands";
      const char* transport = std::getenv("TPAR_TRANSPORT");
      if (transport != nullptr && std::string(transport) == "host")
        ASSERT_EQ(tparTransportHost, info.transport) << tparTransportName(info.transport);
      std::vector<int> island_of(info.islandOfRank, info.islandOfRank + n);
      // The island order of additions applies to the hierarchical algorithm only.
      const bool hier = algo == tparAlgoHierarchical;
      for (size_t count : {size_t(1), size_t(1000), size_t(57347), size_t(300001)}) {
        runAndCheck(g, count, tparBfloat16, tparSum, false, 0, 0,
                    hier ? island_of : std::vector<int>{});
        runAndCheck(g, count, tparBfloat16, tparSum, true, 0, 0,
                    hier ? island_of : std::vector<int>{});
        if (HasFailure()) return;
      }
      if (hier) {
        runAndCheck(g, 40001, tparFloat32, tparSum, false, 0, 0, island_of);
        runAndCheck(g, 40001, tparFloat16, tparMax, false, 1, 3, island_of);
        runAndCheck(g, 9, tparBfloat16, tparMin, true, 0, 0, island_of);
      }
      for (int r = 0; r < n; ++r) {
        tparAlgo_t chosen = tparAlgoAuto;
        TPAR_OK(tparCommSelectAlgorithm(g.comm(r), 1 << 20, &chosen));
        if (algo != tparAlgoAuto) EXPECT_EQ(algo, chosen);
      }
    }
  }
}

std::string runFixtureChild(const std::vector<std::string>& extra_env, int* rc) {
  std::string out;
  const std::string fixture =
      std::string(TPAR_SOURCE_DIR) + "/tests/fixtures/topology/pcie_4switch_2socket_8gpu.xml";
  std::vector<std::string> env = {"TPAR_TOPO_FILE=" + fixture};
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  *rc = runSelfChild("DISABLED_FixtureTopologyChild.*", env, 600, &out);
  return out;
}

TEST(TopologyAlgorithms, EveryAlgorithmRunsOnFixtureIslands) {
  TPAR_REQUIRE_GPU();
  int rc = -1;
  const std::string out = runFixtureChild({"TPAR_TRANSPORT=auto"}, &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

TEST(TopologyAlgorithms, EveryAlgorithmRunsOnFixtureIslandsOverHostMemory) {
  TPAR_REQUIRE_GPU();
  int rc = -1;
  const std::string out = runFixtureChild({"TPAR_TRANSPORT=host"}, &rc);
  EXPECT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

}  // namespace
}  // namespace tpar_test
