// What the fuzz targets share. A broken invariant must stop the run with its reason on stderr:
// abort() is what libFuzzer records as a crash, and it then saves the input as an artifact.
#ifndef TPAR_TESTS_FUZZ_FUZZ_CHECK_H_
#define TPAR_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace tpar_fuzz {

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

inline void fail(const char* fmt, ...) {
  std::fprintf(stderr, "fuzz invariant violated: ");
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\n");
  std::abort();
}

}  // namespace tpar_fuzz

#endif  // TPAR_TESTS_FUZZ_FUZZ_CHECK_H_
