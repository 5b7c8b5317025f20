#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "base/env.h"
#include "base/error.h"
#include "base/user_file.h"

namespace tpar {

std::atomic<uint32_t> g_trace_subsys{kLogAll};

namespace {

// The settings, read once from the environment (or set by a test). level -1: not read yet.
struct Settings {
  std::atomic<int> level{-1};
  std::atomic<uint32_t> subsys{kLogAll};
  std::atomic<bool> level_set{false};  // TPAR_DEBUG was given: the version line prints
  std::mutex mu;     // guards the rest
  std::string file;  // TPAR_DEBUG_FILE, unexpanded
  FILE* out = nullptr;
  bool opened = false;
};

Settings& settings() {
  static Settings* s = new Settings;  // never destroyed: logging may run during exit
  return *s;
}

thread_local int t_rank = -1;
thread_local int t_device = -1;

void apply(Settings& s, LogLevel level, bool level_set, uint32_t subsys,
           const std::string& file) {
  std::lock_guard<std::mutex> lock(s.mu);
  s.level_set.store(level_set, std::memory_order_relaxed);
  if (s.out != nullptr && s.out != stderr) std::fclose(s.out);
  s.out = nullptr;
  s.opened = false;
  s.file = file;
  s.subsys.store(subsys, std::memory_order_relaxed);
  s.level.store(static_cast<int>(level), std::memory_order_release);
  g_trace_subsys.store(level >= LogLevel::kTrace ? subsys : 0u, std::memory_order_relaxed);
}

int currentLevel() {
  Settings& s = settings();
  int level = s.level.load(std::memory_order_acquire);
  if (level >= 0) return level;
  static std::once_flag once;
  std::call_once(once, [&s] {
    // processEnv may record a parse failure as this thread's last error; keep the caller's.
    const std::string saved = lastError();
    const Env* env = nullptr;
    if (processEnv(&env) == tparSuccess) {
      apply(s, static_cast<LogLevel>(env->log_level), env->log_level_set, env->log_subsys,
            env->log_file);
    } else {
      // A malformed variable fails every init with its name; logging keeps its defaults.
      apply(s, LogLevel::kWarn, false, kLogAll, "");
    }
    setError(tparSuccess, "%s", saved.c_str());
  });
  return s.level.load(std::memory_order_acquire);
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

// Where messages go: TPAR_DEBUG_FILE, opened on first use, else stderr. Called with s.mu held.
FILE* output(Settings& s) {
  if (s.opened) return s.out;
  s.opened = true;
  s.out = stderr;
  if (s.file.empty()) return s.out;
  const std::string path = expandLogFileName(s.file, hostName(), static_cast<int>(getpid()));
  // NOTE [user files]: a FIFO or a device must not hold up the first log line; the message
  // goes to stderr, and the caller's last error stays as it was.
  const std::string saved = lastError();
  int fd = -1;
  FILE* f = nullptr;
  std::string why;
  if (openUserFile(path, UserFileMode::kWrite, "TPAR_DEBUG_FILE", &fd) != tparSuccess) {
    why = lastError();
  } else if (ftruncate(fd, 0) != 0 || (f = fdopen(fd, "w")) == nullptr) {
    why = "cannot write TPAR_DEBUG_FILE " + path + ": " + std::strerror(errno);
    close(fd);
  }
  setError(tparSuccess, "%s", saved.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "%s %s; logging to stderr\n",
                 logPrefix(hostName(), getpid(), static_cast<int>(syscall(SYS_gettid)), t_rank,
                           t_device, LogLevel::kWarn)
                     .c_str(),
                 why.c_str());
    return s.out;
  }
  setvbuf(f, nullptr, _IOLBF, 0);
  s.out = f;
  return s.out;
}

}  // namespace

std::string expandLogFileName(const std::string& pattern, const std::string& host, int pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') out += host;
    else if (c == 'p') out += std::to_string(pid);
    else if (c == '%') out += '%';
    else out += std::string("%") + c;  // not ours: kept as written
  }
  return out;
}

std::string logPrefix(const std::string& host, int pid, int tid, int rank, int device,
                      LogLevel level) {
  static const char* kNames[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  auto part = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
  return host + ":" + std::to_string(pid) + ":" + std::to_string(tid) + " [" + part(rank) + "@" +
         part(device) + "] tpar " + kNames[static_cast<int>(level)];
}

bool logEnabled(LogLevel level, uint32_t subsys) {
  const int configured = currentLevel();
  if (static_cast<int>(level) > configured || level == LogLevel::kNone) return false;
  // The version line prints when TPAR_DEBUG asks for logging at all (the default level,
  // warn, stays quiet until something is wrong).
  if (level == LogLevel::kVersion) return settings().level_set.load(std::memory_order_relaxed);
  // The subsystem filter applies to info and trace; warnings always print.
  if (level == LogLevel::kWarn) return true;
  return (settings().subsys.load(std::memory_order_relaxed) & subsys) != 0;
}

void logMessage(LogLevel level, uint32_t subsys, const char* fmt, ...) {
  if (!logEnabled(level, subsys)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  // Never destroyed, like the settings: detached threads may log while the process exits.
  static const std::string& host = *new std::string(hostName());
  // The version line is informational: it carries INFO, as NCCL's does.
  const LogLevel shown = level == LogLevel::kVersion ? LogLevel::kInfo : level;
  const std::string line = logPrefix(host, static_cast<int>(getpid()),
                                     static_cast<int>(syscall(SYS_gettid)), t_rank, t_device,
                                     shown) +
                           " " + msg + "\n";
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mu);
  FILE* out = output(s);
  std::fwrite(line.data(), 1, line.size(), out);
  std::fflush(out);
}

LogScope::LogScope(int rank, int device) : saved_rank_(t_rank), saved_device_(t_device) {
  t_rank = rank;
  t_device = device;
}

LogScope::~LogScope() {
  t_rank = saved_rank_;
  t_device = saved_device_;
}

void resetLogSettingsForTest(const std::string& level, const std::string& subsys,
                             const std::string& file) {
  currentLevel();  // the environment's reading, if still pending, must not overwrite this
  LogLevel l = LogLevel::kWarn;
  uint32_t mask = kLogAll;
  const bool level_set = parseLogLevel(level, &l);
  parseLogSubsys(subsys, &mask);
  apply(settings(), l, level_set, mask, file);
}

}  // namespace tpar
