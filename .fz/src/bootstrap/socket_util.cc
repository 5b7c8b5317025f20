// Helpers shared by the bootstrap service, the ranks' side and fd passing: see socket_util.h.
#include "bootstrap/socket_util.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>

#include "bootstrap/sha256.h"
#include "base/error.h"
#include "base/hash.h"

namespace tpar {
namespace bootstrap_detail {

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

int64_t deadlineAfter(int64_t start, int64_t ms) {
  return ms >= kNoDeadline - start ? kNoDeadline : start + ms;
}

const char* kindName(uint32_t kind) { return kind == kBarrier ? "barrier" : "allGather"; }

uint64_t idChecksum(IdLayout layout) {
  layout.checksum = 0;
  return fnv1a(&layout, sizeof(layout));
}

namespace {

// The hello's fields that the MACs cover, in a fixed order (padding never enters a MAC).
struct HelloFields {
  int32_t rank;
  int32_t nranks;
  int64_t timeoutMs;
};
static_assert(sizeof(HelloFields) == 16, "no padding inside HelloFields");

Mac macOf(const IdLayout& id, const char* label, const uint8_t* first, const uint8_t* second,
          const Request& hello) {
  const HelloFields fields = {hello.rank, hello.nranks, hello.timeoutMs};
  const ByteSpan parts[] = {{label, strlen(label) + 1},
                            {first, kNonceBytes},
                            {second, kNonceBytes},
                            {&fields, sizeof(fields)}};
  const Sha256Digest d = hmacSha256(id.secret, sizeof(id.secret), parts, 4);
  Mac mac;
  std::copy(d.begin(), d.end(), mac.begin());
  return mac;
}

}  // namespace

Mac helloMac(const IdLayout& id, const uint8_t* serviceNonce, const Request& hello) {
  return macOf(id, "tpar bootstrap rank", serviceNonce, hello.nonce, hello);
}

Mac serviceMac(const IdLayout& id, const uint8_t* serviceNonce, const Request& hello) {
  return macOf(id, "tpar bootstrap service", hello.nonce, serviceNonce, hello);
}

tparResult_t randomBytes(void* out, size_t size) {
  unsigned char* p = static_cast<unsigned char*>(out);
  size_t got = 0;
  while (got < size) {
    ssize_t n = getrandom(p + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      return setError(tparSystemError, "getrandom failed: %s", errnoText(errno).c_str());
    }
  }
  return tparSuccess;
}

bool peerCred(int fd, PeerCred* out) {
  ucred cred = {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred)) {
    return false;
  }
  out->pid = static_cast<int32_t>(cred.pid);
  out->uid = static_cast<uint32_t>(cred.uid);
  return true;
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

}  // namespace bootstrap_detail
}  // namespace tpar
