#include "tools/tpar/bench/bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include <CLI/CLI.hpp>

#include "tools/tpar/bench/bench_procs.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/doctor/probes.h"

namespace tpar_cli {
namespace {

// Seeds of the checked calls: every check of a run draws new inputs, so an output left over
// from an earlier call never matches.
unsigned nextSeed() {
  static unsigned seed = static_cast<unsigned>(std::time(nullptr));
  return ++seed;
}

std::string nowText() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The most ranks that share one GPU (and so its PCIe link).
int ranksPerLink(const std::vector<int>& devs) {
  std::map<int, int> per;
  int most = 0;
  for (int d : devs) most = std::max(most, ++per[d]);
  return most;
}

// Each GPU's link to pinned host memory, measured once per run the first time a row that ran
// on the host transport needs it (docs/PERFORMANCE.md, "Host-staged transport").
class HostLinks {
 public:
  explicit HostLinks(bool quiet) : quiet_(quiet) {}
  // Measures every GPU of `devs` not measured yet. Nothing else may run on them meanwhile.
  void measure(const std::vector<int>& devs) {
    for (int d : std::set<int>(devs.begin(), devs.end())) {
      if (by_dev_.count(d)) continue;
      LinkMeasure m;
      probeHostLink(d, probePlan(false), &m);
      by_dev_[d] = m;
      if (quiet_) continue;
      if (m.error.empty())
        std::printf("# host link of GPU %d, measured now: write %.1f GB/s, read %.1f GB/s, "
                    "both at once %.1f GB/s, hand-off %.2f us (a store into pinned host memory "
                    "seen by a poll)\n",
                    d, m.write_gbps, m.read_gbps, m.both_gbps, m.latency_us);
      else
        std::printf("# host link of GPU %d not measured (%s): no floors\n", d, m.error.c_str());
      std::fflush(stdout);
    }
  }
  bool measured(const std::vector<int>& devs) const {
    for (int d : devs)
      if (!by_dev_.count(d)) return false;
    return !devs.empty();
  }
  // The slowest link among `devs`; not `measured` when any of them is missing or failed.
  HostLinkSummary summary(const std::vector<int>& devs) const {
    HostLinkSummary s;
    s.measured = measured(devs);
    bool first = true;
    for (int d : std::set<int>(devs.begin(), devs.end())) {
      auto it = by_dev_.find(d);
      if (it == by_dev_.end() || !it->second.error.empty()) {
        s.measured = false;
        continue;
      }
      const LinkMeasure& m = it->second;
      s.write_gbps = first ? m.write_gbps : std::min(s.write_gbps, m.write_gbps);
      s.read_gbps = first ? m.read_gbps : std::min(s.read_gbps, m.read_gbps);
      s.both_gbps = first ? m.both_gbps : std::min(s.both_gbps, m.both_gbps);
      s.rtt_us = std::max(s.rtt_us, m.latency_us);
      first = false;
    }
    return s;
  }
  nlohmann::json toJson() const {
    if (by_dev_.empty()) return nullptr;
    nlohmann::json gpus = nlohmann::json::array();
    for (const auto& [d, m] : by_dev_)
      gpus.push_back({{"device", d},
                      {"write_gbps", m.write_gbps},
                      {"read_gbps", m.read_gbps},
                      {"both_gbps", m.both_gbps},
                      {"rtt_us", m.latency_us},
                      {"error", m.error}});
    return {{"gpus", gpus},
            {"rtt", "one-way hand-off: a kernel's store into pinned host memory until a poll "
                    "from the GPU sees it (half of tpar doctor's ping-pong round)"},
            {"floor_model",
             "max(write bytes / write_gbps, read bytes / read_gbps) + rounds x rtt_us over the "
             "slowest link, bytes per docs/PERFORMANCE.md (Host-staged transport)"},
            {"both_floor_model",
             "phys_both_floor_us: the same with (write + read bytes) / both_gbps as a third "
             "term, both_gbps measured with stores and loads at once"}};
  }

 private:
  bool quiet_;
  std::map<int, LinkMeasure> by_dev_;
};

// The memory (GPU, summed over `devs`) that `init` took: -M.
std::string memoryTaken(const std::vector<int>& devs, const std::function<std::string()>& init,
                        long long* bytes) {
  std::set<int> unique(devs.begin(), devs.end());
  auto used = [&] {
    long long sum = 0;
    for (int d : unique) {
      size_t free_b = 0, total = 0;
      setDevice(d);
      if (cudaMemGetInfo(&free_b, &total) == cudaSuccess) sum += static_cast<long long>(total - free_b);
    }
    return sum;
  };
  const long long before = used();
  std::string e = init();
  *bytes = used() - before;
  return e;
}

void printPreamble(const BenchOptions& opt, const std::vector<int>& rank_counts) {
  int version = 0;
  tparGetVersion(&version);
  std::printf("# tpar bench %d.%d.%d (commit %s): nccl-tests' columns, every backend side by "
              "side, every result checked\n",
              version / 10000, version / 100 % 100, version % 100, TPAR_GIT_COMMIT);
  const auto sizes = benchSizes(opt);
  const bool factor = opt.factor > 1.0;
  std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d "
              "iters: %d agg iters: %d validation: %d graph: %d\n",
              opt.nthreads, rank_counts.front() / std::max(1, opt.nthreads), sizes.front(),
              sizes.back(), factor ? opt.factor : static_cast<double>(opt.step_bytes),
              factor ? "factor" : "bytes", opt.warmup, opt.iters, opt.agg_iters, opt.check_iters,
              opt.graph_launches);
  if (opt.eager_and_graph)
    std::printf("# -G 0: time = eager calls; graph = one CUDA-graph replay of the same calls "
                "(sizes up to %zu B); e-g = eager - graph (out of place)\n",
                opt.graph_max_bytes);
  if (opt.blocking) std::printf("# Blocking Enabled: wait after every %s\n",
                                opt.blocking == 3 ? "iteration" : "call");
  if (opt.parallel_init)
    std::printf("# -p 1: tpar creates every rank's communicator in one call either way\n");
  std::printf("# time: %s of the ranks' %s per call (-a %d), %s%s\n",
              opt.average == 0 ? "rank 0" : opt.average == 1 ? "mean" : opt.average == 2 ? "minimum" : "maximum",
              opt.report_cputime ? "host time to issue" : "GPU time",
              opt.average, opt.graph_launches > 0 ? "CUDA-graph replays" : "eager calls",
              opt.graph_launches > 0 && opt.graph_max_bytes != SIZE_MAX
                  ? (" up to " + std::to_string(opt.graph_max_bytes) + " B, eager above").c_str()
                  : "");
}

void printDevices(const std::vector<int>& devs, const std::vector<GpuInfo>& gpus) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::printf("#\n# Using devices\n");
  for (size_t r = 0; r < devs.size(); ++r) {
    const GpuInfo& g = gpus[devs[r]];
    std::printf("#  Rank %2zu Group  0 Pid %6d on %10s device %2d [%s] %s\n", r,
                static_cast<int>(getpid()), host, devs[r], g.bus_id.c_str(), g.name.c_str());
  }
}

}  // namespace

std::string measureBenchRow(Backend& b, Ranks& rk, size_t bytes, tparDataType_t dtype,
                            tparRedOp_t op, const BenchOptions& opt, BenchRow* row) {
  const size_t es = tpar::elementBytes(dtype);
  const size_t count = std::max<size_t>(1, bytes / es);
  row->dtype = dtype;
  row->op = op;
  row->bytes = count * es;
  row->count = count;
  row->chosen = b.chosen(count * es);
  // A wire format's results are not the exact sums: such rows are checked bit for bit against
  // the format's reference instead (docs/WIRE.md), and named by the variant that ran.
  int wire = tparWireNone;
  if (const std::string v = b.wireVariant(count * es, dtype); !v.empty()) {
    std::string plain;
    if (!splitWireSuffix(v, &plain, &wire)) return "unknown wire variant '" + v + "'";
    row->chosen = v;
  }
  row->graph = usesGraph(opt, row->bytes);
  TimingPlan plan;
  plan.iters = opt.iters;
  plan.warmup = opt.warmup;
  plan.agg = opt.agg_iters;
  plan.graph_launches = row->graph ? opt.graph_launches : 0;
  plan.blocking = opt.blocking;
  // -u: every buffer starts `unalign` elements past its allocation (rk.alloc left room).
  std::vector<void*> in_bufs, out_bufs;
  for (size_t r = 0; r < rk.in.size(); ++r) {
    in_bufs.push_back(static_cast<char*>(rk.in[r]) + opt.unalign * es);
    out_bufs.push_back(static_cast<char*>(rk.out[r]) + opt.unalign * es);
  }
  const std::vector<const void*> in(in_bufs.begin(), in_bufs.end());
  const std::vector<const void*> out(out_bufs.begin(), out_bufs.end());
  for (const bool in_place : {false, true}) {
    const std::vector<const void*>& send = in_place ? out : in;
    auto issue = [&] { return b.allReduce(send, out_bufs, count, dtype, op, rk.streams); };
    auto fill = [&](unsigned seed) {
      return in_place ? rk.fill(out_bufs, {}, count, dtype, seed)
                      : rk.fill(in_bufs, out_bufs, count, dtype, seed);
    };
    // Timed: in place, the values then change every call, which changes nothing the kernels do.
    if (std::string e = fill(0); !e.empty()) return e;
    Timing t;
    if (std::string e = timeCalls(rk, plan, issue, &t); !e.empty()) return e;
    if (std::string e = b.asyncError(); !e.empty()) return e;
    const double us = opt.report_cputime ? t.cpu_us : averageRankTimes(t.rank_us, opt.average);
    (in_place ? row->us_in : row->us_out) = us;
    (in_place ? row->rank_us_in : row->rank_us_out) = t.rank_us;
    // -G 0: the same calls from one graph replay, right after the eager ones.
    if (opt.eager_and_graph && row->bytes <= opt.graph_max_bytes) {
      TimingPlan graph_plan = plan;
      graph_plan.graph_launches = 1;
      graph_plan.blocking = 0;
      Timing g;
      if (std::string e = timeCalls(rk, graph_plan, issue, &g); !e.empty()) return e;
      if (std::string e = b.asyncError(); !e.empty()) return e;
      (in_place ? row->graph_us_in : row->graph_us_out) =
          opt.report_cputime ? g.cpu_us : averageRankTimes(g.rank_us, opt.average);
    }
    // Checked: -c calls, each on fresh inputs over a poisoned output; the first wrong one ends
    // the checks.
    long long wrong = opt.check_iters > 0 ? 0 : -1;
    for (int c = 0; c < opt.check_iters && wrong == 0; ++c) {
      const unsigned seed = nextSeed();
      if (std::string e = fill(seed); !e.empty()) return e;
      if (std::string e = issue(); !e.empty()) return e;
      if (std::string e = rk.sync(); !e.empty()) return e;
      if (std::string e = b.asyncError(); !e.empty()) return e;
      const std::string e =
          wire != tparWireNone
              ? rk.countWireWrongIn(out_bufs, count, dtype, wire, &wrong, op, seed)
              : rk.countWrongIn(out_bufs, count, dtype, &wrong, op, seed);
      if (!e.empty()) return e;
    }
    (in_place ? row->wrong_in : row->wrong_out) = wrong;
  }
  if (opt.report_timestamps) row->timestamp = nowText();
  return "";
}

bool setHostFloor(BenchRow* row, const HostLinkSummary& link, int ranks_per_link) {
  row->has_floor = false;
  if (row->transport != tparTransportName(tparTransportHost) || !link.measured) return false;
  row->has_floor = hostLinkFloor(row->chosen, row->bytes, row->ranks, ranks_per_link,
                                 link.write_gbps, link.read_gbps, link.rtt_us, &row->floor,
                                 link.both_gbps);
  row->has_phys = row->has_floor &&
                  lowestHostFloor(row->bytes, row->ranks, ranks_per_link, link, &row->phys,
                                  &row->phys_algo);
  // A format's row: the lossless algorithms move more bytes than it does, so its own floor is
  // the lowest that carries the message in that format.
  if (row->has_phys && row->chosen.find('+') != std::string::npos &&
      row->floor.us < row->phys.us) {
    const double both = row->phys.both_us;
    row->phys = row->floor;
    row->phys_algo = row->chosen;
    if (both > 0 && both < row->phys.both_us) row->phys.both_us = both;
  }
  return row->has_floor;
}

nlohmann::json rowToJson(const BenchRow& r) {
  nlohmann::json j = {{"backend", r.backend},
                      {"ranks", r.ranks},
                      {"virtual", r.virtual_ranks},
                      {"dtype", ncclTestsTypeName(r.dtype)},
                      {"op", ncclTestsOpName(r.op)},
                      {"bytes", r.bytes},
                      {"count", r.count},
                      {"chosen", r.chosen},
                      {"graph", r.graph},
                      {"us_out_of_place", r.us_out},
                      {"us_in_place", r.us_in},
                      {"rank_us_out_of_place", r.rank_us_out},
                      {"rank_us_in_place", r.rank_us_in},
                      {"algbw_out_of_place", algBandwidth(r.bytes, r.us_out)},
                      {"busbw_out_of_place", busBandwidth(r.bytes, r.us_out, r.ranks)},
                      {"wrong_out_of_place", r.wrong_out},
                      {"wrong_in_place", r.wrong_in},
                      {"checked", r.wrong_out >= 0 || r.wrong_in >= 0}};
  if (!r.fallback.empty()) j["fallback"] = r.fallback;
  if (!r.transport.empty()) j["transport"] = r.transport;
  if (!r.timestamp.empty()) j["timestamp"] = r.timestamp;
  if (r.graph_us_out >= 0 || r.graph_us_in >= 0) {
    // Eager next to graph (-G 0): us_* are the eager times.
    j["eager_us_out_of_place"] = r.us_out;
    j["eager_us_in_place"] = r.us_in;
    j["graph_us_out_of_place"] = r.graph_us_out;
    j["graph_us_in_place"] = r.graph_us_in;
    j["eager_minus_graph_us_out_of_place"] = r.us_out - r.graph_us_out;
    j["eager_minus_graph_us_in_place"] = r.us_in - r.graph_us_in;
  }
  if (r.has_floor) {
    j["floor_us"] = r.floor.us;
    j["floor_write_bytes"] = r.floor.write_bytes;
    j["floor_read_bytes"] = r.floor.read_bytes;
    j["floor_rounds"] = r.floor.rounds;
    j["x_floor_out_of_place"] = r.floor.us > 0 ? r.us_out / r.floor.us : 0.0;
    j["x_floor_in_place"] = r.floor.us > 0 ? r.us_in / r.floor.us : 0.0;
  }
  if (r.has_phys) {
    j["phys_floor_us"] = r.phys.us;
    j["phys_floor_algo"] = r.phys_algo;
    j["phys_floor_rounds"] = r.phys.rounds;
    j["x_phys_out_of_place"] = r.phys.us > 0 ? r.us_out / r.phys.us : 0.0;
    if (r.phys.both_us > 0) {
      j["phys_both_floor_us"] = r.phys.both_us;
      j["x_phys_both_out_of_place"] = r.us_out / r.phys.both_us;
    }
  }
  return j;
}

BenchRow rowFromJson(const nlohmann::json& j) {
  BenchRow r;
  r.backend = j.value("backend", "");
  r.ranks = j.value("ranks", 0);
  r.virtual_ranks = j.value("virtual", false);
  const std::string dtype = j.value("dtype", "bfloat16");
  parseDatatypeName(dtype, &r.dtype);
  if (dtype == "half") r.dtype = tparFloat16;
  if (dtype == "float") r.dtype = tparFloat32;
  const std::string op = j.value("op", "sum");
  r.op = op == "max" ? tparMax : op == "min" ? tparMin : tparSum;
  r.bytes = j.value("bytes", size_t{0});
  r.count = j.value("count", size_t{0});
  r.chosen = j.value("chosen", "");
  r.graph = j.value("graph", true);
  r.us_out = j.value("us_out_of_place", 0.0);
  r.us_in = j.value("us_in_place", 0.0);
  r.rank_us_out = j.value("rank_us_out_of_place", std::vector<double>{});
  r.rank_us_in = j.value("rank_us_in_place", std::vector<double>{});
  r.wrong_out = j.value("wrong_out_of_place", -1LL);
  r.wrong_in = j.value("wrong_in_place", -1LL);
  r.transport = j.value("transport", "");
  r.fallback = j.value("fallback", "");
  r.timestamp = j.value("timestamp", "");
  r.graph_us_out = j.value("graph_us_out_of_place", -1.0);
  r.graph_us_in = j.value("graph_us_in_place", -1.0);
  return r;
}

int runBench(const BenchOptions& opt) {
  const bool child = !opt.rows_path.empty();
  auto fail = [&](const std::string& msg, int code = kExitRunError) {
    std::fprintf(stderr, "tpar bench: %s\n", msg.c_str());
    if (child) std::ofstream(opt.rows_path) << nlohmann::json{{"error", msg}}.dump();
    return code;
  };
  // A bad output path is found before the minutes of measuring, not after.
  if (!opt.json_path.empty()) {
    if (std::string e = checkOutputPath(opt.json_path); !e.empty())
      return fail("--json: " + e, kExitUsage);
  }
  std::string why;
  const auto gpus = listGpus(&why);
  if (gpus.empty()) return fail(why + "; nothing to measure", kExitNoGpu);
  const int ngpus = static_cast<int>(gpus.size());
  if (opt.worker_rank >= 0) return runBenchWorker(opt, ngpus);
  if (opt.host_cost) return runHostCost(opt, gpus);
  if (opt.fused) return runFusedBench(opt);
  const std::vector<int> rank_counts = benchRankCounts(opt, ngpus);
  const std::vector<std::string> backends =
      withWires(opt.backends.empty() ? defaultBackends(ngpus) : opt.backends, opt.wires);
  const auto sizes = benchSizes(opt);
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  std::vector<BenchRow> rows;
  nlohmann::json floors = nlohmann::json::object();
  std::vector<std::string> skipped;
  HostLinks links(child);
  if (!child) printPreamble(opt, rank_counts);

  for (int cycle = 0; opt.run_cycles == 0 || cycle < opt.run_cycles; ++cycle) {
    for (int n : rank_counts) {
      const bool virt = n > ngpus;
      std::vector<int> devs(n);
      for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
      if (!child) {
        printDevices(devs, gpus);
        if (virt)
          std::printf("# %d virtual ranks on one %s: %d streams share its SMs and memory; the "
                      "times\n# show protocol cost, not an %d-GPU machine's.\n",
                      n, gpus[0].name.c_str(), n, n);
        if (opt.procs)
          std::printf("# one process per rank%s\n",
                      virt ? ": processes sharing one GPU are time-sliced by the driver, so these"
                             " times say nothing about the protocol"
                           : "");
        if (opt.transport != TPAR_CONFIG_UNDEF_INT)
          std::printf("# tpar transport: %s%s\n", transportOptionName(opt.transport),
                      opt.transport == 1 ? " (receive regions in pinned host memory)" : "");
      }
      // Host transport: every row gets the floor of its link (measured before anything runs).
      if (opt.transport == 1 && !child) links.measure(devs);
      const int per_link = ranksPerLink(devs);
      auto annotate = [&](BenchRow* row) {
        if (child || row->transport != tparTransportName(tparTransportHost)) return;
        links.measure(devs);  // no-op once measured; nothing of this run is in flight here
        setHostFloor(row, links.summary(devs), per_link);
      };
      TableStyle style;
      style.cputime = opt.report_cputime != 0;
      style.timestamps = opt.report_timestamps != 0;
      style.floors = !child && links.measured(devs);
      style.eager_and_graph = opt.eager_and_graph;
      auto print = [&](const BenchRow& row) {
        std::printf("%s", tableRow(row, style).c_str());
        std::fflush(stdout);
      };
      Ranks rk;
      if (std::string e = rk.alloc(devs, max_bytes + opt.unalign * size_t{4}); !e.empty())
        return fail(e);
      if (opt.graph_launches > 0 && !child) {
        double floor_us = 0;
        if (std::string e = timeFloor(rk, opt.iters, &floor_us); !e.empty()) return fail(e);
        floors[std::to_string(n)] = floor_us;
        std::printf("# launch floor: %.2f us (graphs of empty kernels on the same %d streams)\n",
                    floor_us, n);
      }
      if (!child) std::printf("%s", tableHeader(style).c_str());
      if (opt.procs) {
        if (std::string e = runBenchProcs(opt, n, ngpus, backends, annotate, print, &rows, &skipped);
            !e.empty())
          return fail(e);
        continue;
      }
      for (const std::string& name : backends) {
        if (ncclVariants().count(name)) {
          if (virt) {
            skipped.push_back(name + " at " + std::to_string(n) +
                              " ranks: NCCL refuses two ranks on one GPU");
            continue;
          }
          const size_t before = rows.size();
          if (std::string e = runBenchVariant(name, opt, n, &rows); !e.empty()) {
            skipped.push_back(name + ": " + e);
            continue;
          }
          for (size_t i = before; i < rows.size(); ++i) print(rows[i]);
          continue;
        }
        std::string reason;
        std::unique_ptr<Backend> b =
            makeBackend(name, &reason, opt.transport, int64_t{opt.timeout_s} * 1000);
        if (b == nullptr) {
          skipped.push_back(name + ": " + reason);
          continue;
        }
        long long mem = 0;
        std::string e = memoryTaken(devs, [&] { return b->init(devs); }, &mem);
        if (e.empty() && opt.local_register == 1) {
          std::vector<std::vector<void*>> bufs;
          for (int r = 0; r < n; ++r) bufs.push_back({rk.in[r], rk.out[r]});
          e = b->registerBuffers(bufs, max_bytes);
        }
        if (!e.empty()) {
          skipped.push_back(name + " at " + std::to_string(n) + " ranks: " + e);
          continue;
        }
        if (opt.memory_report && !child)
          std::printf("# %-20s : %s took %.1f MiB of GPU memory at init (%d ranks)\n",
                      "GPU memory usage", name.c_str(), mem / 1048576.0, n);
        const std::string transport = b->transport();
        const std::string fallback = b->fallback();
        if (!fallback.empty() && !child)
          std::printf("%s", fallbackNote(name, n, fallback).c_str());
        for (tparDataType_t dtype : opt.dtypes) {
          for (tparRedOp_t op : opt.ops) {
            for (size_t bytes : sizes) {
              BenchRow row;
              row.backend = name;
              row.ranks = n;
              row.virtual_ranks = virt;
              row.transport = transport;
              row.fallback = fallback;
              if (std::string e = measureBenchRow(*b, rk, bytes, dtype, op, opt, &row); !e.empty())
                return fail(name + ", " + std::to_string(bytes) + " B: " + e);
              annotate(&row);
              rows.push_back(row);
              if (!child) print(row);
            }
          }
        }
      }
    }
  }

  if (child) {
    nlohmann::json j;
    j["rows"] = nlohmann::json::array();
    for (const BenchRow& r : rows) j["rows"].push_back(rowToJson(r));
    std::ofstream(opt.rows_path) << j.dump();
    return kExitOk;
  }
  std::printf("%s", tableFooter(rows).c_str());
  std::printf("%s", tableComparisons(rows).c_str());
  for (const std::string& s : skipped) std::printf("# skipped %s\n", s.c_str());
  if (!opt.json_path.empty()) {
    nlohmann::json j = machineReport("tpar bench", opt.command_line);
    j["dtypes"] = nlohmann::json::array();
    for (tparDataType_t d : opt.dtypes) j["dtypes"].push_back(ncclTestsTypeName(d));
    j["ops"] = nlohmann::json::array();
    for (tparRedOp_t o : opt.ops) j["ops"].push_back(ncclTestsOpName(o));
    j["timing"] = opt.graph_launches > 0 ? "graph" : opt.eager_and_graph ? "eager+graph" : "eager";
    j["graph_launches"] = opt.graph_launches;
    j["graph_max_bytes"] = opt.graph_max_bytes;
    j["iters"] = opt.iters;
    j["warmup"] = opt.warmup;
    j["agg_iters"] = opt.agg_iters;
    j["check_iters"] = opt.check_iters;
    j["average"] = opt.average;
    j["cputime"] = opt.report_cputime != 0;
    j["launch_floor_us"] = floors;
    j["transport"] = transportOptionName(opt.transport);
    j["host_link"] = links.toJson();
    j["skipped"] = skipped;
    j["rows"] = nlohmann::json::array();
    for (const BenchRow& r : rows) j["rows"].push_back(rowToJson(r));
    if (std::string e = writeOutputFile(opt.json_path, j.dump(2) + "\n"); !e.empty())
      return fail("--json: " + e);
    std::printf("# wrote %s\n", opt.json_path.c_str());
  }
  std::printf("%s", closingLines(rows).c_str());
  long long total_wrong = 0;
  for (const BenchRow& r : rows)
    total_wrong += std::max(0LL, r.wrong_out) + std::max(0LL, r.wrong_in);
  if (total_wrong) return kExitCheckFailed;
  if (rows.empty()) return fail("no backend could run here (see 'skipped' above)");
  return kExitOk;
}

Action addBenchCommand(CLI::App& root, const std::string& command_line) {
  CLI::App* sub = root.add_subcommand(
      "bench", "all-reduce latency and bandwidth, every backend side by side (nccl-tests' flags "
               "and columns)");
  auto opt = std::make_shared<BenchOptions>();
  opt->command_line = command_line;
  const auto finished = addBenchOptions(sub, opt.get());
  sub->footer("For bench: 1 when any element of any row was wrong; 4 when no backend could run.");
  return [opt, finished] {
    if (std::string e = finished(); !e.empty()) {
      std::fprintf(stderr, "tpar bench: %s\n", e.c_str());
      return kExitUsage;
    }
    return runBench(*opt);
  };
}

int runQuickBench(const std::string& command_line) {
  BenchOptions opt;
  opt.command_line = command_line;
  opt.sizes = {12u << 10, 112u << 10, 384u << 10, 1u << 20};
  opt.iters = 100;
  return runBench(opt);
}

}  // namespace tpar_cli
