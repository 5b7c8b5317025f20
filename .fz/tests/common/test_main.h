// The exit status of every GoogleTest binary of tpar, so that CTest reports each test as what
// it was: passed, failed or skipped.
//
// NOTE [skip exit code]
// CTest runs one GoogleTest case per test (gtest_discover_tests). A case that skipped must read
// as skipped and a case that failed as failed, whatever either printed. Matching the output for
// "[  SKIPPED ]" (SKIP_REGULAR_EXPRESSION) gets this wrong: CTest lets the match override the
// exit status, so a case that printed the marker and then failed, or a parent test that failed
// and printed a child's output holding the marker, read as "Not Run". Instead, when CTest
// passes --tpar_skip_exit_code=N (tpar_add_gtests in tests/CMakeLists.txt), the binary exits N
// only when no case failed, at least one skipped and none passed; CTest maps N to "Not Run"
// (SKIP_RETURN_CODE N). A failure always exits 1, and a run that matched no case exits 1, since
// a test that ran nothing has not passed. Without the flag (people, child processes of tests)
// the exit status is GoogleTest's own.
#ifndef TPAR_TESTS_COMMON_TEST_MAIN_H_
#define TPAR_TESTS_COMMON_TEST_MAIN_H_

namespace tpar_test {

// What the binary exits with, from GoogleTest's counts after RUN_ALL_TESTS returned
// `run_all_status`; skip_exit_code 0: the flag was not given.
int testExitStatus(int run_all_status, int passed, int failed, int skipped, int skip_exit_code);

// Removes --tpar_skip_exit_code=N from argv; returns N, 0 when absent, -1 when malformed.
int takeSkipExitCode(int* argc, char** argv);

// InitGoogleTest, `before_run` (may be null: listeners, filters), RUN_ALL_TESTS, then the exit
// status above. Every test binary's main() ends here.
int runTests(int argc, char** argv, void (*before_run)() = nullptr);

}  // namespace tpar_test

#endif  // TPAR_TESTS_COMMON_TEST_MAIN_H_
