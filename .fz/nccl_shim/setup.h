// Making a tpar communicator for an NCCL communicator: the agreement between the ranks, written
// against an abstract channel so that the tests run it with ranks as threads.
#ifndef TPAR_NCCL_SHIM_SETUP_H_
#define TPAR_NCCL_SHIM_SETUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "tpar/tpar.h"

namespace tpar {
namespace shim {

// Collectives over the group of the NCCL communicator. Each returns false, with `why`, when it
// failed or ran past its bound; the group is then in an unknown state.
class SetupChannel {
 public:
  virtual ~SetupChannel() = default;
  // `all` receives every rank's `bytes` bytes in rank order; `mine` is this rank's.
  virtual bool allGather(const void* mine, void* all, size_t bytes, std::string* why) = 0;
  // `buf` of `root` to every rank.
  virtual bool broadcast(void* buf, size_t bytes, int root, std::string* why) = 0;
  // The smallest `*value` over the ranks, into `*value`.
  virtual bool allMin(int32_t* value, std::string* why) = 0;
};

// What the setup asks of tpar (the real calls in production, fakes in the tests).
struct TparOps {
  std::function<tparResult_t(tparUniqueId*)> getUniqueId;
  std::function<tparResult_t(tparComm_t*, int nranks, const tparUniqueId&, int rank)> initRank;
  std::function<tparResult_t(tparComm_t)> attachNccl;  // tparCommSetNcclComm
  std::function<void(tparComm_t)> destroy;
  std::function<std::string()> lastError;  // text of the last failure on this thread
};

struct SetupInput {
  int rank = 0;
  int nranks = 1;
  uint64_t host_id = 0;   // hostIdentity(): equal for ranks that tpar can connect
  bool can_join = true;   // false: this rank cannot run tpar (its reason in `why_not`)
  std::string why_not;
};

struct SetupResult {
  tparComm_t comm = nullptr;  // null: the NCCL communicator passes through (reason in `why`)
  bool fatal = false;         // a collective failed: the NCCL communicator is unusable (`why`)
  std::string why;
};

// NOTE [shim setup]
// A tpar communicator is made for an NCCL communicator only when every rank of it makes one,
// and every rank reaches that decision from the same values, exchanged over the NCCL
// communicator itself:
//   1. all-gather of a vote: the host identity (tpar connects the GPUs of one machine; its
//      rendezvous uses abstract UNIX sockets, so the network namespace counts too) and whether
//      the rank can join. Go on only when all voted yes from one host.
//   2. broadcast from rank 0 of a fresh tpar unique id, and whether rank 0 could make one.
//   3. every rank: tparCommInitRank, then tparCommSetNcclComm (so that sizes a tuning table
//      gives to NCCL go to this very communicator).
//   4. all-reduce (min) of "step 3 worked": where some rank failed, every rank destroys its
//      tpar communicator and the NCCL communicator passes through.
// Groups of 1 rank or of more than TPAR_MAX_RANKS decide without a collective (every rank knows
// the count). Otherwise every rank issues the same collectives in the same order whatever it
// decides. A collective that fails leaves the NCCL communicator in an unknown state: the result
// is fatal and the caller aborts it (a rank that does not load the shim never joins; the
// others' collective runs past its bound and they fail instead of hanging).
SetupResult runSetup(SetupChannel& channel, const TparOps& ops, const SetupInput& in);

// Why a group of `nranks` gets no tpar communicator whatever its ranks say (then runSetup
// issues no collective and the caller need not make a channel); empty when it may get one.
std::string withoutSetup(int nranks);

// Host identity for the vote: tpar's host identity (base/identity.h: hostname and boot id)
// mixed with this process's network namespace; 0, with the reason in *why, when the host
// identity cannot be read (the rank then cannot join).
uint64_t hostIdentity(std::string* why = nullptr);

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_SETUP_H_
