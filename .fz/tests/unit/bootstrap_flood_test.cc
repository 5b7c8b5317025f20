// The rendezvous while another user of the host keeps connecting to it: every connection is
// refused, yet each one costs the service an accept, and the ranks' hellos must still be read
// (NOTE [bootstrap authentication] in src/bootstrap/socket_util.h). The flood comes from real
// processes of another uid, so the test needs root; it skips visibly otherwise.
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/socket_util.h"
#include "common/child_process.h"
#include "unit/bootstrap_gather.h"
#include "base/error.h"

namespace tpar {
namespace {

namespace bd = bootstrap_detail;

// A uid no test process runs as: what another user of the machine looks like.
constexpr uid_t kStrangerUid = 65534;
constexpr int kFlooders = 2;
constexpr int kRanks = 4;
// What the ranks allow the rendezvous. A service that never gets back to the hellos (an accept
// loop without a bound) fails the ranks once this runs out: the test ends within seconds
// either way.
constexpr int64_t kRankTimeoutMs = 5000;
// The ranks start once the service has refused this many of the flood's connections.
constexpr uint64_t kRefusalsBeforeRanks = 2000;
// How long the first ranks wait for the last one, their hellos held by the service.
constexpr int64_t kLastRankLateMs = 300;
// A flooding process ends itself after this, should the test process die without killing it.
constexpr int64_t kFloodLimitMs = 30000;

// The flood: runs as kStrangerUid and connects to TPAR_TEST_SOCKET, hanging up at once, in a
// tight loop until killed. Refused connections cost it nothing but a retry.
TEST(DISABLED_BootstrapStrangerFlood, ConnectsAndHangsUpUntilKilled) {
  const char* name = std::getenv("TPAR_TEST_SOCKET");
  const char* parent = std::getenv("TPAR_TEST_PARENT");
  ASSERT_NE(name, nullptr);
  ASSERT_NE(parent, nullptr);
  ASSERT_EQ(setgroups(0, nullptr), 0) << strerror(errno);
  ASSERT_EQ(setresgid(kStrangerUid, kStrangerUid, kStrangerUid), 0) << strerror(errno);
  ASSERT_EQ(setresuid(kStrangerUid, kStrangerUid, kStrangerUid), 0) << strerror(errno);
  // Set after the uid changed, which clears it; the check covers a parent that died before.
  ASSERT_EQ(prctl(PR_SET_PDEATHSIG, SIGKILL), 0) << strerror(errno);
  ASSERT_EQ(getppid(), static_cast<pid_t>(std::atoll(parent))) << "the test process has gone";
  std::printf("flooding '@%s' as uid %u\n", name, getuid());
  std::fflush(stdout);
  sockaddr_un addr;
  const socklen_t len = bd::socketAddress(name, &addr);
  const int64_t end = bd::nowMs() + kFloodLimitMs;
  while (bd::nowMs() < end) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    (void)!connect(fd, reinterpret_cast<const sockaddr*>(&addr), len);
    close(fd);
  }
}

using Outcome = test::GatherOutcome;

Outcome joinAndGather(const tparUniqueId& id, int rank, int nranks, uint64_t seed, size_t bytes) {
  return test::gatherOnce(id, rank, nranks, seed, bytes, kRankTimeoutMs);
}

// Attack: another user reads the socket's name in /proc/net/unix and runs two processes that
// connect to it over and over, from before the ranks arrive until they have gathered.
TEST(BootstrapFlood, GroupFormsWhileAnotherUserFloodsTheSocket) {
  if (geteuid() != 0) {
    GTEST_SKIP() << "needs root: the flood must come from processes of another uid ("
                 << kStrangerUid << ")";
  }
  tparUniqueId id;
  ASSERT_EQ(createUniqueId(&id, 20000), tparSuccess) << lastError();
  bd::IdLayout layout;
  std::memcpy(&layout, id.internal, sizeof(layout));
  const uint64_t atStart = bootstrapTurnedAway().otherUsers;

  // Destroying a ChildProcess kills and reaps it, so every way out of this test ends the flood.
  std::vector<std::unique_ptr<tpar_test::ChildProcess>> flood;
  for (int i = 0; i < kFlooders; ++i) {
    flood.push_back(std::make_unique<tpar_test::ChildProcess>());
    ASSERT_TRUE(flood.back()->start(
        {"/proc/self/exe", "--gtest_filter=DISABLED_BootstrapStrangerFlood.*",
         "--gtest_also_run_disabled_tests"},
        {std::string("TPAR_TEST_SOCKET=") + layout.socketName,
         "TPAR_TEST_PARENT=" + std::to_string(getpid())}));
  }
  // The ranks arrive only once both flooders are hammering the service.
  const int64_t floodDeadline = bd::nowMs() + 10000;
  while (bootstrapTurnedAway().otherUsers - atStart < kRefusalsBeforeRanks &&
         bd::nowMs() < floodDeadline) {
    for (auto& child : flood) ASSERT_TRUE(child->running()) << child->output();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const uint64_t beforeRanks = bootstrapTurnedAway().otherUsers - atStart;
  ASSERT_GE(beforeRanks, kRefusalsBeforeRanks) << "the flood did not reach the service";

  const uint64_t seed = (static_cast<uint64_t>(std::random_device()()) << 32) | 1;
  std::vector<Outcome> out(kRanks);
  std::vector<std::thread> ranks;
  const int64_t ranksStart = bd::nowMs();
  auto startRank = [&](int r) {
    ranks.emplace_back([&, r] { out[r] = joinAndGather(id, r, kRanks, seed, 256); });
  };
  // The first ranks' hellos wait for the last rank for a while, with the flood going on.
  for (int r = 0; r < kRanks - 1; ++r) startRank(r);
  std::this_thread::sleep_for(std::chrono::milliseconds(kLastRankLateMs));
  const uint64_t whileWaiting = bootstrapTurnedAway().otherUsers - atStart - beforeRanks;
  startRank(kRanks - 1);
  for (auto& t : ranks) t.join();
  const int64_t ranksMs = bd::nowMs() - ranksStart;
  for (auto& child : flood) {
    EXPECT_TRUE(child->running()) << "a flooder ended before the ranks were done: "
                                  << child->output();
  }
  flood.clear();
  std::printf("uid %u was refused %llu times before the ranks came and %llu times in the first "
              "%lld ms of the %lld ms they took to gather\n",
              kStrangerUid, static_cast<unsigned long long>(beforeRanks),
              static_cast<unsigned long long>(whileWaiting),
              static_cast<long long>(kLastRankLateMs), static_cast<long long>(ranksMs));
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(out[r].code, tparSuccess) << "rank " << r << ": " << out[r].error;
    EXPECT_EQ(out[r].wrongBytes, 0u) << "rank " << r;
  }
  EXPECT_GT(whileWaiting, 0u) << "the flood did not go on while the first ranks waited";
}

}  // namespace
}  // namespace tpar
