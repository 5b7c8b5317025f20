// Cases with a known outcome, for the check that CTest reports each test as what it was
// (check_ctest_honesty.py; NOTE [skip exit code]). Registered only in a CTest directory of
// their own: two of them fail on purpose.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/child_process.h"

namespace {

TEST(Fake, Passes) { EXPECT_EQ(4, 2 + 2); }

TEST(Fake, Skips) { GTEST_SKIP() << "the outcome under test"; }

// Prints the marker a skip prints, then fails: a failure whatever the output says.
TEST(Fake, PrintsTheSkipMarkerThenFails) {
  std::printf("[  SKIPPED ] Fake.PrintsTheSkipMarkerThenFails (as if)\n");
  std::fflush(stdout);
  std::exit(1);
}

// A parent that fails and shows its child's output, which holds a skip: still a failure.
TEST(Fake, ParentFailsShowingItsSkippedChild) {
  std::string output;
  const int rc = tpar_test::runChild({"/proc/self/exe", "--gtest_filter=DISABLED_FakeChild.*",
                                      "--gtest_also_run_disabled_tests"},
                                     {}, 60, &output);
  ASSERT_NE(std::string::npos, output.find("[  SKIPPED ]")) << output;
  ADD_FAILURE() << "the child (exit " << rc << ") did not do the work:\n" << output;
}

TEST(DISABLED_FakeChild, Skips) { GTEST_SKIP() << "no work here"; }

// Fails first, then skips: GoogleTest counts it as failed, and so must CTest.
TEST(Fake, FailsThenSkips) {
  ADD_FAILURE() << "a real failure";
  GTEST_SKIP() << "skipped after failing";
}

}  // namespace
