// What the tuner's choices amount to, for the reports that describe a communicator: which
// algorithm runs when a forced one cannot, and how far up one-shot goes. Derived from
// selectPlan itself (and fallbackReason, next to it in tuner.cc), so that a report never states
// a constant the plan does not follow.
#include <algorithm>
#include <limits>
#include <string>

#include "registry/algorithms.h"
#include "tuner/tuner.h"

namespace tpar {

Fallback forcedFallback(tparAlgo_t forced, const TunerContext& ctx) {
  Fallback f;
  if (!kernelAlgoOf(forced, &f.requested)) return f;  // auto or nccl: nothing to fall from
  f.why = fallbackReason(f.requested, ctx);
  f.runs = selectPlan(0, tparBfloat16, ctx, nullptr, forced, -1).algo;
  if (f.why == nullptr) f.runs = f.requested;
  return f;
}

namespace {

bool isOneShot(const Plan& p) {
  return !p.nccl && (p.algo == kernels::Algo::kOneShot || p.algo == kernels::Algo::kOneShotPull);
}

}  // namespace

std::string wireThresholdText(int64_t configured, const TuningTable* table, int wire,
                              int nranks) {
  const int64_t least = wireMinBytes(configured, table, wire);
  const char* from = configured >= 0 ? "TPAR_WIRE_MIN_BYTES"
                     : least >= 0   ? "the tuning table"
                                    : "the default";
  if (least == kWireNever) return std::string("no call (") + from + " measured it behind)";
  const uint64_t bytes = least >= 0 ? static_cast<uint64_t>(least) : defaultWireMinBytes(nranks);
  return "float16/bfloat16 calls from " + std::to_string(bytes) + " bytes (" + from + ")";
}

uint64_t oneShotLimit(tparDataType_t dtype, const TunerContext& ctx, const TuningTable* table,
                      tparAlgo_t forced, int64_t one_shot_max_bytes) {
  auto plan = [&](uint64_t bytes) {
    return selectPlan(bytes, dtype, ctx, table, forced, one_shot_max_bytes);
  };
  // The plan is constant between consecutive boundaries: look at the first size after each.
  std::vector<uint64_t> bounds = defaultPlanBoundaries(ctx, one_shot_max_bytes);
  if (table != nullptr)
    for (const TuningEntry& e : table->entries)
      if (e.dtype == dtype) bounds.push_back(e.max_bytes);
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  if (!isOneShot(plan(1))) return 0;
  for (uint64_t b : bounds) {
    if (b == 0 || b == std::numeric_limits<uint64_t>::max()) continue;
    if (!isOneShot(plan(b + 1))) return b;
  }
  return std::numeric_limits<uint64_t>::max();
}

}  // namespace tpar
