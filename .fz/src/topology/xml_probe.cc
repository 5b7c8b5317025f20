// NOTE [topology crash guard] in xml_probe.h.
#include "topology/xml_probe.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <hwloc.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/user_file.h"

extern char** environ;

namespace tpar {
namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Closes a descriptor when it goes out of scope.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// The value of attribute `name` in the start tag that begins at `tag` ("" when absent).
std::string attribute(const std::string& xml, size_t tag, const char* name) {
  const size_t end = xml.find('>', tag);
  const std::string key = std::string(name) + "=";
  for (size_t at = xml.find(key, tag); at != std::string::npos && at < end;
       at = xml.find(key, at + 1)) {
    const char before = xml[at - 1];
    if (before != ' ' && before != '\t' && before != '\n' && before != '\r') continue;
    const size_t open = at + key.size();
    if (open >= xml.size() || (xml[open] != '"' && xml[open] != '\'')) return "";
    const size_t close = xml.find(xml[open], open + 1);
    if (close == std::string::npos || close > end) return "";
    return xml.substr(open + 1, close - open - 1);
  }
  return "";
}

}  // namespace

tparResult_t readTopologyXml(const std::string& path, std::string* xml) {
  // NOTE [user files]: a FIFO or a device is refused before anything waits on it. A file that
  // cannot be read is, for the loader, one more bad argument (its message says why).
  const tparResult_t r = readUserFile(path, "topology XML", kMaxTopologyXmlBytes, xml);
  return r == tparSuccess ? r : tparInvalidArgument;
}

tparResult_t checkXmlFormatVersion(const std::string& xml, const std::string& path) {
  // The root element; the XML declaration and the DOCTYPE come before it.
  size_t tag = xml.find("<topology");
  while (tag != std::string::npos && tag + 9 < xml.size() && xml[tag + 9] != ' ' &&
         xml[tag + 9] != '>' && xml[tag + 9] != '\n' && xml[tag + 9] != '\t' &&
         xml[tag + 9] != '\r') {
    tag = xml.find("<topology", tag + 1);  // a <topologyfoo> is another element
  }
  if (tag == std::string::npos) return tparSuccess;  // hwloc's own message says what is wrong
  const std::string version = attribute(xml, tag, "version");
  if (version.empty()) return tparSuccess;  // format 1.x wrote none; hwloc 2 reads it
  const unsigned api = hwloc_get_api_version();
  const unsigned readable = api >> 16;  // hwloc 2.x reads XML formats 1.x and 2.x
  char* end = nullptr;
  const unsigned long major = std::strtoul(version.c_str(), &end, 10);
  if (end == version.c_str() || major <= readable) return tparSuccess;
  return setError(tparInvalidArgument,
                  "topology XML %s is in hwloc's XML format %s (written by hwloc %lu); the "
                  "installed hwloc (API %u.%u) reads formats up to %u.x. Save the topology with "
                  "an hwloc %u.x lstopo (lstopo --whole-io file.xml)",
                  path.c_str(), version.c_str(), major, api >> 16, (api >> 8) & 0xff, readable,
                  readable);
}

std::string probeHelperPath() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&probeHelperPath), &info) == 0 || info.dli_fname == nullptr) {
    return "";
  }
  char real[PATH_MAX];
  std::string self;
  if (realpath(info.dli_fname, real) != nullptr) {
    self = real;
  } else {
    // The main program may be named relative to a directory that is no longer the current one.
    const ssize_t n = readlink("/proc/self/exe", real, sizeof(real) - 1);
    if (n <= 0) return "";
    self.assign(real, static_cast<size_t>(n));
  }
  const std::string dir = self.substr(0, self.rfind('/'));
  for (const std::string& candidate :
       {dir + "/tpar-hwloc-probe", dir + "/../libexec/tpar/tpar-hwloc-probe"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

tparResult_t probeTopologyXml(const std::string& xml, const std::string& path,
                              const std::string& helper, int64_t timeout_ms) {
  // The bytes go to the helper as its standard input: a memfd, so that nothing is written to
  // a file system and the helper reads what this process read.
  Fd input;
  input.fd = memfd_create("tpar-topology-xml", MFD_CLOEXEC);
  if (input.fd < 0) return setError(tparSystemError, "memfd_create failed: %s", std::strerror(errno));
  for (size_t done = 0; done < xml.size();) {
    const ssize_t n = write(input.fd, xml.data() + done, xml.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return setError(tparSystemError, "writing the topology for the probe failed");
    done += static_cast<size_t>(n);
  }
  lseek(input.fd, 0, SEEK_SET);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return setError(tparSystemError, "pipe2 failed: %s", std::strerror(errno));
  }
  Fd verdict_in, verdict_out;
  verdict_in.fd = pipe_fds[0];
  verdict_out.fd = pipe_fds[1];

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, input.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, verdict_out.fd, 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Default dispositions and an empty mask: a crash ends the helper, whatever this process
  // (a sanitizer, a fuzzer, an interpreter) installed.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  const std::string arg0 = helper;
  char* argv[] = {const_cast<char*>(arg0.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, helper.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return setError(tparSystemError, "cannot start the topology probe %s: %s", helper.c_str(),
                    std::strerror(rc));
  }
  close(verdict_out.fd);  // only the helper holds the write end now: its exit means EOF
  verdict_out.fd = -1;

  // The verdict's value does not matter: a file hwloc refuses is refused again, with hwloc's
  // message, by the load that follows. What matters is that an answer came.
  bool answered = false, ended = false;
  const int64_t deadline = nowMs() + timeout_ms;
  while (!ended) {
    const int64_t left = deadline - nowMs();
    if (left <= 0) break;
    pollfd p = {verdict_in.fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    char byte;
    const ssize_t n = read(verdict_in.fd, &byte, 1);
    if (n == 1) {
      answered = true;
    } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
      ended = true;
    }
  }
  if (!ended) {
    // No EOF yet: the helper is still alive (only it holds the pipe), so `pid` is still its.
    kill(pid, SIGKILL);
  }
  // Reap it when we can; with SIGCHLD ignored the kernel already has (ECHILD), and a handler
  // of the caller's may have too. Bounded either way: it has exited or been killed.
  int status = 0;
  bool reaped = false;
  for (const int64_t until = nowMs() + 1000; nowMs() < until;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!ended) {
    return setError(tparInvalidArgument,
                    "topology XML %s: hwloc did not finish loading it within %lld ms (in the "
                    "probe %s); not a topology tpar can use",
                    path.c_str(), static_cast<long long>(timeout_ms), helper.c_str());
  }
  if (!answered) {
    const std::string how = reaped && WIFSIGNALED(status)
                                ? "signal " + std::to_string(WTERMSIG(status))
                                : std::string("it ended without an answer");
    return setError(tparInvalidArgument,
                    "topology XML %s crashes hwloc (%s while loading it in the probe): not a "
                    "valid hwloc XML topology",
                    path.c_str(), how.c_str());
  }
  return tparSuccess;  // a load error is reported by the real load, with its message
}

}  // namespace tpar
