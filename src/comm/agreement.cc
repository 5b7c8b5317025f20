// NOTE [agreement] in agreement.h.
#include "comm/agreement.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "bootstrap/bootstrap.h"
#include "comm/comm.h"
#include "base/error.h"
#include "base/hash.h"
#include "kernels/prims/wire.h"
#include "tuner/tuner.h"

namespace tpar {
namespace {

std::string tuningText(const CallShape& s) {
  if (!s.has_tuning) return "none";
  char buf[192];
  std::snprintf(buf, sizeof(buf), "%.128s (hash %016" PRIx64 ")", s.tuning_source, s.tuning_hash);
  return buf;
}

// Every setting that shapes a call is named the same way when ranks disagree on it.
tparResult_t differ(const std::string& setting, size_t r, const std::string& x,
                    const std::string& y) {
  return setError(tparInvalidUsage,
                  "ranks disagree on %s: rank 0 has %s, rank %zu has %s (every setting that "
                  "shapes a call must be the same on all ranks)",
                  setting.c_str(), x.c_str(), r, y.c_str());
}

// Shape setting `i` of rank 0 (`a`) and rank r (`b`): the variable, and the tparConfig_t field
// that can set it instead, so that either way the user finds what differs.
tparResult_t compareSetting(int i, size_t r, int64_t a, int64_t b) {
  if (a == b) return tparSuccess;
  const ShapeSetting& s = shapeSettings()[i];
  std::string name = s.name;
  if (s.config_field != nullptr) name += std::string(" or config->") + s.config_field;
  return differ(name, r, s.show(a), s.show(b));
}

constexpr int kMaxBytesSetting = shapeSettingIndex("TPAR_MAX_BYTES_PER_CALL");
constexpr int kEpochSetting = shapeSettingIndex("TPAR_EPOCH_START");
static_assert(kMaxBytesSetting >= 0 && kEpochSetting >= 0,
              "WorkspaceTerms holds two Shape settings of settings.def");

tparResult_t differInWorkspace(size_t r, const WorkspaceTerms& a, const WorkspaceTerms& b) {
  TPAR_TRY(compareSetting(kMaxBytesSetting, r, static_cast<int64_t>(a.max_bytes_per_call),
                          static_cast<int64_t>(b.max_bytes_per_call)));
  TPAR_TRY(compareSetting(kEpochSetting, r, a.epoch_start, b.epoch_start));
  if (a.workspace_bytes == b.workspace_bytes) return tparSuccess;
  return setError(tparInvalidUsage,
                  "ranks disagree on the layout of their receive regions: rank 0's take %" PRIu64
                  " bytes, rank %zu's %" PRIu64 " with the same maxBytesPerCall (every rank must "
                  "run the same tpar build and transport)",
                  a.workspace_bytes, r, b.workspace_bytes);
}

}  // namespace

tparResult_t agreeOnWorkspaces(const std::vector<WorkspaceTerms>& terms) {
  for (size_t r = 1; r < terms.size(); ++r) TPAR_TRY(differInWorkspace(r, terms[0], terms[r]));
  return tparSuccess;
}

uint64_t tuningTableHash(const TuningTable& table) {
  uint64_t h = kFnvOffset;
  for (char c : table.signature) h = fnv1aU64(h, static_cast<unsigned char>(c));
  h = fnv1aU64(h, static_cast<uint64_t>(table.nranks));
  for (const TuningEntry& e : table.entries) {
    h = fnv1aU64(h, e.max_bytes);
    h = fnv1aU64(h, static_cast<uint64_t>(e.dtype));
    h = fnv1aU64(h, static_cast<uint64_t>(e.plan.algo));
    h = fnv1aU64(h, static_cast<uint64_t>(e.plan.active_blocks));
    h = fnv1aU64(h, static_cast<uint64_t>(e.plan.threads));
    h = fnv1aU64(h, static_cast<uint64_t>(e.plan.steps));
    h = fnv1aU64(h, (e.plan.pull ? 1u : 0u) | (e.plan.nccl ? 2u : 0u));
  }
  for (int64_t b : table.wire_min_bytes) h = fnv1aU64(h, static_cast<uint64_t>(b));
  return h;
}

CallShape describeCallShape(const ResolvedConfig& cfg, int grid_blocks,
                            const TuningTable* tuning) {
  CallShape s;
  std::memset(&s, 0, sizeof(s));
  s.grid_blocks = grid_blocks;
  if (cfg.wire > tparWireNone)
    s.wire_block = kernels::wireKernelBlock(static_cast<kernels::WireFormat>(cfg.wire));
  for (int i = 0; i < kNumShapeSettings; ++i) s.settings[i] = shapeSettings()[i].value(cfg);
  s.has_tuning = tuning != nullptr ? 1 : 0;
  if (tuning != nullptr) {
    s.tuning_hash = tuningTableHash(*tuning);
    std::snprintf(s.tuning_source, sizeof(s.tuning_source), "%s", tuning->source.c_str());
  }
  return s;
}

CallShape describeCallShape(const tparComm& comm) {
  return describeCallShape(comm.cfg, comm.max_blocks, comm.has_tuning ? &comm.tuning : nullptr);
}

tparResult_t agreeOnCallShapes(const std::vector<CallShape>& shapes, int* grid_blocks) {
  if (shapes.empty()) return setError(tparInternalError, "agreeOnCallShapes: no ranks");
  const CallShape& a = shapes[0];
  int grid = a.grid_blocks;
  for (size_t r = 1; r < shapes.size(); ++r) {
    const CallShape& b = shapes[r];
    for (int i = 0; i < kNumShapeSettings; ++i)
      TPAR_TRY(compareSetting(i, r, a.settings[i], b.settings[i]));
    if (b.has_tuning != a.has_tuning || b.tuning_hash != a.tuning_hash) {
      return differ("the tuning table (TPAR_TUNING_FILE or the per-machine cache file)", r,
                    tuningText(a), tuningText(b));
    }
    // After the settings: the ranks hold one format, so this is its block in each build.
    if (b.wire_block != a.wire_block) {
      return differ("the values per scale of the wire format (a property of the tpar build; "
                    "every rank must run the same build)",
                    r, std::to_string(a.wire_block), std::to_string(b.wire_block));
    }
    grid = std::min(grid, b.grid_blocks);
  }
  if (grid < 1) return setError(tparInternalError, "agreed grid of %d blocks", grid);
  *grid_blocks = grid;
  return tparSuccess;
}

tparResult_t checkGroupReady(Bootstrap& boot, tparComm* comm, tparResult_t local) {
  struct Ready {
    int32_t ok;
    int32_t reserved;
    CallShape shape;
  };
  const int n = boot.nranks();
  const int rank = boot.rank();
  std::vector<Ready> all(n);
  std::memset(all.data(), 0, sizeof(Ready) * n);
  all[rank].ok = local == tparSuccess ? 1 : 0;
  if (local == tparSuccess) all[rank].shape = describeCallShape(*comm);
  const std::string local_error = local == tparSuccess ? std::string() : lastError();
  const tparResult_t gathered = boot.allGather(all.data(), sizeof(Ready));
  if (local != tparSuccess) return setError(local, "%s", local_error.c_str());
  if (gathered != tparSuccess) return gathered;
  std::vector<CallShape> shapes;
  for (int r = 0; r < n; ++r) {
    if (!all[r].ok) return setError(tparRemoteError, "rank %d failed to set up its peers", r);
    shapes.push_back(all[r].shape);
  }
  int grid = 0;
  TPAR_TRY(agreeOnCallShapes(shapes, &grid));
  comm->max_blocks = grid;
  return tparSuccess;
}

}  // namespace tpar
