// NOTE [identity] in identity.h.
#include "base/identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/error.h"
#include "base/hash.h"

namespace tpar {
namespace {

constexpr const char* kBootIdPath = "/proc/sys/kernel/random/boot_id";

std::string errnoText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof(buf));  // the GNU variant: returns the text
}

// Reads the boot id; false with *why on failure.
bool readBootId(std::string* out, std::string* why) {
  const int fd = open(kBootIdPath, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = errnoText(errno);
    return false;
  }
  char buf[64] = {};
  ssize_t n;
  do {
    n = read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (n <= 0) {
    *why = n < 0 ? errnoText(err) : "the file is empty";
    return false;
  }
  std::string id(buf, static_cast<size_t>(n));
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  *out = id;
  return true;
}

}  // namespace

uint64_t hostIdentityOf(const char* hostname, const char* boot_id) {
  // The NUL keeps ("ab", "c") and ("a", "bc") apart.
  uint64_t h = fnv1a(hostname, std::strlen(hostname) + 1);
  return fnv1a(boot_id, std::strlen(boot_id), h);
}

tparResult_t hostIdentity(uint64_t* out) {
  // Only a successful read is kept: a transient failure (descriptors exhausted) is reported
  // each time it happens and does not poison later calls.
  static std::mutex mu;
  static std::string boot_id;
  std::lock_guard<std::mutex> lock(mu);
  if (boot_id.empty()) {
    std::string why;
    if (!readBootId(&boot_id, &why)) {
      boot_id.clear();
      return setError(tparSystemError,
                      "cannot read %s (%s): without it tpar cannot tell whether two processes "
                      "run on the same machine boot",
                      kBootIdPath, why.c_str());
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    return setError(tparSystemError, "gethostname failed: %s", errnoText(errno).c_str());
  }
  *out = hostIdentityOf(host, boot_id.c_str());
  return tparSuccess;
}

tparResult_t processIdentity(ProcessIdentity* out) {
  ProcessIdentity id = {};
  TPAR_TRY(hostIdentity(&id.host));
  struct stat st;
  // stat needs no descriptor, so it works even when the table is full.
  if (stat("/proc/self/ns/pid", &st) == 0) {
    const uint64_t parts[2] = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
    id.pid_namespace = fnv1a(parts, sizeof(parts));
  } else if (errno != ENOENT) {
    return setError(tparSystemError, "cannot stat /proc/self/ns/pid: %s", errnoText(errno).c_str());
  }
  id.pid = static_cast<int32_t>(getpid());
  *out = id;
  return tparSuccess;
}

}  // namespace tpar
