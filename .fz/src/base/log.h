// Diagnostics, in the shape NCCL users know (docs/LOGGING.md):
//
//   host:pid:tid [rank@device] tpar LEVEL message
//
// TPAR_DEBUG sets the level (none, version, warn, info, trace; any case), TPAR_DEBUG_SUBSYS
// which subsystems print at info and trace (warnings always print), TPAR_DEBUG_FILE where
// (stderr by default; %h is the host name, %p the process id).
#ifndef TPAR_BASE_LOG_H_
#define TPAR_BASE_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace tpar {

// In increasing verbosity; a message prints when its level is at most the configured one.
enum class LogLevel { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kTrace = 4 };

// Subsystems, as TPAR_DEBUG_SUBSYS names them (logSubsysNames()).
enum LogSubsys : uint32_t {
  kLogInit = 1u << 0,       // INIT: communicator creation, destroy, abort
  kLogColl = 1u << 1,       // COLL: collective calls, their asynchronous errors
  kLogBootstrap = 1u << 2,  // BOOTSTRAP: the rendezvous of the ranks
  kLogTopo = 1u << 3,       // TOPO: topology discovery
  kLogTransport = 1u << 4,  // TRANSPORT: where receive regions live, peer mappings
  kLogTuning = 1u << 5,     // TUNING: the algorithm table, tuning files
  kLogEnv = 1u << 6,        // ENV: the TPAR_* variables that are set
  kLogNccl = 1u << 7,       // NCCL: calls routed to NCCL
  kLogAll = 0xffffffffu,
};

// TPAR_DEBUG and TPAR_DEBUG_SUBSYS are parsed with the registry (base/env.h: parseLogLevel,
// parseLogSubsys).

// TPAR_DEBUG_FILE: %h becomes the host name, %p the process id, %% a '%'.
std::string expandLogFileName(const std::string& pattern, const std::string& host, int pid);
// "host:pid:tid [rank@device] tpar LEVEL " (rank or device -1: "-").
std::string logPrefix(const std::string& host, int pid, int tid, int rank, int device,
                      LogLevel level);

// Whether a message of `level` in `subsys` would print. Cheap: the settings are read once.
bool logEnabled(LogLevel level, uint32_t subsys);

// The subsystems that print at trace (0 when the level is below trace); every bit until the
// settings are read, so that the first check reads them. Per-call paths test it before
// anything else: one load when tracing is off (traceEnabled).
extern std::atomic<uint32_t> g_trace_subsys;
inline bool traceEnabled(uint32_t subsys) {
  return (g_trace_subsys.load(std::memory_order_relaxed) & subsys) != 0 &&
         logEnabled(LogLevel::kTrace, subsys);
}

void logMessage(LogLevel level, uint32_t subsys, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

// The rank and device this thread works for while the scope lives: the [rank@device] of the
// prefix. Scopes nest; the innermost wins.
class LogScope {
 public:
  LogScope(int rank, int device);
  ~LogScope();
  LogScope(const LogScope&) = delete;
  LogScope& operator=(const LogScope&) = delete;

 private:
  int saved_rank_, saved_device_;
};

// For tests: re-reads the settings from `level`, `subsys` and `file` (as the variables would
// give them) instead of the process environment, and closes a log file that was open.
void resetLogSettingsForTest(const std::string& level, const std::string& subsys,
                             const std::string& file);

}  // namespace tpar

#define TPAR_LOG_AT(level, subsys, ...)                                          \
  do {                                                                          \
    if (::tpar::logEnabled(level, subsys)) ::tpar::logMessage(level, subsys, __VA_ARGS__); \
  } while (0)
// Warnings print at the default level, whatever TPAR_DEBUG_SUBSYS says.
#define TPAR_WARN(...) TPAR_LOG_AT(::tpar::LogLevel::kWarn, ::tpar::kLogAll, __VA_ARGS__)
#define TPAR_INFO(subsys, ...) TPAR_LOG_AT(::tpar::LogLevel::kInfo, subsys, __VA_ARGS__)
#define TPAR_TRACE(subsys, ...) TPAR_LOG_AT(::tpar::LogLevel::kTrace, subsys, __VA_ARGS__)

#endif  // TPAR_BASE_LOG_H_
