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
#include "tuner/tuner.h"

namespace tpar {
namespace {

std::string algoText(int32_t algo) {
  return std::string(tparAlgoName(static_cast<tparAlgo_t>(algo)));
}

std::string tuningText(const CallShape& s) {
  if (!s.has_tuning) return "none";
  char buf[192];
  std::snprintf(buf, sizeof(buf), "%.128s (hash %016" PRIx64 ")", s.tuning_source, s.tuning_hash);
  return buf;
}

// Every setting that shapes a call is named the same way when ranks disagree on it.
tparResult_t differ(const char* setting, size_t r, const std::string& x, const std::string& y) {
  return setError(tparInvalidUsage,
                  "ranks disagree on %s: rank 0 has %s, rank %zu has %s (every setting that "
                  "shapes a call must be the same on all ranks)",
                  setting, x.c_str(), r, y.c_str());
}

tparResult_t differInWorkspace(size_t r, const WorkspaceTerms& a, const WorkspaceTerms& b) {
  if (b.max_bytes_per_call != a.max_bytes_per_call) {
    return differ("maxBytesPerCall (TPAR_MAX_BYTES_PER_CALL)", r,
                  std::to_string(a.max_bytes_per_call), std::to_string(b.max_bytes_per_call));
  }
  if (b.epoch_start != a.epoch_start) {
    return differ("TPAR_EPOCH_START", r, std::to_string(a.epoch_start),
                  std::to_string(b.epoch_start));
  }
  return tparSuccess;
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
  return h;
}

CallShape describeCallShape(const tparComm& comm) {
  CallShape s;
  std::memset(&s, 0, sizeof(s));
  s.grid_blocks = comm.max_blocks;
  s.configured_blocks = comm.cfg.max_blocks;
  s.threads = comm.cfg.threads;
  s.forced_algo = comm.cfg.forced_algo;
  s.one_shot_max_bytes = comm.cfg.one_shot_max_bytes;
  s.max_bytes_per_call = comm.cfg.max_bytes_per_call;
  s.epoch_start = comm.cfg.epoch_start;
  s.has_tuning = comm.has_tuning ? 1 : 0;
  if (comm.has_tuning) {
    s.tuning_hash = tuningTableHash(comm.tuning);
    std::snprintf(s.tuning_source, sizeof(s.tuning_source), "%s", comm.tuning.source.c_str());
  }
  return s;
}

tparResult_t agreeOnCallShapes(const std::vector<CallShape>& shapes, int* grid_blocks) {
  if (shapes.empty()) return setError(tparInternalError, "agreeOnCallShapes: no ranks");
  const CallShape& a = shapes[0];
  int grid = a.grid_blocks;
  for (size_t r = 1; r < shapes.size(); ++r) {
    const CallShape& b = shapes[r];
    if (b.configured_blocks != a.configured_blocks) {
      return differ("TPAR_MAX_BLOCKS", r, std::to_string(a.configured_blocks),
                    std::to_string(b.configured_blocks));
    }
    if (b.threads != a.threads) {
      return differ("TPAR_THREADS", r, std::to_string(a.threads), std::to_string(b.threads));
    }
    if (b.forced_algo != a.forced_algo) {
      return differ("the algorithm (TPAR_ALGO or config->algorithm)", r, algoText(a.forced_algo),
                    algoText(b.forced_algo));
    }
    if (b.one_shot_max_bytes != a.one_shot_max_bytes) {
      return differ("TPAR_ONESHOT_MAX_BYTES", r, std::to_string(a.one_shot_max_bytes),
                    std::to_string(b.one_shot_max_bytes));
    }
    TPAR_TRY(differInWorkspace(r, {a.max_bytes_per_call, a.epoch_start},
                               {b.max_bytes_per_call, b.epoch_start}));
    if (b.has_tuning != a.has_tuning || b.tuning_hash != a.tuning_hash) {
      return differ("the tuning table (TPAR_TUNING_FILE or the per-machine cache file)", r,
                    tuningText(a), tuningText(b));
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
