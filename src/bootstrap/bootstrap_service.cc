// The root service's connections: admission (NOTE [bootstrap authentication]), reading and
// writing, and createUniqueId, which starts it. The session is in bootstrap_session.cc.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root_service.h"
#include "bootstrap/sha256.h"
#include "bootstrap/socket_util.h"
#include "base/error.h"
#include "base/identity.h"
#include "base/log.h"

namespace tpar {
namespace bootstrap_detail {
namespace {

// bootstrapTurnedAway(): the sums over every service of this process.
std::atomic<uint64_t> g_otherUsersRefused{0};
std::atomic<uint64_t> g_unprovedDropped{0};

}  // namespace

void RootService::loop() {
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
    // The connections already held go first, and the listener gets a bounded turn after them:
    // NOTE [bootstrap authentication].
    const size_t first = accepting ? 1 : 0;
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
    // A rank's failure while being served (fail()) has closed the listener.
    if (accepting && !failing_ && fds[0].revents != 0) acceptSome();
    reapClosedPeers();
  }
}

void RootService::reapClosedPeers() {
  peers_.erase(std::remove_if(peers_.begin(), peers_.end(),
                              [](const std::unique_ptr<Peer>& p) { return p->fd < 0; }),
               peers_.end());
  if (failing_ && peers_.empty()) done_ = true;
}

int64_t RootService::nextDeadline() const {
  if (failing_) return flushDeadline_;
  int64_t next = nranks_ == 0    ? idleDeadline_
                 : !started_     ? helloDeadline_
                 : postedCount_ > 0 ? roundDeadline_
                                 : kNoDeadline;
  for (const auto& peer : peers_) next = std::min(next, peer->authDeadline);
  return next;
}

void RootService::onPeerException(Peer* peer, const char* what) {
  if (peer->rank < 0 || failing_) {
    closePeer(peer);
    return;
  }
  fail(tparInternalError, tparInternalError, "the bootstrap service failed serving rank %d: %s",
       peer->rank, what);
}

void RootService::acceptSome() {
  for (int tries = 0; tries < kAcceptsPerPoll; ++tries) {
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

void RootService::admit(int fd) {
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
    ++otherUsersRefused_;
    g_otherUsersRefused.fetch_add(1, std::memory_order_relaxed);
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

void RootService::dropOldestPendingBeyond(int limit) {
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
    dropUnproved(oldest);
    --pending;
  }
}

void RootService::dropUnproved(Peer* peer) {
  if (peer->fd < 0 || peer->proved) return;
  if (!peer->rejected) {  // reject() counted it already
    ++unprovedDropped_;
    g_unprovedDropped.fetch_add(1, std::memory_order_relaxed);
  }
  closePeer(peer);
}

void RootService::logTurnedAway() const {
  if (otherUsersRefused_ == 0 && unprovedDropped_ == 0) return;
  TPAR_INFO(kLogBootstrap,
            "bootstrap service '@%s' ended: it refused %llu connection(s) of other users and "
            "closed %llu that did not prove the uniqueId's secret",
            id_.socketName, static_cast<unsigned long long>(otherUsersRefused_),
            static_cast<unsigned long long>(unprovedDropped_));
}

void RootService::readFrom(Peer* peer) {
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

bool RootService::checkHeader(Peer* peer) {
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

RootService::Bytes RootService::replyBytes(tparResult_t code, const char* text, size_t size) {
  auto bytes = std::make_shared<std::vector<char>>(sizeof(Reply) + size);
  Reply reply = {kWireMagic, code, size};
  memcpy(bytes->data(), &reply, sizeof(reply));
  if (size > 0) memcpy(bytes->data() + sizeof(Reply), text, size);
  return bytes;
}

void RootService::queue(Peer* peer, Bytes bytes) {
  if (peer == nullptr || peer->fd < 0) return;
  peer->out.push_back(std::move(bytes));
  flush(peer);
}

void RootService::flush(Peer* peer) {
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

void RootService::closePeer(Peer* peer) {
  if (peer->fd < 0) return;
  close(peer->fd);
  peer->fd = -1;
  peer->out.clear();
}

void RootService::reject(Peer* peer, tparResult_t code, const char* fmt, ...) {
  char text[kMaxErrorText];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (!peer->proved) {
    ++unprovedDropped_;
    g_unprovedDropped.fetch_add(1, std::memory_order_relaxed);
  }
  peer->rejected = true;
  queue(peer, replyBytes(code, text, strlen(text)));
}

}  // namespace bootstrap_detail

BootstrapTurnedAway bootstrapTurnedAway() {
  BootstrapTurnedAway counts;
  counts.otherUsers = bootstrap_detail::g_otherUsersRefused.load(std::memory_order_relaxed);
  counts.unproved = bootstrap_detail::g_unprovedDropped.load(std::memory_order_relaxed);
  return counts;
}

using bootstrap_detail::errnoText;
using bootstrap_detail::idChecksum;
using bootstrap_detail::IdLayout;
using bootstrap_detail::kIdMagic;
using bootstrap_detail::kIdVersion;
using bootstrap_detail::kListenBacklog;
using bootstrap_detail::randomBytes;
using bootstrap_detail::RootService;
using bootstrap_detail::socketAddress;

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
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0 ||
      listen(fd, kListenBacklog) != 0) {
    int err = errno;
    close(fd);
    return setError(tparSystemError, "createUniqueId: cannot listen on '@%s': %s",
                    layout.socketName, errnoText(err).c_str());
  }
  // The service thread is detached and may still run while the process exits (static
  // destructors under way): the logging settings it reads when it ends are read here, on the
  // caller's thread, so that it never constructs a lazily initialised object then.
  (void)logEnabled(LogLevel::kInfo, kLogBootstrap);
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
