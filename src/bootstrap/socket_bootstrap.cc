// The ranks' side of the bootstrap over an abstract-namespace UNIX-domain socket: each rank
// connects to the root service (bootstrap_service.cc) that createUniqueId started. See
// NOTE [bootstrap protocol] and NOTE [bootstrap deadlines] in socket_util.h.
#include <sys/socket.h>
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
#include "core/error.h"

namespace tpar {
namespace {

using bootstrap_detail::deadlineAfter;
using bootstrap_detail::errnoText;
using bootstrap_detail::hostHash;
using bootstrap_detail::idChecksum;
using bootstrap_detail::IdLayout;
using bootstrap_detail::Io;
using bootstrap_detail::kAllGather;
using bootstrap_detail::kBarrier;
using bootstrap_detail::kHello;
using bootstrap_detail::kIdMagic;
using bootstrap_detail::kIdVersion;
using bootstrap_detail::kindName;
using bootstrap_detail::kMaxErrorText;
using bootstrap_detail::kMaxRanks;
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

}  // namespace tpar
