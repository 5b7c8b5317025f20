// The tpar CLI's argument parsing, bandwidth arithmetic and JSON records (no GPU needed).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/report.h"

namespace tpar_cli {
namespace {

TEST(BenchArgs, NcclTestsFlagsAreUnderstood) {
  BenchOptions opt;
  ASSERT_EQ("", parseBenchArgs({"-b", "8K", "-e", "1M", "-f", "4", "-n", "50", "-w", "3", "-G",
                                "0", "-c", "0", "-d", "float16"},
                               &opt));
  EXPECT_EQ(8u << 10, opt.min_bytes);
  EXPECT_EQ(1u << 20, opt.max_bytes);
  EXPECT_DOUBLE_EQ(4.0, opt.factor);
  EXPECT_EQ(50, opt.iters);
  EXPECT_EQ(3, opt.warmup);
  EXPECT_FALSE(opt.graph);
  EXPECT_FALSE(opt.check);
  EXPECT_EQ(tparFloat16, opt.dtype);
  const std::vector<size_t> want = {8u << 10, 32u << 10, 128u << 10, 512u << 10, 1u << 20};
  EXPECT_EQ(want, benchSizes(opt));
}

TEST(BenchArgs, BackendsRanksAndSizeLists) {
  BenchOptions opt;
  ASSERT_EQ("", parseBenchArgs({"--backends", "tpar,nccl:shm,tpar:twoshot", "--ranks", "2,8",
                                "--sizes", "12K,112K,4096", "--json", "/tmp/x.json"},
                               &opt));
  EXPECT_EQ((std::vector<std::string>{"tpar", "nccl:shm", "tpar:twoshot"}), opt.backends);
  EXPECT_EQ((std::vector<int>{2, 8}), opt.ranks);
  EXPECT_EQ((std::vector<size_t>{12288, 114688, 4096}), benchSizes(opt));
  EXPECT_EQ("/tmp/x.json", opt.json_path);
  EXPECT_FALSE(opt.procs);
  BenchOptions p;
  ASSERT_EQ("", parseBenchArgs({"--procs", "--ranks", "4"}, &p));
  EXPECT_TRUE(p.procs);
  EXPECT_EQ(-1, p.worker_rank);
}

TEST(BenchArgs, BadValuesAreRejectedWithTheirName) {
  const std::vector<std::vector<std::string>> bad = {
      {"-b", "12Q"},          {"-e", "0"},           {"--sizes", "1K,x"},
      {"-d", "int8"},         {"--backends", "mpi"}, {"--ranks", "0"},
      {"--ranks", "99"},      {"-n", "0"},           {"-f", "1"},
      {"--no-such-flag"},     {"-b", "2M", "-e", "1M"},
  };
  for (const auto& args : bad) {
    BenchOptions opt;
    const std::string err = parseBenchArgs(args, &opt);
    EXPECT_FALSE(err.empty()) << args[0];
  }
  BenchOptions opt;
  EXPECT_NE(std::string::npos, parseBenchArgs({"--backends", "mpi"}, &opt).find("mpi"));
}

TEST(BenchSizes, MaxIsAlwaysIncluded) {
  BenchOptions opt;
  opt.min_bytes = 1000;
  opt.max_bytes = 5000;
  opt.factor = 2;
  EXPECT_EQ((std::vector<size_t>{1000, 2000, 4000, 5000}), benchSizes(opt));
  opt.min_bytes = opt.max_bytes = 4096;
  EXPECT_EQ((std::vector<size_t>{4096}), benchSizes(opt));
}

TEST(Bandwidth, BusBandwidthFollowsNcclTests) {
  // 1 GB in 1000 us: 1000 GB/s... 1e9 B / 1e-3 s = 1e12 B/s = 1000 GB/s.
  EXPECT_DOUBLE_EQ(1000.0, algBandwidth(1000000000, 1000.0));
  EXPECT_DOUBLE_EQ(1750.0, busBandwidth(1000000000, 1000.0, 8));  // x 2*7/8
  EXPECT_DOUBLE_EQ(1000.0, busBandwidth(1000000000, 1000.0, 2));  // x 2*1/2
  EXPECT_DOUBLE_EQ(0.0, busBandwidth(1000000000, 1000.0, 1));
  EXPECT_DOUBLE_EQ(0.0, algBandwidth(100, 0.0));
}

TEST(BenchJson, RowsCarryEveryColumn) {
  BenchRow r;
  r.backend = "tpar";
  r.ranks = 4;
  r.bytes = 114688;
  r.count = 57344;
  r.us_out = 4.0;
  r.us_in = 5.0;
  r.wrong_out = 0;
  r.wrong_in = 3;
  const auto j = rowToJson(r);
  for (const char* key : {"backend", "ranks", "virtual", "bytes", "count", "chosen", "graph",
                          "us_out_of_place", "us_in_place", "algbw_out_of_place",
                          "busbw_out_of_place", "wrong_out_of_place", "wrong_in_place"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(3, j["wrong_in_place"].get<int>());
  EXPECT_NEAR(busBandwidth(114688, 4.0, 4), j["busbw_out_of_place"].get<double>(), 1e-9);
}

TEST(MachineReport, NamesTheRunEvenWithoutAGpu) {
  const auto j = machineReport("tpar bench", "tpar bench -n 5");
  for (const char* key : {"tool", "commit", "command", "host", "time", "gpus", "nvidia_driver",
                          "cuda_driver", "cuda_runtime", "nccl", "peer_access", "tpar_version"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ("tpar bench -n 5", j["command"].get<std::string>());
  if (j["gpus"].empty()) EXPECT_TRUE(j.contains("gpus_missing"));
}

}  // namespace
}  // namespace tpar_cli
