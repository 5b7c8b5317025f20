#include "tools/tpar/tune.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/comm.h"
#include "core/env.h"
#include "tools/tpar/commands.h"
#include "tools/tpar/report.h"

namespace tpar_cli {
namespace {

using tpar::Plan;
namespace kernels = tpar::kernels;

#define TUNE_CUDA(call)                                                              \
  do {                                                                               \
    if (cudaError_t e_ = (call); e_ != cudaSuccess)                                  \
      return std::string(#call) + ": " + cudaGetErrorString(e_);                     \
  } while (0)

// Small integers, so that every rank count's sum is exact in bf16 (|sum| <= 7 * 16 = 112).
__device__ inline float exactInput(size_t i, int rank) {
  return static_cast<float>(static_cast<int>((i * 5 + rank * 11 + (i >> 12)) % 15) - 7);
}

__device__ inline float readElem(const void* p, size_t i, int dtype) {
  if (dtype == tparFloat32) return static_cast<const float*>(p)[i];
  if (dtype == tparFloat16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}

__global__ void writeInputs(void* p, size_t count, int dtype, int rank) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = exactInput(i, rank);
    if (dtype == tparFloat32) static_cast<float*>(p)[i] = v;
    else if (dtype == tparFloat16) static_cast<__half*>(p)[i] = __float2half_rn(v);
    else static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  }
}

// Counts elements that differ from the exact sum; poison (0xA7A7...) and NaN never match.
__global__ void countMismatches(const void* out, size_t count, int dtype, int nranks,
                                unsigned long long* wrong) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = 0.f;
    for (int r = 0; r < nranks; ++r) want += exactInput(i, r);
    local += !(readElem(out, i, dtype) == want);
  }
  if (local) atomicAdd(wrong, local);
}

size_t elemBytes(tparDataType_t d) { return d == tparFloat32 ? 4 : 2; }

// Every rank's stream and buffers, driven from this thread (virtual ranks share device 0).
struct RankSet {
  std::vector<int> devs;
  std::vector<cudaStream_t> streams;
  std::vector<void*> in, out;
  unsigned long long* wrong = nullptr;  // pinned host word the check kernels add to

  ~RankSet() {
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      if (r < in.size()) cudaFree(in[r]);
      if (r < out.size()) cudaFree(out[r]);
      if (r < streams.size()) cudaStreamDestroy(streams[r]);
    }
    if (wrong) cudaFreeHost(wrong);
  }
  std::string alloc(const std::vector<int>& d, size_t bytes) {
    devs = d;
    TUNE_CUDA(cudaSetDevice(devs[0]));
    TUNE_CUDA(cudaMallocHost(&wrong, sizeof(*wrong)));
    for (int dev : devs) {
      TUNE_CUDA(cudaSetDevice(dev));
      cudaStream_t s;
      TUNE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams.push_back(s);
      void* a = nullptr;
      TUNE_CUDA(cudaMalloc(&a, bytes));
      in.push_back(a);
      TUNE_CUDA(cudaMalloc(&a, bytes));
      out.push_back(a);
      // Load our own kernels now: a first launch while another rank's all-reduce waits on
      // this GPU can deadlock under lazy module loading (see tpar.h).
      writeInputs<<<1, 32, 0, s>>>(a, 0, tparBfloat16, 0);
      countMismatches<<<1, 32, 0, s>>>(a, 0, tparBfloat16, 1, wrong);
      TUNE_CUDA(cudaGetLastError());
    }
    return sync();
  }
  std::string sync() {
    for (size_t r = 0; r < devs.size(); ++r) TUNE_CUDA(cudaStreamSynchronize(streams[r]));
    return "";
  }
  std::string prepare(size_t count, tparDataType_t dtype) {
    for (size_t r = 0; r < devs.size(); ++r) {
      TUNE_CUDA(cudaSetDevice(devs[r]));
      writeInputs<<<256, 256, 0, streams[r]>>>(in[r], count, dtype, static_cast<int>(r));
      TUNE_CUDA(cudaGetLastError());
      TUNE_CUDA(cudaMemsetAsync(out[r], 0xA7, count * elemBytes(dtype), streams[r]));
    }
    return sync();
  }
  std::string mismatches(size_t count, tparDataType_t dtype, long long* result) {
    *wrong = 0;
    for (size_t r = 0; r < devs.size(); ++r) {
      TUNE_CUDA(cudaSetDevice(devs[r]));
      countMismatches<<<128, 256, 0, streams[r]>>>(out[r], count, dtype,
                                                   static_cast<int>(devs.size()), wrong);
      TUNE_CUDA(cudaGetLastError());
    }
    if (std::string e = sync(); !e.empty()) return e;
    *result = static_cast<long long>(*wrong);
    return "";
  }
};

// The communicators of the group, one per rank, created with the algorithm left to the table.
struct Group {
  std::vector<tparComm_t> comms;
  ~Group() { destroy(); }
  void destroy() {
    for (tparComm_t c : comms) tparCommDestroy(c);
    comms.clear();
  }
  std::string init(const std::vector<int>& devs) {
    destroy();
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    cfg.algorithm = tparAlgoAuto;  // TPAR_ALGO must not override the plans being measured
    cfg.allowSharedDevice = devs.size() > 1 && devs[0] == devs[1] ? 1 : 0;
    comms.assign(devs.size(), nullptr);
    if (tparCommInitAllConfig(comms.data(), static_cast<int>(devs.size()), devs.data(), &cfg) !=
        tparSuccess) {
      comms.clear();
      return std::string("tparCommInitAll: ") + tparGetLastError(nullptr);
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
  // (selectPlan) that a saved table takes. The lead may replace this with an internal hook.
  void usePlan(const Plan& plan) {
    for (tparComm_t c : comms) {
      tpar::TuningTable t;
      t.signature = c->tuner_ctx.signature;
      t.nranks = c->tuner_ctx.nranks;
      for (int d = 0; d < tparNumDataTypes; ++d) {
        tpar::TuningEntry e;
        e.max_bytes = std::numeric_limits<uint64_t>::max();
        e.dtype = static_cast<tparDataType_t>(d);
        e.plan = plan;
        t.entries.push_back(e);
      }
      c->tuning = t;
      c->has_tuning = true;
    }
  }
  std::string allReduce(RankSet& rk, size_t count, tparDataType_t dtype) {
    for (size_t r = 0; r < comms.size(); ++r) {
      if (tparAllReduce(rk.in[r], rk.out[r], count, dtype, tparSum, comms[r], rk.streams[r]) !=
          tparSuccess)
        return std::string("tparAllReduce: ") + tparGetLastError(comms[r]);
    }
    return "";
  }
};

// Per-call time of `iters` calls captured into one CUDA graph per rank, from an event before
// every rank's replay to the join of all ranks' streams.
template <typename Issue>
std::string timeGraphs(RankSet& rk, int iters, int warmup, Issue issue, double* us) {
  const size_t n = rk.devs.size();
  for (int i = 0; i < warmup; ++i)
    if (std::string e = issue(); !e.empty()) return e;
  if (std::string e = rk.sync(); !e.empty()) return e;
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  std::vector<cudaEvent_t> events;
  auto release = [&] {
    for (cudaGraphExec_t g : execs)
      if (g) cudaGraphExecDestroy(g);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  };
  // All streams capture together; relaxed mode lets this thread switch devices meanwhile.
  std::string err;
  for (size_t r = 0; r < n && err.empty(); ++r) {
    cudaSetDevice(rk.devs[r]);
    cudaError_t e = cudaStreamBeginCapture(rk.streams[r], cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) err = std::string("begin capture: ") + cudaGetErrorString(e);
  }
  for (int i = 0; i < iters && err.empty(); ++i) err = issue();
  for (size_t r = 0; r < n; ++r) {
    cudaGraph_t g = nullptr;
    cudaSetDevice(rk.devs[r]);
    cudaError_t e = cudaStreamEndCapture(rk.streams[r], &g);
    if (e == cudaSuccess && err.empty()) e = cudaGraphInstantiate(&execs[r], g, 0);
    if (g) cudaGraphDestroy(g);
    if (e != cudaSuccess && err.empty()) err = std::string("graph capture: ") + cudaGetErrorString(e);
  }
  if (err.empty()) {
    // The first replay uploads the graph: not timed.
    for (size_t r = 0; r < n && err.empty(); ++r)
      if (cudaGraphLaunch(execs[r], rk.streams[r]) != cudaSuccess) err = "graph launch failed";
    if (err.empty()) err = rk.sync();
  }
  if (!err.empty()) {
    release();
    return err;
  }
  events.resize(n + 1, nullptr);
  for (size_t r = 0; r <= n; ++r) {
    cudaSetDevice(rk.devs[r < n ? r : 0]);
    TUNE_CUDA(cudaEventCreate(&events[r]));
  }
  cudaEvent_t start = events[n];
  TUNE_CUDA(cudaSetDevice(rk.devs[0]));
  TUNE_CUDA(cudaEventRecord(start, rk.streams[0]));
  for (size_t r = 1; r < n; ++r) TUNE_CUDA(cudaStreamWaitEvent(rk.streams[r], start, 0));
  for (size_t r = 0; r < n; ++r) TUNE_CUDA(cudaGraphLaunch(execs[r], rk.streams[r]));
  for (size_t r = 0; r < n; ++r) TUNE_CUDA(cudaEventRecord(events[r], rk.streams[r]));
  for (size_t r = 1; r < n; ++r) TUNE_CUDA(cudaStreamWaitEvent(rk.streams[0], events[r], 0));
  TUNE_CUDA(cudaEventRecord(events[0], rk.streams[0]));
  TUNE_CUDA(cudaEventSynchronize(events[0]));
  float ms = 0;
  TUNE_CUDA(cudaEventElapsedTime(&ms, start, events[0]));
  *us = 1000.0 * ms / iters;
  release();
  return rk.sync();
}

// Checks, then times one plan. Returns "" unless the machine is unusable; a plan that fails
// or computes wrong sums is recorded in `c` and the run goes on.
std::string measurePlan(Group& g, RankSet& rk, size_t count, tparDataType_t dtype,
                        const TuneOptions& opt, TuneCandidate* c) {
  g.usePlan(c->plan);
  tparAlgo_t runs_as = tparAlgoAuto;
  tparCommSelectAlgorithm(g.comms[0], count * elemBytes(dtype), &runs_as);
  if (tpar::algoName(c->plan.algo) != std::string(tparAlgoName(runs_as))) {
    c->error = std::string("not supported here (runs as ") + tparAlgoName(runs_as) + ")";
    return "";
  }
  // Correctness first, on poisoned outputs: a wrong plan is never timed.
  if (std::string e = rk.prepare(count, dtype); !e.empty()) return e;
  std::string e = g.allReduce(rk, count, dtype);
  if (e.empty()) e = rk.sync();
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    if (std::string f = rk.mismatches(count, dtype, &c->wrong); !f.empty()) return f;
    if (c->wrong != 0) return "";
    e = timeGraphs(rk, opt.iters, opt.warmup, [&] { return g.allReduce(rk, count, dtype); },
                   &c->us);
  }
  if (e.empty()) e = g.asyncError();
  if (e.empty()) {
    // The inputs are intact (out of place): the last replay's output must still be exact.
    long long after = 0;
    if (std::string f = rk.mismatches(count, dtype, &after); !f.empty()) return f;
    c->wrong += after;
    return "";
  }
  c->error = e;
  c->us = 0;
  // A communicator that recorded an asynchronous error accepts nothing but destroy.
  (void)cudaGetLastError();
  return g.init(rk.devs);
}

std::vector<Plan> candidatesFor(const tpar::TunerContext& ctx, int blocks, bool shapes) {
  std::vector<kernels::Algo> algos = {kernels::Algo::kOneShot, kernels::Algo::kTwoShot};
  if (ctx.nranks > 2) algos.push_back(kernels::Algo::kStaged);  // with 2 it is two-shot
  if (ctx.hierarchical_ok) algos.push_back(kernels::Algo::kHier);
  std::vector<int> active = {0};
  if (shapes && blocks >= 2) active.push_back(blocks / 2);
  std::vector<Plan> out;
  for (kernels::Algo a : algos) {
    for (int b : active) out.push_back(Plan{a, b, 0});
  }
  return out;
}

std::string planText(const Plan& p) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-8s %6d %7d", tpar::algoName(p.algo), p.active_blocks,
                p.threads);
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
  auto size = [error](const char* name, size_t* target) {
    return [name, target, error](const std::string& v) {
      uint64_t b = 0;
      if (!tpar::parseBytes(v, &b) || b == 0) *error = std::string(name) + ": bad size '" + v + "'";
      *target = b;
    };
  };
  app->add_option_function<std::string>("-b,--minbytes", size("--minbytes", &opt->min_bytes),
                                        "smallest message (default 1K)");
  app->add_option_function<std::string>("-e,--maxbytes", size("--maxbytes", &opt->max_bytes),
                                        "largest message (default 64M)");
  app->add_option("-f,--stepfactor", opt->factor, "size factor between buckets")
      ->check(CLI::Range(1.01, 1e6));
  app->add_option_function<std::string>(
      "--sizes",
      [opt, error](const std::string& v) {
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
          uint64_t b = 0;
          if (!tpar::parseBytes(item, &b) || b == 0) *error = "--sizes: bad size '" + item + "'";
          opt->sizes.push_back(b);
        }
      },
      "bucket sizes, comma-separated (overrides -b/-e/-f)");
  app->add_option("-n,--iters", opt->iters, "calls per timed CUDA graph")
      ->check(CLI::Range(1, 100000));
  app->add_option("-w,--warmup_iters", opt->warmup, "untimed calls first")
      ->check(CLI::Range(0, 100000));
  app->add_option_function<std::string>(
      "-d,--datatype",
      [opt, error](const std::string& v) {
        opt->dtypes.clear();
        std::stringstream ss(v);
        std::string item;
        while (std::getline(ss, item, ',')) {
          if (item == "bfloat16" || item == "bf16") opt->dtypes.push_back(tparBfloat16);
          else if (item == "float16" || item == "half" || item == "fp16") opt->dtypes.push_back(tparFloat16);
          else if (item == "float32" || item == "float" || item == "fp32") opt->dtypes.push_back(tparFloat32);
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
  app->add_option("--shapes", opt->shapes, "1: also try half the blocks per rank (default); 0: no");
  app->add_option("-o,--output", opt->output, "write the table here (default: where tpar looks)");
  app->add_flag("--dry-run", opt->dry_run, "measure and print; write no file");
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
  std::vector<size_t> out = opt.sizes;
  if (out.empty()) {
    for (double b = static_cast<double>(opt.min_bytes); b <= opt.max_bytes * 1.000001;
         b *= opt.factor)
      out.push_back(static_cast<size_t>(b));
    if (opt.max_bytes >= opt.min_bytes && (out.empty() || out.back() < opt.max_bytes))
      out.push_back(opt.max_bytes);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
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
    return 2;
  };
  std::string why;
  const auto gpus = listGpus(&why);
  if (gpus.empty()) {
    std::printf("tpar tune: no CUDA GPU on this machine (%s); nothing to measure.\n", why.c_str());
    return 2;
  }
  const int ngpus = static_cast<int>(gpus.size());
  const int n = opt.ranks > 0 ? opt.ranks : (ngpus > 1 ? ngpus : 8);
  const bool virt = n > ngpus;
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
  const auto sizes = tuneSizes(opt);
  size_t max_elem = 4;
  for (tparDataType_t d : opt.dtypes) max_elem = std::max(max_elem, elemBytes(d));
  RankSet rk;
  if (std::string e = rk.alloc(devs, sizes.back() + max_elem); !e.empty()) return fail(e);
  Group g;
  if (std::string e = g.init(devs); !e.empty()) return fail(e);
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
  std::printf("# every plan is checked element by element on poisoned outputs, then timed as a\n"
              "# CUDA graph of %d calls after %d warm-up; %d blocks per rank, threads from the work\n",
              opt.iters, opt.warmup, info.blocksPerRank);
  std::printf("# %12s %9s %-8s %6s %7s %10s %7s\n", "size (B)", "type", "algo", "blocks", "threads",
              "time (us)", "#wrong");

  std::vector<TuneBucket> buckets;
  const auto plans = candidatesFor(ctx, info.blocksPerRank, opt.shapes);
  for (tparDataType_t dtype : opt.dtypes) {
    for (size_t bytes : sizes) {
      TuneBucket b;
      b.dtype = dtype;
      const size_t count = std::max<size_t>(1, bytes / elemBytes(dtype));
      b.bytes = count * elemBytes(dtype);
      for (const Plan& p : plans) {
        TuneCandidate c;
        c.plan = p;
        if (std::string e = measurePlan(g, rk, count, dtype, opt, &c); !e.empty())
          return fail(std::to_string(b.bytes) + " B, " + tpar::algoName(p.algo) + ": " + e);
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
  std::printf("#\n# %12s %9s %-24s %10s   %-24s %10s %8s\n", "size (B)", "type", "chosen", "(us)",
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
    std::printf("  %12" PRIu64 " %9s %-24s %10.2f   %-24s %10s %8s\n", b.bytes,
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
    return wrong ? 1 : 0;
  }
  if (tpar::saveTuningFile(path, table) != tparSuccess) return fail(tparGetLastError(nullptr));
  size_t kept = 0;
  for (const tpar::TuningEntry& e : table.entries)
    kept += std::find(opt.dtypes.begin(), opt.dtypes.end(), e.dtype) == opt.dtypes.end();
  std::printf("# wrote %zu entries (%zu kept from the previous file) to\n#   %s\n"
              "# communicators of this topology and rank count load it at init\n",
              table.entries.size(), kept, path.c_str());
  return wrong ? 1 : 0;
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
      return 2;
    }
    if (opt->sizes.empty() && opt->min_bytes > opt->max_bytes) {
      std::fprintf(stderr, "tpar tune: --minbytes is larger than --maxbytes\n");
      return 2;
    }
    return runTune(*opt);
  };
}

}  // namespace tpar_cli
