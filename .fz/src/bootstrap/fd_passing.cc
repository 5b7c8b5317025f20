// File-descriptor passing (SCM_RIGHTS) over a connected UNIX-domain socket, for exchanging VMM
// shareable handles between processes.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_util.h"
#include "base/error.h"

namespace tpar {
namespace {

using bootstrap_detail::deadlineAfter;
using bootstrap_detail::errnoText;
using bootstrap_detail::Io;
using bootstrap_detail::nowMs;
using bootstrap_detail::recvAll;
using bootstrap_detail::sendAll;
using bootstrap_detail::waitFd;

constexpr uint32_t kFdMagic = 0x74704644u;  // "tpFD"
// sendFds has no timeout parameter; a peer that stops reading must still not block it forever.
constexpr int64_t kSendFdsTimeoutMs = 10000;
constexpr int kMaxFdsPerMessage = 253;  // the kernel's SCM_MAX_FD

}  // namespace

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
