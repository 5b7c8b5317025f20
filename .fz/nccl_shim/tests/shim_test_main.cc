// main() of the shim's CPU tests. Tests named ShimChild.* run only inside a child process that
// a parent test starts with the environment they need (the shim reads its settings and finds
// its NCCL once per process); a plain run leaves them out.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "common/test_main.h"

int main(int argc, char** argv) {
  return tpar_test::runTests(argc, argv, [] {
    if (std::getenv("TPAR_SHIM_TEST_CHILD") != nullptr) return;
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-ShimChild.*" : ":ShimChild.*";
    ::testing::GTEST_FLAG(filter) = filter;
  });
}
