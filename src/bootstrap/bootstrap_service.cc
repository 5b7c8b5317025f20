// The root service of the socket bootstrap: createUniqueId starts it as a detached thread of the
// calling process, listening on an abstract-namespace UNIX-domain socket. See
// NOTE [bootstrap protocol] and NOTE [bootstrap deadlines] in socket_util.h.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_util.h"
#include "bootstrap/sha256.h"
#include "core/error.h"
#include "core/identity.h"

namespace tpar {
namespace {

using bootstrap_detail::deadlineAfter;
using bootstrap_detail::errnoText;
using bootstrap_detail::helloMac;
using bootstrap_detail::idChecksum;
using bootstrap_detail::IdLayout;
using bootstrap_detail::kAllGather;
using bootstrap_detail::kAuthTimeoutMs;
using bootstrap_detail::kBarrier;
using bootstrap_detail::kHello;
using bootstrap_detail::kIdlePollMs;
using bootstrap_detail::kIdMagic;
using bootstrap_detail::kIdVersion;
using bootstrap_detail::kindName;
using bootstrap_detail::kMacBytes;
using bootstrap_detail::kMaxBlobBytes;
using bootstrap_detail::kMaxErrorText;
using bootstrap_detail::kMaxGatherBytes;
using bootstrap_detail::kMaxPendingPeers;
using bootstrap_detail::kMaxRanks;
using bootstrap_detail::kNoDeadline;
using bootstrap_detail::kNonceBytes;
using bootstrap_detail::kWireMagic;
using bootstrap_detail::Mac;
using bootstrap_detail::nowMs;
using bootstrap_detail::PeerCred;
using bootstrap_detail::peerCred;
using bootstrap_detail::randomBytes;
using bootstrap_detail::Reply;
using bootstrap_detail::Request;
using bootstrap_detail::serviceMac;
using bootstrap_detail::socketAddress;

// How long a failing service keeps trying to deliver its error replies before closing anyway.
constexpr int64_t kFlushMs = 1000;

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 16) {
      s += ", ... (" + std::to_string(ranks.size()) + " in all)";
      break;
    }
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

// ------------------------------------------------------------------------------------------
// The root service. See NOTE [bootstrap protocol].

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

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Peer*> polled;
    while (!done_) {
      checkDeadlines();
      reapClosedPeers();
      if (done_) break;
      fds.clear();
      polled.clear();
      int64_t now = nowMs();
      bool accepting = !failing_ && now >= acceptPausedUntil_;
      if (accepting) fds.push_back({listenFd_, POLLIN, 0});
      for (auto& peer : peers_) {
        short events = (failing_ || peer->rejected) ? 0 : POLLIN;
        if (!peer->out.empty()) events |= POLLOUT;
        fds.push_back({peer->fd, events, 0});
        polled.push_back(peer.get());
      }
      int64_t wait = std::min<int64_t>(nextDeadline() - now, kIdlePollMs);
      if (now < acceptPausedUntil_) wait = std::min(wait, acceptPausedUntil_ - now);
      int r = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait, 0)));
      if (r < 0) {
        if (errno == EINTR) continue;
        return;  // poll itself failing leaves nothing to serve with; ranks see the close
      }
      size_t first = 0;
      if (accepting) {
        if (fds[0].revents != 0) acceptAll();
        first = 1;
      }
      for (size_t i = 0; i < polled.size(); ++i) {
        Peer* peer = polled[i];
        short revents = fds[first + i].revents;
        // A bad peer ends its own connection (or, once it is a rank, the session), never the
        // process: nothing a peer sends may throw out of here.
        try {
          if ((revents & POLLOUT) && peer->fd >= 0) flush(peer);
          if ((revents & (POLLIN | POLLHUP | POLLERR)) && peer->fd >= 0) {
            if (failing_ || peer->rejected) {
              if (revents & (POLLHUP | POLLERR)) closePeer(peer);
            } else {
              readFrom(peer);
            }
          }
        } catch (const std::exception& e) {
          onPeerException(peer, e.what());
        } catch (...) {
          onPeerException(peer, "unknown exception");
        }
      }
      reapClosedPeers();
    }
  }

  void reapClosedPeers() {
    peers_.erase(std::remove_if(peers_.begin(), peers_.end(),
                                [](const std::unique_ptr<Peer>& p) { return p->fd < 0; }),
                 peers_.end());
    if (failing_ && peers_.empty()) done_ = true;
  }

  int64_t nextDeadline() const {
    if (failing_) return flushDeadline_;
    int64_t next = nranks_ == 0    ? idleDeadline_
                   : !started_     ? helloDeadline_
                   : postedCount_ > 0 ? roundDeadline_
                                   : kNoDeadline;
    for (const auto& peer : peers_) next = std::min(next, peer->authDeadline);
    return next;
  }

  void onPeerException(Peer* peer, const char* what) {
    if (peer->rank < 0 || failing_) {
      closePeer(peer);
      return;
    }
    fail(tparInternalError, tparInternalError, "the bootstrap service failed serving rank %d: %s",
         peer->rank, what);
  }

  void checkDeadlines() {
    int64_t now = nowMs();
    if (failing_) {
      if (now >= flushDeadline_) done_ = true;
      return;
    }
    // A connection that has not proved itself in time is dropped; the session goes on.
    for (auto& peer : peers_) {
      if (peer->fd >= 0 && !peer->proved && now >= peer->authDeadline) closePeer(peer.get());
    }
    if (nranks_ == 0) {
      if (now >= idleDeadline_) {
        fail(tparTimeout, tparTimeout,
             "no rank connected within %lld ms of createUniqueId; the service ended",
             static_cast<long long>(idleTimeoutMs_));
      }
    } else if (!started_) {
      if (now >= helloDeadline_) {
        std::vector<int> missing, present;
        for (int r = 0; r < nranks_; ++r) (rankState_[r] == kFree ? missing : present).push_back(r);
        fail(tparTimeout, tparTimeout,
             "rank(s) %s of %d did not connect within %lld ms (connected: %s)",
             rankList(missing).c_str(), nranks_, static_cast<long long>(deadlineTimeoutMs_),
             rankList(present).c_str());
      }
    } else if (postedCount_ > 0 && now >= roundDeadline_) {
      std::vector<int> missing;
      for (int r = 0; r < nranks_; ++r) {
        if (!posted_[r]) missing.push_back(r);
      }
      fail(tparTimeout, tparRemoteError,
           "%s round %llu: rank(s) %s of %d did not arrive within %lld ms", kindName(roundKind_),
           static_cast<unsigned long long>(round_), rankList(missing).c_str(), nranks_,
           static_cast<long long>(deadlineTimeoutMs_));
    }
  }

  void acceptAll() {
    for (;;) {
      int fd = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        admit(fd);
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE and friends would make poll report the listener ready in a busy loop.
      if (errno != EAGAIN && errno != EWOULDBLOCK) acceptPausedUntil_ = nowMs() + 100;
      return;
    }
  }

  // NOTE [bootstrap authentication]: a new connection gets a challenge, unless its user may
  // not join (then a one-line refusal and a close).
  void admit(int fd) {
    PeerCred cred;
    if (!peerCred(fd, &cred)) {
      close(fd);
      return;
    }
    if (!allowOtherUsers_ && cred.uid != ownUid_) {
      char text[256];
      snprintf(text, sizeof(text),
               "the bootstrap service runs as uid %u and admits no other user (pid %d runs as "
               "uid %u; TPAR_BOOTSTRAP_ALLOW_OTHER_USERS=1 on the creating process admits other "
               "users that hold the uniqueId)",
               ownUid_, cred.pid, cred.uid);
      Bytes refusal = replyBytes(tparInvalidUsage, text, strlen(text));
      // One attempt: the text fits an empty socket buffer; a stranger is owed nothing more.
      (void)!send(fd, refusal->data(), refusal->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      return;
    }
    auto peer = std::make_unique<Peer>();
    peer->fd = fd;
    peer->cred = cred;
    peer->authDeadline = deadlineAfter(nowMs(), authTimeoutMs_);
    if (randomBytes(peer->nonce, sizeof(peer->nonce)) != tparSuccess) {
      close(fd);
      return;
    }
    dropOldestPendingBeyond(kMaxPendingPeers - 1);
    Peer* p = peer.get();
    peers_.push_back(std::move(peer));
    queue(p, replyBytes(tparSuccess, reinterpret_cast<const char*>(p->nonce), kNonceBytes));
  }

  // Keeps at most `limit` connections that have not proved themselves, dropping the oldest:
  // a flood of silent connections then costs the newest ones (a real rank proves itself
  // within one round trip) nothing but their place in the queue.
  void dropOldestPendingBeyond(int limit) {
    int pending = 0;
    for (const auto& peer : peers_) pending += peer->fd >= 0 && !peer->proved;
    while (pending > limit) {
      Peer* oldest = nullptr;
      for (auto& peer : peers_) {
        if (peer->fd >= 0 && !peer->proved &&
            (oldest == nullptr || peer->authDeadline < oldest->authDeadline)) {
          oldest = peer.get();
        }
      }
      closePeer(oldest);
      --pending;
    }
  }

  void readFrom(Peer* peer) {
    while (peer->fd >= 0 && !failing_ && !peer->rejected) {
      bool inHeader = peer->headerGot < sizeof(Request);
      char* dst = inHeader ? reinterpret_cast<char*>(&peer->header) + peer->headerGot
                           : peer->payload.data() + peer->payloadGot;
      size_t want =
          inHeader ? sizeof(Request) - peer->headerGot : peer->payload.size() - peer->payloadGot;
      ssize_t n = recv(peer->fd, dst, want, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        onDisconnect(peer);
        return;
      }
      if (inHeader) {
        peer->headerGot += static_cast<size_t>(n);
        if (peer->headerGot < sizeof(Request)) continue;
        if (!checkHeader(peer)) return;
        peer->payload.assign(peer->header.bytes, 0);
        peer->payloadGot = 0;
      } else {
        peer->payloadGot += static_cast<size_t>(n);
      }
      if (peer->payloadGot == peer->payload.size()) {
        peer->headerGot = 0;
        if (peer->rank < 0) {
          onHello(peer);
        } else {
          onRound(peer);
        }
      }
    }
  }

  // Rejects what cannot be a message of this protocol before any memory is sized from it.
  bool checkHeader(Peer* peer) {
    const Request& h = peer->header;
    bool hello = h.kind == kHello;
    bool round = h.kind == kAllGather || h.kind == kBarrier;
    bool ok = h.magic == kWireMagic && (peer->rank < 0 ? hello : round) &&
              (h.kind == kAllGather || h.bytes == 0);
    if (!ok) {
      if (peer->rank < 0) {
        reject(peer, tparInvalidUsage, "expected a hello from a tpar rank");
      } else {
        fail(tparInternalError, tparInternalError,
             "rank %d sent a malformed message (magic 0x%x, kind %u)", peer->rank, h.magic,
             h.kind);
      }
      return false;
    }
    if (h.bytes > kMaxBlobBytes || h.bytes * static_cast<uint64_t>(nranks_) > kMaxGatherBytes) {
      fail(tparInvalidArgument, tparInvalidUsage,
           "rank %d sent an allGather of %llu bytes; the bootstrap carries at most %llu bytes per "
           "rank and %llu in all",
           peer->rank, static_cast<unsigned long long>(h.bytes),
           static_cast<unsigned long long>(kMaxBlobBytes),
           static_cast<unsigned long long>(kMaxGatherBytes));
      return false;
    }
    return true;
  }

  void onHello(Peer* peer) {
    const Request& h = peer->header;
    const Mac expected = helloMac(id_, peer->nonce, h);
    if (!constantTimeEqual(expected.data(), h.mac, kMacBytes)) {
      reject(peer, tparInvalidUsage,
             "the hello does not prove knowledge of the uniqueId's secret (an id from another "
             "session, or not a tpar rank)");
      return;
    }
    peer->proved = true;
    peer->authDeadline = kNoDeadline;
    if (h.nranks < 1 || h.nranks > kMaxRanks || h.rank < 0 || h.rank >= h.nranks ||
        h.timeoutMs <= 0) {
      reject(peer, tparInvalidArgument, "invalid hello (rank %d, nranks %d)", h.rank, h.nranks);
      return;
    }
    if (nranks_ == 0) {
      nranks_ = h.nranks;
      firstRank_ = h.rank;
      rankState_.assign(nranks_, kFree);
      posted_.assign(nranks_, false);
      blobs_.assign(nranks_, {});
      byRank_.assign(nranks_, nullptr);
    }
    if (h.nranks != nranks_) {
      fail(tparInvalidUsage, tparInvalidUsage,
           "ranks disagree on nranks: rank %d passed nranks=%d but rank %d passed "
           "nranks=%d",
           h.rank, h.nranks, firstRank_, nranks_);
      return;
    }
    if (rankState_[h.rank] != kFree) {
      const Peer* first = byRank_[h.rank];
      fail(tparInvalidUsage, tparInvalidUsage,
           "duplicate rank: two ranks claim rank %d of %d (pid %d%s, then pid %d)", h.rank,
           nranks_, first != nullptr ? first->cred.pid : 0,
           started_ ? ", in the group that had formed" : "", peer->cred.pid);
      return;
    }
    peer->rank = h.rank;
    peer->timeoutMs = h.timeoutMs;
    rankState_[h.rank] = kPresent;
    byRank_[h.rank] = peer;
    // Our proof goes out before anything else the rank will read (NOTE [bootstrap protocol]).
    const Mac proof = serviceMac(id_, peer->nonce, h);
    queue(peer, replyBytes(tparSuccess, reinterpret_cast<const char*>(proof.data()), kMacBytes));
    extendDeadline(&helloDeadline_, peer->timeoutMs);
    if (++helloCount_ < nranks_) return;
    started_ = true;
    Bytes goAhead = replyBytes(tparSuccess, nullptr, 0);
    for (Peer* p : byRank_) queue(p, goAhead);
  }

  void onRound(Peer* peer) {
    const Request& h = peer->header;
    int rank = peer->rank;
    if (!started_ || posted_[rank]) {
      fail(tparInternalError, tparInternalError, "rank %d sent a request out of turn (round %llu)",
           rank, static_cast<unsigned long long>(round_));
      return;
    }
    if (postedCount_ == 0) {
      roundKind_ = h.kind;
      roundBytes_ = h.bytes;
      roundFirstRank_ = rank;
    } else if (h.kind != roundKind_) {
      fail(tparInvalidUsage, tparInvalidUsage,
           "round %llu: rank %d called %s but rank %d called %s",
           static_cast<unsigned long long>(round_), rank, kindName(h.kind), roundFirstRank_,
           kindName(roundKind_));
      return;
    } else if (h.bytes != roundBytes_) {
      fail(tparInvalidUsage, tparInvalidUsage,
           "allGather round %llu: ranks passed different sizes: rank %d passed %llu "
           "bytes but rank %d passed %llu bytes",
           static_cast<unsigned long long>(round_), rank, static_cast<unsigned long long>(h.bytes),
           roundFirstRank_, static_cast<unsigned long long>(roundBytes_));
      return;
    }
    if (leftCount_ > 0) {
      std::vector<int> left;
      for (int r = 0; r < nranks_; ++r) {
        if (rankState_[r] == kLeft) left.push_back(r);
      }
      fail(tparRemoteError, tparRemoteError,
           "%s round %llu cannot complete: rank(s) %s already closed their connection",
           kindName(h.kind), static_cast<unsigned long long>(round_), rankList(left).c_str());
      return;
    }
    blobs_[rank] = std::move(peer->payload);
    peer->payload = {};
    posted_[rank] = true;
    if (postedCount_++ == 0) roundDeadline_ = kNoDeadline;
    extendDeadline(&roundDeadline_, peer->timeoutMs);
    if (postedCount_ < nranks_) return;

    // One shared copy of the concatenation serves every rank's reply.
    auto all = std::make_shared<std::vector<char>>(sizeof(Reply) + roundBytes_ * nranks_);
    Reply reply = {kWireMagic, tparSuccess, roundBytes_ * nranks_};
    memcpy(all->data(), &reply, sizeof(reply));
    for (int r = 0; r < nranks_; ++r) {
      if (roundBytes_ > 0) {
        memcpy(all->data() + sizeof(Reply) + r * roundBytes_, blobs_[r].data(), roundBytes_);
      }
      blobs_[r] = {};
      posted_[r] = false;
    }
    postedCount_ = 0;
    ++round_;
    for (Peer* p : byRank_) queue(p, all);
  }

  void onDisconnect(Peer* peer) {
    int rank = peer->rank;  // -1: never a rank, nothing of the session depends on it
    closePeer(peer);
    if (rank < 0 || failing_) return;
    byRank_[rank] = nullptr;
    rankState_[rank] = kLeft;
    ++leftCount_;
    if (!started_) {
      fail(tparRemoteError, tparRemoteError,
           "rank %d closed its connection before all %d ranks connected", rank, nranks_);
    } else if (postedCount_ > 0) {
      fail(tparRemoteError, tparRemoteError,
           "rank(s) %d closed their connection during %s round %llu", rank, kindName(roundKind_),
           static_cast<unsigned long long>(round_));
    } else if (leftCount_ == nranks_) {
      done_ = true;  // the normal end: every rank is finished with the bootstrap
    }
  }

  // The earliest rank to give up bounds the whole wait: once it leaves, nothing can complete.
  void extendDeadline(int64_t* deadline, int64_t timeoutMs) {
    int64_t candidate = deadlineAfter(nowMs(), timeoutMs);
    if (candidate < *deadline) {
      *deadline = candidate;
      deadlineTimeoutMs_ = timeoutMs;
    }
  }

  static Bytes replyBytes(tparResult_t code, const char* text, size_t size) {
    auto bytes = std::make_shared<std::vector<char>>(sizeof(Reply) + size);
    Reply reply = {kWireMagic, code, size};
    memcpy(bytes->data(), &reply, sizeof(reply));
    if (size > 0) memcpy(bytes->data() + sizeof(Reply), text, size);
    return bytes;
  }

  void queue(Peer* peer, Bytes bytes) {
    if (peer == nullptr || peer->fd < 0) return;
    peer->out.push_back(std::move(bytes));
    flush(peer);
  }

  void flush(Peer* peer) {
    while (!peer->out.empty()) {
      const std::vector<char>& chunk = *peer->out.front();
      ssize_t n = send(peer->fd, chunk.data() + peer->outOffset, chunk.size() - peer->outOffset,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0) {
        onDisconnect(peer);
        return;
      }
      peer->outOffset += static_cast<size_t>(n);
      if (peer->outOffset == chunk.size()) {
        peer->out.pop_front();
        peer->outOffset = 0;
      }
    }
    // Closing only once the error reply is written keeps the peer from seeing a bare EOF.
    if (failing_ || peer->rejected) closePeer(peer);
  }

  void closePeer(Peer* peer) {
    if (peer->fd < 0) return;
    close(peer->fd);
    peer->fd = -1;
    peer->out.clear();
  }

  void reject(Peer* peer, tparResult_t code, const char* fmt, ...)
      __attribute__((format(printf, 4, 5))) {
    char text[kMaxErrorText];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    peer->rejected = true;
    queue(peer, replyBytes(code, text, strlen(text)));
  }

  // Ends the session: see NOTE [bootstrap protocol]. A peer waiting on the service right now
  // (before the go-ahead, or inside the pending round) gets `waitingCode`; the others, whose
  // next request will read this reply, get `otherCode`.
  void fail(tparResult_t waitingCode, tparResult_t otherCode, const char* fmt, ...)
      __attribute__((format(printf, 4, 5))) {
    if (failing_) return;  // the first failure is the one every rank hears about
    char text[kMaxErrorText];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    failing_ = true;
    flushDeadline_ = nowMs() + kFlushMs;
    // A rank arriving from now on is refused at once instead of waiting in the backlog.
    close(listenFd_);
    listenFd_ = -1;
    size_t size = strlen(text);
    Bytes waiting = replyBytes(waitingCode, text, size);
    Bytes other = replyBytes(otherCode, text, size);
    for (auto& peer : peers_) {
      if (peer->fd < 0 || peer->rejected) continue;
      if (!peer->proved) {
        closePeer(peer.get());  // a stranger is owed no explanation of the session
        continue;
      }
      bool isWaiting = !started_ || (peer->rank >= 0 && posted_[peer->rank]);
      queue(peer.get(), isWaiting ? waiting : other);
    }
  }

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

}  // namespace

tparResult_t createUniqueId(tparUniqueId* id, int64_t timeout_ms, const BootstrapPeers& peers) {
  if (id == nullptr) return setError(tparInvalidArgument, "createUniqueId: uniqueId is NULL");
  if (timeout_ms <= 0) {
    return setError(tparInvalidArgument, "createUniqueId: timeout_ms=%lld must be positive",
                    static_cast<long long>(timeout_ms));
  }
  IdLayout layout;
  memset(&layout, 0, sizeof(layout));
  layout.magic = kIdMagic;
  layout.version = kIdVersion;
  layout.serviceUid =
      peers.trusted_uid >= 0 ? static_cast<uint32_t>(peers.trusted_uid) : geteuid();
  TPAR_TRY(hostIdentity(&layout.hostHash));
  TPAR_TRY(randomBytes(layout.secret, sizeof(layout.secret)));
  // The name is public (/proc/net/unix): it carries nothing of the secret.
  uint64_t nonce;
  TPAR_TRY(randomBytes(&nonce, sizeof(nonce)));
  snprintf(layout.socketName, sizeof(layout.socketName), "tpar-%d-%016llx",
           static_cast<int>(getpid()), static_cast<unsigned long long>(nonce));
  layout.checksum = idChecksum(layout);

  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return setError(tparSystemError, "createUniqueId: socket failed: %s", errnoText(errno).c_str());
  }
  sockaddr_un addr;
  socklen_t len = socketAddress(layout.socketName, &addr);
  // Listening before returning means a rank can never race ahead of the service.
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    close(fd);
    return setError(tparSystemError, "createUniqueId: cannot listen on '@%s': %s",
                    layout.socketName, errnoText(err).c_str());
  }
  try {
    // The thread owns the service (and so the socket) from here; if the thread cannot start,
    // destroying its argument closes the socket.
    auto service = std::make_shared<RootService>(fd, layout, timeout_ms, layout.serviceUid,
                                                 peers.allow_other_users);
    fd = -1;
    std::thread([service]() { service->run(); }).detach();
  } catch (const std::system_error& e) {
    return setError(tparSystemError, "createUniqueId: cannot start the service thread: %s",
                    e.what());
  } catch (const std::bad_alloc&) {
    if (fd >= 0) close(fd);
    return setError(tparSystemError, "createUniqueId: out of memory");
  }
  memcpy(id->internal, &layout, sizeof(layout));
  return tparSuccess;
}

}  // namespace tpar
