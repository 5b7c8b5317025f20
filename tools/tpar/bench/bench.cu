#include "tools/tpar/bench/bench.h"

#include <unistd.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/env.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/doctor/probes.h"
#include "tools/tpar/common/report.h"

extern char** environ;

namespace tpar_cli {
namespace {

std::string measureRow(Backend& b, Ranks& rk, size_t bytes, const BenchOptions& opt,
                       BenchRow* row) {
  const size_t es = elemSize(opt.dtype);
  const size_t count = std::max<size_t>(1, bytes / es);
  const size_t n = rk.devs.size();
  row->bytes = count * es;
  row->count = count;
  row->chosen = b.chosen(count * es);
  row->graph = opt.graph && row->bytes <= opt.graph_max_bytes;
  std::vector<const void*> cin(rk.in.begin(), rk.in.end());
  std::vector<const void*> cout_(rk.out.begin(), rk.out.end());
  // Out of place: the inputs stay intact, so the last call's output is checked.
  if (std::string e = rk.fill(rk.in, rk.out, count, opt.dtype); !e.empty()) return e;
  auto out_of_place = [&] { return b.allReduce(cin, rk.out, count, opt.dtype, rk.streams); };
  if (std::string e = timeIt(rk, opt.iters, opt.warmup, row->graph, out_of_place, &row->us_out);
      !e.empty())
    return e;
  if (std::string e = b.asyncError(); !e.empty()) return e;
  if (opt.check) {
    if (std::string e = rk.countWrongIn(rk.out, count, opt.dtype, &row->wrong_out); !e.empty())
      return e;
  }
  // In place: check one call on fresh inputs, then time (the values then grow every call,
  // which changes nothing the kernels do).
  auto in_place = [&] { return b.allReduce(cout_, rk.out, count, opt.dtype, rk.streams); };
  if (opt.check) {
    if (std::string e = rk.fill(rk.out, {}, count, opt.dtype); !e.empty()) return e;
    if (std::string e = in_place(); !e.empty()) return e;
    if (std::string e = rk.sync(); !e.empty()) return e;
    if (std::string e = rk.countWrongIn(rk.out, count, opt.dtype, &row->wrong_in); !e.empty())
      return e;
  }
  if (std::string e = timeIt(rk, opt.iters, opt.warmup, row->graph, in_place, &row->us_in);
      !e.empty())
    return e;
  (void)n;
  return b.asyncError();
}

// `floors`: two more columns, the host-link floor of the row's algorithm and the out-of-place
// time over it.
void printHeader(bool floors) {
  std::printf("#%73s%s\n", "out-of-place", "                          in-place");
  std::printf("# %-17s %12s %12s %9s %6s %9s %8s %8s %6s %9s %8s %8s %6s %12s", "backend",
              "size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong", "time",
              "algbw", "busbw", "#wrong", "algo");
  if (floors) std::printf(" %9s %7s", "floor", "x floor");
  std::printf("\n# %-17s %12s %12s %9s %6s %9s %8s %8s %6s %9s %8s %8s %6s %12s", "", "(B)",
              "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
              "");
  if (floors) std::printf(" %9s %7s", "(us)", "");
  std::printf("\n");
}

std::string wrongText(long long w) { return w < 0 ? "N/A" : std::to_string(w); }

void printRow(const BenchRow& r, tparDataType_t dtype, bool floors) {
  std::printf("  %-17s %12zu %12zu %9s %6s %9.2f %8.2f %8.2f %6s %9.2f %8.2f %8.2f %6s %12s",
              r.backend.c_str(), r.bytes, r.count, tparDataTypeName(dtype), "sum", r.us_out,
              algBandwidth(r.bytes, r.us_out), busBandwidth(r.bytes, r.us_out, r.ranks),
              wrongText(r.wrong_out).c_str(), r.us_in, algBandwidth(r.bytes, r.us_in),
              busBandwidth(r.bytes, r.us_in, r.ranks), wrongText(r.wrong_in).c_str(),
              r.chosen.empty() ? "-" : r.chosen.c_str());
  if (floors && r.has_floor)
    std::printf(" %9.2f %7.2f", r.floor.us, r.floor.us > 0 ? r.us_out / r.floor.us : 0.0);
  else if (floors)
    std::printf(" %9s %7s", "-", "-");
  std::printf("\n");
  std::fflush(stdout);
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
                    "hand-off %.2f us (a store into pinned host memory seen by a poll)\n",
                    d, m.write_gbps, m.read_gbps, m.latency_us);
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
                      {"rtt_us", m.latency_us},
                      {"error", m.error}});
    return {{"gpus", gpus},
            {"rtt", "one-way hand-off: a kernel's store into pinned host memory until a poll "
                    "from the GPU sees it (half of tpar doctor's ping-pong round)"},
            {"floor_model",
             "max(write bytes / write_gbps, read bytes / read_gbps) + rounds x rtt_us over the "
             "slowest link, bytes per docs/PERFORMANCE.md (Host-staged transport)"}};
  }

 private:
  bool quiet_;
  std::map<int, LinkMeasure> by_dev_;
};

// Runs a NCCL variant in a child `tpar bench` with its environment; appends its rows.
std::string runVariantChild(const std::string& variant, const BenchOptions& opt, int nranks,
                            std::vector<BenchRow>* rows) {
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return "cannot find own binary";
  char tmpl[] = "/tmp/tpar_bench_rows_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return "mkstemp failed";
  close(fd);
  std::ostringstream cmd;
  for (const std::string& kv : ncclVariants().at(variant)) cmd << kv << ' ';
  cmd << '\'' << self << "' bench --backends nccl --ranks " << nranks << " -n " << opt.iters
      << " -w " << opt.warmup << " -G " << (opt.graph ? 1 : 0) << " -c " << (opt.check ? 1 : 0)
      << " -d " << tparDataTypeName(opt.dtype) << " --sizes ";
  const auto sizes = benchSizes(opt);
  for (size_t i = 0; i < sizes.size(); ++i) cmd << (i ? "," : "") << sizes[i];
  cmd << " --rows-json " << tmpl << " > /dev/null";
  const int rc = std::system(cmd.str().c_str());
  std::ifstream f(tmpl);
  nlohmann::json j;
  try {
    f >> j;
  } catch (...) {
    unlink(tmpl);
    return "child run failed (exit " + std::to_string(rc) + ")";
  }
  unlink(tmpl);
  if (j.contains("error")) return j["error"].get<std::string>();
  for (const auto& r : j["rows"]) {
    BenchRow row;
    row.backend = variant;
    row.ranks = r["ranks"];
    row.virtual_ranks = r["virtual"];
    row.bytes = r["bytes"];
    row.count = r["count"];
    row.graph = r["graph"];
    row.us_out = r["us_out_of_place"];
    row.us_in = r["us_in_place"];
    row.wrong_out = r["wrong_out_of_place"];
    row.wrong_in = r["wrong_in_place"];
    rows->push_back(row);
  }
  return "";
}

std::string selfPath() {
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof(self) - 1) <= 0) return "";
  return self;
}

// Starts every command (argv lists) with `extra_env` added, waits for all (killing them all
// after timeout_s). Returns "" when every one exited 0.
std::string runAll(const std::vector<std::vector<std::string>>& cmds,
                   const std::vector<std::string>& extra_env, int timeout_s) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.push_back(*e);
  for (const std::string& kv : extra_env) envs.push_back(kv);
  std::vector<char*> cenv;
  for (auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  std::vector<pid_t> pids;
  for (const auto& cmd : cmds) {
    std::vector<char*> argv;
    for (const auto& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), cenv.data()) != 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return "cannot start " + cmd[0];
    }
    pids.push_back(pid);
  }
  std::string err;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  size_t left = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --left;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
          err = "rank " + std::to_string(i) + " process failed (status " + std::to_string(status) + ")";
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) waitpid(pids[i], nullptr, 0);
      return "rank processes did not finish within " + std::to_string(timeout_s) + " s";
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return err;
}

// One process per rank: every backend in its own set of `n` child processes (NCCL variants with
// their environment); each child measures its rank, and a row takes the slowest rank's time.
// `annotate` completes each merged row (the host floor) before it is printed.
std::string runProcs(const BenchOptions& opt, int n, int ngpus,
                     const std::vector<std::string>& backends,
                     const std::function<void(BenchRow*)>& annotate, bool floors,
                     std::vector<BenchRow>* rows, std::vector<std::string>* skipped) {
  const std::string self = selfPath();
  if (self.empty()) return "cannot find own binary";
  const auto sizes = benchSizes(opt);
  std::string size_list;
  for (size_t i = 0; i < sizes.size(); ++i) size_list += (i ? "," : "") + std::to_string(sizes[i]);
  for (const std::string& name : backends) {
    const bool variant = ncclVariants().count(name) != 0;
    const std::string base = variant ? "nccl" : name;
    if (base == "nccl" && n > ngpus) {
      skipped->push_back(name + " at " + std::to_string(n) + " ranks: NCCL refuses two ranks on one GPU");
      continue;
    }
    std::string id;
    if (std::string e = newUniqueId(base, &id); !e.empty()) {
      skipped->push_back(name + ": " + e);
      continue;
    }
    std::vector<std::vector<std::string>> cmds;
    std::vector<std::string> files;
    for (int r = 0; r < n; ++r) {
      files.push_back("/tmp/tpar_bench_rank_" + std::to_string(getpid()) + "_" + std::to_string(r));
      cmds.push_back({self, "bench", "--backends", base, "--sizes", size_list, "-n",
                      std::to_string(opt.iters), "-w", std::to_string(opt.warmup), "-G",
                      opt.graph ? "1" : "0", "-c", opt.check ? "1" : "0", "-d",
                      tparDataTypeName(opt.dtype), "--worker-rank", std::to_string(r),
                      "--worker-world", std::to_string(n), "--worker-id", id, "--rows-json",
                      files.back()});
      if (opt.transport != TPAR_CONFIG_UNDEF_INT) {
        cmds.back().push_back("--transport");
        cmds.back().push_back(transportOptionName(opt.transport));
      }
    }
    const std::vector<std::string> env = variant ? ncclVariants().at(name) : std::vector<std::string>{};
    const std::string err = runAll(cmds, env, 1800);
    std::vector<BenchRow> merged;
    for (int r = 0; r < n && err.empty(); ++r) {
      std::ifstream f(files[r]);
      nlohmann::json j;
      try {
        f >> j;
      } catch (...) {
        j = nlohmann::json{{"error", "rank " + std::to_string(r) + " wrote no rows"}};
      }
      if (j.contains("error")) {
        skipped->push_back(name + ": " + j["error"].get<std::string>());
        merged.clear();
        break;
      }
      size_t i = 0;
      for (const auto& jr : j["rows"]) {
        if (r == 0) {
          BenchRow row;
          row.backend = name;
          row.ranks = n;
          row.virtual_ranks = n > ngpus;
          row.bytes = jr["bytes"];
          row.count = jr["count"];
          row.chosen = jr["chosen"];
          row.graph = jr["graph"];
          row.transport = jr.value("transport", "");
          row.wrong_out = row.wrong_in = 0;
          merged.push_back(row);
        }
        if (i >= merged.size()) break;
        BenchRow& m = merged[i++];
        m.us_out = std::max(m.us_out, jr["us_out_of_place"].get<double>());
        m.us_in = std::max(m.us_in, jr["us_in_place"].get<double>());
        const long long wo = jr["wrong_out_of_place"], wi = jr["wrong_in_place"];
        m.wrong_out = (m.wrong_out < 0 || wo < 0) ? -1 : m.wrong_out + wo;
        m.wrong_in = (m.wrong_in < 0 || wi < 0) ? -1 : m.wrong_in + wi;
      }
    }
    for (const auto& f : files) unlink(f.c_str());
    if (!err.empty()) {
      skipped->push_back(name + ": " + err);
      continue;
    }
    for (BenchRow& m : merged) {
      annotate(&m);
      rows->push_back(m);
      printRow(m, opt.dtype, floors);
    }
  }
  return "";
}

// This process is one rank of a --procs run.
int runWorker(const BenchOptions& opt, int ngpus) {
  auto fail = [&](const std::string& msg) {
    std::ofstream(opt.rows_path) << nlohmann::json{{"error", msg}}.dump();
    return 2;
  };
  if (opt.backends.size() != 1) return fail("a worker runs exactly one backend");
  const int dev = ngpus >= opt.worker_world ? opt.worker_rank : 0;
  std::string why;
  std::unique_ptr<Backend> b = makeBackend(opt.backends[0], &why, opt.transport);
  if (b == nullptr) return fail(why);
  if (std::string e = b->initRank(opt.worker_world, opt.worker_rank, opt.worker_id, dev);
      !e.empty())
    return fail(e);
  Ranks rk;
  rk.first_rank = opt.worker_rank;
  rk.world = opt.worker_world;
  const auto sizes = benchSizes(opt);
  if (std::string e = rk.alloc({dev}, *std::max_element(sizes.begin(), sizes.end())); !e.empty())
    return fail(e);
  nlohmann::json j;
  j["rows"] = nlohmann::json::array();
  for (size_t bytes : sizes) {
    BenchRow row;
    row.backend = opt.backends[0];
    row.ranks = opt.worker_world;
    row.transport = b->transport();
    if (std::string e = measureRow(*b, rk, bytes, opt, &row); !e.empty()) return fail(e);
    j["rows"].push_back(rowToJson(row));
  }
  std::ofstream(opt.rows_path) << j.dump();
  return 0;
}

void registerOptions(CLI::App* app, BenchOptions* opt, std::shared_ptr<std::string> error) {
  addSizeOptions(app, &opt->min_bytes, &opt->max_bytes, &opt->factor, &opt->sizes, error,
                 "message");
  app->add_option("-n,--iters", opt->iters, "timed calls per size")->check(CLI::Range(1, 1000000));
  app->add_option("-w,--warmup_iters", opt->warmup, "untimed calls first")
      ->check(CLI::Range(0, 1000000));
  app->add_option("-G,--cudagraph", opt->graph, "1: time CUDA-graph replays (sizes <= 4 MB); 0: eager");
  app->add_option("-c,--check", opt->check, "1: check every result (default); 0: do not");
  app->add_option_function<std::string>(
      "-d,--datatype",
      [opt, error](const std::string& v) {
        if (!parseDatatypeName(v, &opt->dtype))
          *error = "--datatype: unknown type '" + v + "' (bfloat16, float16, float32)";
      },
      "bfloat16 (default), float16, float32");
  app->add_option_function<std::string>(
      "--backends",
      [opt, error](const std::string& v) {
        std::stringstream ss(v);
        std::string item;
        opt->backends.clear();
        while (std::getline(ss, item, ',')) {
          std::string why;
          const auto& known = backendNames();
          if (!ncclVariants().count(item) &&
              std::find(known.begin(), known.end(), item) == known.end())
            *error = "--backends: unknown backend '" + item + "' (" + backendNameList() +
                     ", nccl:p2p-sys, nccl:shm)";
          opt->backends.push_back(item);
        }
      },
      "comma-separated: " + backendNameList() + ", nccl:p2p-sys, nccl:shm");
  app->add_option_function<std::string>(
      "--transport",
      [opt, error](const std::string& v) {
        if (!parseTransportName(v, &opt->transport))
          *error = "--transport: '" + v + "' is not auto, host or p2p";
      },
      "where tpar's receive regions live: auto (GPU memory; host memory where P2P is missing), "
      "host (pinned host memory; also measures the host link and prints each row's floor), "
      "p2p (GPU memory only); default: TPAR_TRANSPORT");
  app->add_option_function<std::string>(
      "--ranks",
      [opt, error](const std::string& v) {
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
          int64_t k = 0;
          if (!tpar::parseInt(item, &k) || k < 1 || k > TPAR_MAX_RANKS)
            *error = "--ranks: '" + item + "' is not a rank count in 1.." +
                     std::to_string(TPAR_MAX_RANKS);
          opt->ranks.push_back(static_cast<int>(k));
        }
      },
      "ranks (default: every GPU; on one GPU, 8 virtual ranks); a list runs each");
  app->add_option("--json", opt->json_path, "write every row with machine, versions, commit, command");
  app->add_flag("--procs", opt->procs, "one process per rank (default: one thread drives all)");
  app->add_option("--rows-json", opt->rows_path, "internal: rows of a child run")->group("");
  app->add_option("--worker-rank", opt->worker_rank, "internal")->group("");
  app->add_option("--worker-world", opt->worker_world, "internal")->group("");
  app->add_option("--worker-id", opt->worker_id, "internal")->group("");
}

}  // namespace

std::vector<std::string> defaultBackends(int ngpus) {
  // Every backend; hierarchical only where islands can exist (3+ GPUs).
  std::vector<std::string> b = backendNames();
  if (ngpus <= 2) b.erase(std::find(b.begin(), b.end(), "tpar:hier"));
  if (ngpus > 1) {
    b.push_back("nccl:p2p-sys");
    b.push_back("nccl:shm");
  }
  return b;
}

const std::map<std::string, std::vector<std::string>>& ncclVariants() {
  static const std::map<std::string, std::vector<std::string>> kVariants = {
      {"nccl:p2p-sys", {"NCCL_P2P_LEVEL=SYS"}},
      {"nccl:shm", {"NCCL_P2P_DISABLE=1"}},
  };
  return kVariants;
}

std::vector<size_t> benchSizes(const BenchOptions& opt) {
  return opt.sizes.empty() ? sizeRange(opt.min_bytes, opt.max_bytes, opt.factor) : opt.sizes;
}

std::string parseBenchArgs(const std::vector<std::string>& args, BenchOptions* opt) {
  CLI::App app{"bench", "bench"};
  auto error = std::make_shared<std::string>();
  registerOptions(&app, opt, error);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  if (!error->empty()) return *error;
  if (opt->sizes.empty() && opt->min_bytes > opt->max_bytes)
    return "--minbytes is larger than --maxbytes";
  return "";
}

bool setHostFloor(BenchRow* row, const HostLinkSummary& link, int ranks_per_link) {
  row->has_floor = false;
  if (row->transport != tparTransportName(tparTransportHost) || !link.measured) return false;
  row->has_floor = hostLinkFloor(row->chosen, row->bytes, row->ranks, ranks_per_link,
                                 link.write_gbps, link.read_gbps, link.rtt_us, &row->floor);
  return row->has_floor;
}

nlohmann::json rowToJson(const BenchRow& r) {
  nlohmann::json j = {{"backend", r.backend},
                      {"ranks", r.ranks},
                      {"virtual", r.virtual_ranks},
                      {"bytes", r.bytes},
                      {"count", r.count},
                      {"chosen", r.chosen},
                      {"graph", r.graph},
                      {"us_out_of_place", r.us_out},
                      {"us_in_place", r.us_in},
                      {"algbw_out_of_place", algBandwidth(r.bytes, r.us_out)},
                      {"busbw_out_of_place", busBandwidth(r.bytes, r.us_out, r.ranks)},
                      {"wrong_out_of_place", r.wrong_out},
                      {"wrong_in_place", r.wrong_in}};
  if (!r.transport.empty()) j["transport"] = r.transport;
  if (r.has_floor) {
    j["floor_us"] = r.floor.us;
    j["floor_write_bytes"] = r.floor.write_bytes;
    j["floor_read_bytes"] = r.floor.read_bytes;
    j["floor_rounds"] = r.floor.rounds;
    j["x_floor_out_of_place"] = r.floor.us > 0 ? r.us_out / r.floor.us : 0.0;
    j["x_floor_in_place"] = r.floor.us > 0 ? r.us_in / r.floor.us : 0.0;
  }
  return j;
}

int runBench(const BenchOptions& opt) {
  std::string why;
  const auto gpus = listGpus(&why);
  auto fail = [&](const std::string& msg) {
    std::fprintf(stderr, "tpar bench: %s\n", msg.c_str());
    if (!opt.rows_path.empty()) {
      std::ofstream(opt.rows_path) << nlohmann::json{{"error", msg}}.dump();
    }
    return 2;
  };
  if (gpus.empty()) {
    std::printf("tpar bench: no CUDA GPU on this machine (%s); nothing to measure.\n", why.c_str());
    return opt.rows_path.empty() ? 0 : fail("no GPU");
  }
  const int ngpus = static_cast<int>(gpus.size());
  if (opt.worker_rank >= 0) return runWorker(opt, ngpus);
  std::vector<int> rank_counts = opt.ranks;
  if (rank_counts.empty()) rank_counts.push_back(ngpus > 1 ? ngpus : 8);
  const std::vector<std::string> backends =
      opt.backends.empty() ? defaultBackends(ngpus) : opt.backends;
  const auto sizes = benchSizes(opt);
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const bool child = !opt.rows_path.empty();
  std::vector<BenchRow> rows;
  nlohmann::json floors = nlohmann::json::object();
  std::vector<std::string> skipped;
  HostLinks links(child);

  for (int n : rank_counts) {
    const bool virt = n > ngpus;
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
    if (!child) {
      if (virt) {
        std::printf("# %d virtual ranks on one %s: %d streams share its SMs and memory; the times\n"
                    "# show protocol cost, not an %d-GPU machine's.\n",
                    n, gpus[0].name.c_str(), n, n);
      } else {
        std::printf("# %d ranks on %d GPUs (%s)\n", n, n, gpus[0].name.c_str());
      }
      std::printf("# %s, sum, %s timing up to %zu B, %d iterations after %d warm-up, %s\n",
                  tparDataTypeName(opt.dtype), opt.graph ? "CUDA-graph" : "eager",
                  opt.graph_max_bytes, opt.iters, opt.warmup,
                  opt.procs ? "one process per rank (time of the slowest rank)"
                            : "one thread drives every rank");
      if (opt.procs && virt)
        std::printf("# processes sharing one GPU are time-sliced by the driver: these times are\n"
                    "# dominated by context switches and say nothing about the protocol.\n");
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
    const bool floor_cols = !child && links.measured(devs);
    Ranks rk;
    if (std::string e = rk.alloc(devs, max_bytes); !e.empty()) return fail(e);
    if (opt.graph && !child) {
      double floor_us = 0;
      if (std::string e = timeFloor(rk, opt.iters, &floor_us); !e.empty()) return fail(e);
      floors[std::to_string(n)] = floor_us;
      std::printf("# launch floor: %.2f us (graphs of empty kernels on the same %d streams)\n",
                  floor_us, n);
    }
    if (!child) printHeader(floor_cols);
    if (opt.procs) {
      if (std::string e = runProcs(opt, n, ngpus, backends, annotate, floor_cols, &rows, &skipped);
          !e.empty())
        return fail(e);
      continue;
    }
    for (const std::string& name : backends) {
      if (ncclVariants().count(name)) {
        if (virt) {
          skipped.push_back(name + " at " + std::to_string(n) + " ranks: NCCL refuses two ranks on one GPU");
          continue;
        }
        const size_t before = rows.size();
        if (std::string e = runVariantChild(name, opt, n, &rows); !e.empty()) {
          skipped.push_back(name + ": " + e);
          continue;
        }
        for (size_t i = before; i < rows.size(); ++i) printRow(rows[i], opt.dtype, floor_cols);
        continue;
      }
      std::string reason;
      std::unique_ptr<Backend> b = makeBackend(name, &reason, opt.transport);
      if (b == nullptr) {
        skipped.push_back(name + ": " + reason);
        continue;
      }
      if (std::string e = b->init(devs); !e.empty()) {
        skipped.push_back(name + " at " + std::to_string(n) + " ranks: " + e);
        continue;
      }
      const std::string transport = b->transport();
      for (size_t bytes : sizes) {
        BenchRow row;
        row.backend = name;
        row.ranks = n;
        row.virtual_ranks = virt;
        row.transport = transport;
        if (std::string e = measureRow(*b, rk, bytes, opt, &row); !e.empty())
          return fail(name + ", " + std::to_string(bytes) + " B: " + e);
        annotate(&row);
        rows.push_back(row);
        if (!child) printRow(row, opt.dtype, floor_cols);
      }
    }
  }

  if (child) {
    nlohmann::json j;
    j["rows"] = nlohmann::json::array();
    for (const BenchRow& r : rows) j["rows"].push_back(rowToJson(r));
    std::ofstream(opt.rows_path) << j.dump();
    return 0;
  }

  // Average bus bandwidth per backend, and each backend against NCCL where NCCL ran.
  long long total_wrong = 0;
  for (const BenchRow& r : rows) total_wrong += std::max(0LL, r.wrong_out) + std::max(0LL, r.wrong_in);
  std::map<std::string, std::pair<double, int>> avg;
  for (const BenchRow& r : rows) {
    auto& a = avg[r.backend + " @" + std::to_string(r.ranks)];
    a.first += busBandwidth(r.bytes, r.us_out, r.ranks);
    a.second += 1;
  }
  for (const auto& [k, v] : avg)
    std::printf("# Avg bus bandwidth %-22s: %.3f GB/s\n", k.c_str(), v.first / v.second);
  bool any_nccl = false;
  for (const BenchRow& r : rows) any_nccl |= r.backend == "nccl";
  if (any_nccl) {
    std::printf("#\n# speed-up against nccl (nccl time / backend time, out of place)\n");
    for (const BenchRow& r : rows) {
      if (r.backend == "nccl") continue;
      for (const BenchRow& q : rows) {
        if (q.backend == "nccl" && q.ranks == r.ranks && q.bytes == r.bytes) {
          std::printf("  %-17s %3d ranks %12zu B  %7.2fx\n", r.backend.c_str(), r.ranks, r.bytes,
                      q.us_out / r.us_out);
        }
      }
    }
  }
  bool any_floor = false;
  for (const BenchRow& r : rows) any_floor |= r.has_floor;
  if (any_floor) {
    std::printf("#\n# against the host-link floor (out of place; floor = max(bytes written / write "
                "bandwidth, bytes read / read bandwidth) + rounds x hand-off)\n");
    for (const BenchRow& r : rows) {
      if (!r.has_floor) continue;
      std::printf("  %-17s %3d ranks %12zu B %-13s %8.2f MB written %8.2f MB read %d rounds: "
                  "floor %8.2f us, time %8.2f us, %6.2fx\n",
                  r.backend.c_str(), r.ranks, r.bytes, r.chosen.c_str(), r.floor.write_bytes / 1e6,
                  r.floor.read_bytes / 1e6, r.floor.rounds, r.floor.us, r.us_out,
                  r.floor.us > 0 ? r.us_out / r.floor.us : 0.0);
    }
  }
  for (const std::string& s : skipped) std::printf("# skipped %s\n", s.c_str());
  if (!opt.json_path.empty()) {
    nlohmann::json j = machineReport("tpar bench", opt.command_line);
    j["dtype"] = tparDataTypeName(opt.dtype);
    j["timing"] = opt.graph ? "graph" : "eager";
    j["graph_max_bytes"] = opt.graph_max_bytes;
    j["iters"] = opt.iters;
    j["warmup"] = opt.warmup;
    j["launch_floor_us"] = floors;
    j["transport"] = transportOptionName(opt.transport);
    j["host_link"] = links.toJson();
    j["skipped"] = skipped;
    j["rows"] = nlohmann::json::array();
    for (const BenchRow& r : rows) j["rows"].push_back(rowToJson(r));
    std::ofstream f(opt.json_path);
    f << j.dump(2) << "\n";
    if (!f) return fail("cannot write " + opt.json_path);
    std::printf("# wrote %s\n", opt.json_path.c_str());
  }
  std::printf("# %s: %lld wrong elements\n", total_wrong ? "FAILED" : "ok", total_wrong);
  return total_wrong ? 1 : 0;
}

Action addBenchCommand(CLI::App& root, const std::string& command_line) {
  CLI::App* sub = root.add_subcommand("bench", "all-reduce latency and bandwidth, every backend side by side");
  auto opt = std::make_shared<BenchOptions>();
  auto error = std::make_shared<std::string>();
  opt->command_line = command_line;
  registerOptions(sub, opt.get(), error);
  return [opt, error] {
    if (!error->empty()) {
      std::fprintf(stderr, "tpar bench: %s\n", error->c_str());
      return 2;
    }
    if (opt->sizes.empty() && opt->min_bytes > opt->max_bytes) {
      std::fprintf(stderr, "tpar bench: --minbytes is larger than --maxbytes\n");
      return 2;
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
