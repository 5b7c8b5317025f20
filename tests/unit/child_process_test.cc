// The test harness's child processes: what they inherit from the parent's environment.
#include <stdlib.h>

#include <random>
#include <string>

#include <gtest/gtest.h>

#include "common/child_process.h"

namespace {

// Sets NAME for this process and puts the previous value back at the end of the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = getenv(name)) {
      had_ = true;
      old_ = old;
    }
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::string childSees(const std::vector<std::string>& env) {
  std::string out;
  const int rc = tpar_test::runChild(
      {"/bin/sh", "-c",
       "echo T=${GTEST_TOTAL_SHARDS-unset} I=${GTEST_SHARD_INDEX-unset} "
       "F=${GTEST_SHARD_STATUS_FILE-unset} K=${TPAR_CHILD_TEST_KEEP-unset}"},
      env, 30, &out);
  EXPECT_EQ(0, rc) << out;
  return out;
}

TEST(ChildProcess, ChildrenRunTheirOwnFilterNotTheParentsShard) {
  std::mt19937 rng(std::random_device{}());
  const std::string keep = std::to_string(rng());
  const std::string shards = std::to_string(2 + rng() % 6);
  const ScopedEnv total("GTEST_TOTAL_SHARDS", shards);
  const ScopedEnv index("GTEST_SHARD_INDEX", "1");
  const ScopedEnv status("GTEST_SHARD_STATUS_FILE", "/tmp/tpar-shard-status");
  const ScopedEnv other("TPAR_CHILD_TEST_KEEP", keep);
  // The sharding variables stay behind; everything else is inherited.
  EXPECT_EQ("T=unset I=unset F=unset K=" + keep + "\n", childSees({}));
  // A test may still hand its child a shard on purpose.
  EXPECT_EQ("T=" + shards + " I=0 F=unset K=" + keep + "\n",
            childSees({"GTEST_TOTAL_SHARDS=" + shards, "GTEST_SHARD_INDEX=0"}));
}

}  // namespace
