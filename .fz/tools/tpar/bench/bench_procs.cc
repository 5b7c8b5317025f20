#include "tools/tpar/bench/bench_procs.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/spawn.h"

namespace tpar_cli {
namespace {

// How long the children of one backend may take in all.
constexpr int kChildTimeoutS = 1800;

// A child's rows from its file, or its error.
std::string readRows(const std::string& path, std::vector<BenchRow>* rows) {
  std::ifstream f(path);
  nlohmann::json j;
  try {
    f >> j;
  } catch (...) {
    return "wrote no rows";
  }
  if (j.contains("error")) return j["error"].get<std::string>();
  for (const auto& r : j["rows"]) rows->push_back(rowFromJson(r));
  return "";
}

}  // namespace

int runBenchWorker(const BenchOptions& opt, int ngpus) {
  auto fail = [&](const std::string& msg) {
    std::ofstream(opt.rows_path) << nlohmann::json{{"error", msg}}.dump();
    return kExitRunError;
  };
  if (opt.backends.size() != 1) return fail("a worker runs exactly one backend");
  const int dev = ngpus >= opt.worker_world ? opt.worker_rank : 0;
  std::string why;
  std::unique_ptr<Backend> b =
      makeBackend(opt.backends[0], &why, opt.transport, int64_t{opt.timeout_s} * 1000);
  if (b == nullptr) return fail(why);
  if (std::string e = b->initRank(opt.worker_world, opt.worker_rank, opt.worker_id, dev);
      !e.empty())
    return fail(e);
  Ranks rk;
  rk.first_rank = opt.worker_rank;
  rk.world = opt.worker_world;
  const auto sizes = benchSizes(opt);
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end()) + opt.unalign * size_t{4};
  if (std::string e = rk.alloc({dev}, max_bytes); !e.empty()) return fail(e);
  if (opt.local_register == 1) {
    if (std::string e = b->registerBuffers({{rk.in[0], rk.out[0]}}, max_bytes); !e.empty())
      return fail(e);
  }
  nlohmann::json j;
  j["rows"] = nlohmann::json::array();
  for (tparDataType_t dtype : opt.dtypes) {
    for (tparRedOp_t op : opt.ops) {
      for (size_t bytes : sizes) {
        BenchRow row;
        row.backend = opt.backends[0];
        row.ranks = opt.worker_world;
        row.transport = b->transport();
        row.fallback = b->fallback();
        if (std::string e = measureBenchRow(*b, rk, bytes, dtype, op, opt, &row); !e.empty())
          return fail(e);
        j["rows"].push_back(rowToJson(row));
      }
    }
  }
  std::ofstream(opt.rows_path) << j.dump();
  return kExitOk;
}

std::string runBenchVariant(const std::string& variant, const BenchOptions& opt, int nranks,
                            std::vector<BenchRow>* rows) {
  const std::string self = selfPath();
  if (self.empty()) return "cannot find own binary";
  ChildFile file;
  if (file.path().empty()) return "cannot create a temporary file";
  std::vector<std::string> cmd = {self};
  for (const std::string& a : childBenchArgs(opt, "nccl")) cmd.push_back(a);
  for (const char* a : {"--ranks", "", "--rows-json", ""}) cmd.push_back(a);
  cmd[cmd.size() - 3] = std::to_string(nranks);
  cmd.back() = file.path();
  const std::string run_error = runAll({cmd}, ncclVariants().at(variant), kChildTimeoutS);
  std::vector<BenchRow> got;
  if (std::string e = readRows(file.path(), &got); !e.empty())
    return run_error.empty() ? e : run_error + ": " + e;
  for (BenchRow& r : got) {
    r.backend = variant;
    rows->push_back(r);
  }
  return run_error;
}

std::string runBenchProcs(const BenchOptions& opt, int n, int ngpus,
                          const std::vector<std::string>& backends,
                          const std::function<void(BenchRow*)>& annotate,
                          const std::function<void(const BenchRow&)>& print,
                          std::vector<BenchRow>* rows, std::vector<std::string>* skipped) {
  const std::string self = selfPath();
  if (self.empty()) return "cannot find own binary";
  for (const std::string& name : backends) {
    const bool variant = ncclVariants().count(name) != 0;
    const std::string base = variant ? "nccl" : name;
    if (base == "nccl" && n > ngpus) {
      skipped->push_back(name + " at " + std::to_string(n) +
                         " ranks: NCCL refuses two ranks on one GPU");
      continue;
    }
    std::string id;
    if (std::string e = newUniqueId(base, &id); !e.empty()) {
      skipped->push_back(name + ": " + e);
      continue;
    }
    std::vector<ChildFile> files(n);
    std::vector<std::vector<std::string>> cmds;
    for (int r = 0; r < n; ++r) {
      if (files[r].path().empty()) return "cannot create a temporary file";
      std::vector<std::string> cmd = {self};
      for (const std::string& a : childBenchArgs(opt, base)) cmd.push_back(a);
      for (const std::string& a : workerArgs(r, n, id, "--rows-json", files[r].path()))
        cmd.push_back(a);
      cmds.push_back(cmd);
    }
    const std::vector<std::string> env =
        variant ? ncclVariants().at(name) : std::vector<std::string>{};
    std::string err = runAll(cmds, env, kChildTimeoutS);
    // Rank r's rows, in the same order in every rank: merged row by row.
    std::vector<std::vector<BenchRow>> per_rank(n);
    for (int r = 0; r < n && err.empty(); ++r)
      if (std::string e = readRows(files[r].path(), &per_rank[r]); !e.empty())
        err = "rank " + std::to_string(r) + ": " + e;
    if (!err.empty()) {
      skipped->push_back(name + ": " + err);
      continue;
    }
    for (size_t i = 0; i < per_rank[0].size(); ++i) {
      BenchRow m = per_rank[0][i];
      m.backend = name;
      m.virtual_ranks = n > ngpus;
      m.rank_us_out.clear();
      m.rank_us_in.clear();
      std::vector<double> graph_out, graph_in;  // -G 0: each rank's graph times (-1: none)
      for (int r = 0; r < n; ++r) {
        if (i >= per_rank[r].size()) return name + ": rank " + std::to_string(r) + " has fewer rows";
        const BenchRow& q = per_rank[r][i];
        m.rank_us_out.push_back(q.us_out);
        m.rank_us_in.push_back(q.us_in);
        graph_out.push_back(q.graph_us_out);
        graph_in.push_back(q.graph_us_in);
        if (r > 0) {
          m.wrong_out = (m.wrong_out < 0 || q.wrong_out < 0) ? -1 : m.wrong_out + q.wrong_out;
          m.wrong_in = (m.wrong_in < 0 || q.wrong_in < 0) ? -1 : m.wrong_in + q.wrong_in;
        }
      }
      m.us_out = averageRankTimes(m.rank_us_out, opt.average);
      m.us_in = averageRankTimes(m.rank_us_in, opt.average);
      auto graphTime = [&](const std::vector<double>& us) {
        return *std::min_element(us.begin(), us.end()) < 0 ? -1.0 : averageRankTimes(us, opt.average);
      };
      m.graph_us_out = graphTime(graph_out);
      m.graph_us_in = graphTime(graph_in);
      annotate(&m);
      rows->push_back(m);
      print(m);
    }
  }
  return "";
}

}  // namespace tpar_cli
