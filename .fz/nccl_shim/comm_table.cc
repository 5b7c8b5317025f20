#include "comm_table.h"

#include <cstring>

namespace tpar {
namespace shim {

void CommTable::add(ncclComm_t comm, std::unique_ptr<ShimComm> entry) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  ++(entry->tpar != nullptr ? with_tpar_ : pass_through_);
  auto it = map_.find(comm);
  if (it != map_.end()) {
    for (int r = 0; r < kRouteCount; ++r) removed_[r] += it->second->calls[r].load();
  }
  map_[comm] = std::move(entry);
}

std::unique_ptr<ShimComm> CommTable::take(ncclComm_t comm) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = map_.find(comm);
  if (it == map_.end()) return nullptr;
  std::unique_ptr<ShimComm> entry = std::move(it->second);
  map_.erase(it);
  for (int r = 0; r < kRouteCount; ++r) removed_[r] += entry->calls[r].load();
  return entry;
}

tparComm_t CommTable::detachTpar(ncclComm_t comm, const char* why) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = map_.find(comm);
  if (it == map_.end() || it->second->tpar == nullptr) return nullptr;
  tparComm_t tpar = it->second->tpar;
  it->second->tpar = nullptr;
  it->second->why = why;
  return tpar;
}

bool CommTable::stats(ncclComm_t comm, tparShimStats_t* out) {
  std::memset(out, 0, sizeof(*out));
  std::shared_lock<std::shared_mutex> lock(mu_);
  if (comm != nullptr) {
    auto it = map_.find(comm);
    if (it == map_.end()) return false;
    for (int r = 0; r < kRouteCount; ++r) out->calls[r] = it->second->calls[r].load();
    ++(it->second->tpar != nullptr ? out->commsWithTpar : out->commsPassThrough);
    return true;
  }
  for (int r = 0; r < kRouteCount; ++r) out->calls[r] = removed_[r] + unknown_[r].load();
  for (const auto& kv : map_) {
    for (int r = 0; r < kRouteCount; ++r) out->calls[r] += kv.second->calls[r].load();
  }
  out->commsWithTpar = with_tpar_;
  out->commsPassThrough = pass_through_;
  return true;
}

CommTable& commTable() {
  // Never destroyed: NCCL calls may come from other threads while the process exits.
  static CommTable* table = new CommTable();
  return *table;
}

}  // namespace shim
}  // namespace tpar
