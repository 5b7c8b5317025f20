// `tpar bench` as nccl-tests' users drive it: their command lines, parsed with the meaning
// all_reduce_perf gives them, and a table that a reader of nccl-tests' output reads (no GPU
// needed: the table is formatted from rows made here).
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/nccl_tests_output.h"
#include "registry/algorithms.h"
#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/report.h"

namespace tpar_cli {
namespace {

TEST(Info, AlgorithmTableNamesScheduleProtocolAndDirectionOfEveryAlgorithm) {
  const std::string t = algorithmTable();
  EXPECT_NE(std::string::npos, t.find("  twoshot-ll    two-shot      ll        push\n")) << t;
  EXPECT_NE(std::string::npos, t.find("  oneshot-pull  one-shot      ll        pull\n")) << t;
  EXPECT_NE(std::string::npos, t.find("  pipelined     two-shot      flags     plan\n")) << t;
  size_t lines = 0;
  for (char c : t) lines += c == '\n';
  EXPECT_EQ(tpar::algorithms().size(), lines);
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

BenchOptions parsed(const std::string& line) {
  BenchOptions opt;
  const std::string err = parseBenchArgs(words(line), &opt);
  EXPECT_EQ("", err) << line;
  return opt;
}

TEST(BenchArgs, NcclTestsCommandLinesRunAsTheyAre) {
  // The lines of nccl-tests' documentation and of everyday use, unchanged.
  for (const char* line : {
           "-b 8 -e 128M -f 2 -g 1",
           "-b 8 -e 256M -f 2 -g 8",
           "-b 8 -e 128M -f 2 -t 2",
           "-b 1M -e 64M -i 1M",
           "-b 8 -e 128M -f 2 -g 8 -c 5 -G 10 -o all -d all -a 1 -z 0 -p 1 -m 2 -N 2 -C 1 -R 1 "
           "-T 100 -J /tmp/out.json",
           "-b 8 -e 128M -f 2 -g 4 -n 50 -w 5 -c 0 -u 1 -M 1 -S 1 -r 0 -x 0 -V 16 -K 0 -I 0 -y 0 "
           "-D 0",
           "--minbytes 8 --maxbytes 1G --stepfactor 2 --ngpus 8 --check 1 --op sum --datatype "
           "bfloat16 --iters 20 --warmup_iters 5 --cudagraph 1 --blocking 0 --average 1",
       }) {
    parsed(line);
  }
}

TEST(BenchArgs, EveryFlagKeepsItsNcclTestsMeaning) {
  BenchOptions o = parsed(
      "-b 8 -e 128M -f 2 -g 4 -t 2 -n 50 -w 3 -m 2 -N 3 -p 1 -c 5 -o max -d float -z 0 -T 100 "
      "-G 10 -C 1 -S 1 -J /tmp/x.json -a 1 -R 1 -M 1 -u 3");
  EXPECT_EQ(8u, o.min_bytes);
  EXPECT_EQ(128u << 20, o.max_bytes);
  EXPECT_DOUBLE_EQ(2.0, o.factor);
  EXPECT_EQ((std::vector<int>{8}), benchRankCounts(o, 4));  // -t 2 x -g 4
  EXPECT_EQ(50, o.iters);
  EXPECT_EQ(3, o.warmup);
  EXPECT_EQ(2, o.agg_iters);
  EXPECT_EQ(3, o.run_cycles);
  EXPECT_EQ(1, o.parallel_init);
  EXPECT_EQ(5, o.check_iters);  // a count of checked calls, not a switch
  EXPECT_EQ((std::vector<tparRedOp_t>{tparMax}), o.ops);
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat32}), o.dtypes);
  EXPECT_EQ(100, o.timeout_s);
  EXPECT_EQ(10, o.graph_launches);  // a count of graph launches
  EXPECT_TRUE(usesGraph(o, 128u << 20));  // -G given: every size, as in nccl-tests
  EXPECT_EQ(1, o.report_cputime);
  EXPECT_EQ(1, o.report_timestamps);
  EXPECT_EQ("/tmp/x.json", o.json_path);
  EXPECT_EQ(1, o.average);
  EXPECT_EQ(1, o.local_register);
  EXPECT_EQ(1, o.memory_report);
  EXPECT_EQ(3, o.unalign);
}

TEST(BenchArgs, AllRunsEveryTypeAndOpTparHas) {
  BenchOptions o = parsed("-d all -o all");
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat16, tparFloat32, tparBfloat16}), o.dtypes);
  EXPECT_EQ((std::vector<tparRedOp_t>{tparSum, tparMax, tparMin}), o.ops);
  BenchOptions l = parsed("-d half,bf16 -o min,sum");
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat16, tparBfloat16}), l.dtypes);
  EXPECT_EQ((std::vector<tparRedOp_t>{tparMin, tparSum}), l.ops);
}

TEST(BenchArgs, SizeSweepsFollowNcclTests) {
  // -f > 1 multiplies; -i alone adds (nccl-tests' factor is 1 unless -f is given).
  BenchOptions f = parsed("-b 8K -e 1M -f 4");
  EXPECT_EQ((std::vector<size_t>{8u << 10, 32u << 10, 128u << 10, 512u << 10, 1u << 20}),
            benchSizes(f));
  BenchOptions i = parsed("-b 1M -e 4M -i 1M");
  EXPECT_EQ((std::vector<size_t>{1u << 20, 2u << 20, 3u << 20, 4u << 20}), benchSizes(i));
  BenchOptions one = parsed("-b 1K -e 3K -f 1 -i 1K");
  EXPECT_EQ((std::vector<size_t>{1024, 2048, 3072}), benchSizes(one));
  BenchOptions both = parsed("-b 1K -e 4K -f 2 -i 1K");  // a factor > 1 wins, as there
  EXPECT_EQ((std::vector<size_t>{1024, 2048, 4096}), benchSizes(both));
  BenchOptions edge;
  edge.min_bytes = 1000;
  edge.max_bytes = 5000;
  edge.factor = 2;
  EXPECT_EQ((std::vector<size_t>{1000, 2000, 4000, 5000}), benchSizes(edge));  // max included
}

TEST(BenchArgs, GraphsAndEagerTimingByDefaultAndByFlag) {
  BenchOptions d = parsed("");
  EXPECT_TRUE(usesGraph(d, 4u << 20));
  EXPECT_FALSE(usesGraph(d, 8u << 20));  // tpar's default: graphs up to 4 MiB
  BenchOptions e = parsed("-G 0");
  EXPECT_FALSE(usesGraph(e, 1024));
  BenchOptions bounded = parsed("-G 3 --graph-max-bytes 1M");
  EXPECT_TRUE(usesGraph(bounded, 1u << 20));
  EXPECT_FALSE(usesGraph(bounded, 2u << 20));
  BenchOptions z = parsed("-z 1");
  EXPECT_EQ(0, z.graph_launches);  // waiting between calls: eager
}

TEST(BenchArgs, GraphZeroTimesEagerAndGraphSideBySide) {
  // -G 0: eager calls, and graph replays of the same calls up to --graph-max-bytes.
  const BenchOptions e = parsed("-G 0");
  EXPECT_TRUE(e.eager_and_graph);
  EXPECT_FALSE(usesGraph(e, 1024));       // the table's time columns stay eager
  EXPECT_EQ(size_t{4} << 20, e.graph_max_bytes);  // tpar's default bound, not every size
  EXPECT_EQ(size_t{1} << 20, parsed("-G 0 --graph-max-bytes 1M").graph_max_bytes);
  // Graphs only, the default, or waiting between calls (a graph cannot): as before.
  EXPECT_FALSE(parsed("-G 2").eager_and_graph);
  EXPECT_FALSE(parsed("").eager_and_graph);
  EXPECT_FALSE(parsed("-G 0 -z 1").eager_and_graph);
  EXPECT_FALSE(parsed("-z 3").eager_and_graph);
  // A child of a -G 0 run (NCCL variant, --procs rank) measures both too, with the same bound.
  std::vector<std::string> args = childBenchArgs(parsed("-G 0 --graph-max-bytes 64K"), "nccl");
  args.erase(args.begin());
  BenchOptions c;
  ASSERT_EQ("", parseBenchArgs(args, &c));
  EXPECT_TRUE(c.eager_and_graph);
  EXPECT_EQ(size_t{64} << 10, c.graph_max_bytes);
}

TEST(BenchArgs, HostCostTakesItsBatchAndRefusesWhatItCannotMeasure) {
  const BenchOptions d = parsed("");
  EXPECT_FALSE(d.host_cost);
  const BenchOptions h = parsed("--host-cost");
  EXPECT_TRUE(h.host_cost);
  EXPECT_EQ(200, h.host_cost_batch);
  EXPECT_EQ(50, h.host_cost_batches);
  const BenchOptions b = parsed("--host-cost --host-cost-batch 64 --host-cost-batches 9");
  EXPECT_EQ(64, b.host_cost_batch);
  EXPECT_EQ(9, b.host_cost_batches);
  const std::pair<const char*, const char*> bad[] = {
      {"--host-cost --host-cost-batch 0", "--host-cost-batch"},
      {"--host-cost --host-cost-batch 5000", "--host-cost-batch"},  // would fill the queue
      {"--host-cost --host-cost-batches 0", "--host-cost-batches"},
      {"--host-cost-batch 10", "need --host-cost"},
      {"--host-cost --procs", "--procs"},
  };
  for (const auto& [line, says] : bad) {
    BenchOptions o;
    const std::string err = parseBenchArgs(words(line), &o);
    EXPECT_NE(std::string::npos, err.find(says)) << line << ": '" << err << "'";
  }
}

TEST(BenchArgs, FusedTakesItsShapesAndRefusesWhatItCannotMeasure) {
  const BenchOptions d = parsed("");
  EXPECT_FALSE(d.fused);
  const BenchOptions f = parsed("--fused");
  EXPECT_TRUE(f.fused);
  EXPECT_EQ((std::vector<size_t>{4096, 7168, 8192}), f.fused_hidden);
  EXPECT_EQ((std::vector<size_t>{1, 8, 64}), f.fused_tokens);
  const BenchOptions g = parsed("--fused --hidden 16384,24 --tokens 3,1200 -d half");
  EXPECT_EQ((std::vector<size_t>{16384, 24}), g.fused_hidden);
  EXPECT_EQ((std::vector<size_t>{3, 1200}), g.fused_tokens);
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat16}), g.dtypes);
  const std::pair<const char*, const char*> bad[] = {
      {"--fused --hidden 12", "--hidden"},      // not a multiple of 8
      {"--fused --hidden 16392", "--hidden"},   // above 16384
      {"--fused --hidden 0", "--hidden"},
      {"--fused --tokens 0", "--tokens"},
      {"--fused --tokens 65537", "--tokens"},
      {"--hidden 4096", "need --fused"},
      {"--tokens 8", "need --fused"},
      {"--fused --procs", "--procs"},
      {"--fused --host-cost", "--host-cost"},
      {"--fused -d all", "one datatype"},
  };
  for (const auto& [line, says] : bad) {
    BenchOptions o;
    const std::string err = parseBenchArgs(words(line), &o);
    EXPECT_NE(std::string::npos, err.find(says)) << line << ": '" << err << "'";
  }
}

TEST(BenchArgs, TparLongOptionsStillWork) {
  BenchOptions o = parsed(
      "--backends tpar,nccl:shm,tpar:twoshot --ranks 2,8 --sizes 12K,112K,4096 --json "
      "/tmp/x.json --transport host");
  EXPECT_EQ((std::vector<std::string>{"tpar", "nccl:shm", "tpar:twoshot"}), o.backends);
  EXPECT_EQ((std::vector<int>{2, 8}), benchRankCounts(o, 1));
  EXPECT_EQ((std::vector<size_t>{12288, 114688, 4096}), benchSizes(o));
  EXPECT_EQ("/tmp/x.json", o.json_path);
  EXPECT_EQ(1, o.transport);
  EXPECT_FALSE(o.procs);
  BenchOptions p = parsed("--procs --ranks 4 --dtype float16");
  EXPECT_TRUE(p.procs);
  EXPECT_EQ(-1, p.worker_rank);
  EXPECT_EQ((std::vector<tparDataType_t>{tparFloat16}), p.dtypes);
  // No rank count given: every GPU, or 8 virtual ranks on one.
  EXPECT_EQ((std::vector<int>{4}), benchRankCounts(parsed(""), 4));
  EXPECT_EQ((std::vector<int>{8}), benchRankCounts(parsed(""), 1));
}

TEST(BenchArgs, WireRunsEachTparBackendOncePerFormatNamedWithIt) {
  // The spelling: bf16 is the lossless wire, as none.
  BenchOptions o = parsed("--wire bf16,fp8,int8,int4 --backends tpar,nccl,tpar:pipelined");
  EXPECT_EQ((std::vector<int>{tparWireNone, tparWireFp8, tparWireInt8, tparWireInt4}), o.wires);
  EXPECT_EQ((std::vector<std::string>{"tpar+none", "tpar+fp8", "tpar+int8", "tpar+int4", "nccl",
                                      "tpar:pipelined+none", "tpar:pipelined+fp8",
                                      "tpar:pipelined+int8", "tpar:pipelined+int4"}),
            withWires(o.backends, o.wires));
  // A repeated format runs once; no --wire leaves the names alone (TPAR_WIRE decides).
  EXPECT_EQ((std::vector<int>{tparWireInt4, tparWireNone}), parsed("--wire int4,none,int4").wires);
  BenchOptions plain = parsed("--backends tpar,nccl");
  EXPECT_TRUE(plain.wires.empty());
  EXPECT_EQ(plain.backends, withWires(plain.backends, plain.wires));
  // A format named by hand stays as given; --backends takes it.
  BenchOptions named = parsed("--backends tpar+int8,nccl --wire fp8");
  EXPECT_EQ((std::vector<std::string>{"tpar+int8", "nccl"}), withWires(named.backends, named.wires));
  // A child gets the backend's name with its format, and parses it back.
  std::vector<std::string> args = childBenchArgs(o, "tpar+int4");
  args.erase(args.begin());
  BenchOptions c;
  ASSERT_EQ("", parseBenchArgs(args, &c));
  EXPECT_EQ((std::vector<std::string>{"tpar+int4"}), c.backends);
  // What cannot carry a format says so.
  for (const char* bad : {"--wire fp16", "--wire", "--backends nccl+fp8", "--backends tpar+fp4",
                          "--fused --wire fp8"}) {
    BenchOptions b;
    EXPECT_NE("", parseBenchArgs(words(bad), &b)) << bad;
  }
  BenchOptions b;
  EXPECT_NE(std::string::npos, parseBenchArgs(words("--wire fp16"), &b).find("--wire"));
  BenchOptions f;
  EXPECT_NE(std::string::npos, parseBenchArgs(words("--fused --wire int8"), &f).find("--wire"));
}

TEST(BenchTable, WireRowsAreComparedWithTheirLosslessRows) {
  auto row = [](const std::string& backend, const std::string& chosen, double us) {
    BenchRow r;
    r.backend = backend;
    r.chosen = chosen;
    r.ranks = 4;
    r.bytes = 64u << 20;
    r.count = r.bytes / 2;
    r.us_out = r.us_in = us;
    return r;
  };
  const std::vector<BenchRow> rows = {row("tpar+none", "pipelined", 1000.0),
                                      row("tpar+fp8", "pipelined+fp8", 400.0),
                                      row("tpar+int4", "pipelined", 1010.0)};
  const std::string c = tableComparisons(rows);
  // The ratio is the lossless time over the format's, with what ran.
  auto lineOf = [&](const std::string& backend) {
    const size_t at = c.find("#  " + backend + " ");
    return at == std::string::npos ? std::string() : c.substr(at, c.find('\n', at) - at);
  };
  const std::vector<std::string> fp8 = words(lineOf("tpar+fp8"));
  ASSERT_FALSE(fp8.empty()) << c;
  EXPECT_EQ("pipelined+fp8", fp8[fp8.size() - 2]) << c;
  EXPECT_EQ("2.50x", fp8.back()) << c;
  const std::vector<std::string> int4 = words(lineOf("tpar+int4"));
  ASSERT_FALSE(int4.empty()) << c;
  EXPECT_EQ("0.99x", int4.back()) << c;
  EXPECT_EQ(std::string::npos, c.find("#  tpar+none ")) << c;  // no row against itself
  // Without lossless rows there is nothing to compare with.
  EXPECT_EQ(std::string::npos, tableComparisons({rows[1]}).find("wire format")) << c;
}

TEST(BenchArgs, BadAndUnsupportedValuesAreRejectedWithTheirName) {
  struct Bad {
    const char* line;
    const char* mentions;
  };
  const Bad bad[] = {
      {"-b 12Q", "--minbytes"},        {"-e 0", "--maxbytes"},
      {"--sizes 1K,x", "--sizes"},     {"-d int32", "int32"},
      {"-d fp64", "fp64"},             {"-o prod", "prod"},
      {"-o avg", "avg"},               {"--backends mpi", "mpi"},
      {"--ranks 0", "--ranks"},        {"--ranks 99", "--ranks"},
      {"-n 0", "iters"},               {"-f 0.5", "stepfactor"},
      {"--no-such-flag", "no-such-flag"}, {"-b 2M -e 1M", "--minbytes"},
      {"-y 1", "--stream_null"},       {"-I 1", "--per_iter_timing"},
      {"-D 1", "--device_implementation"}, {"-R 2", "--local_register"},
      {"-z 1 -G 5", "--blocking"},     {"--ranks 2 -g 2", "--ranks"},
      {"-b 8 -e 1G -i 8", "sizes"},    {"-a 4", "average"},
  };
  for (const Bad& b : bad) {
    BenchOptions opt;
    const std::string err = parseBenchArgs(words(b.line), &opt);
    EXPECT_NE(std::string::npos, err.find(b.mentions)) << b.line << " -> '" << err << "'";
  }
}

TEST(BenchArgs, ChildrenGetTheSameMeasurement) {
  // A child (an NCCL variant, a --procs rank) parses the arguments it is given to the same
  // measurement as its parent.
  BenchOptions o = parsed("-b 8 -e 1M -f 4 -n 7 -w 2 -m 3 -c 2 -G 5 -o all -d half -a 1 -C 1 "
                          "-u 2 -T 9 --transport host");
  std::vector<std::string> args = childBenchArgs(o, "tpar:twoshot");
  ASSERT_EQ("bench", args.front());
  args.erase(args.begin());
  BenchOptions c;
  ASSERT_EQ("", parseBenchArgs(args, &c));
  EXPECT_EQ(benchSizes(o), benchSizes(c));
  EXPECT_EQ((std::vector<std::string>{"tpar:twoshot"}), c.backends);
  for (size_t b : {size_t{8}, size_t{1} << 20})
    EXPECT_EQ(usesGraph(o, b), usesGraph(c, b)) << b;
  EXPECT_EQ(o.iters, c.iters);
  EXPECT_EQ(o.warmup, c.warmup);
  EXPECT_EQ(o.agg_iters, c.agg_iters);
  EXPECT_EQ(o.check_iters, c.check_iters);
  EXPECT_EQ(o.graph_launches, c.graph_launches);
  EXPECT_EQ(o.ops, c.ops);
  EXPECT_EQ(o.dtypes, c.dtypes);
  EXPECT_EQ(o.average, c.average);
  EXPECT_EQ(o.report_cputime, c.report_cputime);
  EXPECT_EQ(o.unalign, c.unalign);
  EXPECT_EQ(o.timeout_s, c.timeout_s);
  EXPECT_EQ(o.transport, c.transport);
}

TEST(BenchTime, AverageFlagReducesRankTimesAsNcclTests) {
  const std::vector<double> us = {4.0, 2.0, 9.0, 5.0};
  EXPECT_DOUBLE_EQ(4.0, averageRankTimes(us, 0));  // rank 0
  EXPECT_DOUBLE_EQ(5.0, averageRankTimes(us, 1));  // mean
  EXPECT_DOUBLE_EQ(2.0, averageRankTimes(us, 2));  // min
  EXPECT_DOUBLE_EQ(9.0, averageRankTimes(us, 3));  // max
  EXPECT_DOUBLE_EQ(0.0, averageRankTimes({}, 1));
}

// Rows with random values, as a run would make them.
std::vector<BenchRow> randomRows(std::mt19937* rng, int n) {
  std::uniform_real_distribution<double> us(0.5, 5e5);
  std::uniform_int_distribution<int> pick(0, 2);
  std::uniform_int_distribution<long long> wrong(-1, 3);
  const char* backends[] = {"tpar", "tpar:twoshot", "nccl:p2p-sys"};
  const tparDataType_t types[] = {tparFloat16, tparFloat32, tparBfloat16};
  const tparRedOp_t ops[] = {tparSum, tparMax, tparMin};
  std::vector<BenchRow> rows;
  for (int i = 0; i < n; ++i) {
    BenchRow r;
    r.backend = backends[pick(*rng)];
    r.ranks = 2 + pick(*rng) * 3;
    r.dtype = types[pick(*rng)];
    r.op = ops[pick(*rng)];
    r.count = size_t{1} << std::uniform_int_distribution<int>(0, 27)(*rng);
    r.bytes = r.count * tpar::elementBytes(r.dtype);
    r.us_out = us(*rng);
    r.us_in = us(*rng);
    r.wrong_out = wrong(*rng);
    r.wrong_in = wrong(*rng);
    r.chosen = pick(*rng) ? "twoshot" : "";
    r.graph_us_out = pick(*rng) ? us(*rng) : -1;  // -G 0: above --graph-max-bytes, none
    rows.push_back(r);
  }
  return rows;
}

TEST(BenchTable, ReadsLikeNcclTestsOutput) {
  // A reader written for nccl-tests' output reads what it reads there.
  const std::string nccl_tests =
      "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 "
      "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
      "#\n"
      "#                                                              out-of-place             "
      "          in-place          \n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
      "time   algbw   busbw #wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            "
      "(us)  (GB/s)  (GB/s)       \n"
      "           8             2     float     sum      -1    36.51    0.00    0.00      0    "
      "35.23    0.00    0.00      0\n"
      "   134217728      33554432     float     sum      -1   1234.5  108.72  190.26      0   "
      "1230.1  109.11  190.94      0\n"
      "# Out of bounds values : 0 OK\n"
      "# Avg bus bandwidth    : 95.3 \n";
  const auto ref = tpar_test::parseNcclTestsOutput(nccl_tests);
  ASSERT_EQ("", ref.error);
  ASSERT_EQ(2u, ref.rows.size());
  EXPECT_EQ(134217728, ref.rows[1].size);
  EXPECT_DOUBLE_EQ(190.26, ref.rows[1].out_of_place.busbw);
  EXPECT_EQ(0, ref.out_of_bounds);
  ASSERT_EQ(1u, ref.avg_busbw.size());

  std::mt19937 rng(std::random_device{}());
  const std::vector<BenchRow> rows = randomRows(&rng, 40);
  for (const bool floors : {false, true}) {
    for (const bool timestamps : {false, true}) {
      for (const bool eager_and_graph : {false, true}) {
        TableStyle style;
        style.floors = floors;
        style.timestamps = timestamps;
        style.eager_and_graph = eager_and_graph;
        std::string text = tableHeader(style);
        for (BenchRow r : rows) {
          r.timestamp = "2026-01-02 03:04:05";
          text += tableRow(r, style);
        }
        text += tableFooter(rows);
        const auto got = tpar_test::parseNcclTestsOutput(text);
        ASSERT_EQ("", got.error) << text;
        // nccl-tests' 13 columns first, in its order; tpar's after them.
        ASSERT_GE(got.columns.size(), ref.columns.size());
        EXPECT_EQ(ref.columns, std::vector<std::string>(got.columns.begin(),
                                                         got.columns.begin() + ref.columns.size()));
        ASSERT_EQ(rows.size(), got.rows.size());
        long long wrong = 0;
        for (size_t i = 0; i < rows.size(); ++i) {
          const BenchRow& r = rows[i];
          const tpar_test::NcclTestsRow& g = got.rows[i];
          EXPECT_EQ(static_cast<long long>(r.bytes), g.size);
          EXPECT_EQ(static_cast<long long>(r.count), g.count);
          EXPECT_EQ(ncclTestsTypeName(r.dtype), g.type);
          EXPECT_EQ(ncclTestsOpName(r.op), g.redop);
          EXPECT_EQ(-1, g.root);
          // Printed in 7 (time) and 6 (bandwidth) characters: 2 decimals or 4 significant digits.
          EXPECT_NEAR(r.us_out, g.out_of_place.time_us, std::max(0.006, r.us_out * 1e-3));
          EXPECT_NEAR(r.us_in, g.in_place.time_us, std::max(0.006, r.us_in * 1e-3));
          const double bw = busBandwidth(r.bytes, r.us_out, r.ranks);
          EXPECT_NEAR(bw, g.out_of_place.busbw, std::max(0.006, bw * 1e-2));
          EXPECT_EQ(r.wrong_out, g.out_of_place.wrong);
          EXPECT_EQ(r.wrong_in, g.in_place.wrong);
          wrong += std::max(0LL, r.wrong_out) + std::max(0LL, r.wrong_in);
          // tpar's columns come after: (-S's date and time), backend, algo, (-G 0: graph,
          // e-g), (floor, phys, x floor), and "not checked" on a row whose results were not
          // compared (-c 0).
          const size_t first = timestamps ? 2 : 0;
          const bool unchecked = r.wrong_out < 0 && r.wrong_in < 0;
          ASSERT_EQ(first + 2 + (eager_and_graph ? 2 : 0) + (floors ? 3 : 0) + (unchecked ? 2 : 0),
                    g.extras.size());
          EXPECT_EQ(r.backend, g.extras[first]);
          EXPECT_EQ(r.chosen.empty() ? "-" : r.chosen, g.extras[first + 1]);
          if (eager_and_graph && r.graph_us_out < 0) {
            EXPECT_EQ("-", g.extras[first + 2]);
            EXPECT_EQ("-", g.extras[first + 3]);
          } else if (eager_and_graph) {
            const double graph = std::stod(g.extras[first + 2]);
            const double diff = std::stod(g.extras[first + 3]);
            EXPECT_NEAR(r.graph_us_out, graph, std::max(0.006, r.graph_us_out * 1e-3));
            const double want = r.us_out - r.graph_us_out;
            EXPECT_NEAR(want, diff, std::max(0.006, std::abs(want) * 2e-2));
          }
          if (unchecked) EXPECT_EQ("checked", g.extras.back());
        }
        EXPECT_EQ(wrong, got.out_of_bounds);
        EXPECT_FALSE(got.avg_busbw.empty());
      }
    }
  }
}

// Rows as `tpar bench -c C` makes them: checked (both halves) or not (-c 0).
std::vector<BenchRow> checkedRows(int checked, int unchecked, long long wrong_each) {
  std::vector<BenchRow> rows;
  for (int i = 0; i < checked + unchecked; ++i) {
    BenchRow r;
    r.backend = "tpar";
    r.ranks = 2;
    r.bytes = 4096u << i;
    r.count = r.bytes / 2;
    r.us_out = r.us_in = 3.0 + i;
    r.wrong_out = r.wrong_in = i < checked ? wrong_each : -1;
    rows.push_back(r);
  }
  return rows;
}

TEST(BenchTable, UncheckedRowsSayNotCheckedAndNeverOk) {
  const std::vector<BenchRow> rows = checkedRows(0, 3, 0);
  const std::string row = tableRow(rows[0], TableStyle{});
  EXPECT_NE(std::string::npos, row.find("N/A")) << row;
  EXPECT_NE(std::string::npos, row.find("not checked")) << row;
  const std::string footer = tableFooter(rows);
  EXPECT_NE(std::string::npos, footer.find("Out of bounds values : N/A (not checked: -c 0)"))
      << footer;
  EXPECT_EQ(std::string::npos, footer.find("OK")) << footer;
  const std::string end = closingLines(rows);
  EXPECT_EQ("# not checked: 3 rows not checked (-c 0): their results were never compared\n", end);
  EXPECT_EQ(std::string::npos, end.find("ok")) << end;
  EXPECT_EQ(std::string::npos, end.find("0 wrong")) << end;
}

TEST(BenchTable, ClosingLineCountsCheckedAndUncheckedRows) {
  EXPECT_EQ("# ok: 0 wrong elements in 2 checked rows\n", closingLines(checkedRows(2, 0, 0)));
  EXPECT_EQ("# ok: 0 wrong elements in 2 checked rows; 1 rows not checked (-c 0): their results "
            "were never compared\n",
            closingLines(checkedRows(2, 1, 0)));
  EXPECT_EQ("# FAILED: 12 wrong elements in 2 checked rows\n", closingLines(checkedRows(2, 0, 3)));
  const std::string mixed = tableFooter(checkedRows(2, 1, 0));
  EXPECT_NE(std::string::npos, mixed.find(": 0 OK (1 rows not checked)")) << mixed;
  EXPECT_EQ("", closingLines({}));
}

TEST(BenchTable, AForcedAlgorithmThatFellBackSaysSoOncePerBackendAndRanks) {
  std::vector<BenchRow> rows = checkedRows(3, 0, 0);
  for (BenchRow& r : rows) {
    r.backend = "tpar:hier";
    r.ranks = 8;
    r.chosen = "twoshot";
    r.fallback = "twoshot (one island)";
  }
  rows[2].ranks = 4;
  const std::string end = closingLines(rows);
  EXPECT_NE(std::string::npos,
            end.find("# tpar:hier at 8 ranks: fell back to twoshot (one island); hier did not "
                     "run, its rows are twoshot's\n"))
      << end;
  EXPECT_NE(std::string::npos, end.find("# tpar:hier at 4 ranks: fell back")) << end;
  EXPECT_EQ(end.find("at 8 ranks"), end.rfind("at 8 ranks")) << end;
  EXPECT_NE(std::string::npos, end.find("# ok: 0 wrong elements in 3 checked rows")) << end;
  const auto j = rowToJson(rows[0]);
  EXPECT_EQ("twoshot (one island)", j["fallback"].get<std::string>());
  EXPECT_TRUE(j["checked"].get<bool>());
  EXPECT_EQ("twoshot (one island)", rowFromJson(j).fallback);
  EXPECT_FALSE(rowToJson(checkedRows(0, 1, 0)[0])["checked"].get<bool>());
  EXPECT_FALSE(rowToJson(checkedRows(1, 0, 0)[0]).contains("fallback"));
}

TEST(BenchTable, CputimeNamesTheTimeColumns) {
  TableStyle style;
  style.cputime = true;
  const auto got = tpar_test::parseNcclTestsOutput(tableHeader(style));
  ASSERT_GE(got.columns.size(), 13u);
  EXPECT_EQ("cputime", got.columns[5]);
  EXPECT_EQ("cputime", got.columns[9]);
}

TEST(Bandwidth, BusBandwidthFollowsNcclTests) {
  // 1 GB in 1000 us: 1e9 B / 1e-3 s = 1e12 B/s = 1000 GB/s.
  EXPECT_DOUBLE_EQ(1000.0, algBandwidth(1000000000, 1000.0));
  EXPECT_DOUBLE_EQ(1750.0, busBandwidth(1000000000, 1000.0, 8));  // x 2*7/8
  EXPECT_DOUBLE_EQ(1000.0, busBandwidth(1000000000, 1000.0, 2));  // x 2*1/2
  EXPECT_DOUBLE_EQ(0.0, busBandwidth(1000000000, 1000.0, 1));
  EXPECT_DOUBLE_EQ(0.0, algBandwidth(100, 0.0));
}

TEST(BenchJson, RowsCarryEveryColumnAndComeBack) {
  std::mt19937 rng(std::random_device{}());
  for (const BenchRow& r : randomRows(&rng, 10)) {
    const auto j = rowToJson(r);
    for (const char* key : {"backend", "ranks", "virtual", "dtype", "op", "bytes", "count",
                            "chosen", "graph", "us_out_of_place", "us_in_place",
                            "algbw_out_of_place", "busbw_out_of_place", "wrong_out_of_place",
                            "wrong_in_place"}) {
      EXPECT_TRUE(j.contains(key)) << key;
    }
    const BenchRow back = rowFromJson(j);
    EXPECT_EQ(r.backend, back.backend);
    EXPECT_EQ(r.dtype, back.dtype);
    EXPECT_EQ(r.op, back.op);
    EXPECT_EQ(r.bytes, back.bytes);
    EXPECT_DOUBLE_EQ(r.us_out, back.us_out);
    EXPECT_EQ(r.wrong_in, back.wrong_in);
  }
}

TEST(BenchJson, EagerAndGraphTimesTravelAndComeBack) {
  BenchRow r;
  r.backend = "tpar";
  r.ranks = 2;
  r.bytes = 12288;
  r.count = 6144;
  r.us_out = 3.25;
  r.us_in = 3.5;
  r.graph_us_out = 2.86;
  r.graph_us_in = 2.9;
  r.wrong_out = r.wrong_in = 0;
  const auto j = rowToJson(r);
  EXPECT_DOUBLE_EQ(3.25, j["eager_us_out_of_place"].get<double>());
  EXPECT_DOUBLE_EQ(2.86, j["graph_us_out_of_place"].get<double>());
  EXPECT_DOUBLE_EQ(2.9, j["graph_us_in_place"].get<double>());
  EXPECT_NEAR(0.39, j["eager_minus_graph_us_out_of_place"].get<double>(), 1e-12);
  EXPECT_NEAR(0.6, j["eager_minus_graph_us_in_place"].get<double>(), 1e-12);
  const BenchRow back = rowFromJson(j);  // a --procs rank's row, read by its parent
  EXPECT_DOUBLE_EQ(2.86, back.graph_us_out);
  EXPECT_DOUBLE_EQ(2.9, back.graph_us_in);
  // Not measured (graph-only runs, sizes above the bound): no graph keys, and none come back.
  BenchRow g = r;
  g.graph_us_out = g.graph_us_in = -1;
  EXPECT_FALSE(rowToJson(g).contains("graph_us_out_of_place"));
  EXPECT_GT(0, rowFromJson(rowToJson(g)).graph_us_out);
}

TEST(BenchHostCost, LineHeaderAndJsonCarryCallBareAndTheirDifference) {
  HostCostRow r;
  r.backend = "tpar";
  r.ranks = 2;
  r.bytes = 12288;
  r.chosen = "oneshot";
  r.batch = 200;
  r.batches = 50;
  r.median_us = 2.37;
  r.min_us = 2.12;
  r.bare_median_us = 1.62;
  r.bare_min_us = 1.5;
  r.overlap = true;
  r.wrong = 0;
  EXPECT_NEAR(0.75, r.overheadUs(), 1e-12);
  const std::string header = hostCostHeader();
  for (const char* col : {"size", "backend", "algo", "ranks", "call", "bare", "call-bare", "#wrong"})
    EXPECT_NE(std::string::npos, header.find(col)) << col << " in " << header;
  EXPECT_EQ('#', header[0]);
  std::istringstream line(hostCostLine(r));
  std::vector<std::string> cols;
  for (std::string c; line >> c;) cols.push_back(c);
  ASSERT_EQ(10u, cols.size()) << hostCostLine(r);
  EXPECT_EQ("12288", cols[0]);
  EXPECT_EQ("tpar", cols[1]);
  EXPECT_EQ("oneshot", cols[2]);
  EXPECT_EQ("2", cols[3]);
  EXPECT_DOUBLE_EQ(2.37, std::stod(cols[4]));
  EXPECT_DOUBLE_EQ(2.12, std::stod(cols[5]));
  EXPECT_DOUBLE_EQ(1.62, std::stod(cols[6]));
  EXPECT_DOUBLE_EQ(1.5, std::stod(cols[7]));
  EXPECT_DOUBLE_EQ(0.75, std::stod(cols[8]));
  EXPECT_EQ("0", cols[9]);
  const auto j = hostCostToJson(r);
  EXPECT_NEAR(0.75, j["overhead_us"].get<double>(), 1e-12);
  EXPECT_DOUBLE_EQ(1.62, j["bare_median_us"].get<double>());
  EXPECT_TRUE(j["checked"].get<bool>());
  EXPECT_TRUE(j["bare_overlap"].get<bool>());
  // Unchecked: says so, never a zero.
  r.wrong = -1;
  EXPECT_NE(std::string::npos, hostCostLine(r).find("N/A")) << hostCostLine(r);
  EXPECT_NE(std::string::npos, hostCostLine(r).find("not checked")) << hostCostLine(r);
  EXPECT_FALSE(hostCostToJson(r)["checked"].get<bool>());
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
