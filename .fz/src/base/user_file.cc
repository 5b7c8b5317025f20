// NOTE [user files] in user_file.h.
#include "base/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace tpar {
namespace {

const char* kindOf(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

tparResult_t notRegular(const std::string& path, const char* what, mode_t mode) {
  return setError(tparInvalidArgument, "%s %s is not a regular file (it is %s)", what, path.c_str(),
                  kindOf(mode));
}

// Closes the descriptor unless released.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) close(fd);
  }
  int release() {
    const int f = fd;
    fd = -1;
    return f;
  }
};

}  // namespace

tparResult_t openUserFile(const std::string& path, UserFileMode mode, const char* what, int* fd) {
  const bool write = mode == UserFileMode::kWrite;
  if (path.empty()) return setError(tparInvalidArgument, "%s: the path is empty", what);
  // No O_TRUNC: a device or a FIFO is refused untouched, and an existing file keeps its
  // contents until writeUserFile has something to put there.
  const int flags = (write ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC | O_NONBLOCK;
  FdGuard f{open(path.c_str(), flags, 0644)};
  if (f.fd < 0) {
    const int err = errno;
    // ENXIO (a FIFO without a reader, a socket), EISDIR: say what the path is instead.
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      return notRegular(path, what, st.st_mode);
    return setError(tparSystemError, "cannot %s %s %s: %s", write ? "write" : "read", what,
                    path.c_str(), std::strerror(err));
  }
  struct stat st;
  if (fstat(f.fd, &st) != 0) {
    return setError(tparSystemError, "cannot %s %s %s: fstat: %s", write ? "write" : "read", what,
                    path.c_str(), std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return notRegular(path, what, st.st_mode);
  // A regular file never blocks, but reads and writes that see EAGAIN would look like errors.
  const int fl = fcntl(f.fd, F_GETFL);
  if (fl < 0 || fcntl(f.fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return setError(tparSystemError, "%s %s: fcntl: %s", what, path.c_str(), std::strerror(errno));
  }
  *fd = f.release();
  return tparSuccess;
}

tparResult_t readUserFile(const std::string& path, const char* what, size_t max_bytes,
                          std::string* out) {
  int raw = -1;
  TPAR_TRY(openUserFile(path, UserFileMode::kRead, what, &raw));
  FdGuard f{raw};
  struct stat st;
  if (fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > max_bytes) {
    return setError(tparInvalidArgument, "%s %s has %lld bytes, more than the %zu allowed", what,
                    path.c_str(), static_cast<long long>(st.st_size), max_bytes);
  }
  std::string data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(f.fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return setError(tparSystemError, "cannot read %s %s: %s", what, path.c_str(),
                      std::strerror(errno));
    }
    if (n == 0) break;
    if (data.size() + static_cast<size_t>(n) > max_bytes) {
      return setError(tparInvalidArgument, "%s %s grew past %zu bytes while read", what,
                      path.c_str(), max_bytes);
    }
    data.append(buf, static_cast<size_t>(n));
  }
  *out = std::move(data);
  return tparSuccess;
}

tparResult_t writeUserFile(const std::string& path, const char* what, const std::string& data) {
  int raw = -1;
  TPAR_TRY(openUserFile(path, UserFileMode::kWrite, what, &raw));
  FdGuard f{raw};
  if (ftruncate(f.fd, 0) != 0) {
    return setError(tparSystemError, "cannot write %s %s: %s", what, path.c_str(),
                    std::strerror(errno));
  }
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = write(f.fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return setError(tparSystemError, "cannot write %s %s: %s", what, path.c_str(),
                      n < 0 ? std::strerror(errno) : "nothing written");
    }
    done += static_cast<size_t>(n);
  }
  if (close(f.release()) != 0) {
    return setError(tparSystemError, "cannot write %s %s: %s", what, path.c_str(),
                    std::strerror(errno));
  }
  return tparSuccess;
}

tparResult_t checkUserFile(const std::string& path, const char* what) {
  int fd = -1;
  TPAR_TRY(openUserFile(path, UserFileMode::kRead, what, &fd));
  close(fd);
  return tparSuccess;
}

}  // namespace tpar
