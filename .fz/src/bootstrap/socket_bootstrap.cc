// The ranks' side of the bootstrap over an abstract-namespace UNIX-domain socket: each rank
// connects to the root service (root_service.h) that createUniqueId started. See
// NOTE [bootstrap protocol] and NOTE [bootstrap deadlines] in socket_util.h.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_util.h"
#include "bootstrap/sha256.h"
#include "base/error.h"
#include "base/identity.h"

namespace tpar {
namespace {

using bootstrap_detail::deadlineAfter;
using bootstrap_detail::errnoText;
using bootstrap_detail::idChecksum;
using bootstrap_detail::IdLayout;
using bootstrap_detail::Io;
using bootstrap_detail::kAllGather;
using bootstrap_detail::kBarrier;
using bootstrap_detail::kHello;
using bootstrap_detail::kIdMagic;
using bootstrap_detail::kIdVersion;
using bootstrap_detail::kindName;
using bootstrap_detail::kAuthTimeoutMs;
using bootstrap_detail::kMacBytes;
using bootstrap_detail::kMaxBlobBytes;
using bootstrap_detail::kMaxErrorText;
using bootstrap_detail::kMaxGatherBytes;
using bootstrap_detail::kMaxRanks;
using bootstrap_detail::kNonceBytes;
using bootstrap_detail::Mac;
using bootstrap_detail::PeerCred;
using bootstrap_detail::peerCred;
using bootstrap_detail::randomBytes;
using bootstrap_detail::helloMac;
using bootstrap_detail::serviceMac;
using bootstrap_detail::kServiceGraceMs;
using bootstrap_detail::kWireMagic;
using bootstrap_detail::MsgKind;
using bootstrap_detail::nowMs;
using bootstrap_detail::recvAll;
using bootstrap_detail::Reply;
using bootstrap_detail::Request;
using bootstrap_detail::sendAll;
using bootstrap_detail::socketAddress;

// The service listens before createUniqueId returns, so a refused connect means the service has
// ended; retrying longer would only delay that diagnosis.
constexpr int64_t kConnectRetryMs = 1000;

constexpr const char* kOthersLate = "other ranks did not arrive";

// Reads one Reply. On success its payload (exactly `expected` bytes) lands in `payload`.
// `what` prefixes every error text; `waitingFor` says what a timeout means.
tparResult_t awaitReply(int fd, int64_t deadline, void* payload, size_t expected,
                        const std::string& what, int64_t timeoutMs,
                        const char* waitingFor = kOthersLate) {
  Reply reply;
  Io io = recvAll(fd, &reply, sizeof(reply), deadline);
  if (io == Io::kTimeout) {
    return setError(tparTimeout, "%s: no answer from the bootstrap service within %lld ms (%s)",
                    what.c_str(), static_cast<long long>(timeoutMs), waitingFor);
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
                      size_t expected, const std::string& what, int64_t timeoutMs,
                      const char* waitingFor = kOthersLate) {
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
                    timeoutMs, waitingFor);
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
    if (bytes > kMaxBlobBytes || bytes * static_cast<uint64_t>(nranks_) > kMaxGatherBytes) {
      return setError(tparInvalidArgument,
                      "bootstrap allGather: %zu bytes x %d ranks is more than the bootstrap "
                      "carries (%llu bytes per rank, %llu in all)",
                      bytes, nranks_, static_cast<unsigned long long>(kMaxBlobBytes),
                      static_cast<unsigned long long>(kMaxGatherBytes));
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
    Request request = {};
    request.magic = kWireMagic;
    request.kind = kind;
    request.bytes = bytes;
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
  if (memchr(layout->socketName, '\0', sizeof(layout->socketName)) == nullptr) {
    return setError(tparInvalidArgument,
                    "uniqueId is corrupted (its socket name is not terminated within %zu bytes)",
                    sizeof(layout->socketName));
  }
  if (layout->checksum != idChecksum(*layout)) {
    return setError(tparInvalidArgument, "uniqueId is corrupted (checksum mismatch)");
  }
  return tparSuccess;
}

// A full listen backlog (EAGAIN) means the service is there but busy: with a burst of ranks, or
// with a process that keeps connecting to it (NOTE [bootstrap authentication]). Such a service
// is worth waiting for as long as the rank waits for its peers, and the wait is in the kernel's
// queue of connectors (a blocking connect bounded by SO_SNDTIMEO), which the service's next
// accept wakes: a rank that slept and retried would have to find a free slot before processes
// that never sleep.
tparResult_t connectService(const char* name, int rank, int64_t timeoutMs, int* out) {
  sockaddr_un addr;
  socklen_t len = socketAddress(name, &addr);
  const int64_t start = nowMs();
  const int64_t retryUntil = start + std::min<int64_t>(timeoutMs, kConnectRetryMs);
  const int64_t busyUntil = deadlineAfter(start, timeoutMs);
  for (;;) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return setError(tparSystemError, "bootstrap rank %d: socket failed: %s", rank,
                      errnoText(errno).c_str());
    }
    int rc;
    do {
      // At least 1 ms: a zero SO_SNDTIMEO would mean no bound at all.
      const int64_t left = std::max<int64_t>(busyUntil - nowMs(), 1);
      timeval tv = {static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000 * 1000)};
      rc = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      if (rc == 0) rc = connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      // The rest of the protocol waits with poll; nothing may block beyond its deadline.
      if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        int err = errno;
        close(fd);
        return setError(tparSystemError, "bootstrap rank %d: fcntl failed: %s", rank,
                        errnoText(err).c_str());
      }
      *out = fd;
      return tparSuccess;
    }
    int err = errno;
    close(fd);
    if (err == EAGAIN) {
      if (nowMs() < busyUntil) continue;  // the kernel rounds the bound: wait out the rest
      return setError(tparTimeout,
                      "bootstrap rank %d: the bootstrap service '@%s' accepted no connection of "
                      "this rank within %lld ms (its listen backlog stayed full: more ranks than "
                      "it could take at once, or a process that keeps connecting to it)",
                      rank, name, static_cast<long long>(timeoutMs));
    }
    bool transient = err == ECONNREFUSED || err == ENOENT;
    if (!transient || nowMs() >= retryUntil) {
      return setError(tparSystemError,
                      "bootstrap rank %d: cannot reach the bootstrap service '@%s': %s (has the "
                      "process that called tparGetUniqueId exited, or did the service time out?)",
                      rank, name, errnoText(err).c_str());
    }
    usleep(10 * 1000);
  }
}

// NOTE [bootstrap authentication]: the service must run as a user this rank trusts.
tparResult_t checkServiceUser(int fd, const IdLayout& layout, int rank,
                              const BootstrapPeers& peers) {
  PeerCred cred;
  if (!peerCred(fd, &cred)) {
    return setError(tparSystemError, "bootstrap rank %d: cannot read the service's credentials: %s",
                    rank, errnoText(errno).c_str());
  }
  const uint32_t own = peers.trusted_uid >= 0 ? static_cast<uint32_t>(peers.trusted_uid) : geteuid();
  const uint32_t wanted = peers.allow_other_users ? layout.serviceUid : own;
  if (cred.uid != wanted) {
    return setError(tparInvalidUsage,
                    "bootstrap rank %d: the process listening on '@%s' (pid %d) runs as uid %u, "
                    "but the service must run as uid %u: not believed (did the service end and "
                    "another process take its name?)",
                    rank, layout.socketName, cred.pid, cred.uid, wanted);
  }
  return tparSuccess;
}

// The hello handshake (NOTE [bootstrap protocol], NOTE [bootstrap authentication]): take the
// service's challenge, prove ourselves, check the service's proof, then wait for the go-ahead.
tparResult_t handshake(int fd, const IdLayout& layout, int rank, int nranks, int64_t timeoutMs) {
  char what[96];
  snprintf(what, sizeof(what), "bootstrap rank %d of %d", rank, nranks);
  const int64_t authMs = std::min(timeoutMs, kAuthTimeoutMs);
  uint8_t challenge[kNonceBytes];
  TPAR_TRY(awaitReply(fd, deadlineAfter(nowMs(), authMs + kServiceGraceMs), challenge,
                      sizeof(challenge), what, authMs, "it sent no challenge"));
  Request hello = {};
  hello.magic = kWireMagic;
  hello.kind = kHello;
  hello.rank = rank;
  hello.nranks = nranks;
  hello.timeoutMs = timeoutMs;
  TPAR_TRY(randomBytes(hello.nonce, sizeof(hello.nonce)));
  const Mac mac = helloMac(layout, challenge, hello);
  std::copy(mac.begin(), mac.end(), hello.mac);
  uint8_t proof[kMacBytes];
  TPAR_TRY(exchange(fd, hello, nullptr, proof, sizeof(proof), what, authMs,
                    "it did not answer the hello"));
  const Mac expected = serviceMac(layout, challenge, hello);
  if (!constantTimeEqual(expected.data(), proof, kMacBytes)) {
    return setError(tparInvalidUsage,
                    "%s: the process listening on '@%s' cannot prove it holds the uniqueId's "
                    "secret: not believed (did the service end and another process take its "
                    "name?)",
                    what, layout.socketName);
  }
  return awaitReply(fd, deadlineAfter(deadlineAfter(nowMs(), timeoutMs), kServiceGraceMs),
                    nullptr, 0, what, timeoutMs);
}

}  // namespace

tparResult_t connectBootstrap(const tparUniqueId& id, int rank, int nranks, int64_t timeout_ms,
                              std::unique_ptr<Bootstrap>* out, const BootstrapPeers& peers) {
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
  uint64_t host = 0;
  TPAR_TRY(hostIdentity(&host));
  if (layout.hostHash != host) {
    return setError(tparInvalidUsage,
                    "uniqueId was created on another host (or before a reboot): tpar is "
                    "intra-node, every rank must run on the host that called tparGetUniqueId");
  }
  int fd = -1;
  TPAR_TRY(connectService(layout.socketName, rank, timeout_ms, &fd));
  tparResult_t res = checkServiceUser(fd, layout, rank, peers);
  if (res == tparSuccess) res = handshake(fd, layout, rank, nranks, timeout_ms);
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

}  // namespace tpar
