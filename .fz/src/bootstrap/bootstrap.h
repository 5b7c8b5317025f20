// Rendezvous between the ranks of a communicator during initialization.
//
// A Bootstrap moves small blobs between ranks while a communicator is being built (device
// info, CUDA IPC handles, later file descriptors of VMM handles). It is not used on the
// all-reduce path. After init it is destroyed.
#ifndef TPAR_BOOTSTRAP_BOOTSTRAP_H_
#define TPAR_BOOTSTRAP_BOOTSTRAP_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tpar/tpar.h"

namespace tpar {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // `data` holds nranks() * bytes; this rank's blob is at data + rank() * bytes on entry, and
  // every rank's blob is in its slot on return. Every rank passes the same `bytes`; a rank that
  // passes a different size makes every rank fail with tparInvalidUsage.
  virtual tparResult_t allGather(void* data, size_t bytes) = 0;
  // Returns once every rank has entered.
  virtual tparResult_t barrier() = 0;
};

// Who may take part in a rendezvous (NOTE [bootstrap authentication] in socket_util.h).
struct BootstrapPeers {
  // TPAR_BOOTSTRAP_ALLOW_OTHER_USERS: processes of other users that hold the id may join.
  bool allow_other_users = false;
  // The user that counts as "this user": the effective uid, unless a test names another one
  // to play a stranger without changing its own uid.
  int64_t trusted_uid = -1;
};

// Fills `id` and starts the rendezvous service on this process (a detached thread listening on
// an abstract UNIX-domain socket). The service ends once every rank of the communicator has
// disconnected, or when no rank connected within `timeout_ms`.
tparResult_t createUniqueId(tparUniqueId* id, int64_t timeout_ms,
                            const BootstrapPeers& peers = {});

// What the bootstrap services of this process have turned away since it started, summed over
// every service (NOTE [bootstrap authentication] in socket_util.h): tests read how many
// connections an attack cost, and each service logs its own share when it ends.
struct BootstrapTurnedAway {
  uint64_t otherUsers = 0;  // connections of a user that may not join, refused at once
  uint64_t unproved = 0;    // connections closed before proving the secret (cap or deadline)
};
BootstrapTurnedAway bootstrapTurnedAway();

// Connects rank `rank` of `nranks` to the service named by `id`. Fails with tparInvalidArgument
// for an id that was not made by createUniqueId, tparSystemError when the service cannot be
// reached, tparTimeout when the other ranks do not all arrive within `timeout_ms`,
// tparInvalidUsage when ranks disagree on nranks or two ranks claim the same rank, and
// tparInvalidUsage naming the reason when the service or this rank cannot prove it holds the
// id's secret or runs as a user it may not (NOTE [bootstrap authentication]).
tparResult_t connectBootstrap(const tparUniqueId& id, int rank, int nranks, int64_t timeout_ms,
                              std::unique_ptr<Bootstrap>* out, const BootstrapPeers& peers = {});

// File-descriptor passing over a connected UNIX-domain socket (SCM_RIGHTS), for exchanging
// VMM shareable handles between processes.
tparResult_t sendFds(int socket_fd, const int* fds, int count);
tparResult_t recvFds(int socket_fd, int* fds, int count, int64_t timeout_ms);

}  // namespace tpar

#endif  // TPAR_BOOTSTRAP_BOOTSTRAP_H_
