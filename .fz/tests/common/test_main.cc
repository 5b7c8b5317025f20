#include "common/test_main.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace tpar_test {

int testExitStatus(int run_all_status, int passed, int failed, int skipped, int skip_exit_code) {
  if (run_all_status != 0 || failed > 0) return 1;
  if (skip_exit_code <= 0) return 0;
  if (passed == 0 && skipped == 0) return 1;  // nothing ran: see NOTE [skip exit code]
  return passed == 0 ? skip_exit_code : 0;
}

int takeSkipExitCode(int* argc, char** argv) {
  static const char kFlag[] = "--tpar_skip_exit_code=";
  int code = 0;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::strncmp(argv[i], kFlag, sizeof(kFlag) - 1) != 0) {
      argv[out++] = argv[i];
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(argv[i] + sizeof(kFlag) - 1, &end, 10);
    code = (end != nullptr && *end == '\0' && v > 0 && v < 256) ? static_cast<int>(v) : -1;
  }
  *argc = out;
  argv[out] = nullptr;
  return code;
}

int runTests(int argc, char** argv, void (*before_run)()) {
  const int skip_exit_code = takeSkipExitCode(&argc, argv);
  if (skip_exit_code < 0) {
    std::fprintf(stderr, "--tpar_skip_exit_code takes a number in 1..255\n");
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (before_run != nullptr) before_run();
  const int status = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int passed = unit.successful_test_count();
  const int failed = unit.failed_test_count();
  const int skipped = unit.skipped_test_count();
  const int code = testExitStatus(status, passed, failed, skipped, skip_exit_code);
  if (skip_exit_code > 0 && passed == 0 && skipped == 0 && failed == 0)
    std::fprintf(stderr, "no test case matched --gtest_filter: nothing ran, nothing passed\n");
  return code;
}

}  // namespace tpar_test
