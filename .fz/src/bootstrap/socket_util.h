// Internals shared by the bootstrap over an abstract-namespace UNIX-domain socket: the root
// service (root_service.h, a detached thread of the process that called createUniqueId),
// the ranks' side (socket_bootstrap.cc) and fd passing (fd_passing.cc).
//
// NOTE [bootstrap protocol]
// Every rank holds one stream connection to the root service. All messages are native-endian
// (every party is on one host). Every message of the service is a Reply header followed by
// `bytes` bytes; every message of a rank is a Request header followed by `bytes` bytes.
//   0. the service answers a new connection with a challenge (Reply, kNonceBytes of nonce), or
//      with an error and a close when the peer's user may not join (NOTE [bootstrap
//      authentication]).
//   1. hello {rank, nranks, timeoutMs, nonce, mac}: a hello that proves knowledge of the secret
//      is answered at once with the service's own proof (Reply, kMacBytes), then, once all
//      nranks ranks have said hello, with the go-ahead (Reply, 0 bytes), or with an error.
//   2. rounds (allGather or barrier): answered once every rank has sent the same kind and size.
// A failure anywhere (disagreeing ranks, a missing rank, a rank that leaves early) fails the
// whole session: the service queues an error Reply to every connection, flushes, closes all
// and exits. A rank that had not asked anything yet reads that error as the answer to its next
// request, so every rank learns why instead of seeing a bare EOF. A connection that has not
// proved itself is not a rank: whatever it does ends that connection only.
//
// NOTE [bootstrap authentication]
// The abstract socket's name is public (/proc/net/unix lists it), so reaching the service
// proves nothing. The uniqueId carries a random secret of kSecretBytes; it never crosses the
// socket. Each side proves it holds the secret by an HMAC-SHA256 over both sides' fresh nonces
// and the hello's fields, under a label of its role, so that one side's answer can never be
// replayed as the other's; both compare in constant time. A rank believes nothing the service
// says before the service's proof has checked out, so a process that took over the name of a
// service that has ended learns nothing and can forge nothing. Besides, each side reads the
// other's credentials from the kernel (SO_PEERCRED): by default only processes of the user
// that created the id may join, and a rank only believes a service of its own user
// (TPAR_BOOTSTRAP_ALLOW_OTHER_USERS=1: any user that holds the id, and a service of the user
// recorded in the id). Connections that have not proved themselves are bounded in number
// (kMaxPendingPeers; the oldest is dropped for a new one) and in time (kAuthTimeoutMs each),
// and every length a peer sends is capped by what the protocol needs before memory is sized
// from it. Anyone on the host can connect, and as often as it likes, so the listener must not
// crowd out the ranks: each turn of the service's loop first serves the connections it holds,
// then accepts at most kAcceptsPerPoll new ones. A process that keeps connecting (and is
// refused, or dropped) then costs the ranks a share of the service's time, never its
// attention: their hellos are read on the next turn. Such a process also keeps the listen
// backlog full; a rank then waits in the kernel's queue of connectors until its own timeout,
// and once in, behind at most kListenBacklog connections.
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
#include <array>
#include <cstdint>
#include <string>

#include "tpar/tpar.h"

namespace tpar {
namespace bootstrap_detail {

constexpr uint32_t kIdMagic = 0x74704944u;  // "tpID"
// 1: a token sent in the clear; 2: a secret that never leaves the process (challenge-response).
constexpr uint32_t kIdVersion = 2;
constexpr uint32_t kWireMagic = 0x74705752u;  // "tpWR"
constexpr size_t kSocketNameBytes = 64;
constexpr size_t kSecretBytes = 32;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
// Far above TPAR_MAX_RANKS; it only bounds the per-rank tables a hello can make the service grow.
constexpr int kMaxRanks = 1024;
constexpr int64_t kServiceGraceMs = 250;  // see NOTE [bootstrap deadlines]
constexpr size_t kMaxErrorText = 4096;
constexpr int64_t kNoDeadline = INT64_MAX;
constexpr int kIdlePollMs = 1000;
// NOTE [bootstrap authentication]: limits on connections that have not proved themselves.
constexpr int kMaxPendingPeers = 64;
constexpr int64_t kAuthTimeoutMs = 5000;  // or the service's timeout when that is shorter
// Enough to drain a burst of ranks in a few turns; few enough that one turn stays short.
constexpr int kAcceptsPerPoll = 16;
// A connection waits in the listen backlog behind every one queued before it, so a long backlog
// that a flood keeps full is a long wait for a rank. A full one costs a rank only a wait in the
// kernel's queue of connectors (connectService in socket_bootstrap.cc), which every accept
// serves.
constexpr int kListenBacklog = 64;
// The largest blob one rank may put into a round, and the largest gathered reply: far above what
// communicator init exchanges (a few hundred bytes per rank), far below what could hurt.
constexpr uint64_t kMaxBlobBytes = 1ull << 20;
constexpr uint64_t kMaxGatherBytes = 64ull << 20;

struct IdLayout {
  uint32_t magic;
  uint32_t version;
  uint64_t hostHash;    // hostIdentity(): abstract sockets cannot be reached from other hosts
  uint64_t checksum;    // over every other field: catches ids damaged in transit
  uint32_t serviceUid;  // the user the service runs as (NOTE [bootstrap authentication])
  uint32_t reserved;
  uint8_t secret[kSecretBytes];  // never sent anywhere (NOTE [bootstrap authentication])
  char socketName[kSocketNameBytes];
};
static_assert(sizeof(IdLayout) == TPAR_UNIQUE_ID_BYTES, "IdLayout must fill tparUniqueId");

// The message framing: see NOTE [bootstrap protocol].
enum MsgKind : uint32_t { kHello = 1, kAllGather = 2, kBarrier = 3 };

struct Request {
  uint32_t magic;
  uint32_t kind;
  int32_t rank;       // hello only
  int32_t nranks;     // hello only
  int64_t timeoutMs;  // hello only
  uint64_t bytes;     // rounds: size of this rank's blob, which follows
  uint8_t nonce[kNonceBytes];  // hello only: the rank's challenge to the service
  uint8_t mac[kMacBytes];      // hello only: helloMac
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

// NOTE [bootstrap authentication]: what a rank's hello proves, and what the service answers.
using Mac = std::array<uint8_t, kMacBytes>;
Mac helloMac(const IdLayout& id, const uint8_t* serviceNonce, const Request& hello);
Mac serviceMac(const IdLayout& id, const uint8_t* serviceNonce, const Request& hello);

// Fills `out` with `size` bytes from the kernel's random source.
tparResult_t randomBytes(void* out, size_t size);

// The credentials of the process at the other end of a connected UNIX socket.
struct PeerCred {
  int32_t pid = 0;
  uint32_t uid = 0;
};
bool peerCred(int fd, PeerCred* out);

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
