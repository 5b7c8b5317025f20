#include "setup.h"

#include <sys/stat.h>

#include <cstring>
#include <vector>

#include "api/internal.h"

namespace tpar {
namespace shim {
namespace {

struct Vote {
  uint64_t host_id;
  int32_t can_join;
  int32_t reserved;
};

struct IdMessage {
  tparUniqueId id;
  int32_t ok;
  int32_t reserved;
};

SetupResult passThrough(std::string why) {
  SetupResult r;
  r.why = std::move(why);
  return r;
}

SetupResult fatal(const std::string& step, const std::string& why) {
  SetupResult r;
  r.fatal = true;
  r.why = step + ": " + why;
  return r;
}

}  // namespace

std::string withoutSetup(int nranks) {
  if (nranks < 2) return "a group of one rank has nothing to exchange";
  if (nranks > TPAR_MAX_RANKS) {
    return std::to_string(nranks) + " ranks; tpar connects at most " +
           std::to_string(TPAR_MAX_RANKS);
  }
  return "";
}

SetupResult runSetup(SetupChannel& channel, const TparOps& ops, const SetupInput& in) {
  std::string why = withoutSetup(in.nranks);
  if (!why.empty()) return passThrough(why);

  // 1. Votes.
  Vote mine{in.host_id, in.can_join ? 1 : 0, 0};
  std::vector<Vote> votes(in.nranks);
  if (!channel.allGather(&mine, votes.data(), sizeof(Vote), &why)) return fatal("vote", why);
  for (int r = 0; r < in.nranks; ++r) {
    if (votes[r].can_join == 0) {
      return passThrough(r == in.rank ? "this rank cannot run tpar: " + in.why_not
                                      : "rank " + std::to_string(r) + " cannot run tpar");
    }
    if (votes[r].host_id != votes[0].host_id) {
      return passThrough("rank " + std::to_string(r) +
                         " is on another host than rank 0 (tpar connects the GPUs of one host)");
    }
  }

  // 2. The id from rank 0.
  IdMessage msg;
  std::memset(&msg, 0, sizeof(msg));
  std::string rank0_error;
  if (in.rank == 0) {
    msg.ok = ops.getUniqueId(&msg.id) == tparSuccess ? 1 : 0;
    if (!msg.ok) rank0_error = ": " + ops.lastError();
  }
  if (!channel.broadcast(&msg, sizeof(msg), 0, &why)) return fatal("unique id", why);
  if (!msg.ok) return passThrough("rank 0 could not make a tpar unique id" + rank0_error);

  // 3. The communicator, attached to the NCCL one.
  tparComm_t comm = nullptr;
  std::string local_error;
  if (ops.initRank(&comm, in.nranks, msg.id, in.rank) != tparSuccess) {
    local_error = "tparCommInitRank: " + ops.lastError();
    comm = nullptr;
  } else if (ops.attachNccl(comm) != tparSuccess) {
    local_error = "tparCommSetNcclComm: " + ops.lastError();
    ops.destroy(comm);
    comm = nullptr;
  }

  // 4. Everyone or no one.
  int32_t all_ok = comm != nullptr ? 1 : 0;
  if (!channel.allMin(&all_ok, &why)) {
    if (comm != nullptr) ops.destroy(comm);
    return fatal("agreement", why);
  }
  if (all_ok == 0) {
    if (comm != nullptr) ops.destroy(comm);
    return passThrough(local_error.empty() ? "making the tpar communicator failed on another rank"
                                           : "making the tpar communicator failed here: " +
                                                 local_error);
  }
  SetupResult r;
  r.comm = comm;
  return r;
}

uint64_t hostIdentity(std::string* why) {
  uint64_t id = 0;
  if (thisHostIdentity(&id) != tparSuccess) {
    if (why != nullptr) *why = tparGetLastError(nullptr);
    return 0;
  }
  struct stat st;
  if (stat("/proc/self/ns/net", &st) == 0) {
    // FNV-1a step over the namespace's inode: processes in different network namespaces of one
    // host cannot reach each other's abstract sockets.
    id = fnv1aU64(id, static_cast<uint64_t>(st.st_ino));
  }
  return id;
}

}  // namespace shim
}  // namespace tpar
