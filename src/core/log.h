// Diagnostics on stderr, filtered by TPAR_DEBUG.
#ifndef TPAR_CORE_LOG_H_
#define TPAR_CORE_LOG_H_

namespace tpar {

enum class LogLevel { kWarn = 0, kInfo = 1, kDebug = 2 };

void logMessage(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace tpar

#define TPAR_WARN(...) ::tpar::logMessage(::tpar::LogLevel::kWarn, __VA_ARGS__)
#define TPAR_INFO(...) ::tpar::logMessage(::tpar::LogLevel::kInfo, __VA_ARGS__)
#define TPAR_DEBUG_LOG(...) ::tpar::logMessage(::tpar::LogLevel::kDebug, __VA_ARGS__)

#endif  // TPAR_CORE_LOG_H_
