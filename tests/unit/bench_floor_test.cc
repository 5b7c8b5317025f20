// `tpar bench --transport`, the pull backends, and the host-link floor model (no GPU needed).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/prims/wire.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/report.h"

namespace tpar_cli {
namespace {

TEST(BenchTransport, TransportOptionTakesTheNamesOfTparTransport) {
  BenchOptions none;
  ASSERT_EQ("", parseBenchArgs({"--ranks", "2"}, &none));
  EXPECT_EQ(TPAR_CONFIG_UNDEF_INT, none.transport);  // TPAR_TRANSPORT decides
  const std::pair<const char*, int> cases[] = {{"auto", 0}, {"host", 1}, {"p2p", 2}};
  for (const auto& [name, value] : cases) {
    BenchOptions opt;
    ASSERT_EQ("", parseBenchArgs({"--transport", name}, &opt)) << name;
    EXPECT_EQ(value, opt.transport) << name;
    EXPECT_STREQ(name, transportOptionName(value));
  }
  EXPECT_STREQ("env", transportOptionName(TPAR_CONFIG_UNDEF_INT));
  BenchOptions bad;
  const std::string err = parseBenchArgs({"--transport", "shm"}, &bad);
  EXPECT_NE(std::string::npos, err.find("--transport")) << err;
  EXPECT_NE(std::string::npos, err.find("shm")) << err;
}

TEST(BenchTransport, HostMemoryBackendsAreKnown) {
  BenchOptions opt;
  ASSERT_EQ("", parseBenchArgs({"--backends",
                                "tpar:oneshot-pull,tpar:twoshot-pull,tpar:pipelined,tpar:twoshot-ll"},
                               &opt));
  EXPECT_EQ((std::vector<std::string>{"tpar:oneshot-pull", "tpar:twoshot-pull", "tpar:pipelined",
                                      "tpar:twoshot-ll"}),
            opt.backends);
  for (const char* name :
       {"tpar:oneshot-pull", "tpar:twoshot-pull", "tpar:pipelined", "tpar:twoshot-ll"}) {
    std::string why;
    auto b = makeBackend(name, &why, /*tpar_transport=*/1);
    ASSERT_NE(nullptr, b) << name << ": " << why;
    EXPECT_EQ(name, b->name());
  }
  std::string why;
  EXPECT_EQ(nullptr, makeBackend("tpar:threeshot", &why));
  EXPECT_NE(std::string::npos, why.find("tpar:twoshot-pull")) << why;
  // Every public algorithm a caller can force is a backend, and every backend name parses.
  EXPECT_EQ(static_cast<size_t>(tparNumAlgos), backendNames().size());  // tpar, 8 forced, nccl
  for (const std::string& name : backendNames()) {
    BenchOptions one;
    EXPECT_EQ("", parseBenchArgs({"--backends", name}, &one)) << name;
  }
  // The default list has every backend but hierarchical below 3 GPUs, then NCCL's variants.
  const auto two = defaultBackends(2);
  EXPECT_EQ(two.end(), std::find(two.begin(), two.end(), "tpar:hier"));
  EXPECT_NE(two.end(), std::find(two.begin(), two.end(), "tpar:twoshot-ll"));
  const auto four = defaultBackends(4);
  EXPECT_NE(four.end(), std::find(four.begin(), four.end(), "tpar:hier"));
  EXPECT_EQ("nccl:shm", four.back());
}

// 112 KiB over 8 ranks, links of 50 GB/s write and 40 GB/s read, 2 us hand-off.
constexpr size_t kM = 114688;
constexpr double kWrite = 50, kRead = 40, kRtt = 2;

TEST(HostLinkFloor, BytesPerCallFollowTheModelOfEveryAlgorithm) {
  struct Case {
    const char* algo;
    double write_m, read_m;  // in units of the message size, all 8 ranks on one link
    int rounds;
  } cases[] = {
      {"oneshot-pull", 8, 8 * 7, 2},  // flag lines from 3 ranks (2 ranks: below)
      {"twoshot-pull", 8, 2 * 7, 2},
      {"pipelined", 8, 2 * 7, 2},
      {"twoshot-ll", 4 * 7, 4 * 7, 2},
      {"oneshot", 2 * 8 * 7, 8 * 7, 1},
      {"twoshot", 4 * 7, 2 * 7, 2},
      {"staged", 4 * 7, 2 * 7, 2},
      {"hier", 4 * 7, 2 * 7, 2},
  };
  for (const Case& c : cases) {
    HostLinkFloor f;
    ASSERT_TRUE(hostLinkFloor(c.algo, kM, 8, /*ranks_per_link=*/8, kWrite, kRead, kRtt, &f))
        << c.algo;
    EXPECT_DOUBLE_EQ(c.write_m * kM, f.write_bytes) << c.algo;
    EXPECT_DOUBLE_EQ(c.read_m * kM, f.read_bytes) << c.algo;
    EXPECT_EQ(c.rounds, f.rounds) << c.algo;
    const double want = std::max(c.write_m * kM / (kWrite * 1e3), c.read_m * kM / (kRead * 1e3)) +
                        c.rounds * kRtt;
    EXPECT_DOUBLE_EQ(want, f.us) << c.algo;
  }
}

// One-shot pull in host memory: epoch lines at 2 ranks (16-byte lines of 8 payload bytes, one
// hand-off), flag lines from 3 ranks (the input once, a flag's hand-off and the data's); NOTE
// [one-shot pull over flag lines in host memory].
TEST(HostLinkFloor, OneShotPullFollowsItsHostKernels) {
  for (int n : {2, 3, 4, 8}) {
    HostLinkFloor f;
    ASSERT_TRUE(hostLinkFloor("oneshot-pull", kM, n, n, kWrite, kRead, kRtt, &f)) << n;
    const double lines = n == 2 ? 2.0 : 1.0;
    EXPECT_DOUBLE_EQ(lines * n * kM, f.write_bytes) << n;
    EXPECT_DOUBLE_EQ(lines * n * (n - 1) * kM, f.read_bytes) << n;
    EXPECT_EQ(n == 2 ? 1 : 2, f.rounds) << n;
  }
}

TEST(HostLinkFloor, WorkedExampleTwoShotPull) {
  // 8 virtual ranks, 112 KiB: 8 x 112 KiB written (18.35 us at 50 GB/s), 14 x 112 KiB read
  // (40.14 us at 40 GB/s): the reads bound it; plus two hand-offs.
  HostLinkFloor f;
  ASSERT_TRUE(hostLinkFloor("twoshot-pull", kM, 8, 8, kWrite, kRead, kRtt, &f));
  EXPECT_NEAR(40.1408 + 4.0, f.us, 1e-9);
}

TEST(HostLinkFloor, BothWaysFloorAddsTheSharedRateOfTheTwoDirections) {
  // twoshot-pull, 8 ranks, 112 KiB: 8 M written, 14 M read. At 60 GB/s for both directions
  // together the 22 M take longer than the reads alone at 40 GB/s.
  HostLinkFloor none, slow, fast;
  ASSERT_TRUE(hostLinkFloor("twoshot-pull", kM, 8, 8, kWrite, kRead, kRtt, &none));
  EXPECT_EQ(0, none.both_us);  // not measured
  ASSERT_TRUE(hostLinkFloor("twoshot-pull", kM, 8, 8, kWrite, kRead, kRtt, &slow, 60));
  EXPECT_DOUBLE_EQ(none.us, slow.us);  // the one-way floor itself does not move
  EXPECT_NEAR(22.0 * kM / 60e3 + 2 * kRtt, slow.both_us, 1e-9);
  EXPECT_GT(slow.both_us, slow.us);
  // Where both directions together move more than either floor needs, the floors agree.
  ASSERT_TRUE(hostLinkFloor("twoshot-pull", kM, 8, 8, kWrite, kRead, kRtt, &fast, 1000));
  EXPECT_DOUBLE_EQ(fast.us, fast.both_us);
  // Over the algorithms (phys), each floor is the lowest of its own kind.
  HostLinkSummary link;
  link.measured = true;
  link.write_gbps = kWrite;
  link.read_gbps = kRead;
  link.both_gbps = 60;
  link.rtt_us = kRtt;
  HostLinkFloor phys;
  std::string algo;
  ASSERT_TRUE(lowestHostFloor(kM, 8, 8, link, &phys, &algo));
  double lowest_us = 1e300, lowest_both = 1e300;
  for (const char* a : {"oneshot-pull", "twoshot-pull", "pipelined", "twoshot-ll", "oneshot",
                        "twoshot", "staged"}) {
    HostLinkFloor f;
    ASSERT_TRUE(hostLinkFloor(a, kM, 8, 8, kWrite, kRead, kRtt, &f, 60)) << a;
    lowest_us = std::min(lowest_us, f.us);
    lowest_both = std::min(lowest_both, f.both_us);
  }
  EXPECT_DOUBLE_EQ(lowest_us, phys.us);
  EXPECT_DOUBLE_EQ(lowest_both, phys.both_us);
}

TEST(HostLinkFloor, OneRankPerGpuDividesTheBytesByTheRanks) {
  HostLinkFloor shared, own;
  ASSERT_TRUE(hostLinkFloor("twoshot", kM, 4, 4, kWrite, kRead, kRtt, &shared));
  ASSERT_TRUE(hostLinkFloor("twoshot", kM, 4, 1, kWrite, kRead, kRtt, &own));
  EXPECT_DOUBLE_EQ(shared.write_bytes / 4, own.write_bytes);
  EXPECT_DOUBLE_EQ(shared.read_bytes / 4, own.read_bytes);
  EXPECT_EQ(shared.rounds, own.rounds);
  // The hand-offs do not shrink with the bytes.
  EXPECT_DOUBLE_EQ(own.write_bytes / (kWrite * 1e3) + 2 * kRtt, own.us);
}

TEST(HostLinkFloor, WireVariantsMoveTheirCodesAndScales) {
  // FP8 and INT8: B + 2 bytes per block of B values where bf16 takes 2B; INT4: B / 2 + 2, each
  // with its format's block B.
  constexpr double kB8 = tpar::kernels::wireKernelBlock(tpar::kernels::WireFormat::kFp8);
  constexpr double kBi8 = tpar::kernels::wireKernelBlock(tpar::kernels::WireFormat::kInt8);
  constexpr double kB4 = tpar::kernels::wireKernelBlock(tpar::kernels::WireFormat::kInt4);
  HostLinkFloor plain, fp8, int8, int4;
  ASSERT_TRUE(hostLinkFloor("pipelined", kM, 4, 4, kWrite, kRead, kRtt, &plain));
  ASSERT_TRUE(hostLinkFloor("pipelined+fp8", kM, 4, 4, kWrite, kRead, kRtt, &fp8));
  ASSERT_TRUE(hostLinkFloor("pipelined+int8", kM, 4, 4, kWrite, kRead, kRtt, &int8));
  ASSERT_TRUE(hostLinkFloor("pipelined+int4", kM, 4, 4, kWrite, kRead, kRtt, &int4));
  EXPECT_DOUBLE_EQ(plain.write_bytes * (kB8 + 2) / (2 * kB8), fp8.write_bytes);
  EXPECT_DOUBLE_EQ(plain.read_bytes * (kB8 + 2) / (2 * kB8), fp8.read_bytes);
  EXPECT_DOUBLE_EQ(plain.write_bytes * (kBi8 + 2) / (2 * kBi8), int8.write_bytes);
  EXPECT_DOUBLE_EQ(plain.read_bytes * (kBi8 + 2) / (2 * kBi8), int8.read_bytes);
  EXPECT_DOUBLE_EQ(plain.read_bytes * (kB4 / 2 + 2) / (2 * kB4), int4.read_bytes);
  EXPECT_EQ(plain.rounds, int4.rounds);
  EXPECT_LT(int4.us, fp8.us);
  EXPECT_LT(fp8.us, plain.us);
  HostLinkFloor none;
  EXPECT_FALSE(hostLinkFloor("twoshot+fp8", kM, 4, 4, kWrite, kRead, kRtt, &none));
}

TEST(HostLinkFloor, NoModelNoFloor) {
  HostLinkFloor f;
  f.us = 123;
  EXPECT_FALSE(hostLinkFloor("nccl", kM, 8, 8, kWrite, kRead, kRtt, &f));
  EXPECT_FALSE(hostLinkFloor("", kM, 8, 8, kWrite, kRead, kRtt, &f));
  EXPECT_FALSE(hostLinkFloor("twoshot", kM, 1, 1, kWrite, kRead, kRtt, &f));  // nothing crosses
  EXPECT_FALSE(hostLinkFloor("twoshot", kM, 8, 8, 0, kRead, kRtt, &f));       // not measured
  EXPECT_EQ(123, f.us);
}

TEST(HostLinkFloor, RowsOnTheHostTransportGetItInTheirJson) {
  BenchRow row;
  row.backend = "tpar";
  row.ranks = 8;
  row.virtual_ranks = true;
  row.bytes = kM;
  row.count = kM / 2;
  row.chosen = "twoshot-pull";
  row.us_out = 88.2816;
  row.us_in = 44.1408;
  HostLinkSummary link;
  link.write_gbps = kWrite;
  link.read_gbps = kRead;
  link.rtt_us = kRtt;
  // Not measured, or another transport: no floor.
  row.transport = "host";
  EXPECT_FALSE(setHostFloor(&row, link, 8));
  link.measured = true;
  row.transport = "same-device";
  EXPECT_FALSE(setHostFloor(&row, link, 8));
  EXPECT_FALSE(rowToJson(row).contains("floor_us"));
  EXPECT_EQ("same-device", rowToJson(row)["transport"].get<std::string>());
  row.transport = "host";
  ASSERT_TRUE(setHostFloor(&row, link, 8));
  const auto j = rowToJson(row);
  EXPECT_EQ("host", j["transport"].get<std::string>());
  EXPECT_NEAR(44.1408, j["floor_us"].get<double>(), 1e-9);
  EXPECT_DOUBLE_EQ(8.0 * kM, j["floor_write_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(14.0 * kM, j["floor_read_bytes"].get<double>());
  EXPECT_EQ(2, j["floor_rounds"].get<int>());
  EXPECT_NEAR(2.0, j["x_floor_out_of_place"].get<double>(), 1e-9);
  EXPECT_NEAR(1.0, j["x_floor_in_place"].get<double>(), 1e-9);
}

// The physical floor: the lowest over every algorithm that could run the size, next to the
// floor of the one that ran.
TEST(HostLinkFloor, PhysicalFloorIsTheLowestOverTheAlgorithmsThatCouldRun) {
  HostLinkSummary link;
  link.measured = true;
  link.write_gbps = 50;
  link.read_gbps = 40;
  link.rtt_us = 1.5;
  for (const int nranks : {2, 4, 8}) {
    for (const size_t bytes : {size_t{12} << 10, size_t{112} << 10, size_t{4} << 20}) {
      HostLinkFloor phys;
      std::string algo;
      ASSERT_TRUE(lowestHostFloor(bytes, nranks, 1, link, &phys, &algo)) << nranks << " " << bytes;
      EXPECT_NE("hier", algo);                        // islands: a topology the floor lacks
      if (nranks < 3) EXPECT_NE("staged", algo);     // below its minimum rank count
      HostLinkFloor own;
      ASSERT_TRUE(hostLinkFloor(algo, bytes, nranks, 1, link.write_gbps, link.read_gbps,
                                link.rtt_us, &own));
      EXPECT_DOUBLE_EQ(own.us, phys.us) << algo;
      for (const char* other : {"oneshot", "twoshot", "oneshot-pull", "twoshot-pull",
                                "twoshot-ll", "pipelined"}) {
        HostLinkFloor f;
        ASSERT_TRUE(hostLinkFloor(other, bytes, nranks, 1, link.write_gbps, link.read_gbps,
                                  link.rtt_us, &f));
        EXPECT_LE(phys.us, f.us) << other << " at " << bytes << " B, " << nranks << " ranks";
      }
    }
  }
  // 12 KiB on 4 ranks: one hand-off beats moving fewer bytes (one-shot push: 6 M written per
  // link, 1.47 us + 1.5 us); 4 MiB: the fewest bytes win (a two-shot that publishes once).
  HostLinkFloor small, large;
  std::string small_algo, large_algo;
  ASSERT_TRUE(lowestHostFloor(12 << 10, 4, 1, link, &small, &small_algo));
  EXPECT_EQ("oneshot", small_algo);
  EXPECT_EQ(1, small.rounds);
  EXPECT_NEAR(6.0 * 12288 / 50e3 + 1.5, small.us, 1e-9);
  ASSERT_TRUE(lowestHostFloor(4 << 20, 4, 1, link, &large, &large_algo));
  EXPECT_EQ(2, large.rounds);
  EXPECT_TRUE(large_algo == "twoshot-pull" || large_algo == "pipelined") << large_algo;
  // Nothing measured: no floor.
  HostLinkSummary none;
  std::string algo;
  HostLinkFloor f;
  EXPECT_FALSE(lowestHostFloor(12 << 10, 4, 1, none, &f, &algo));
}

TEST(HostLinkFloor, RowsCarryThePhysicalFloorBesideTheirOwn) {
  BenchRow row;
  row.backend = "tpar";
  row.ranks = 4;
  row.bytes = 12 << 10;
  row.count = row.bytes / 2;
  row.chosen = "twoshot-ll";
  row.transport = "host";
  row.us_out = 11.4;
  row.us_in = 11.0;
  HostLinkSummary link;
  link.measured = true;
  link.write_gbps = 50;
  link.read_gbps = 40;
  link.rtt_us = 1.5;
  ASSERT_TRUE(setHostFloor(&row, link, 1));
  ASSERT_TRUE(row.has_phys);
  EXPECT_EQ("oneshot", row.phys_algo);
  EXPECT_LT(row.phys.us, row.floor.us);  // two rounds and 4x the bytes of the chosen one
  const auto j = rowToJson(row);
  EXPECT_NEAR(row.floor.us, j["floor_us"].get<double>(), 1e-12);
  EXPECT_NEAR(row.phys.us, j["phys_floor_us"].get<double>(), 1e-12);
  EXPECT_EQ("oneshot", j["phys_floor_algo"].get<std::string>());
  EXPECT_EQ(1, j["phys_floor_rounds"].get<int>());
  EXPECT_NEAR(11.4 / row.phys.us, j["x_phys_out_of_place"].get<double>(), 1e-9);
  // The table prints both: floor (the chosen algorithm's), then phys.
  TableStyle style;
  style.floors = true;
  EXPECT_NE(std::string::npos, tableHeader(style).find("phys")) << tableHeader(style);
  const std::string line = tableRow(row, style);
  char floor_text[32], phys_text[32];
  std::snprintf(floor_text, sizeof(floor_text), " %.2f ", row.floor.us);
  std::snprintf(phys_text, sizeof(phys_text), " %.2f ", row.phys.us);
  const size_t at_floor = line.find(floor_text), at_phys = line.find(phys_text);
  ASSERT_NE(std::string::npos, at_floor) << line;
  ASSERT_NE(std::string::npos, at_phys) << line;
  EXPECT_LT(at_floor, at_phys) << line;
  EXPECT_NE(std::string::npos, tableComparisons({row}).find("phys: oneshot"))
      << tableComparisons({row});
}

}  // namespace
}  // namespace tpar_cli
