// The side table: each NCCL communicator made through the shim, its tpar communicator (if any)
// and its counters. Callers keep the real ncclComm_t; this table is the only link.
#ifndef TPAR_NCCL_SHIM_COMM_TABLE_H_
#define TPAR_NCCL_SHIM_COMM_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include <nccl.h>

#include "route.h"
#include "tpar/tpar.h"
#include "tpar_nccl_shim.h"

namespace tpar {
namespace shim {

constexpr int kRouteCount = static_cast<int>(Route::kCount);
static_assert(kRouteCount == tparShimNumRoutes, "tparShimRoute_t mirrors Route");

struct ShimComm {
  tparComm_t tpar = nullptr;  // null: every all-reduce goes to NCCL (`why`)
  bool blocking = true;       // created blocking (a split without a config inherits it)
  int rank = 0;
  int nranks = 0;
  std::string why;
  std::atomic<uint64_t> calls[kRouteCount] = {};
  std::mutex log_mu;
  std::set<uint64_t> logged;  // decisions already logged (TPAR_DEBUG=info)
};

// "rank/nranks", or "?" for a non-blocking communicator (not queried while it initializes).
inline std::string rankText(const ShimComm& c) {
  return c.nranks > 0 ? std::to_string(c.rank) + "/" + std::to_string(c.nranks) : "?";
}

class CommTable {
 public:
  // Registers a communicator (replacing a stale entry of a reused address).
  void add(ncclComm_t comm, std::unique_ptr<ShimComm> entry);
  // Removes it; its counters stay in the process totals. Null when unknown.
  std::unique_ptr<ShimComm> take(ncclComm_t comm);
  // Removes its tpar communicator (returned, to be destroyed by the caller) and keeps the
  // entry, which passes every call through from now on with `why`.
  tparComm_t detachTpar(ncclComm_t comm, const char* why);
  // Runs f(entry or nullptr) while no entry can be removed.
  template <typename F>
  auto withComm(ncclComm_t comm, F&& f) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = map_.find(comm);
    return f(it == map_.end() ? nullptr : it->second.get());
  }
  // A call on a communicator the table does not know (made before the shim was loaded, or a
  // stale handle).
  void countUnknown(Route route) { unknown_[static_cast<int>(route)].fetch_add(1); }
  // tparShimGetStats.
  bool stats(ncclComm_t comm, tparShimStats_t* out);

 private:
  std::shared_mutex mu_;
  std::unordered_map<ncclComm_t, std::unique_ptr<ShimComm>> map_;
  std::atomic<uint64_t> unknown_[kRouteCount] = {};
  // Of communicators already removed, and how many were created each way.
  uint64_t removed_[kRouteCount] = {};
  uint64_t with_tpar_ = 0;
  uint64_t pass_through_ = 0;
};

CommTable& commTable();

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_COMM_TABLE_H_
