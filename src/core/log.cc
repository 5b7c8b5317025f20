#include "core/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "core/env.h"
#include "core/error.h"

namespace tpar {

void logMessage(LogLevel level, const char* fmt, ...) {
  const Env* env = nullptr;
  // processEnv may record a parse failure as this thread's last error; keep the caller's.
  const std::string saved = lastError();
  const int threshold = processEnv(&env) == tparSuccess ? env->log_level : 0;
  setError(tparSuccess, "%s", saved.c_str());
  if (static_cast<int>(level) > threshold) return;
  static const char* kNames[] = {"WARN", "INFO", "DEBUG"};
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "tpar %d %s %s\n", static_cast<int>(getpid()),
               kNames[static_cast<int>(level)], buf);
}

}  // namespace tpar
