#include "tools/tpar/tune/tune.h"


#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/algorithms.h"
#include "core/comm.h"
#include "core/env.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/commands.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/common/report.h"

namespace tpar_cli {
namespace {

using tpar::Plan;
namespace kernels = tpar::kernels;

// The communicators of the group, one per rank, created with the algorithm left to the table;
// with `nccl` set, an NCCL communicator of the same ranks is attached to each, so that the NCCL
// candidate runs through the very route (tparCommSetNcclComm) a table entry takes later.
struct Group {
  std::vector<tparComm_t> comms;
  const tpar::NcclLib* nccl = nullptr;
  std::vector<tpar::NcclComm> nccl_comms;
  ~Group() { destroy(); }
  void destroy() {
    for (tparComm_t c : comms) tparCommDestroy(c);
    comms.clear();
    for (tpar::NcclComm c : nccl_comms)
      if (c != nullptr) nccl->commDestroy(c);
    nccl_comms.clear();
  }
  int transport = TPAR_CONFIG_UNDEF_INT;
  std::string init(const std::vector<int>& devs) {
    destroy();
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.transport = transport;
    cfg.algorithm = tparAlgoAuto;  // TPAR_ALGO must not override the plans being measured
    cfg.allowSharedDevice = devs.size() > 1 && devs[0] == devs[1] ? 1 : 0;
    comms.assign(devs.size(), nullptr);
    if (tparCommInitAllConfig(comms.data(), static_cast<int>(devs.size()), devs.data(), &cfg) !=
        tparSuccess) {
      comms.clear();
      return std::string("tparCommInitAll: ") + tparGetLastError(nullptr);
    }
    if (nccl == nullptr) return "";
    nccl_comms.assign(devs.size(), nullptr);
    const int rc = nccl->commInitAll(nccl_comms.data(), static_cast<int>(devs.size()), devs.data());
    if (rc != 0) {
      nccl_comms.clear();
      return std::string("ncclCommInitAll: ") + nccl->getErrorString(rc);
    }
    for (size_t r = 0; r < comms.size(); ++r) {
      if (tparCommSetNcclComm(comms[r], nccl_comms[r]) != tparSuccess)
        return std::string("tparCommSetNcclComm: ") + tparGetLastError(comms[r]);
    }
    return "";
  }
  std::string asyncError() {
    for (size_t r = 0; r < comms.size(); ++r) {
      tparResult_t e = tparSuccess;
      tparCommGetAsyncError(comms[r], &e);
      if (e != tparSuccess) return "rank " + std::to_string(r) + ": " + tparGetErrorString(e);
    }
    return "";
  }
  // The public API forces an algorithm but not a launch shape, so the plan goes in as a
  // one-entry tuning table: every size and dtype then gets `plan`, through the very path
  // (selectPlan) that a saved table takes, so a measured plan is exactly what a table gives.
  void usePlan(const Plan& plan) {
    for (tparComm_t c : comms) {
      c->tuning = tpar::singlePlanTable(c->tuner_ctx, plan);
      c->has_tuning = true;
    }
  }
  std::string allReduce(Ranks& rk, size_t count, tparDataType_t dtype) {
    // One thread drives every rank: calls routed to NCCL must be one NCCL group (tpar's own
    // launches inside it are unaffected).
    if (!nccl_comms.empty()) nccl->groupStart();
    std::string err;
    for (size_t r = 0; r < comms.size() && err.empty(); ++r) {
      if (tparAllReduce(rk.in[r], rk.out[r], count, dtype, tparSum, comms[r], rk.streams[r]) !=
          tparSuccess)
        err = std::string("tparAllReduce: ") + tparGetLastError(comms[r]);
    }
    if (!nccl_comms.empty()) {
      const int rc = nccl->groupEnd();
      if (rc != 0 && err.empty()) err = std::string("ncclGroupEnd: ") + nccl->getErrorString(rc);
    }
    return err;
  }
};

// Per-call time of `iters` calls captured into one CUDA graph per rank, from an event before
// every rank's replay to the join of all ranks' streams.
// Checks, then times one plan. Returns "" unless the machine is unusable; a plan that fails
// or computes wrong sums is recorded in `c` and the run goes on.
std::string measurePlan(Group& g, Ranks& rk, size_t count, tparDataType_t dtype,
                        const TuneOptions& opt, TuneCandidate* c) {
  g.usePlan(c->plan);
  tparAlgo_t runs_as = tparAlgoAuto;
  tparCommSelectAlgorithm(g.comms[0], count * tpar::elementBytes(dtype), &runs_as);
  if (tpar::planAlgoName(c->plan) != std::string(tparAlgoName(runs_as))) {
    c->error = std::string("not supported here (runs as ") + tparAlgoName(runs_as) + ")";
    return "";
  }
  // Correctness first, on poisoned outputs: a wrong plan is never timed.
  if (std::string e = rk.fill(rk.in, rk.out, count, dtype); !e.empty()) return e;
  std::string e = g.allReduce(rk, count, dtype);
  if (e.empty()) e = rk.sync();
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    if (std::string f = rk.countWrongIn(rk.out, count, dtype, &c->wrong); !f.empty()) return f;
    if (c->wrong != 0) return "";
    e = timeIt(rk, opt.iters, opt.warmup, /*graph=*/true,
               [&] { return g.allReduce(rk, count, dtype); }, &c->us);
  }
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    // The inputs are intact (out of place): the last replay's output must still be exact.
    long long after = 0;
    if (std::string f = rk.countWrongIn(rk.out, count, dtype, &after); !f.empty()) return f;
    c->wrong += after;
    return "";
  }
  c->error = e;
  c->us = 0;
  // A communicator that recorded an asynchronous error accepts nothing but destroy.
  (void)cudaGetLastError();
  return g.init(rk.devs);
}

std::string planText(const Plan& p) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-12s %6d %7d %5d %4s", tpar::planAlgoName(p), p.active_blocks,
                p.threads, p.steps, p.algo == kernels::Algo::kPipelined && p.pull ? "pull" : "-");
  return buf;
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

constexpr double kNoise = 0.03;

void registerOptions(CLI::App* app, TuneOptions* opt, std::shared_ptr<std::string> error) {
  addSizeOptions(app, &opt->min_bytes, &opt->max_bytes, &opt->factor, &opt->sizes, error,
                 "bucket");
  app->add_option("-n,--iters", opt->iters, "calls per timed CUDA graph")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_option("-w,--warmup_iters", opt->warmup, "untimed calls first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app->add_option_function<std::string>(
      "-d,--datatype,--dtype",
      [opt, error](const std::string& v) {
        opt->dtypes.clear();
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
          tparDataType_t d;
          if (parseDatatypeName(item, &d)) opt->dtypes.push_back(d);
          else *error = "--datatype: unknown type '" + item + "' (bfloat16, float16, float32)";
        }
      },
      "bfloat16 (default), float16, float32; a comma-separated list tunes each");
  app->add_option_function<std::string>(
      "--ranks",
      [opt, error](const std::string& v) {
        int64_t k = 0;
        if (!tpar::parseInt(v, &k) || k < 2 || k > TPAR_MAX_RANKS)
          *error = "--ranks: '" + v + "' is not a rank count in 2.." + std::to_string(TPAR_MAX_RANKS);
        opt->ranks = static_cast<int>(k);
      },
      "ranks (default: every GPU; on one GPU, 8 virtual ranks)");
  app->add_option_function<std::string>(
      "--transport",
      [opt, error](const std::string& v) {
        if (!parseTransportName(v, &opt->transport))
          *error = "--transport: '" + v + "' is not auto, host or p2p";
      },
      "auto (default: TPAR_TRANSPORT), host (receive regions in pinned host memory) or p2p");
  app->add_option("--shapes", opt->shapes, "1: also try half the blocks per rank (default); 0: no");
  app->add_option("--output", opt->output, "write the table here (default: where tpar looks)");
  // -o was the output file before bench took nccl-tests' -o (the reduction op); still read here.
  app->add_option_function<std::string>(
         "-o",
         [opt](const std::string& v) {
           opt->output = v;
           std::fprintf(stderr, "tpar tune: -o FILE is an old spelling; use --output FILE\n");
         },
         "old spelling of --output")
      ->group("");
  app->add_flag("--dry-run", opt->dry_run, "measure and print; write no file");
  app->add_option("--nccl", opt->nccl,
                  "1: also measure NCCL where it can run (default); 0: tpar's algorithms only");
  app->add_flag_callback("--no-nccl", [opt] { opt->nccl = false; }, "the same as --nccl 0");
}

}  // namespace

std::string parseTuneArgs(const std::vector<std::string>& args, TuneOptions* opt) {
  CLI::App app{"tune", "tune"};
  auto error = std::make_shared<std::string>();
  registerOptions(&app, opt, error);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  if (!error->empty()) return *error;
  if (opt->sizes.empty() && opt->min_bytes > opt->max_bytes) return "--minbytes is larger than --maxbytes";
  return "";
}

std::vector<size_t> tuneSizes(const TuneOptions& opt) {
  std::vector<size_t> out =
      opt.sizes.empty() ? sizeRange(opt.min_bytes, opt.max_bytes, opt.factor) : opt.sizes;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<Plan> tuneCandidates(const tpar::TunerContext& ctx, int blocks, bool shapes,
                                 bool nccl) {
  // Every algorithm the group can run (pull wins only where reads cost less than writes: a
  // measurement decides, never a default); host-memory grids of their own below.
  std::vector<kernels::Algo> algos;
  for (const tpar::Algorithm& a : tpar::algorithms()) {
    if (ctx.nranks < a.min_ranks || (a.needs_islands && !ctx.hierarchical_ok) ||
        (a.host_grid && ctx.host_transport))
      continue;
    algos.push_back(a.id);
  }
  std::vector<int> active = {0};
  if (shapes && blocks >= 2) active.push_back(blocks / 2);
  std::vector<Plan> out;
  // Each plan once (the host grids below may repeat a shape of the loop above).
  auto add = [&out](const Plan& p) {
    for (const Plan& q : out) {
      if (q.algo == p.algo && q.active_blocks == p.active_blocks && q.threads == p.threads &&
          q.steps == p.steps && q.pull == p.pull)
        return;
    }
    out.push_back(p);
  };
  for (kernels::Algo a : algos) {
    for (int b : active) add(Plan{a, b, 0});
  }
  if (ctx.host_transport && shapes) {
    // Few blocks poll less across the link.
    for (int b : {1, 2, 4, 8}) {
      if (b <= blocks) add(Plan{kernels::Algo::kTwoShotLL, b, 0});
    }
  }
  if (ctx.host_transport) {
    // Blocks set how many warps poll across the link, steps how far reads and writes overlap.
    const std::vector<int> grid_blocks = shapes ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{0};
    const std::vector<int> grid_steps = shapes ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{0};
    for (bool pull : {true, false}) {
      for (int b : grid_blocks) {
        if (b > blocks) continue;
        for (int s : grid_steps) {
          Plan p{kernels::Algo::kPipelined, b, 0};
          p.steps = s;
          p.pull = pull;
          add(p);
        }
      }
    }
  }
  // Last: a tpar plan within the noise of NCCL keeps the size (pickFastest favours the first).
  if (nccl) {
    Plan p;
    p.nccl = true;
    out.push_back(p);
  }
  return out;
}

int pickFastest(const std::vector<TuneCandidate>& candidates, double noise) {
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].usable()) continue;
    if (best < 0 || candidates[i].us < candidates[best].us * (1.0 - noise))
      best = static_cast<int>(i);
  }
  return best;
}

tpar::TuningTable tableFromBuckets(const std::vector<TuneBucket>& buckets,
                                   const tpar::TunerContext& ctx, const tpar::TuningTable* keep,
                                   double noise) {
  tpar::TuningTable t;
  t.signature = ctx.signature;
  t.nranks = ctx.nranks;
  std::map<int, std::vector<tpar::TuningEntry>> by_dtype;
  for (const TuneBucket& b : buckets) {
    const int best = pickFastest(b.candidates, noise);
    if (best < 0) continue;
    tpar::TuningEntry e;
    e.max_bytes = b.bytes;
    e.dtype = b.dtype;
    e.plan = b.candidates[best].plan;
    e.us = b.candidates[best].us;
    by_dtype[b.dtype].push_back(e);
  }
  if (keep != nullptr && keep->signature == ctx.signature && keep->nranks == ctx.nranks) {
    std::map<int, std::vector<tpar::TuningEntry>> kept;
    for (const tpar::TuningEntry& e : keep->entries)
      if (!by_dtype.count(e.dtype)) kept[e.dtype].push_back(e);
    for (auto& [d, v] : kept) by_dtype[d] = v;
  }
  for (auto& [d, v] : by_dtype) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.max_bytes < b.max_bytes; });
    for (const auto& e : v)
      if (t.entries.empty() || t.entries.back().dtype != e.dtype ||
          t.entries.back().max_bytes != e.max_bytes)
        t.entries.push_back(e);
  }
  return t;
}

int runTune(const TuneOptions& opt) {
  auto fail = [](const std::string& msg) {
    std::fprintf(stderr, "tpar tune: %s\n", msg.c_str());
    return kExitRunError;
  };
  std::string why;
  const auto gpus = listGpus(&why);
  if (gpus.empty()) {
    std::fprintf(stderr, "tpar tune: %s; nothing to measure.\n", why.c_str());
    return kExitNoGpu;
  }
  const int ngpus = static_cast<int>(gpus.size());
  const int n = opt.ranks > 0 ? opt.ranks : (ngpus > 1 ? ngpus : 8);
  const bool virt = n > ngpus;
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
  const auto sizes = tuneSizes(opt);
  size_t max_elem = 4;
  for (tparDataType_t d : opt.dtypes) max_elem = std::max(max_elem, tpar::elementBytes(d));
  Ranks rk;
  if (std::string e = rk.alloc(devs, sizes.back() + max_elem); !e.empty()) return fail(e);
  Group g;
  g.transport = opt.transport;
  std::string nccl_note;
  if (!opt.nccl) {
    nccl_note = "not measured (--nccl 0)";
  } else if (virt) {
    nccl_note = "not measured: NCCL cannot run two ranks on one GPU";
  } else if (const tpar::NcclLib* lib = tpar::loadNccl(&why)) {
    g.nccl = lib;
  } else {
    nccl_note = "not measured: " + why;
  }
  std::string init_error = g.init(devs);
  if (!init_error.empty() && g.nccl != nullptr) {
    nccl_note = "not measured: " + init_error;
    g.destroy();
    g.nccl = nullptr;
    init_error = g.init(devs);
  }
  if (!init_error.empty()) return fail(init_error);
  if (g.nccl != nullptr) {
    nccl_note = tpar::ncclVersionString(g.nccl->version) + " (" + g.nccl->path +
                ") measured as a candidate, attached with tparCommSetNcclComm";
  }
  const tpar::TunerContext ctx = g.comms[0]->tuner_ctx;
  tparCommInfo_t info;
  if (tparCommQuery(g.comms[0], &info) != tparSuccess) return fail(tparGetLastError(g.comms[0]));
  const std::string path = opt.output.empty() ? tpar::tuningFilePath(ctx) : opt.output;
  if (path.empty() && !opt.dry_run)
    return fail("no place for the table: set TPAR_TUNING_FILE, XDG_CACHE_HOME or HOME, or pass --output");

  if (virt) {
    std::printf("# %d virtual ranks on one %s: %d streams share its SMs, so the crossovers are\n"
                "# this setup's, not those of an %d-GPU machine (its topology signature differs,\n"
                "# so a real group never loads this table).\n",
                n, gpus[0].name.c_str(), n, n);
  } else {
    std::printf("# %d ranks on %d GPUs (%s)\n", n, n, gpus[0].name.c_str());
  }
  std::printf("# topology %s: %d island(s), worst link class %d%s\n", ctx.signature.c_str(),
              ctx.islands, ctx.worst_link, ctx.hierarchical_ok ? ", hierarchical possible" : "");
  std::printf("# nccl: %s\n", nccl_note.c_str());
  std::printf("# every plan is checked element by element on poisoned outputs, then timed as a\n"
              "# CUDA graph of %d calls after %d warm-up; %d blocks per rank, threads from the work\n",
              opt.iters, opt.warmup, info.blocksPerRank);
  std::printf("# %12s %9s %-12s %6s %7s %5s %4s %10s %7s\n", "size (B)", "type", "algo", "blocks",
              "threads", "steps", "mode", "time (us)", "#wrong");

  std::vector<TuneBucket> buckets;
  const auto plans = tuneCandidates(ctx, info.blocksPerRank, opt.shapes, g.nccl != nullptr);
  for (tparDataType_t dtype : opt.dtypes) {
    for (size_t bytes : sizes) {
      TuneBucket b;
      b.dtype = dtype;
      const size_t count = std::max<size_t>(1, bytes / tpar::elementBytes(dtype));
      b.bytes = count * tpar::elementBytes(dtype);
      for (const Plan& p : plans) {
        TuneCandidate c;
        c.plan = p;
        if (std::string e = measurePlan(g, rk, count, dtype, opt, &c); !e.empty())
          return fail(std::to_string(b.bytes) + " B, " + tpar::planAlgoName(p) + ": " + e);
        b.candidates.push_back(c);
      }
      const int best = pickFastest(b.candidates, kNoise);
      for (size_t i = 0; i < b.candidates.size(); ++i) {
        const TuneCandidate& c = b.candidates[i];
        if (!c.error.empty()) {
          std::printf("  %12" PRIu64 " %9s %s  %s\n", b.bytes, tparDataTypeName(dtype),
                      planText(c.plan).c_str(), c.error.c_str());
          continue;
        }
        std::printf("  %12" PRIu64 " %9s %s %10.2f %7lld%s\n", b.bytes, tparDataTypeName(dtype),
                    planText(c.plan).c_str(), c.us, c.wrong,
                    static_cast<int>(i) == best ? "  <- chosen" : c.wrong ? "  WRONG" : "");
      }
      std::fflush(stdout);
      buckets.push_back(b);
    }
  }

  // What the table changes against the built-in defaults.
  long long wrong = 0;
  std::printf("#\n# %12s %9s %-27s %10s   %-27s %10s %8s\n", "size (B)", "type", "chosen", "(us)",
              "built-in default", "(us)", "gain");
  for (const TuneBucket& b : buckets) {
    for (const TuneCandidate& c : b.candidates) wrong += std::max(0LL, c.wrong);
    const int best = pickFastest(b.candidates, kNoise);
    const Plan def = tpar::defaultPlan(b.bytes, b.dtype, ctx, -1);
    const TuneCandidate* dc = nullptr;
    for (const TuneCandidate& c : b.candidates)
      if (planText(c.plan) == planText(def) && c.usable()) dc = &c;
    if (best < 0) {
      std::printf("  %12" PRIu64 " %9s no correct plan: left out of the table\n", b.bytes,
                  tparDataTypeName(b.dtype));
      continue;
    }
    const TuneCandidate& bc = b.candidates[best];
    char def_us[32] = "-";
    char gain[32] = "-";
    if (dc != nullptr) {
      std::snprintf(def_us, sizeof(def_us), "%.2f", dc->us);
      std::snprintf(gain, sizeof(gain), "%.2fx", dc->us / bc.us);
    }
    std::printf("  %12" PRIu64 " %9s %-27s %10.2f   %-27s %10s %8s\n", b.bytes,
                tparDataTypeName(b.dtype), planText(bc.plan).c_str(), bc.us,
                planText(def).c_str(), def_us, gain);
  }
  if (wrong > 0)
    std::printf("# %lld wrong elements in total: those plans were never chosen\n", wrong);

  tpar::TuningTable old;
  const bool have_old = tpar::loadTuningFile(path, ctx, &old) == tparSuccess;
  tpar::TuningTable table = tableFromBuckets(buckets, ctx, have_old ? &old : nullptr, kNoise);
  table.created = utcNow();
  table.gpu = gpus[0].name + (virt ? " (" + std::to_string(n) + " virtual ranks)" : "");
  if (table.entries.empty()) return fail("no size had a correct plan; nothing written");
  if (opt.dry_run) {
    std::printf("# --dry-run: would write %s\n", path.empty() ? "(no path)" : path.c_str());
    return wrong ? kExitCheckFailed : kExitOk;
  }
  if (tpar::saveTuningFile(path, table) != tparSuccess) return fail(tparGetLastError(nullptr));
  size_t to_nccl = 0;
  for (const tpar::TuningEntry& e : table.entries) to_nccl += e.plan.nccl;
  if (to_nccl > 0) {
    std::printf("# %zu entries route to NCCL: in communicators with an NCCL communicator attached\n"
                "# (tparCommSetNcclComm); the others use the built-in choice for those sizes\n",
                to_nccl);
  }
  size_t kept = 0;
  for (const tpar::TuningEntry& e : table.entries)
    kept += std::find(opt.dtypes.begin(), opt.dtypes.end(), e.dtype) == opt.dtypes.end();
  std::printf("# wrote %zu entries (%zu kept from the previous file) to\n#   %s\n"
              "# communicators of this topology and rank count load it at init\n",
              table.entries.size(), kept, path.c_str());
  return wrong ? kExitCheckFailed : kExitOk;
}

Action addTuneCommand(CLI::App& root, const std::string& command_line) {
  CLI::App* sub = root.add_subcommand(
      "tune", "measure every algorithm per message size and save the fastest as the tuning table");
  auto opt = std::make_shared<TuneOptions>();
  auto error = std::make_shared<std::string>();
  opt->command_line = command_line;
  registerOptions(sub, opt.get(), error);
  return [opt, error] {
    if (!error->empty()) {
      std::fprintf(stderr, "tpar tune: %s\n", error->c_str());
      return kExitUsage;
    }
    if (opt->sizes.empty() && opt->min_bytes > opt->max_bytes) {
      std::fprintf(stderr, "tpar tune: --minbytes is larger than --maxbytes\n");
      return kExitUsage;
    }
    if (!opt->output.empty() && !opt->dry_run) {
      if (std::string e = checkOutputPath(opt->output); !e.empty()) {
        std::fprintf(stderr, "tpar tune: --output: %s\n", e.c_str());
        return kExitUsage;
      }
    }
    return runTune(*opt);
  };
}

}  // namespace tpar_cli
