// Bootstrap over an abstract-namespace UNIX-domain socket, served by a detached thread of the
// process that called createUniqueId.
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
#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdarg>
#include <cstddef>
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
#include "core/error.h"

namespace tpar {
namespace {

constexpr uint32_t kIdMagic = 0x74704944u;  // "tpID"
constexpr uint32_t kIdVersion = 1;
constexpr uint32_t kWireMagic = 0x74705752u;  // "tpWR"
constexpr uint32_t kFdMagic = 0x74704644u;    // "tpFD"
constexpr size_t kSocketNameBytes = 96;
// Far above TPAR_MAX_RANKS; it only bounds the per-rank tables a hello can make the service grow.
constexpr int kMaxRanks = 1024;
// The service listens before createUniqueId returns, so a refused connect means the service has
// ended; retrying longer would only delay that diagnosis.
constexpr int64_t kConnectRetryMs = 1000;
constexpr int64_t kServiceGraceMs = 250;  // see NOTE [bootstrap deadlines]
// How long a failing service keeps trying to deliver its error replies before closing anyway.
constexpr int64_t kFlushMs = 1000;
// sendFds has no timeout parameter; a peer that stops reading must still not block it forever.
constexpr int64_t kSendFdsTimeoutMs = 10000;
constexpr size_t kMaxErrorText = 4096;
constexpr int kMaxFdsPerMessage = 253;  // the kernel's SCM_MAX_FD
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

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Not strerror: its buffer may be shared between threads, and ranks are often threads.
std::string errnoText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof(buf));  // the GNU variant: returns the text
}

// Deadlines saturate so that a huge timeout means "practically never", not an overflow.
int64_t deadlineAfter(int64_t start, int64_t ms) {
  return ms >= kNoDeadline - start ? kNoDeadline : start + ms;
}

const char* kindName(uint32_t kind) { return kind == kBarrier ? "barrier" : "allGather"; }

uint64_t fnv1a(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 0x100000001b3ull;
  return hash;
}

uint64_t idChecksum(IdLayout layout) {
  layout.checksum = 0;
  return fnv1a(&layout, sizeof(layout));
}

tparResult_t randomU64(uint64_t* out) {
  unsigned char* p = reinterpret_cast<unsigned char*>(out);
  size_t got = 0;
  while (got < sizeof(*out)) {
    ssize_t n = getrandom(p + got, sizeof(*out) - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return setError(tparSystemError, "getrandom failed: %s", errnoText(errno).c_str());
    }
  }
  return tparSuccess;
}

uint64_t hostHash() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  char boot[64] = {};
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n;
    do {
      n = read(fd, boot, sizeof(boot) - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
  }
  uint64_t hash = fnv1a(host, strlen(host));
  return fnv1a(boot, strlen(boot), hash);
}

socklen_t socketAddress(const char* name, sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  size_t len = strnlen(name, sizeof(addr->sun_path) - 1);
  // sun_path[0] stays '\0': that is what puts the name in the abstract namespace, so no file is
  // left behind when the process dies.
  memcpy(addr->sun_path + 1, name, len);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
}

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
// Bounded I/O on non-blocking sockets.

enum class Io { kOk, kTimeout, kClosed, kError };  // kError leaves errno set

Io waitFd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = std::max<int64_t>(deadline - nowMs(), 0);
    pollfd p = {fd, events, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kIdlePollMs)));
    if (r > 0) return Io::kOk;  // POLLHUP/POLLERR too: the next send/recv reports them
    if (r == 0 && left == 0) return Io::kTimeout;
    if (r < 0 && errno != EINTR) return Io::kError;
  }
}

Io sendAll(int fd, const void* data, size_t size, int64_t deadline) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io w = waitFd(fd, POLLOUT, deadline);
      if (w != Io::kOk) return w;
    } else if (errno == EPIPE || errno == ECONNRESET) {
      return Io::kClosed;
    } else if (errno != EINTR) {
      return Io::kError;
    }
  }
  return Io::kOk;
}

Io recvAll(int fd, void* data, size_t size, int64_t deadline) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<size_t>(n);
    } else if (n == 0 || errno == ECONNRESET) {
      return Io::kClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io w = waitFd(fd, POLLIN, deadline);
      if (w != Io::kOk) return w;
    } else if (errno != EINTR) {
      return Io::kError;
    }
  }
  return Io::kOk;
}

// ------------------------------------------------------------------------------------------
// The root service. See NOTE [bootstrap protocol].

class RootService {
 public:
  RootService(int listenFd, uint64_t token, int64_t timeoutMs)
      : listenFd_(listenFd),
        token_(token),
        idleDeadline_(deadlineAfter(nowMs(), timeoutMs)),
        idleTimeoutMs_(timeoutMs) {}
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
    } catch (const std::bad_alloc&) {
      // Nothing sensible to send without memory; closing tells every rank the session is over.
    }
  }

 private:
  using Bytes = std::shared_ptr<const std::vector<char>>;

  struct Peer {
    int fd = -1;
    int rank = -1;  // -1 until a valid hello
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
        if ((revents & POLLOUT) && peer->fd >= 0) flush(peer);
        if ((revents & (POLLIN | POLLHUP | POLLERR)) && peer->fd >= 0) {
          if (failing_ || peer->rejected) {
            if (revents & (POLLHUP | POLLERR)) closePeer(peer);
          } else {
            readFrom(peer);
          }
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
    if (nranks_ == 0) return idleDeadline_;
    if (!started_) return helloDeadline_;
    return postedCount_ > 0 ? roundDeadline_ : kNoDeadline;
  }

  void checkDeadlines() {
    int64_t now = nowMs();
    if (failing_) {
      if (now >= flushDeadline_) done_ = true;
      return;
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
        auto peer = std::make_unique<Peer>();
        peer->fd = fd;
        peers_.push_back(std::move(peer));
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // EMFILE and friends would make poll report the listener ready in a busy loop.
      if (errno != EAGAIN && errno != EWOULDBLOCK) acceptPausedUntil_ = nowMs() + 100;
      return;
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
    if (ok) return true;
    if (peer->rank < 0) {
      reject(peer, tparInvalidUsage, "expected a hello from a tpar rank");
    } else {
      fail(tparInternalError, tparInternalError,
           "rank %d sent a malformed message (magic 0x%x, kind %u)", peer->rank, h.magic, h.kind);
    }
    return false;
  }

  void onHello(Peer* peer) {
    const Request& h = peer->header;
    if (h.token != token_) {
      reject(peer, tparInvalidUsage,
             "the uniqueId's token does not match this service (an id from another "
             "session?)");
      return;
    }
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
      fail(tparInvalidUsage, tparInvalidUsage, "duplicate rank: two ranks claim rank %d of %d",
           h.rank, nranks_);
      return;
    }
    peer->rank = h.rank;
    peer->timeoutMs = h.timeoutMs;
    rankState_[h.rank] = kPresent;
    byRank_[h.rank] = peer;
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
    int rank = peer->rank;
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
      bool isWaiting = !started_ || (peer->rank >= 0 && posted_[peer->rank]);
      queue(peer.get(), isWaiting ? waiting : other);
    }
  }

  int listenFd_;
  uint64_t token_;
  int64_t idleDeadline_;
  int64_t idleTimeoutMs_;
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

// ------------------------------------------------------------------------------------------
// The rank side.

// Reads one Reply. On success its payload (exactly `expected` bytes) lands in `payload`.
// `what` prefixes every error text.
tparResult_t awaitReply(int fd, int64_t deadline, void* payload, size_t expected,
                        const std::string& what, int64_t timeoutMs) {
  Reply reply;
  Io io = recvAll(fd, &reply, sizeof(reply), deadline);
  if (io == Io::kTimeout) {
    return setError(tparTimeout,
                    "%s: no answer from the bootstrap service within %lld ms (other ranks did "
                    "not arrive)",
                    what.c_str(), static_cast<long long>(timeoutMs));
  }
  if (io == Io::kClosed) {
    return setError(tparRemoteError,
                    "%s: the bootstrap service closed the connection (the service ended or "
                    "another rank failed)",
                    what.c_str());
  }
  if (io == Io::kError) {
    return setError(tparSystemError, "%s: recv from the bootstrap service failed: %s", what.c_str(),
                    errnoText(errno).c_str());
  }
  if (reply.magic != kWireMagic) {
    return setError(tparInternalError, "%s: malformed reply from the bootstrap service",
                    what.c_str());
  }
  if (reply.code == tparSuccess) {
    if (reply.bytes != expected) {
      return setError(tparInternalError, "%s: the bootstrap service sent %llu bytes, expected %zu",
                      what.c_str(), static_cast<unsigned long long>(reply.bytes), expected);
    }
    io = recvAll(fd, payload, expected, deadline);
    if (io == Io::kOk) return tparSuccess;
    return setError(io == Io::kTimeout ? tparTimeout : tparRemoteError,
                    "%s: the bootstrap service's reply was cut short", what.c_str());
  }
  if (reply.code <= tparSuccess || reply.code >= tparNumResults || reply.bytes > kMaxErrorText) {
    return setError(tparInternalError, "%s: malformed error reply from the bootstrap service",
                    what.c_str());
  }
  std::string text(reply.bytes, '\0');
  if (recvAll(fd, &text[0], text.size(), deadline) != Io::kOk) {
    text = "(the service's explanation was cut short)";
  }
  return setError(static_cast<tparResult_t>(reply.code), "%s: %s", what.c_str(), text.c_str());
}

// Sends a request and reads its reply. A service that failed the session may already have
// closed the connection while we were sending; its explanation is then waiting in our receive
// buffer, and is worth more than "broken pipe".
tparResult_t exchange(int fd, const Request& request, const void* blob, void* payload,
                      size_t expected, const std::string& what, int64_t timeoutMs) {
  int64_t deadline = deadlineAfter(nowMs(), timeoutMs);
  Io io = sendAll(fd, &request, sizeof(request), deadline);
  if (io == Io::kOk && request.bytes > 0) io = sendAll(fd, blob, request.bytes, deadline);
  if (io == Io::kClosed) {
    tparResult_t res = awaitReply(fd, nowMs() + 100, payload, expected, what, timeoutMs);
    if (res != tparSuccess && res != tparTimeout) return res;
    return setError(tparRemoteError,
                    "%s: the bootstrap service closed the connection (the service ended or "
                    "another rank failed)",
                    what.c_str());
  }
  if (io == Io::kTimeout) {
    return setError(tparTimeout, "%s: could not send to the bootstrap service within %lld ms",
                    what.c_str(), static_cast<long long>(timeoutMs));
  }
  if (io == Io::kError) {
    return setError(tparSystemError, "%s: send to the bootstrap service failed: %s", what.c_str(),
                    errnoText(errno).c_str());
  }
  return awaitReply(fd, deadlineAfter(deadline, kServiceGraceMs), payload, expected, what,
                    timeoutMs);
}

class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(int fd, int rank, int nranks, int64_t timeoutMs)
      : fd_(fd), rank_(rank), nranks_(nranks), timeoutMs_(timeoutMs) {}
  SocketBootstrap(const SocketBootstrap&) = delete;
  SocketBootstrap& operator=(const SocketBootstrap&) = delete;
  ~SocketBootstrap() override { close(fd_); }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  tparResult_t allGather(void* data, size_t bytes) override {
    if (bytes > 0 && data == nullptr) {
      return setError(tparInvalidArgument, "bootstrap allGather: data is NULL for %zu bytes",
                      bytes);
    }
    if (bytes > SIZE_MAX / static_cast<size_t>(nranks_)) {
      return setError(tparInvalidArgument, "bootstrap allGather: %zu bytes x %d ranks overflows",
                      bytes, nranks_);
    }
    return round(kAllGather, data, bytes);
  }

  tparResult_t barrier() override { return round(kBarrier, nullptr, 0); }

 private:
  tparResult_t round(MsgKind kind, void* data, size_t bytes) {
    // The service ends the session on any failure, and a partly read reply would desynchronize
    // the stream, so a failed bootstrap stays failed.
    if (!broken_.empty()) {
      return setError(brokenCode_, "bootstrap rank %d: unusable after an earlier failure: %s",
                      rank_, broken_.c_str());
    }
    Request request = {kWireMagic, kind, 0, 0, 0, 0, bytes};
    char what[96];
    snprintf(what, sizeof(what), "bootstrap %s round %llu on rank %d", kindName(kind),
             static_cast<unsigned long long>(round_), rank_);
    const char* blob = static_cast<const char*>(data) + (bytes > 0 ? rank_ * bytes : 0);
    tparResult_t res = exchange(fd_, request, blob, data, bytes * nranks_, what, timeoutMs_);
    if (res != tparSuccess) {
      brokenCode_ = res;
      broken_ = lastError();
      return res;
    }
    ++round_;
    return tparSuccess;
  }

  int fd_;
  int rank_;
  int nranks_;
  int64_t timeoutMs_;
  uint64_t round_ = 0;
  tparResult_t brokenCode_ = tparSuccess;
  std::string broken_;
};

tparResult_t decodeId(const tparUniqueId& id, IdLayout* layout) {
  memcpy(layout, id.internal, sizeof(*layout));
  if (layout->magic != kIdMagic) {
    return setError(tparInvalidArgument,
                    "uniqueId was not made by tparGetUniqueId (bad magic 0x%08x)", layout->magic);
  }
  if (layout->version != kIdVersion) {
    return setError(tparInvalidArgument,
                    "uniqueId has format version %u but this build of tpar reads version %u "
                    "(ranks run different tpar builds?)",
                    layout->version, kIdVersion);
  }
  if (layout->checksum != idChecksum(*layout) ||
      memchr(layout->socketName, '\0', sizeof(layout->socketName)) == nullptr) {
    return setError(tparInvalidArgument, "uniqueId is corrupted (checksum mismatch)");
  }
  return tparSuccess;
}

tparResult_t connectService(const char* name, int rank, int64_t retryUntil, int* out) {
  sockaddr_un addr;
  socklen_t len = socketAddress(name, &addr);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      return setError(tparSystemError, "bootstrap rank %d: socket failed: %s", rank,
                      errnoText(errno).c_str());
    }
    int rc;
    do {
      rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      *out = fd;
      return tparSuccess;
    }
    int err = errno;
    close(fd);
    // EAGAIN: the listen backlog is full (a non-blocking AF_UNIX connect does not queue).
    bool transient = err == ECONNREFUSED || err == ENOENT || err == EAGAIN;
    if (!transient || nowMs() >= retryUntil) {
      return setError(tparSystemError,
                      "bootstrap rank %d: cannot reach the bootstrap service '@%s': %s (has the "
                      "process that called tparGetUniqueId exited, or did the service time out?)",
                      rank, name, errnoText(err).c_str());
    }
    usleep(10 * 1000);
  }
}

}  // namespace

tparResult_t createUniqueId(tparUniqueId* id, int64_t timeout_ms) {
  if (id == nullptr) return setError(tparInvalidArgument, "createUniqueId: uniqueId is NULL");
  if (timeout_ms <= 0) {
    return setError(tparInvalidArgument, "createUniqueId: timeout_ms=%lld must be positive",
                    static_cast<long long>(timeout_ms));
  }
  IdLayout layout;
  memset(&layout, 0, sizeof(layout));
  layout.magic = kIdMagic;
  layout.version = kIdVersion;
  uint64_t nonce;
  TPAR_TRY(randomU64(&layout.token));
  // The name is public (/proc/net/unix), so it must not carry the token.
  TPAR_TRY(randomU64(&nonce));
  layout.hostHash = hostHash();
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
    auto service = std::make_shared<RootService>(fd, layout.token, timeout_ms);
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

tparResult_t connectBootstrap(const tparUniqueId& id, int rank, int nranks, int64_t timeout_ms,
                              std::unique_ptr<Bootstrap>* out) {
  if (out == nullptr) return setError(tparInvalidArgument, "connectBootstrap: out is NULL");
  if (nranks < 1 || nranks > kMaxRanks) {
    return setError(tparInvalidArgument, "nranks=%d is out of range [1, %d]", nranks, kMaxRanks);
  }
  if (rank < 0 || rank >= nranks) {
    return setError(tparInvalidArgument, "rank=%d is out of range [0, nranks=%d)", rank, nranks);
  }
  if (timeout_ms <= 0) {
    return setError(tparInvalidArgument, "bootstrap timeout_ms=%lld must be positive",
                    static_cast<long long>(timeout_ms));
  }
  IdLayout layout;
  TPAR_TRY(decodeId(id, &layout));
  if (layout.hostHash != hostHash()) {
    return setError(tparInvalidUsage,
                    "uniqueId was created on another host (or before a reboot): tpar is "
                    "intra-node, every rank must run on the host that called tparGetUniqueId");
  }
  int64_t start = nowMs();
  int fd = -1;
  TPAR_TRY(connectService(layout.socketName, rank,
                          start + std::min<int64_t>(timeout_ms, kConnectRetryMs), &fd));
  char what[96];
  snprintf(what, sizeof(what), "bootstrap rank %d of %d", rank, nranks);
  Request hello = {kWireMagic, kHello, layout.token, rank, nranks, timeout_ms, 0};
  tparResult_t res = exchange(fd, hello, nullptr, nullptr, 0, what, timeout_ms);
  if (res != tparSuccess) {
    close(fd);
    return res;
  }
  try {
    out->reset(new SocketBootstrap(fd, rank, nranks, timeout_ms));
  } catch (const std::bad_alloc&) {
    close(fd);
    return setError(tparSystemError, "connectBootstrap: out of memory");
  }
  return tparSuccess;
}

tparResult_t sendFds(int socket_fd, const int* fds, int count) {
  if (count == 0) return tparSuccess;
  if (count < 0 || count > kMaxFdsPerMessage || fds == nullptr) {
    return setError(tparInvalidArgument, "sendFds: count=%d must be in [0, %d] with fds non-NULL",
                    count, kMaxFdsPerMessage);
  }
  // The header lets the receiver check it got the message it expected, not just some fds.
  uint32_t header[2] = {kFdMagic, static_cast<uint32_t>(count)};
  size_t controlSize = CMSG_SPACE(sizeof(int) * count);
  std::unique_ptr<char[]> control(new (std::nothrow) char[controlSize]());
  if (!control) return setError(tparSystemError, "sendFds: out of memory");
  iovec iov = {header, sizeof(header)};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.get();
  msg.msg_controllen = controlSize;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int) * count);
  memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * count);

  int64_t deadline = nowMs() + kSendFdsTimeoutMs;
  for (;;) {
    ssize_t n = sendmsg(socket_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      // The fds travel with the first byte; the rest of the header is plain data.
      size_t rest = sizeof(header) - static_cast<size_t>(n);
      Io io = sendAll(socket_fd, reinterpret_cast<char*>(header) + n, rest, deadline);
      if (io == Io::kOk) return tparSuccess;
      return setError(io == Io::kTimeout ? tparTimeout : tparSystemError,
                      "sendFds: the peer stopped reading mid-message");
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      Io io = waitFd(socket_fd, POLLOUT, deadline);
      if (io == Io::kTimeout) {
        return setError(tparTimeout, "sendFds: the peer did not read within %lld ms",
                        static_cast<long long>(kSendFdsTimeoutMs));
      }
      if (io == Io::kOk) continue;
    }
    return setError(errno == EPIPE || errno == ECONNRESET ? tparRemoteError : tparSystemError,
                    "sendFds: sendmsg of %d fd(s) failed: %s", count, errnoText(errno).c_str());
  }
}

tparResult_t recvFds(int socket_fd, int* fds, int count, int64_t timeout_ms) {
  if (count == 0) return tparSuccess;
  if (count < 0 || count > kMaxFdsPerMessage || fds == nullptr) {
    return setError(tparInvalidArgument, "recvFds: count=%d must be in [0, %d] with fds non-NULL",
                    count, kMaxFdsPerMessage);
  }
  if (timeout_ms <= 0) {
    return setError(tparInvalidArgument, "recvFds: timeout_ms=%lld must be positive",
                    static_cast<long long>(timeout_ms));
  }
  int64_t deadline = deadlineAfter(nowMs(), timeout_ms);
  uint32_t header[2] = {0, 0};
  // Room for one more fd than expected, so that a sender passing too many shows up as a count
  // mismatch rather than as a silently truncated message.
  size_t controlSize = CMSG_SPACE(sizeof(int) * (count + 1));
  std::unique_ptr<char[]> control(new (std::nothrow) char[controlSize]());
  if (!control) return setError(tparSystemError, "recvFds: out of memory");
  std::vector<int> got;
  auto discard = [&got]() {
    for (int fd : got) close(fd);
  };
  iovec iov = {header, sizeof(header)};
  msghdr msg = {};
  ssize_t n;
  for (;;) {
    msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.get();
    msg.msg_controllen = controlSize;
    n = recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n >= 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      Io io = waitFd(socket_fd, POLLIN, deadline);
      if (io == Io::kOk) continue;
      if (io == Io::kTimeout) {
        return setError(tparTimeout, "recvFds: no fds arrived within %lld ms",
                        static_cast<long long>(timeout_ms));
      }
    }
    return setError(errno == ECONNRESET ? tparRemoteError : tparSystemError,
                    "recvFds: recvmsg failed: %s", errnoText(errno).c_str());
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      got.push_back(fd);
    }
  }
  if (n == 0) {
    discard();
    return setError(tparRemoteError, "recvFds: the peer closed the socket");
  }
  if (static_cast<size_t>(n) < sizeof(header) &&
      recvAll(socket_fd, reinterpret_cast<char*>(header) + n, sizeof(header) - n, deadline) !=
          Io::kOk) {
    discard();
    return setError(tparRemoteError, "recvFds: the fd message was cut short");
  }
  if (header[0] != kFdMagic || (msg.msg_flags & MSG_CTRUNC) ||
      got.size() != static_cast<size_t>(count) || header[1] != static_cast<uint32_t>(count)) {
    discard();
    return setError(tparInvalidUsage,
                    "recvFds: expected %d fd(s) but the peer sent %u (received %zu%s)", count,
                    header[0] == kFdMagic ? header[1] : 0u, got.size(),
                    header[0] == kFdMagic ? "" : ", not a tpar fd message");
  }
  std::copy(got.begin(), got.end(), fds);
  return tparSuccess;
}

}  // namespace tpar
