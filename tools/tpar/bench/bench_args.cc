// The options of `tpar bench`: every flag of nccl-tests' all_reduce_perf with its meaning, and
// tpar's own as long options (docs/CLI.md). No GPU code: unit-tested in CI.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "api/internal.h"
#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"

namespace tpar_cli {
namespace {

// The longest sweep a run takes (-b 8 -e 128M -i 8 would be 16 million sizes).
constexpr size_t kMaxSizes = 4096;

// nccl-tests' type names first; tpar's own spellings are accepted too (cli_options.h).
constexpr tparDataType_t kAllTypes[] = {tparFloat16, tparFloat32, tparBfloat16};
constexpr const char* kUnsupportedTypes[] = {"int8",   "uint8",  "int32",  "uint32", "int64",
                                             "uint64", "double", "f8e4m3", "f8e5m2"};
constexpr tparRedOp_t kAllOps[] = {tparSum, tparMax, tparMin};
constexpr const char* kUnsupportedOps[] = {"prod", "avg", "mulsum"};

// Flags that are accepted for nccl-tests' command lines but change nothing here, or are
// refused unless 0 (finish says why).
struct Accepted {
  int root = 0, cta_policy = -1, device_impl = 0, device_ctas = 16, per_iter = 0, per_iter_skip = 0;
};

// -d and -o: a comma-separated list of names that `lookup` knows, or "all". Names that
// nccl-tests knows and tpar does not (`unsupported`) are refused saying what tpar does.
template <typename T, size_t NAll, size_t NUnsupported>
std::string parseChoices(const std::string& option, const std::string& v, const T (&all)[NAll],
                         const char* const (&unsupported)[NUnsupported],
                         const std::function<bool(const std::string&, T*)>& lookup,
                         const std::string& supported, std::vector<T>* out) {
  out->clear();
  if (v == "all") {
    out->assign(std::begin(all), std::end(all));
    return "";
  }
  std::string refused;
  const std::string e = parseList(option, v, [&](const std::string& item) {
    T value;
    if (lookup(item, &value)) {
      if (std::find(out->begin(), out->end(), value) == out->end()) out->push_back(value);
      return true;
    }
    if (std::find(std::begin(unsupported), std::end(unsupported), item) != std::end(unsupported))
      refused = item;
    return false;
  });
  if (!refused.empty())
    return option + ": tpar does not reduce '" + refused + "'; it takes " + supported +
           ", a list of them, or all";
  return e.empty() ? "" : e + " (" + supported + ", or all)";
}

std::string parseTypes(const std::string& v, std::vector<tparDataType_t>* out) {
  return parseChoices<tparDataType_t>("--datatype", v, kAllTypes, kUnsupportedTypes,
                                      parseDatatypeName, "half, float, bfloat16", out);
}

std::string parseOps(const std::string& v, std::vector<tparRedOp_t>* out) {
  return parseChoices<tparRedOp_t>(
      "--op", v, kAllOps, kUnsupportedOps,
      [](const std::string& item, tparRedOp_t* op) {
        for (tparRedOp_t o : kAllOps) {
          if (item == ncclTestsOpName(o)) {
            *op = o;
            return true;
          }
        }
        return false;
      },
      "sum, max, min", out);
}

void registerOptions(CLI::App* app, BenchOptions* opt, Accepted* given,
                     std::shared_ptr<std::string> error) {
  auto setError = [error](const std::string& e) {
    if (!e.empty() && error->empty()) *error = e;
  };
  // nccl-tests' flags, in its order. Their defaults are tpar's where it has its own (shown).
  app->add_option("-t,--nthreads", opt->nthreads,
                  "threads; ranks are threads x GPUs per thread (tpar drives them all from one "
                  "thread)")
      ->check(CLI::Range(1, TPAR_MAX_RANKS))
      ->capture_default_str();
  app->add_option("-g,--ngpus", opt->ngpus,
                  "GPUs per thread (default: every GPU; one GPU: 8 virtual ranks)")
      ->check(CLI::Range(1, TPAR_MAX_RANKS));
  addSizeOptions(app, &opt->min_bytes, &opt->max_bytes, &opt->factor, &opt->sizes, error,
                 "message", /*min_factor=*/1.0);
  app->get_option("-f")->description(
      "size factor between messages; 1: add --stepbytes instead");
  app->add_option_function<std::string>(
         "-i,--stepbytes",
         [opt, setError](const std::string& v) {
           uint64_t b = 0;
           if (!tpar::parseBytes(v, &b) || b == 0) setError("--stepbytes: bad size '" + v + "'");
           opt->step_bytes = b;
         },
         "size increment when the factor is 1 (given alone, it sets the factor to 1)")
      ->default_str(bytesText(opt->step_bytes));
  app->add_option("-n,--iters", opt->iters, "timed iterations per size")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app->add_option("-m,--agg_iters", opt->agg_iters, "all-reduces per iteration")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("-w,--warmup_iters", opt->warmup, "untimed iterations first")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app->add_option("-N,--run_cycles", opt->run_cycles, "run and print the sweep this often; 0: until interrupted")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app->add_option("-p,--parallel_init", opt->parallel_init,
                  "0/1; tpar creates every rank's communicator in one call either way")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app->add_option("-c,--check", opt->check_iters,
                  "checked calls per size, each on fresh inputs; 0: no check")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app->add_option_function<std::string>(
         "-o,--op", [opt, setError](const std::string& v) { setError(parseOps(v, &opt->ops)); },
         "sum, max, min, a comma-separated list, or all")
      ->default_str("sum");
  app->add_option_function<std::string>(
         "-d,--datatype,--dtype",
         [opt, setError](const std::string& v) { setError(parseTypes(v, &opt->dtypes)); },
         "half, float, bfloat16 (also float16/fp16, float32/fp32, bf16), a list, or all")
      ->default_str("bfloat16");
  app->add_option("-r,--root", given->root, "accepted; an all-reduce has no root");
  app->add_option("-z,--blocking", opt->blocking,
                  "0; 1 or 2: wait for every call; 3: wait for every iteration (eager timing)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app->add_option("-y,--stream_null", opt->stream_null,
                  "0 only: every rank has its own stream (ranks sharing a GPU cannot share one)")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app->add_option("-T,--timeout", opt->timeout_s,
                  "seconds any wait of tpar's communicators may take (0: TPAR_TIMEOUT_MS)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app->add_option("-G,--cudagraph", opt->graph_launches,
                  "replays of a CUDA graph of the timed calls (0: eager); given, for every size "
                  "(by default, for sizes up to --graph-max-bytes)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app->add_option("-C,--report_cputime", opt->report_cputime,
                  "1: report the host time to issue a call instead of the GPU time")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app->add_option("-S,--report_timestamps", opt->report_timestamps,
                  "1: a timestamp after each row's nccl-tests columns")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app->add_option("-J,--output_file,--json", opt->json_path,
                  "write every row with machine, versions, commit and command as JSON");
  app->add_option("-a,--average", opt->average,
                  "time reported over the ranks: 0 rank 0, 1 mean, 2 min, 3 max (the slowest)")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  app->add_option("-R,--local_register", opt->local_register,
                  "1: register NCCL's buffers (ncclCommRegister); tpar needs no registration")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  app->add_option("-x,--cta_policy", given->cta_policy, "accepted; NCCL's CTA policy is not set");
  app->add_option("-D,--device_implementation", given->device_impl,
                  "0 only (NCCL's device API is not measured)");
  app->add_option("-V,--device_cta_count", given->device_ctas, "accepted (used only with -D)");
  app->add_option("-M,--memory", opt->memory_report,
                  "1: report the GPU memory each backend took at init")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app->add_option("-u,--unalign", opt->unalign, "start buffers this many elements off alignment")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app->add_option("-I,--per_iter_timing", given->per_iter, "0 only (no per-iteration timing)");
  app->add_option("-K,--per_iter_skip", given->per_iter_skip, "accepted (used only with -I)");

  // tpar's own options.
  app->add_option_function<std::string>(
      "--ranks",
      [opt, setError](const std::string& v) {
        opt->ranks.clear();
        setError(parseList("--ranks", v, [&](const std::string& item) {
          int64_t k = 0;
          if (!tpar::parseInt(item, &k) || k < 1 || k > TPAR_MAX_RANKS) return false;
          opt->ranks.push_back(static_cast<int>(k));
          return true;
        }));
      },
      "rank counts, a list runs each (default: -t x -g, else every GPU; one GPU: 8 virtual "
      "ranks)");
  app->add_option_function<std::string>(
      "--backends",
      [opt, setError](const std::string& v) {
        opt->backends.clear();
        const auto& known = backendNames();
        const std::string e = parseList("--backends", v, [&](const std::string& item) {
          opt->backends.push_back(item);
          std::string base = item;
          int wire = 0;
          if (splitWireSuffix(item, &base, &wire) && base.rfind("tpar", 0) != 0) return false;
          return ncclVariants().count(base) ||
                 std::find(known.begin(), known.end(), base) != known.end();
        });
        if (!e.empty())
          setError(e + " (" + backendNameList() +
                   ", nccl:p2p-sys, nccl:shm; a tpar backend may end in +none, +fp8, +int8 or "
                   "+int4)");
      },
      "comma-separated: " + backendNameList() +
          ", nccl:p2p-sys, nccl:shm (default: all); a tpar backend with a wire format after "
          "'+' (tpar+fp8) runs with that format");
  app->add_option_function<std::string>(
         "--wire",
         [opt, setError](const std::string& v) {
           opt->wires.clear();
           const std::string e = parseList("--wire", v, [&](const std::string& item) {
             int w = 0;
             if (!tpar::wireFromName(item.c_str(), &w)) return false;
             if (std::find(opt->wires.begin(), opt->wires.end(), w) == opt->wires.end())
               opt->wires.push_back(w);
             return true;
           });
           if (!e.empty()) setError(e + " (none or bf16 for lossless, fp8, int8, int4)");
         },
         "wire formats (docs/WIRE.md), a list: each tpar backend runs once per format, its rows "
         "named with it (tpar+fp8); none (or bf16) is lossless. Rows that run a format are "
         "checked against its reference on the host")
      ->default_str("TPAR_WIRE");
  app->add_option_function<std::string>(
         "--transport",
         [opt, setError](const std::string& v) {
           if (!parseTransportName(v, &opt->transport))
             setError("--transport: '" + v + "' is not auto, host or p2p");
         },
         "where tpar's receive regions live: auto (GPU memory; host memory where P2P is "
         "missing), host (pinned host memory; also measures the host link and prints each "
         "row's floor), p2p (GPU memory only)")
      ->default_str("TPAR_TRANSPORT");
  app->add_option_function<std::string>(
         "--graph-max-bytes",
         [opt, setError](const std::string& v) {
           uint64_t b = 0;
           if (!tpar::parseBytes(v, &b)) setError("--graph-max-bytes: bad size '" + v + "'");
           opt->graph_max_bytes = b;
         },
         "largest message timed from graph replays; larger ones run eagerly")
      ->default_str(bytesText(opt->graph_max_bytes));
  app->add_flag("--procs", opt->procs, "one process per rank (default: one thread drives all)");
  app->add_flag("--host-cost", opt->host_cost,
                "instead of the table: the host time to enqueue one call, every rank's stream "
                "held by a spin kernel so that no launch queue fills, against a bare launch of "
                "the same parameter size and launch attributes (results checked after each "
                "release)");
  app->add_option("--host-cost-batch", opt->host_cost_batch,
                  "--host-cost: calls timed per hold (few enough not to fill the launch queue)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--host-cost-batches", opt->host_cost_batches,
                  "--host-cost: holds per size; the median and minimum over them are reported")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app->add_flag("--fused", opt->fused,
                "instead of the table: the fused all-reduce + residual add + RMSNorm against "
                "tpar's all-reduce of the same bytes, that all-reduce then a separate norm "
                "kernel, and NCCL then that kernel (one rank per GPU), per --hidden x --tokens; "
                "the fused outputs are checked against the unfused sequence's first");
  auto sizeList = [opt, setError](const char* name, std::vector<size_t>* out, int64_t most,
                                  int64_t multiple) {
    return [=](const std::string& v) {
      out->clear();
      setError(parseList(name, v, [&](const std::string& item) {
        int64_t k = 0;
        if (!tpar::parseInt(item, &k) || k < 1 || k > most || k % multiple != 0) return false;
        out->push_back(static_cast<size_t>(k));
        return true;
      }));
    };
  };
  app->add_option_function<std::string>("--hidden",
                                         sizeList("--hidden", &opt->fused_hidden, 16384, 8),
                                         "--fused: hidden sizes, multiples of 8 up to 16384")
      ->default_str("4096,7168,8192");
  app->add_option_function<std::string>("--tokens",
                                         sizeList("--tokens", &opt->fused_tokens, 65536, 1),
                                         "--fused: tokens (rows) per call, up to 65536")
      ->default_str("1,8,64");
  app->add_option("--rows-json", opt->rows_path, "internal: rows of a child run")->group("");
  app->add_option("--worker-rank", opt->worker_rank, "internal")->group("");
  app->add_option("--worker-world", opt->worker_world, "internal")->group("");
  app->add_option("--worker-id", opt->worker_id, "internal")->group("");
}

// What the flags mean together, once parsed; "" or the error.
std::string finish(const CLI::App& app, const Accepted& given, BenchOptions* opt) {
  auto has = [&](const char* name) { return app.count(name) > 0; };
  // -i alone: nccl-tests' additive sweep (its factor defaults to 1, tpar's to 2).
  if (has("--stepbytes") && !has("--stepfactor")) opt->factor = 1.0;
  opt->graph_given = has("--cudagraph");
  // nccl-tests times every size from graphs under -G; an explicit --graph-max-bytes still bounds.
  // -G 0 times eagerly and, up to --graph-max-bytes (default or given), from graphs beside.
  if (opt->graph_given && opt->graph_launches > 0 && !has("--graph-max-bytes"))
    opt->graph_max_bytes = std::numeric_limits<size_t>::max();
  opt->eager_and_graph = opt->graph_given && opt->graph_launches == 0 && opt->blocking == 0;
  if ((has("--host-cost-batch") || has("--host-cost-batches")) && !opt->host_cost)
    return "--host-cost-batch and --host-cost-batches need --host-cost";
  if (opt->host_cost && opt->procs)
    return "--host-cost measures one thread driving every rank; --procs is not supported with it";
  if ((has("--hidden") || has("--tokens")) && !opt->fused)
    return "--hidden and --tokens need --fused";
  if (opt->fused && (opt->procs || opt->host_cost))
    return "--fused runs every rank from one thread; --procs and --host-cost are not "
           "supported with it";
  if (opt->fused && !opt->wires.empty())
    return "--fused measures the lossless fused call; --wire applies to the all-reduce table";
  if (opt->fused && opt->dtypes.size() != 1)
    return "--fused measures one datatype: give -d float, half or bfloat16";
  if (has("--ranks") && (has("--nthreads") || has("--ngpus")))
    return "--ranks and -t/-g both give the rank count: use one of them";
  if (opt->stream_null != 0)
    return "--stream_null 1 is not supported: every rank needs its own stream (ranks that share "
           "a GPU would wait for each other on one stream)";
  if (given.device_impl != 0)
    return "--device_implementation " + std::to_string(given.device_impl) +
           " is not supported: tpar bench measures NCCL's host API only";
  if (given.per_iter != 0)
    return "--per_iter_timing is not supported: tpar bench times whole iterations";
  if (opt->local_register == 2)
    return "--local_register 2 (NCCL symmetric windows) is not supported; -R 1 registers "
           "NCCL's buffers (tpar needs no registration)";
  if (opt->blocking != 0 && opt->graph_given && opt->graph_launches > 0)
    return "--blocking " + std::to_string(opt->blocking) +
           " waits between calls, which a CUDA graph cannot: add -G 0";
  if (opt->blocking != 0) opt->graph_launches = 0;
  if (opt->sizes.empty()) {
    if (opt->min_bytes > opt->max_bytes) return "--minbytes is larger than --maxbytes";
    const size_t n = benchSizes(*opt).size();
    if (n > kMaxSizes)
      return "the sweep from --minbytes to --maxbytes has " + std::to_string(n) +
             " sizes (at most " + std::to_string(kMaxSizes) + "): use a larger -f or -i";
  }
  return "";
}

}  // namespace

const char* ncclTestsTypeName(tparDataType_t dtype) {
  switch (dtype) {
    case tparFloat16: return "half";
    case tparFloat32: return "float";
    case tparBfloat16: return "bfloat16";
    default: return "unknown";
  }
}

const char* ncclTestsOpName(tparRedOp_t op) { return tparRedOpName(op); }

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
  if (!opt.sizes.empty()) return opt.sizes;
  if (opt.factor > 1.0) return sizeRange(opt.min_bytes, opt.max_bytes, opt.factor);
  std::vector<size_t> out;
  for (size_t b = opt.min_bytes; b <= opt.max_bytes && out.size() <= kMaxSizes; b += opt.step_bytes)
    out.push_back(b);
  return out;
}

std::vector<std::string> withWires(const std::vector<std::string>& backends,
                                   const std::vector<int>& wires) {
  if (wires.empty()) return backends;
  std::vector<std::string> out;
  for (const std::string& b : backends) {
    std::string base = b;
    int given = 0;
    const bool has = splitWireSuffix(b, &base, &given);
    if (base.rfind("tpar", 0) != 0 || has) {  // NCCL, or a format named by hand: as given
      out.push_back(b);
      continue;
    }
    for (int w : wires) out.push_back(b + "+" + wireOptionName(w));
  }
  return out;
}

std::vector<int> benchRankCounts(const BenchOptions& opt, int gpus) {
  if (!opt.ranks.empty()) return opt.ranks;
  if (opt.ngpus > 0) return {opt.nthreads * opt.ngpus};
  if (opt.nthreads > 1) return {opt.nthreads};
  return {gpus > 1 ? gpus : 8};
}

bool usesGraph(const BenchOptions& opt, size_t bytes) {
  return opt.graph_launches > 0 && bytes <= opt.graph_max_bytes;
}

double averageRankTimes(const std::vector<double>& us, int average) {
  if (us.empty()) return 0.0;
  switch (average) {
    case 0: return us[0];
    case 1: {
      double sum = 0;
      for (double u : us) sum += u;
      return sum / us.size();
    }
    case 2: return *std::min_element(us.begin(), us.end());
    default: return *std::max_element(us.begin(), us.end());
  }
}

std::function<std::string()> addBenchOptions(CLI::App* app, BenchOptions* opt) {
  auto error = std::make_shared<std::string>();
  auto given = std::make_shared<Accepted>();
  registerOptions(app, opt, given.get(), error);
  return [app, opt, error, given] { return !error->empty() ? *error : finish(*app, *given, opt); };
}

std::string parseBenchArgs(const std::vector<std::string>& args, BenchOptions* opt) {
  CLI::App app{"bench", "bench"};
  const auto finished = addBenchOptions(&app, opt);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return finished();
}

std::vector<std::string> childBenchArgs(const BenchOptions& opt, const std::string& backend) {
  auto join = [](const auto& items, auto name) {
    std::string s;
    for (const auto& i : items) s += (s.empty() ? "" : ",") + name(i);
    return s;
  };
  std::vector<std::string> a = {
      "bench", "--backends", backend,
      "--sizes", join(benchSizes(opt), [](size_t b) { return std::to_string(b); }),
      "-n", std::to_string(opt.iters), "-w", std::to_string(opt.warmup),
      "-m", std::to_string(opt.agg_iters), "-c", std::to_string(opt.check_iters),
      "-G", std::to_string(opt.graph_launches),
      "--graph-max-bytes", std::to_string(opt.graph_max_bytes),
      "-z", std::to_string(opt.blocking), "-a", std::to_string(opt.average),
      "-C", std::to_string(opt.report_cputime), "-R", std::to_string(opt.local_register),
      "-u", std::to_string(opt.unalign), "-T", std::to_string(opt.timeout_s),
      "-d", join(opt.dtypes, [](tparDataType_t d) { return std::string(ncclTestsTypeName(d)); }),
      "-o", join(opt.ops, [](tparRedOp_t o) { return std::string(ncclTestsOpName(o)); })};
  if (opt.transport != TPAR_CONFIG_UNDEF_INT) {
    a.push_back("--transport");
    a.push_back(transportOptionName(opt.transport));
  }
  return a;
}

}  // namespace tpar_cli
