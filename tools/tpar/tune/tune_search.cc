// The host-only half of `tpar tune`: the search space and its candidates, the choice, the
// table and the gain report (tune.cu measures).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include "api/internal.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/tune/tune.h"

namespace tpar_cli {

using tpar::Plan;
namespace kernels = tpar::kernels;

TuneSpace fullTuneSpace() {
  // Blocks: powers of two and the steps between the larger ones, up to 64 (the grid may be
  // smaller: TPAR_MAX_BLOCKS); threads 64..1024 (64: many small blocks won small calls in GPU
  // memory for FlashInfer's kernels, docs/PERFORMANCE.md; 1024 is excluded by the launch
  // bound, with the reason printed). Steps stop at 8: each step costs two fenced hand-offs.
  return TuneSpace{{1, 2, 4, 8, 12, 16, 24, 32, 48, 64}, {64, 128, 256, 512, 1024},
                   {1, 2, 4, 8}, {false, true}};
}

TuneSpace quickTuneSpace() {
  // Around the shapes that won where they were measured: one-shot with 8-32 blocks of 256-512
  // threads (P2P), pulls and two-shots with 1-8 blocks (host memory), 64 blocks for ranks
  // that share a GPU (NOTE [wide grid for shared GPUs]), 64 threads for small calls.
  return TuneSpace{{1, 2, 8, 16, 32, 64}, {64, 256, 512}, {1, 4}, {false, true}};
}

namespace {

// Why the group cannot run algorithm `a` at all, or "".
std::string algorithmExcluded(const tpar::Algorithm& a, const tpar::TunerContext& ctx) {
  if (ctx.nranks < a.min_ranks)
    return "needs " + std::to_string(a.min_ranks) + " ranks or more (below, it is two-shot)";
  if (const char* why = tpar::fallbackReason(a.id, ctx)) return std::string("cannot run: ") + why;
  return "";
}

// Why (blocks, threads) cannot launch algorithm `a` on this group as asked, or "". A shape that
// would launch as another one (clamped) is excluded rather than measured under a false name.
std::string shapeExcluded(const tpar::Algorithm& a, bool host, int blocks, int threads,
                          const TuneLimits& limits) {
  if (blocks > limits.grid_blocks)
    return "blocks above the communicator's grid of " + std::to_string(limits.grid_blocks) +
           " (TPAR_MAX_BLOCKS raises it, here and where the table is used, up to what ranks"
           " sharing a GPU can hold at once: NOTE [virtual-rank residency])";
  const int most = tpar::maxBlocksFor(a, host);
  if (most > 0 && blocks > most)
    return "blocks above the algorithm's " + std::to_string(most) + " (its flag lines)";
  if (threads > kernels::kMaxThreads)
    return "threads above the kernels' launch bound of " + std::to_string(kernels::kMaxThreads) +
           " (docs/TUNING.md, \"Why threads stop at 512\")";
  if (threads > limits.max_threads)
    return "threads above the communicator's " + std::to_string(limits.max_threads) +
           " (TPAR_THREADS)";
  if (threads < a.min_threads)
    return "threads below the algorithm's " + std::to_string(a.min_threads) +
           " (groups of whole warps)";
  return "";
}

}  // namespace

TuneCandidates tuneCandidates(const tpar::TunerContext& ctx, const TuneSpace& space,
                              const TuneLimits& limits, bool shapes, bool nccl) {
  TuneCandidates out;
  auto add = [&out](const Plan& p) {
    for (const Plan& q : out.plans)
      if (tpar::samePlan(p, q)) return;
    out.plans.push_back(p);
  };
  for (const tpar::Algorithm& a : tpar::algorithms()) {
    Plan base;
    base.algo = a.id;
    if (std::string why = algorithmExcluded(a, ctx); !why.empty()) {
      out.excluded.push_back({base, why});
      continue;
    }
    if (!shapes) {
      add(base);
      continue;
    }
    out.forced.push_back(base);
    // Steps and the publish mode apply to the pipelined kernel only.
    const bool pipelined = a.id == kernels::Algo::kPipelined;
    const std::vector<int> steps = pipelined ? space.steps : std::vector<int>{0};
    const std::vector<bool> pulls = pipelined ? space.pulls : std::vector<bool>{false};
    for (int b : space.blocks) {
      for (int t : space.threads) {
        const std::string why = shapeExcluded(a, ctx.host_transport, b, t, limits);
        for (int s : steps) {
          for (bool pull : pulls) {
            Plan p = base;
            p.active_blocks = b;
            p.threads = t;
            p.steps = s;
            p.pull = pull;
            if (why.empty()) add(p);
            else out.excluded.push_back({p, why});
          }
        }
      }
    }
  }
  // Last: a tpar plan within the noise of NCCL keeps the size (pickFastest favours the first).
  if (nccl) {
    Plan p;
    p.nccl = true;
    out.plans.push_back(p);
  }
  return out;
}

double tuneEstimateSeconds(size_t candidates, const std::vector<size_t>& sizes, int iters,
                           int warmup, int nranks) {
  // Per candidate and size: ~5 ms of fixed cost (installing the plan, capturing and
  // instantiating the graph, synchronizing), the check (filling inputs and reading outputs
  // back twice at ~5 GB/s per rank), and the calls at 10 us plus the message at 5 GB/s.
  double s = 0;
  const int calls = iters + warmup + 2;
  for (size_t bytes : sizes) {
    const double b = static_cast<double>(bytes);
    const double check = 3.0 * b * std::max(nranks, 1) / 5e9;
    const double call = 10e-6 + b / 5e9;
    s += static_cast<double>(candidates) * (5e-3 + check + calls * call);
  }
  return s;
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

namespace {

const TuneCandidate* defaultOf(const TuneBucket& b) {
  for (const TuneCandidate& c : b.candidates)
    if (c.is_default) return &c;
  return nullptr;
}

}  // namespace

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
    const TuneCandidate* def = defaultOf(b);
    if (def != nullptr && def->usable()) e.default_us = def->us;
    by_dtype[b.dtype].push_back(e);
  }
  if (keep != nullptr && keep->signature == ctx.signature && keep->nranks == ctx.nranks) {
    std::map<int, std::vector<tpar::TuningEntry>> kept;
    for (const tpar::TuningEntry& e : keep->entries)
      if (!by_dtype.count(e.dtype)) kept[e.dtype].push_back(e);
    for (auto& [d, v] : kept) by_dtype[d] = v;
  }
  if (keep != nullptr && keep->signature == ctx.signature && keep->nranks == ctx.nranks)
    std::copy(std::begin(keep->wire_min_bytes), std::end(keep->wire_min_bytes), t.wire_min_bytes);
  for (auto& [d, v] : by_dtype) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.max_bytes < b.max_bytes; });
    for (const auto& e : v)
      if (t.entries.empty() || t.entries.back().dtype != e.dtype ||
          t.entries.back().max_bytes != e.max_bytes)
        t.entries.push_back(e);
  }
  return t;
}

int64_t wireBreakEven(const std::vector<WirePoint>& points, double noise) {
  if (points.empty()) return -1;
  int64_t least = tpar::kWireNever;
  for (size_t i = points.size(); i-- > 0;) {
    if (!points[i].wins(noise)) break;
    least = static_cast<int64_t>(points[i].bytes);
  }
  return least;
}

std::string wireReport(const std::vector<WireResult>& results) {
  std::string out;
  char line[256];
  for (const WireResult& r : results) {
    const char* name = wireOptionName(r.wire);
    std::snprintf(line, sizeof(line), "#\n# wire %s (%s): the format against the lossless plan of the table\n"
                  "# %12s %12s %12s %9s %7s\n", name, tparDataTypeName(r.dtype), "size (B)",
                  "lossless us", "format us", "lossless/", "#wrong");
    out += line;
    for (const WirePoint& p : r.points) {
      if (!p.error.empty()) {
        std::snprintf(line, sizeof(line), "  %12" PRIu64 " %12.2f  %s\n", p.bytes, p.lossless_us,
                      p.error.c_str());
      } else {
        std::snprintf(line, sizeof(line), "  %12" PRIu64 " %12.2f %12.2f %8.3fx %7lld\n", p.bytes,
                      p.lossless_us, p.wire_us, p.wire_us > 0 ? p.lossless_us / p.wire_us : 0.0,
                      p.wrong);
      }
      out += line;
    }
    if (r.min_bytes == tpar::kWireNever) {
      std::snprintf(line, sizeof(line), "# %s: not ahead at the largest size measured; the table "
                    "keeps it off (\"never\")\n", name);
    } else if (r.min_bytes >= 0) {
      std::snprintf(line, sizeof(line), "# %s: ahead from %" PRId64 " B at every size measured "
                    "above; the table's threshold for it\n", name, r.min_bytes);
    } else {
      std::snprintf(line, sizeof(line), "# %s: nothing measured; the table says nothing of it\n",
                    name);
    }
    out += line;
  }
  return out;
}

std::string joinInts(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string planText(const Plan& p) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%-12s %6d %7d %5d %4s", tpar::planAlgoName(p), p.active_blocks,
                p.threads, p.steps, p.algo == kernels::Algo::kPipelined && p.pull ? "pull" : "-");
  return buf;
}

std::vector<TuneGain> tuneGains(const std::vector<TuneBucket>& buckets, double noise) {
  std::vector<TuneGain> out;
  for (const TuneBucket& b : buckets) {
    TuneGain g;
    g.bytes = b.bytes;
    g.dtype = b.dtype;
    const int best = pickFastest(b.candidates, noise);
    if (best >= 0) {
      g.tuned_ok = true;
      g.tuned = b.candidates[best].plan;
      g.tuned_us = b.candidates[best].us;
    }
    if (const TuneCandidate* def = defaultOf(b)) {
      g.def = def->plan;
      g.default_ok = def->usable();
      g.default_us = def->usable() ? def->us : 0;
    }
    out.push_back(g);
  }
  return out;
}

std::string gainReport(const std::vector<TuneGain>& gains) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof(line), "# %12s %9s %-33s %9s   %-33s %9s %7s\n", "size (B)", "type",
                "tuned: algo blocks threads steps mode", "(us)", "default", "(us)", "gain");
  s += line;
  int faster = 0, measured = 0;
  for (const TuneGain& g : gains) {
    const std::string tuned = g.tuned_ok ? planText(g.tuned) : "no correct plan";
    char tuned_us[32] = "-", def_us[32] = "-", gain[32] = "-";
    if (g.tuned_ok) std::snprintf(tuned_us, sizeof(tuned_us), "%.2f", g.tuned_us);
    if (g.default_ok) std::snprintf(def_us, sizeof(def_us), "%.2f", g.default_us);
    const std::string def = g.default_ok ? planText(g.def) : planText(g.def) + " (failed)";
    if (g.gain() > 0) {
      std::snprintf(gain, sizeof(gain), "%.2fx", g.gain());
      ++measured;
      faster += !tpar::samePlan(g.tuned, g.def);
    }
    std::snprintf(line, sizeof(line), "  %12" PRIu64 " %9s %-33s %9s   %-33s %9s %7s\n", g.bytes,
                  tparDataTypeName(g.dtype), tuned.c_str(), tuned_us, def.c_str(), def_us, gain);
    s += line;
  }
  std::snprintf(line, sizeof(line),
                "# gain = default / tuned, both measured in this run; the table changes %d of "
                "%d sizes (a plan must beat the default by more than the noise margin)\n",
                faster, measured);
  s += line;
  return s;
}

}  // namespace tpar_cli
