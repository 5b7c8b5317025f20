// `tpar tune --procs`: one child process per rank runs the same search in lockstep (the
// candidates depend only on what every rank agrees on), each times its own rank, and this
// process merges their measurements, reports and writes the table.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/spawn.h"
#include "tools/tpar/tune/tune.h"

namespace tpar_cli {
namespace {

// How long the children may take in all: a full search of many sizes takes minutes.
constexpr int kChildTimeoutS = 3600;

}  // namespace

std::vector<std::string> childTuneArgs(const TuneOptions& opt) {
  std::vector<std::string> a = {"tune"};
  std::string sizes;
  for (size_t b : tuneSizes(opt)) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
  std::string dtypes;
  for (tparDataType_t d : opt.dtypes) dtypes += (dtypes.empty() ? "" : ",") + std::string(tparDataTypeName(d));
  for (const std::string& s :
       {std::string("--sizes"), sizes, std::string("-n"), std::to_string(opt.iters),
        std::string("-w"), std::to_string(opt.warmup), std::string("-d"), dtypes,
        std::string("--shapes"), std::string(opt.shapes ? "1" : "0"), std::string("--nccl"),
        std::string("0")})
    a.push_back(s);
  if (opt.transport != TPAR_CONFIG_UNDEF_INT) {
    a.push_back("--transport");
    a.push_back(transportOptionName(opt.transport));
  }
  if (opt.quick) a.push_back("--quick");
  if (opt.virtual_ranks) a.push_back("--virtual");
  const std::pair<const char*, const std::vector<int>*> lists[] = {
      {"--blocks", &opt.blocks}, {"--threads", &opt.threads}, {"--steps", &opt.steps}};
  for (const auto& [name, v] : lists) {
    if (v->empty()) continue;
    a.push_back(name);
    a.push_back(joinInts(*v));
  }
  return a;
}

std::string bucketsToJson(const std::vector<TuneBucket>& buckets, const tpar::TunerContext& ctx) {
  nlohmann::json j;
  j["signature"] = ctx.signature;
  j["nranks"] = ctx.nranks;
  j["buckets"] = nlohmann::json::array();
  for (const TuneBucket& b : buckets) {
    nlohmann::json jb;
    jb["bytes"] = b.bytes;
    jb["dtype"] = static_cast<int>(b.dtype);
    jb["candidates"] = nlohmann::json::array();
    for (const TuneCandidate& c : b.candidates) {
      jb["candidates"].push_back({{"algo", tpar::planAlgoName(c.plan)},
                                  {"blocks", c.plan.active_blocks},
                                  {"threads", c.plan.threads},
                                  {"steps", c.plan.steps},
                                  {"pull", c.plan.pull},
                                  {"default", c.is_default},
                                  {"us", c.us},
                                  {"wrong", c.wrong},
                                  {"error", c.error}});
    }
    j["buckets"].push_back(jb);
  }
  return j.dump();
}

std::string bucketsFromJson(const std::string& text, std::vector<TuneBucket>* buckets,
                            tpar::TunerContext* ctx) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.contains("error")) return j["error"].get<std::string>();
    ctx->signature = j.at("signature").get<std::string>();
    ctx->nranks = j.at("nranks").get<int>();
    for (const auto& jb : j.at("buckets")) {
      TuneBucket b;
      b.bytes = jb.at("bytes").get<uint64_t>();
      b.dtype = static_cast<tparDataType_t>(jb.at("dtype").get<int>());
      for (const auto& jc : jb.at("candidates")) {
        TuneCandidate c;
        if (!tpar::planAlgoFromName(jc.at("algo").get<std::string>(), &c.plan))
          return "unknown algorithm " + jc.at("algo").dump();
        c.plan.active_blocks = jc.at("blocks").get<int>();
        c.plan.threads = jc.at("threads").get<int>();
        c.plan.steps = jc.at("steps").get<int>();
        c.plan.pull = jc.at("pull").get<bool>();
        c.is_default = jc.at("default").get<bool>();
        c.us = jc.at("us").get<double>();
        c.wrong = jc.at("wrong").get<long long>();
        c.error = jc.at("error").get<std::string>();
        b.candidates.push_back(c);
      }
      buckets->push_back(b);
    }
  } catch (const nlohmann::json::exception& e) {
    return std::string("unreadable measurements: ") + e.what();
  }
  return "";
}

std::string mergeRankBuckets(const std::vector<std::vector<TuneBucket>>& per_rank,
                             std::vector<TuneBucket>* out) {
  if (per_rank.empty()) return "no ranks";
  *out = per_rank[0];
  for (size_t r = 1; r < per_rank.size(); ++r) {
    const std::string who = "rank " + std::to_string(r);
    if (per_rank[r].size() != out->size()) return who + " measured another number of sizes";
    for (size_t i = 0; i < out->size(); ++i) {
      TuneBucket& m = (*out)[i];
      const TuneBucket& q = per_rank[r][i];
      if (q.bytes != m.bytes || q.dtype != m.dtype || q.candidates.size() != m.candidates.size())
        return who + " measured other sizes or candidates";
      for (size_t k = 0; k < m.candidates.size(); ++k) {
        TuneCandidate& c = m.candidates[k];
        const TuneCandidate& d = q.candidates[k];
        if (!tpar::samePlan(c.plan, d.plan) || c.is_default != d.is_default)
          return who + " measured other plans";
        // The call ends when the slowest rank's does.
        c.us = std::max(c.us, d.us);
        c.wrong = c.wrong < 0 || d.wrong < 0 ? -1 : c.wrong + d.wrong;
        if (c.error.empty() && !d.error.empty()) c.error = who + ": " + d.error;
      }
    }
  }
  return "";
}

int runTuneProcs(const TuneOptions& opt, int n, bool virt, const std::string& gpu_name) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "tpar tune: %s\n", msg.c_str());
    return kExitRunError;
  };
  const std::string self = selfPath();
  if (self.empty()) return fail("cannot find own binary");
  std::string id;
  if (std::string e = newUniqueId("tpar", &id); !e.empty()) return fail(e);
  std::printf("# nccl: not measured (--procs)\n");
  std::fflush(stdout);
  std::vector<ChildFile> files(n);
  std::vector<std::vector<std::string>> cmds;
  for (int r = 0; r < n; ++r) {
    if (files[r].path().empty()) return fail("cannot create a temporary file");
    std::vector<std::string> cmd = {self};
    for (const std::string& a : childTuneArgs(opt)) cmd.push_back(a);
    if (virt && !opt.virtual_ranks) cmd.push_back("--virtual");  // more ranks than GPUs
    for (const std::string& a : workerArgs(r, n, id, "--results-json", files[r].path()))
      cmd.push_back(a);
    cmds.push_back(cmd);
  }
  const auto started = std::chrono::steady_clock::now();
  // Rank 0's child describes the search on stderr as it starts.
  const std::string run_error = runAll(cmds, {}, kChildTimeoutS);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<std::vector<TuneBucket>> per_rank(n);
  tpar::TunerContext ctx;
  for (int r = 0; r < n; ++r) {
    std::ifstream f(files[r].path());
    std::stringstream text;
    text << f.rdbuf();
    tpar::TunerContext rank_ctx;
    if (std::string e = bucketsFromJson(text.str(), &per_rank[r], &rank_ctx); !e.empty())
      return fail("rank " + std::to_string(r) + ": " + e +
                  (run_error.empty() ? "" : " (" + run_error + ")"));
    if (r == 0) ctx = rank_ctx;
  }
  if (!run_error.empty()) return fail(run_error);
  std::vector<TuneBucket> buckets;
  if (std::string e = mergeRankBuckets(per_rank, &buckets); !e.empty()) return fail(e);
  std::printf("# topology %s; every rank's time measured in its own process, the slowest counts\n",
              ctx.signature.c_str());
  std::printf("# %12s %9s %-12s %6s %7s %5s %4s %10s %7s\n", "size (B)", "type", "algo", "blocks",
              "threads", "steps", "mode", "time (us)", "#wrong");
  for (const TuneBucket& b : buckets) printTuneBucket(b, opt.print_all);
  return finishTune(buckets, ctx, opt,
                    gpu_name + (virt ? " (" + std::to_string(n) + " virtual ranks, processes)"
                                     : " (one process per rank)"),
                    elapsed);
}

}  // namespace tpar_cli
