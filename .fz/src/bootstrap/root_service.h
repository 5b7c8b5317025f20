// The root service of the socket bootstrap: createUniqueId starts it as a detached thread of the
// calling process, listening on an abstract-namespace UNIX-domain socket. See
// NOTE [bootstrap protocol], NOTE [bootstrap authentication] and NOTE [bootstrap deadlines] in
// socket_util.h. Connections, admission and I/O are in bootstrap_service.cc; the session (hellos,
// rounds, deadlines, failure) in bootstrap_session.cc.
#ifndef TPAR_BOOTSTRAP_ROOT_SERVICE_H_
#define TPAR_BOOTSTRAP_ROOT_SERVICE_H_

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "bootstrap/socket_util.h"
#include "tpar/tpar.h"

namespace tpar {
namespace bootstrap_detail {

// How long a failing service keeps trying to deliver its error replies before closing anyway.
constexpr int64_t kFlushMs = 1000;

class RootService {
 public:
  RootService(int listenFd, const IdLayout& id, int64_t timeoutMs, uint32_t ownUid,
              bool allowOtherUsers)
      : listenFd_(listenFd),
        id_(id),
        ownUid_(ownUid),
        allowOtherUsers_(allowOtherUsers),
        idleDeadline_(deadlineAfter(nowMs(), timeoutMs)),
        idleTimeoutMs_(timeoutMs),
        authTimeoutMs_(std::min(kAuthTimeoutMs, timeoutMs)) {}
  RootService(const RootService&) = delete;
  RootService& operator=(const RootService&) = delete;
  ~RootService() {
    for (auto& peer : peers_) {
      if (peer->fd >= 0) close(peer->fd);
    }
    if (listenFd_ >= 0) close(listenFd_);
  }

  void run() {
    try {
      loop();
    } catch (...) {
      // Only fail() itself can get here (per-peer failures are caught in loop()); without it
      // there is nothing sensible to send, and closing tells every rank the session is over.
    }
    logTurnedAway();
  }

 private:
  using Bytes = std::shared_ptr<const std::vector<char>>;

  struct Peer {
    int fd = -1;
    int rank = -1;  // -1 until a valid hello
    bool proved = false;  // its hello proved the secret (NOTE [bootstrap authentication])
    PeerCred cred;
    uint8_t nonce[kNonceBytes] = {};  // our challenge to it
    int64_t authDeadline = kNoDeadline;  // until it has proved itself
    int64_t timeoutMs = 0;
    Request header = {};
    size_t headerGot = 0;
    std::vector<char> payload;
    size_t payloadGot = 0;
    std::deque<Bytes> out;  // replies not yet written; the first is written from outOffset
    size_t outOffset = 0;
    bool rejected = false;  // not a rank of this session: close once its error reply is out
  };

  enum RankState : char { kFree = 0, kPresent = 1, kLeft = 2 };

  // Connections (bootstrap_service.cc).
  void loop();
  void reapClosedPeers();
  int64_t nextDeadline() const;
  void onPeerException(Peer* peer, const char* what);
  // Accepts at most kAcceptsPerPoll connections: see NOTE [bootstrap authentication].
  void acceptSome();
  // NOTE [bootstrap authentication]: a new connection gets a challenge, unless its user may
  // not join (then a one-line refusal and a close).
  void admit(int fd);
  // Keeps at most `limit` connections that have not proved themselves, dropping the oldest:
  // a flood of silent connections then costs the newest ones (a real rank proves itself
  // within one round trip) nothing but their place in the queue.
  void dropOldestPendingBeyond(int limit);
  // Closes a connection that has not proved itself, counting it (bootstrapTurnedAway).
  void dropUnproved(Peer* peer);
  void logTurnedAway() const;
  void readFrom(Peer* peer);
  // Rejects what cannot be a message of this protocol before any memory is sized from it.
  bool checkHeader(Peer* peer);
  static Bytes replyBytes(tparResult_t code, const char* text, size_t size);
  void queue(Peer* peer, Bytes bytes);
  void flush(Peer* peer);
  void closePeer(Peer* peer);
  void reject(Peer* peer, tparResult_t code, const char* fmt, ...)
      __attribute__((format(printf, 4, 5)));

  // The session (bootstrap_session.cc).
  void checkDeadlines();
  void onHello(Peer* peer);
  void onRound(Peer* peer);
  void onDisconnect(Peer* peer);
  // The earliest rank to give up bounds the whole wait: once it leaves, nothing can complete.
  void extendDeadline(int64_t* deadline, int64_t timeoutMs);
  // Ends the session: see NOTE [bootstrap protocol]. A peer waiting on the service right now
  // (before the go-ahead, or inside the pending round) gets `waitingCode`; the others, whose
  // next request will read this reply, get `otherCode`.
  void fail(tparResult_t waitingCode, tparResult_t otherCode, const char* fmt, ...)
      __attribute__((format(printf, 4, 5)));

  int listenFd_;
  IdLayout id_;
  uint32_t ownUid_;
  bool allowOtherUsers_;
  int64_t idleDeadline_;
  int64_t idleTimeoutMs_;
  int64_t authTimeoutMs_;
  std::vector<std::unique_ptr<Peer>> peers_;
  int64_t acceptPausedUntil_ = 0;
  bool done_ = false;
  bool failing_ = false;
  int64_t flushDeadline_ = kNoDeadline;
  uint64_t otherUsersRefused_ = 0;
  uint64_t unprovedDropped_ = 0;

  int nranks_ = 0;  // 0 until the first valid hello
  int firstRank_ = -1;
  std::vector<char> rankState_;
  std::vector<Peer*> byRank_;
  int helloCount_ = 0;
  int leftCount_ = 0;
  bool started_ = false;
  int64_t helloDeadline_ = kNoDeadline;
  int64_t deadlineTimeoutMs_ = 0;  // the timeout behind the deadline that is nearest

  uint64_t round_ = 0;
  uint32_t roundKind_ = 0;
  uint64_t roundBytes_ = 0;
  int roundFirstRank_ = -1;
  int postedCount_ = 0;
  std::vector<bool> posted_;
  std::vector<std::vector<char>> blobs_;
  int64_t roundDeadline_ = kNoDeadline;
};

}  // namespace bootstrap_detail
}  // namespace tpar

#endif  // TPAR_BOOTSTRAP_ROOT_SERVICE_H_
