// Internals shared by the bootstrap over an abstract-namespace UNIX-domain socket: the root
// service (bootstrap_service.cc, a detached thread of the process that called createUniqueId),
// the ranks' side (socket_bootstrap.cc) and fd passing (fd_passing.cc).
//
// NOTE [bootstrap protocol]
// Every rank holds one stream connection to the root service. All messages are native-endian
// (every party is on one host). A rank sends a Request header, followed by `bytes` bytes of its
// blob for a round; the service answers each Request with exactly one Reply header followed by
// `bytes` bytes: the gathered blobs on success, the error text otherwise.
//   1. hello {token, rank, nranks, timeoutMs}: the service answers once all nranks ranks have
//      said hello (the go-ahead), or with an error.
//   2. rounds (allGather or barrier): answered once every rank has sent the same kind and size.
// A failure anywhere (disagreeing ranks, a missing rank, a rank that leaves early) fails the
// whole session: the service queues an error Reply to every connection, flushes, closes all
// and exits. A rank that had not asked anything yet reads that error as the answer to its next
// request, so every rank learns why instead of seeing a bare EOF.
//
// NOTE [bootstrap deadlines]
// The service, not the ranks, decides when a rendezvous or a round has timed out, because only
// it knows which ranks are missing. It fires at (arrival of a rank's request + that rank's
// timeout); the rank itself waits kServiceGraceMs longer before it gives up on its own, so the
// service's detailed verdict normally arrives first. Before any rank has said hello the service
// lives for createUniqueId's timeout, so an id that is never used does not leak a thread.
#ifndef TPAR_BOOTSTRAP_SOCKET_UTIL_H_
#define TPAR_BOOTSTRAP_SOCKET_UTIL_H_

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tpar/tpar.h"

namespace tpar {
namespace bootstrap_detail {

constexpr uint32_t kIdMagic = 0x74704944u;  // "tpID"
constexpr uint32_t kIdVersion = 1;
constexpr uint32_t kWireMagic = 0x74705752u;  // "tpWR"
constexpr size_t kSocketNameBytes = 96;
// Far above TPAR_MAX_RANKS; it only bounds the per-rank tables a hello can make the service grow.
constexpr int kMaxRanks = 1024;
constexpr int64_t kServiceGraceMs = 250;  // see NOTE [bootstrap deadlines]
constexpr size_t kMaxErrorText = 4096;
constexpr int64_t kNoDeadline = INT64_MAX;
constexpr int kIdlePollMs = 1000;

struct IdLayout {
  uint32_t magic;
  uint32_t version;
  uint64_t token;     // proves to the service that a connecting rank was given this id
  uint64_t hostHash;  // hostname + boot id: abstract sockets cannot be reached from other hosts
  uint64_t checksum;  // over every other field: catches ids damaged in transit
  char socketName[kSocketNameBytes];
};
static_assert(sizeof(IdLayout) == TPAR_UNIQUE_ID_BYTES, "IdLayout must fill tparUniqueId");

// The message framing: see NOTE [bootstrap protocol].
enum MsgKind : uint32_t { kHello = 1, kAllGather = 2, kBarrier = 3 };

struct Request {
  uint32_t magic;
  uint32_t kind;
  uint64_t token;     // hello only
  int32_t rank;       // hello only
  int32_t nranks;     // hello only
  int64_t timeoutMs;  // hello only
  uint64_t bytes;     // rounds: size of this rank's blob, which follows
};

struct Reply {
  uint32_t magic;
  int32_t code;
  uint64_t bytes;
};

int64_t nowMs();

// The text of errno value `err`; safe to call from several threads at once.
std::string errnoText(int err);

// Deadlines saturate so that a huge timeout means "practically never", not an overflow.
int64_t deadlineAfter(int64_t start, int64_t ms);

const char* kindName(uint32_t kind);

uint64_t idChecksum(IdLayout layout);

uint64_t hostHash();

// Fills `addr` with `name` in the abstract namespace and returns the address length to pass to
// bind/connect.
socklen_t socketAddress(const char* name, sockaddr_un* addr);

// ------------------------------------------------------------------------------------------
// Bounded I/O on non-blocking sockets. Every call gives up at `deadline` (in nowMs() time).

enum class Io { kOk, kTimeout, kClosed, kError };  // kError leaves errno set

Io waitFd(int fd, short events, int64_t deadline);
Io sendAll(int fd, const void* data, size_t size, int64_t deadline);
Io recvAll(int fd, void* data, size_t size, int64_t deadline);

}  // namespace bootstrap_detail
}  // namespace tpar

#endif  // TPAR_BOOTSTRAP_SOCKET_UTIL_H_
