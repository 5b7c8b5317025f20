#include "tools/tpar/tune/tune.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "api/internal.h"
#include "tools/tpar/common/backend.h"
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
  int wire = tparWireNone;  // --wire: the format's own group; every other group is lossless
  int64_t wire_min_bytes = -1;  // >= 0: the format from this size on (commSetWireMinBytes)
  std::string init(const std::vector<int>& devs) {
    destroy();
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.transport = transport;
    cfg.wire = wire;
    cfg.algorithm = tparAlgoAuto;  // TPAR_ALGO must not override the plans being measured
    cfg.allowSharedDevice = devs.size() > 1 && devs[0] == devs[1] ? 1 : 0;
    comms.assign(devs.size(), nullptr);
    if (tparCommInitAllConfig(comms.data(), static_cast<int>(devs.size()), devs.data(), &cfg) !=
        tparSuccess) {
      comms.clear();
      return std::string("tparCommInitAll: ") + tparGetLastError(nullptr);
    }
    if (wire_min_bytes >= 0)
      for (tparComm_t c : comms) tpar::commSetWireMinBytes(c, wire_min_bytes);
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
  // One rank of a group spread over processes (--procs): this process's rank only.
  std::string initRank(int world, int rank, const std::string& id_hex, int dev) {
    destroy();
    tparUniqueId id;
    if (!fromHex(id_hex, id.internal, sizeof(id.internal))) return "bad unique id";
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.transport = transport;
    cfg.algorithm = tparAlgoAuto;
    cfg.allowSharedDevice = 1;  // several processes on one GPU: virtual ranks
    if (cudaSetDevice(dev) != cudaSuccess) return "cudaSetDevice failed";
    comms.assign(1, nullptr);
    if (tparCommInitRankConfig(&comms[0], world, id, rank, &cfg) != tparSuccess) {
      comms.clear();
      return std::string("tparCommInitRank: ") + tparGetLastError(nullptr);
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
  // The public API forces an algorithm but not a launch shape: the plan goes in as a one-entry
  // tuning table (tpar::commUsePlan), the path a saved table takes.
  void usePlan(const Plan& plan) {
    for (tparComm_t c : comms) tpar::commUsePlan(c, plan);
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

// Checks what group `g` runs for `count` elements, then times it: the output (poisoned first)
// against the exact sum, or against the format's reference where the group has a wire format;
// per-call time of `iters` calls captured into one CUDA graph per rank, from an event before
// every rank's replay to the join of all ranks' streams; then the last replay's output again.
// Returns "" unless the machine is unusable; a call that fails leaves its error in *error and
// the group rebuilt, and wrong sums are counted in *wrong, and the run goes on.
// With `lockstep` (one process per rank) every rank issues the same calls whatever it found:
// a wrong plan is timed too (and never chosen), and a failure ends the run, since the group
// cannot be recreated without the other processes.
std::string checkThenTime(Group& g, Ranks& rk, size_t count, tparDataType_t dtype,
                          const TuneOptions& opt, bool lockstep, long long* wrong, double* us,
                          std::string* error) {
  auto countWrong = [&](long long* n) {
    return g.wire == tparWireNone ? rk.countWrongIn(rk.out, count, dtype, n)
                                  : rk.countWireWrongIn(rk.out, count, dtype, g.wire, n);
  };
  // Correctness first, on poisoned outputs: a wrong plan is never timed.
  if (std::string e = rk.fill(rk.in, rk.out, count, dtype); !e.empty()) return e;
  std::string e = g.allReduce(rk, count, dtype);
  if (e.empty()) e = rk.sync();
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    if (std::string f = countWrong(wrong); !f.empty()) return f;
    if (*wrong != 0 && !lockstep) return "";
    e = timeIt(rk, opt.iters, opt.warmup, /*graph=*/true,
               [&] { return g.allReduce(rk, count, dtype); }, us);
  }
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    // The inputs are intact (out of place): the last replay's output must still be right.
    long long after = 0;
    if (std::string f = countWrong(&after); !f.empty()) return f;
    *wrong += after;
    return "";
  }
  *error = e;
  *us = 0;
  if (lockstep) return e;
  // A communicator that recorded an asynchronous error accepts nothing but destroy.
  (void)cudaGetLastError();
  return g.init(rk.devs);
}

// One plan of the search: checked, then timed (checkThenTime), recorded in `c`.
std::string measurePlan(Group& g, Ranks& rk, size_t count, tparDataType_t dtype,
                        const TuneOptions& opt, bool lockstep, TuneCandidate* c) {
  g.usePlan(c->plan);
  tparAlgo_t runs_as = tparAlgoAuto;
  tparCommSelectAlgorithmForType(g.comms[0], count * tpar::elementBytes(dtype), dtype, &runs_as);
  if (tpar::planAlgoName(c->plan) != std::string(tparAlgoName(runs_as))) {
    c->error = std::string("not supported here (runs as ") + tparAlgoName(runs_as) + ")";
    return "";
  }
  return checkThenTime(g, rk, count, dtype, opt, lockstep, &c->wrong, &c->us, &c->error);
}

// A later candidate must beat the best so far by more than this to replace it (pickFastest), and
// a wire format the lossless plan by as much to count as a gain (wireBreakEven).
constexpr double kNoise = 0.03;

// --wire: each format on a group of its own with the format from every size, against the
// lossless plan the search chose at the same size (`buckets`), at the sizes of the first 16-bit
// datatype searched. Each size is checked bit for bit against the format's reference before it
// is timed. Returns "" unless the machine is unusable.
std::string measureWires(const std::vector<int>& devs, Ranks& rk, const TuneOptions& opt,
                         const std::vector<TuneBucket>& buckets, std::vector<WireResult>* out) {
  tparDataType_t dtype = tparFloat32;
  for (tparDataType_t d : opt.dtypes)
    if (dtype == tparFloat32 && (d == tparBfloat16 || d == tparFloat16)) dtype = d;
  for (int wire : opt.wires) {
    WireResult r;
    r.wire = wire;
    r.dtype = dtype;
    Group g;
    g.transport = opt.transport;
    g.wire = wire;
    g.wire_min_bytes = 0;  // the format at every size
    if (std::string e = g.init(devs); !e.empty()) return e;
    bool applies = false;
    for (const TuneBucket& b : buckets) {
      if (b.dtype != dtype) continue;
      WirePoint p;
      p.bytes = b.bytes;
      const int best = pickFastest(b.candidates, kNoise);
      if (best >= 0) p.lossless_us = b.candidates[best].us;
      const size_t count = b.bytes / tpar::elementBytes(dtype);
      if (tpar::commWireVariant(g.comms[0], b.bytes, dtype) == nullptr) {
        p.error = "the format does not apply here (GPU memory: only under a forced pipelined)";
      } else {
        applies = true;
        if (std::string e = checkThenTime(g, rk, count, dtype, opt, /*lockstep=*/false, &p.wrong,
                                          &p.wire_us, &p.error);
            !e.empty())
          return e;
      }
      r.points.push_back(p);
    }
    // Where the format applies at no size (GPU memory without a forced pipelined) the table
    // says nothing of it; where it applies but fails or computes wrong sums, no size is a win.
    r.min_bytes = applies ? wireBreakEven(r.points, kNoise) : -1;
    out->push_back(r);
  }
  return "";
}

std::string utcNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Correct plans printed per size besides the default and the chosen one (--all: every one).
constexpr size_t kShownPerSize = 4;

// The comma-separated items of an option's value.
std::vector<std::string> listItems(const std::string& v) {
  std::vector<std::string> items;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) items.push_back(item);
  return items;
}

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
        for (const std::string& item : listItems(v)) {
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
  app->add_option("--shapes", opt->shapes,
                  "1: search blocks x threads (x steps x mode) per algorithm (default); 0: "
                  "kernel-default shapes only");
  app->add_flag("--virtual", opt->virtual_ranks,
                "every rank on GPU 0 (virtual ranks), also where there are more GPUs");
  app->add_flag("--procs", opt->procs,
                "one process per rank (default: one thread drives every rank); no NCCL candidate");
  app->add_option("--worker-rank", opt->worker_rank, "internal")->group("");
  app->add_option("--worker-world", opt->worker_world, "internal")->group("");
  app->add_option("--worker-id", opt->worker_id, "internal")->group("");
  app->add_option("--results-json", opt->results_json, "internal")->group("");
  app->add_flag("--quick", opt->quick, "a smaller search: blocks 1,2,8,16,32,64 x threads 64,256,512");
  auto int_list = [app, error](const char* name, std::vector<int>* out, int lo, int hi,
                               const char* what) {
    app->add_option_function<std::string>(
        name,
        [out, error, name, lo, hi](const std::string& v) {
          out->clear();
          for (const std::string& item : listItems(v)) {
            int64_t k = 0;
            if (!tpar::parseInt(item, &k) || k < lo || k > hi) {
              *error = std::string(name) + ": '" + item + "' is not a whole number in " +
                       std::to_string(lo) + ".." + std::to_string(hi);
              return;
            }
            out->push_back(static_cast<int>(k));
          }
        },
        what);
  };
  int_list("--blocks", &opt->blocks, 1, kernels::kMaxBlocks, "blocks to search, e.g. 8,16,32");
  int_list("--threads", &opt->threads, 32, 1024, "threads per block to search, e.g. 256,512");
  int_list("--steps", &opt->steps, 1, tpar::kMaxPlanSteps, "pipelined steps to search, e.g. 1,4");
  app->add_flag("--all", opt->print_all, "print every measurement (default: the best few per size)");
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
  app->add_option_function<std::string>(
      "--wire",
      [opt, error](const std::string& v) {
        opt->wires.clear();
        for (const std::string& item : listItems(v)) {
          int w = tparWireNone;
          if (!tpar::wireFromName(item.c_str(), &w)) {
            *error = "--wire: '" + item + "' is not a wire format (fp8, int8, int4)";
            return;
          }
          if (w != tparWireNone &&
              std::find(opt->wires.begin(), opt->wires.end(), w) == opt->wires.end())
            opt->wires.push_back(w);
        }
      },
      "wire formats (fp8,int8,int4) whose smallest winning size to measure against the tuned "
      "lossless plans and write to the table (docs/WIRE.md); float16/bfloat16 sizes only");
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

namespace {

// One size's measurements: the default, the fastest few and every failure (all with `all`).
}  // namespace

void printTuneBucket(const TuneBucket& b, bool all) {
  const int best = pickFastest(b.candidates, kNoise);
  std::vector<size_t> order(b.candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Usable ones by time, then the rest in measuring order.
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    const TuneCandidate& a = b.candidates[x];
    const TuneCandidate& c = b.candidates[y];
    if (a.usable() != c.usable()) return a.usable();
    return a.usable() && a.us < c.us;
  });
  size_t shown = 0, hidden = 0;
  for (size_t i : order) {
    const TuneCandidate& c = b.candidates[i];
    const bool show = all || c.is_default || !c.usable() || static_cast<int>(i) == best ||
                      shown < kShownPerSize;
    if (!show) {
      ++hidden;
      continue;
    }
    shown += c.usable();
    const std::string mark = static_cast<int>(i) == best ? "  <- chosen" : c.wrong > 0 ? "  WRONG" : "";
    const std::string tag = c.is_default ? "  (default)" : "";
    if (!c.error.empty()) {
      std::printf("  %12" PRIu64 " %9s %s  %s\n", b.bytes, tparDataTypeName(b.dtype),
                  planText(c.plan).c_str(), c.error.c_str());
      continue;
    }
    std::printf("  %12" PRIu64 " %9s %s %10.2f %7lld%s%s\n", b.bytes, tparDataTypeName(b.dtype),
                planText(c.plan).c_str(), c.us, c.wrong, mark.c_str(), tag.c_str());
  }
  if (hidden > 0) std::printf("  %12s (%zu slower correct plans not shown; --all shows them)\n", "", hidden);
  std::fflush(stdout);
}

namespace {

int failRun(const std::string& msg) {
  std::fprintf(stderr, "tpar tune: %s\n", msg.c_str());
  return kExitRunError;
}

// Measures every size of the search on group `g` (one rank per process with `lockstep`).
// `header` gets the search's description (nullptr: none); sizes are printed as measured when
// `print`. Returns "" or why the run cannot go on.
std::string searchBuckets(Group& g, Ranks& rk, const TuneOptions& opt, bool lockstep, FILE* header,
                          bool print, std::vector<TuneBucket>* buckets) {
  const tpar::TunerContext ctx = tpar::commTunerContext(g.comms[0]);
  tparCommInfo_t info;
  if (tparCommQuery(g.comms[0], &info) != tparSuccess) return tparGetLastError(g.comms[0]);
  const auto sizes = tuneSizes(opt);
  // The search: every algorithm over the space's shapes that this group can launch.
  TuneSpace space = opt.quick ? quickTuneSpace() : fullTuneSpace();
  if (!opt.blocks.empty()) space.blocks = opt.blocks;
  if (!opt.threads.empty()) space.threads = opt.threads;
  if (!opt.steps.empty()) space.steps = opt.steps;
  TuneLimits limits;
  limits.grid_blocks = info.blocksPerRank;
  limits.max_threads = std::min(info.threadsPerBlock, kernels::kMaxThreads);
  const TuneCandidates cands = tuneCandidates(ctx, space, limits, opt.shapes, g.nccl != nullptr);
  // + the built-in default and the forced plan of each algorithm, per size (fewer where they
  // coincide with the grid's)
  const size_t per_size = cands.plans.size() + 1 + cands.forced.size();
  const size_t total = per_size * sizes.size() * opt.dtypes.size();
  if (header != nullptr) {
    std::fprintf(header, "# search (%s): blocks %s x threads %s, pipelined also steps %s x push/pull\n",
                 !opt.shapes ? "kernel-default shapes only" : opt.quick ? "quick" : "full",
                 joinInts(space.blocks).c_str(), joinInts(space.threads).c_str(),
                 joinInts(space.steps).c_str());
    std::map<std::string, size_t> reasons;
    for (const ExcludedPlan& x : cands.excluded)
      ++reasons[(x.plan.active_blocks == 0 ? std::string(tpar::planAlgoName(x.plan)) + ": "
                                            : std::string()) + x.why];
    for (const auto& [why, count] : reasons)
      std::fprintf(header, "#   excluded %4zu: %s\n", count, why.c_str());
    std::fprintf(header, "# %zu candidates per size at most (the default first, then each algorithm as forced) x %zu sizes x %zu types = %zu; "
                 "about %.0f s (rough; --quick or --shapes 0 for fewer)\n",
                 per_size, sizes.size(), opt.dtypes.size(), total,
                 tuneEstimateSeconds(per_size, sizes, opt.iters, opt.warmup, ctx.nranks) *
                     static_cast<double>(opt.dtypes.size()));
    std::fprintf(header, "# every plan is checked element by element on poisoned outputs, then timed as a\n"
                 "# CUDA graph of %d calls after %d warm-up, then checked again; grid of %d blocks "
                 "per rank, at most %d threads\n",
                 opt.iters, opt.warmup, info.blocksPerRank, limits.max_threads);
    std::fflush(header);
  }
  if (print) {
    std::printf("# %12s %9s %-12s %6s %7s %5s %4s %10s %7s\n", "size (B)", "type", "algo",
                "blocks", "threads", "steps", "mode", "time (us)", "#wrong");
    std::fflush(stdout);
  }
  for (tparDataType_t dtype : opt.dtypes) {
    for (size_t bytes : sizes) {
      TuneBucket b;
      b.dtype = dtype;
      const size_t count = std::max<size_t>(1, bytes / tpar::elementBytes(dtype));
      b.bytes = count * tpar::elementBytes(dtype);
      // The built-in default first (ties go to it), as a communicator without a table runs it.
      TuneCandidate def;
      def.plan = tpar::commDefaultPlan(g.comms[0], b.bytes, dtype);
      def.is_default = true;
      std::vector<Plan> plans = {def.plan};
      auto add = [&plans](const Plan& p) {
        for (const Plan& q : plans)
          if (tpar::samePlan(q, p)) return;
        plans.push_back(p);
      };
      // Then what forcing each algorithm runs at this size (its own grid or host shape,
      // threads sized from the work), which the blocks x threads grid need not hold: after
      // tuning, no algorithm forced by hand should beat the table.
      for (const Plan& p : cands.forced)
        add(tpar::commForcedPlan(g.comms[0], b.bytes, dtype, tpar::algorithm(p.algo).pub));
      for (const Plan& p : cands.plans) add(p);
      for (size_t i = 0; i < plans.size(); ++i) {
        TuneCandidate c = i == 0 ? def : TuneCandidate{};
        c.plan = plans[i];
        if (std::string e = measurePlan(g, rk, count, dtype, opt, lockstep, &c); !e.empty())
          return std::to_string(b.bytes) + " B, " + planText(plans[i]) + ": " + e;
        b.candidates.push_back(c);
      }
      if (print) printTuneBucket(b, opt.print_all);
      buckets->push_back(b);
    }
  }
  return "";
}

size_t maxElementBytes(const TuneOptions& opt) {
  size_t max_elem = 4;
  for (tparDataType_t d : opt.dtypes) max_elem = std::max(max_elem, tpar::elementBytes(d));
  return max_elem;
}

// A child of --procs: measures its rank, writes what it measured to opt.results_json.
int runTuneWorker(const TuneOptions& opt, int ngpus) {
  auto fail = [&](const std::string& msg) {
    std::ofstream(opt.results_json) << nlohmann::json{{"error", msg}}.dump();
    return kExitRunError;
  };
  const int dev = opt.virtual_ranks || ngpus < opt.worker_world ? 0 : opt.worker_rank;
  Ranks rk;
  rk.first_rank = opt.worker_rank;
  rk.world = opt.worker_world;
  if (std::string e = rk.alloc({dev}, tuneSizes(opt).back() + maxElementBytes(opt)); !e.empty())
    return fail(e);
  Group g;
  g.transport = opt.transport;
  if (std::string e = g.initRank(opt.worker_world, opt.worker_rank, opt.worker_id, dev); !e.empty())
    return fail(e);
  std::vector<TuneBucket> buckets;
  if (std::string e = searchBuckets(g, rk, opt, /*lockstep=*/true,
                                    opt.worker_rank == 0 ? stderr : nullptr, false, &buckets);
      !e.empty())
    return fail("rank " + std::to_string(opt.worker_rank) + ": " + e);
  std::ofstream(opt.results_json) << bucketsToJson(buckets, tpar::commTunerContext(g.comms[0]));
  return kExitOk;
}

}  // namespace

int finishTune(const std::vector<TuneBucket>& buckets, const tpar::TunerContext& ctx,
               const TuneOptions& opt, const std::string& gpu_label, double elapsed_s,
               const std::vector<WireResult>& wires) {
  size_t total = 0;
  long long wrong = 0;
  for (const TuneBucket& b : buckets) {
    total += b.candidates.size();
    for (const TuneCandidate& c : b.candidates) wrong += std::max(0LL, c.wrong);
  }
  // What the table changes against the built-in defaults, both measured in this run.
  std::printf("#\n%s", gainReport(tuneGains(buckets, kNoise)).c_str());
  if (!wires.empty()) std::printf("%s", wireReport(wires).c_str());
  std::printf("# measured %zu candidates in %.1f s\n", total, elapsed_s);
  if (wrong > 0)
    std::printf("# %lld wrong elements in total: those plans were never chosen\n", wrong);

  const std::string path = opt.output.empty() ? tpar::tuningFilePath(ctx) : opt.output;
  if (path.empty() && !opt.dry_run)
    return failRun("no place for the table: set TPAR_TUNING_FILE, XDG_CACHE_HOME or HOME, or pass --output");
  tpar::TuningTable old;
  const bool have_old = !path.empty() && tpar::loadTuningFile(path, ctx, &old) == tparSuccess;
  tpar::TuningTable table = tableFromBuckets(buckets, ctx, have_old ? &old : nullptr, kNoise);
  long long wire_wrong = 0;
  for (const WireResult& w : wires) {
    if (w.min_bytes != -1) table.wire_min_bytes[w.wire] = w.min_bytes;
    for (const WirePoint& p : w.points) wire_wrong += std::max(0LL, p.wrong);
  }
  if (wire_wrong > 0)
    std::printf("# %lld wrong elements in the wire formats' rows: those sizes never count as a gain\n",
                wire_wrong);
  wrong += wire_wrong;
  table.created = utcNow();
  table.gpu = gpu_label;
  if (table.entries.empty()) return failRun("no size had a correct plan; nothing written");
  if (opt.dry_run) {
    std::printf("# --dry-run: would write %s\n", path.empty() ? "(no path)" : path.c_str());
    return wrong ? kExitCheckFailed : kExitOk;
  }
  if (tpar::saveTuningFile(path, table) != tparSuccess) return failRun(tparGetLastError(nullptr));
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

int runTune(const TuneOptions& opt) {
  std::string why;
  const auto gpus = listGpus(&why);
  if (gpus.empty()) {
    std::fprintf(stderr, "tpar tune: %s; nothing to measure.\n", why.c_str());
    return kExitNoGpu;
  }
  const int ngpus = static_cast<int>(gpus.size());
  if (opt.worker_rank >= 0) return runTuneWorker(opt, ngpus);
  const int n = opt.ranks > 0 ? opt.ranks : (ngpus > 1 && !opt.virtual_ranks ? ngpus : 8);
  const bool virt = opt.virtual_ranks || n > ngpus;
  if (virt) {
    std::printf("# %d virtual ranks on one %s: they share its SMs, so the crossovers are\n"
                "# this setup's, not those of an %d-GPU machine (its topology signature differs,\n"
                "# so a real group never loads this table).\n",
                n, gpus[0].name.c_str(), n);
  } else {
    std::printf("# %d ranks on %d GPUs (%s), %s\n", n, n, gpus[0].name.c_str(),
                opt.procs ? "one process per rank" : "one thread drives them all");
  }
  if (opt.procs) return runTuneProcs(opt, n, virt, gpus[0].name);

  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
  Ranks rk;
  if (std::string e = rk.alloc(devs, tuneSizes(opt).back() + maxElementBytes(opt)); !e.empty())
    return failRun(e);
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
  if (!init_error.empty()) return failRun(init_error);
  if (g.nccl != nullptr) {
    nccl_note = tpar::ncclVersionString(g.nccl->version) + " (" + g.nccl->path +
                ") measured as a candidate, attached with tparCommSetNcclComm";
  }
  const tpar::TunerContext ctx = tpar::commTunerContext(g.comms[0]);
  if (opt.output.empty() && tpar::tuningFilePath(ctx).empty() && !opt.dry_run)
    return failRun("no place for the table: set TPAR_TUNING_FILE, XDG_CACHE_HOME or HOME, or pass --output");
  std::printf("# topology %s: %d island(s), worst link class %d%s\n", ctx.signature.c_str(),
              ctx.islands, ctx.worst_link, ctx.hierarchical_ok ? ", hierarchical possible" : "");
  std::printf("# nccl: %s\n", nccl_note.c_str());

  const auto started = std::chrono::steady_clock::now();
  std::vector<TuneBucket> buckets;
  if (std::string e = searchBuckets(g, rk, opt, /*lockstep=*/false, stdout, true, &buckets);
      !e.empty())
    return failRun(e);
  std::vector<WireResult> wires;
  if (!opt.wires.empty()) {
    g.destroy();  // the formats' groups take their own regions
    if (std::string e = measureWires(devs, rk, opt, buckets, &wires); !e.empty())
      return failRun("--wire: " + e);
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return finishTune(buckets, ctx, opt,
                    gpus[0].name + (virt ? " (" + std::to_string(n) + " virtual ranks)" : ""),
                    elapsed, wires);
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
    if (!opt->wires.empty() && opt->procs) {
      std::fprintf(stderr, "tpar tune: --wire measures with one thread driving every rank; "
                           "leave out --procs\n");
      return kExitUsage;
    }
    if (!opt->wires.empty() &&
        std::none_of(opt->dtypes.begin(), opt->dtypes.end(),
                     [](tparDataType_t d) { return d == tparBfloat16 || d == tparFloat16; })) {
      std::fprintf(stderr, "tpar tune: --wire: the formats carry float16 and bfloat16 only; "
                           "add one of them to --datatype\n");
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
    // Without --output the table goes to TPAR_TUNING_FILE when set; a FIFO or a device there is
    // found now, not after the search. A missing directory is not an error: saving makes it.
    const tpar::Env* env = nullptr;
    struct stat st;
    if (opt->output.empty() && !opt->dry_run && tpar::processEnv(&env) == tparSuccess &&
        !env->tuning_file.empty() && stat(env->tuning_file.c_str(), &st) == 0) {
      if (std::string e = checkOutputPath(env->tuning_file); !e.empty()) {
        std::fprintf(stderr, "tpar tune: TPAR_TUNING_FILE: %s\n", e.c_str());
        return kExitUsage;
      }
    }
    return runTune(*opt);
  };
}

}  // namespace tpar_cli
