// Tests of the socket bootstrap: ranks as threads of this process, and as forked processes.
#include "bootstrap/bootstrap.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"

namespace tpar {
namespace {

constexpr int64_t kTimeoutMs = 5000;  // for tests that expect success: never the limiting factor
constexpr int64_t kShortTimeoutMs = 300;
constexpr int kTestBudgetSeconds = 30;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ends the process if a test runs past its budget, so that a bug shows up as a failure with the
// test's name instead of a hung CI job.
class Watchdog {
 public:
  explicit Watchdog(int seconds)
      : thread_([this, seconds] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
            const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
            fprintf(stderr, "watchdog: %s.%s did not finish within %d s\n",
                    info ? info->test_suite_name() : "?", info ? info->name() : "?", seconds);
            fflush(stderr);
            _exit(3);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: it uses the members above
};

struct Outcome {
  tparResult_t code = tparSuccess;
  std::string error;  // this rank's last-error text after a failure
  int64_t elapsedMs = 0;
  size_t wrongBytes = 0;
};

// Runs fn(i) on `count` threads and returns once all have finished.
void runThreads(int count, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) threads.emplace_back(fn, i);
  for (auto& t : threads) t.join();
}

// Every rank can compute every other rank's blob, so each can check every byte it receives.
void fillBlob(uint64_t seed, int round, int rank, unsigned char* out, size_t bytes) {
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(round) * 1000003u + rank * 7919u + 1));
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(rng());
}

size_t roundBytes(uint64_t seed, int round) {
  std::mt19937_64 rng(seed + static_cast<uint64_t>(round) * 31337u);
  // Round 1 is large so that replies need many partial reads and writes.
  if (round == 1) return 64 * 1024 + rng() % (192 * 1024);
  return rng() % 3000;  // includes 0 now and then
}

uint64_t freshSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Connects, then runs `rounds` allGathers of random blobs, checking every received byte.
Outcome gatherRounds(const tparUniqueId& id, int rank, int nranks, uint64_t seed, int rounds) {
  Outcome outcome;
  std::unique_ptr<Bootstrap> boot;
  outcome.code = connectBootstrap(id, rank, nranks, kTimeoutMs, &boot);
  if (outcome.code != tparSuccess) {
    outcome.error = lastError();
    return outcome;
  }
  std::vector<unsigned char> data, expected;
  for (int round = 0; round < rounds; ++round) {
    size_t bytes = roundBytes(seed, round);
    data.assign(bytes * nranks, 0xee);
    expected.resize(bytes * nranks);
    for (int r = 0; r < nranks; ++r) fillBlob(seed, round, r, expected.data() + r * bytes, bytes);
    memcpy(data.data() + rank * bytes, expected.data() + rank * bytes, bytes);
    outcome.code = boot->allGather(data.data(), bytes);
    if (outcome.code != tparSuccess) {
      outcome.error = lastError();
      return outcome;
    }
    for (size_t i = 0; i < data.size(); ++i) outcome.wrongBytes += data[i] != expected[i];
  }
  return outcome;
}

class BootstrapTest : public ::testing::Test {
 protected:
  tparUniqueId newId(int64_t timeoutMs = kTimeoutMs) {
    tparUniqueId id;
    tparResult_t res = createUniqueId(&id, timeoutMs);
    EXPECT_EQ(res, tparSuccess) << lastError();
    return id;
  }

  Watchdog watchdog_{kTestBudgetSeconds};
};

class BootstrapRanksTest : public BootstrapTest, public ::testing::WithParamInterface<int> {};

TEST_P(BootstrapRanksTest, AllGatherDeliversEveryRanksBlobInRankOrder) {
  const int nranks = GetParam();
  const uint64_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(nranks);
  runThreads(nranks, [&](int rank) { outcomes[rank] = gatherRounds(id, rank, nranks, seed, 3); });
  for (int rank = 0; rank < nranks; ++rank) {
    EXPECT_EQ(outcomes[rank].code, tparSuccess) << "rank " << rank << ": " << outcomes[rank].error;
    EXPECT_EQ(outcomes[rank].wrongBytes, 0u) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, BootstrapRanksTest, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Ranks";
                         });

TEST_F(BootstrapTest, ConsecutiveRoundsOfMixedSizesStayInStep) {
  const int nranks = 4;
  const uint64_t seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(nranks);
  runThreads(nranks, [&](int rank) { outcomes[rank] = gatherRounds(id, rank, nranks, seed, 25); });
  for (int rank = 0; rank < nranks; ++rank) {
    EXPECT_EQ(outcomes[rank].code, tparSuccess) << "rank " << rank << ": " << outcomes[rank].error;
    EXPECT_EQ(outcomes[rank].wrongBytes, 0u) << "rank " << rank;
  }
}

TEST_F(BootstrapTest, BarrierReturnsOnlyAfterEveryRankHasEntered) {
  const int nranks = 4;
  const int64_t lateMs = 150;
  tparUniqueId id = newId();
  std::atomic<int> entered{0};
  std::vector<Outcome> outcomes(nranks);
  std::vector<int> seenEntered(nranks, -1);
  runThreads(nranks, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    Outcome& o = outcomes[rank];
    o.code = connectBootstrap(id, rank, nranks, kTimeoutMs, &boot);
    if (o.code == tparSuccess) o.code = boot->barrier();  // everyone connected: start together
    if (o.code != tparSuccess) {
      o.error = lastError();
      return;
    }
    if (rank == nranks - 1) std::this_thread::sleep_for(std::chrono::milliseconds(lateMs));
    entered.fetch_add(1);
    o.code = boot->barrier();
    seenEntered[rank] = entered.load();
    if (o.code != tparSuccess) o.error = lastError();
  });
  for (int rank = 0; rank < nranks; ++rank) {
    EXPECT_EQ(outcomes[rank].code, tparSuccess) << "rank " << rank << ": " << outcomes[rank].error;
    EXPECT_EQ(seenEntered[rank], nranks) << "rank " << rank << " left the barrier early";
  }
}

// Children are forked before this process starts any bootstrap thread, do nothing but their
// rank's work, and report through their exit status only.
enum ChildExit {
  kChildOk = 0,
  kChildNoId = 10,
  kChildConnect = 11,
  kChildGather = 12,
  kChildWrongBytes = 13
};

struct IdMessage {
  tparUniqueId id;
  uint64_t seed;
};

[[noreturn]] void childRank(int readFd, int rank, int nranks) {
  IdMessage msg;
  size_t got = 0;
  int64_t deadline = nowMs() + kTimeoutMs;
  while (got < sizeof(msg)) {
    pollfd p = {readFd, POLLIN, 0};
    int64_t left = deadline - nowMs();
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) < 0) _exit(kChildNoId);
    ssize_t n = read(readFd, reinterpret_cast<char*>(&msg) + got, sizeof(msg) - got);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) _exit(kChildNoId);
    if (n > 0) got += static_cast<size_t>(n);
  }
  Outcome o = gatherRounds(msg.id, rank, nranks, msg.seed, 4);
  if (o.code != tparSuccess) {
    _exit(o.error.find("allGather") != std::string::npos ? kChildGather : kChildConnect);
  }
  if (o.wrongBytes != 0) _exit(kChildWrongBytes);
  _exit(kChildOk);
}

// No watchdog thread here: forking a process with other threads running leaves their state
// behind, unowned, in every child. The parent bounds its own wait instead.
TEST(BootstrapProcessTest, RanksInSeparateProcessesGatherEachOthersBlobs) {
  const int nranks = 4;
  std::vector<pid_t> pids;
  std::vector<int> writeFds;
  for (int rank = 0; rank < nranks; ++rank) {
    int fds[2];
    ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0) << strerror(errno);
    pid_t pid = fork();
    if (pid == 0) {
      // Earlier siblings' write ends would otherwise keep their pipes open past the parent.
      for (int fd : writeFds) close(fd);
      close(fds[1]);
      childRank(fds[0], rank, nranks);
    }
    close(fds[0]);
    ASSERT_GT(pid, 0) << strerror(errno);
    pids.push_back(pid);
    writeFds.push_back(fds[1]);
  }
  IdMessage msg;
  ASSERT_EQ(createUniqueId(&msg.id, kTimeoutMs), tparSuccess) << lastError();
  msg.seed = freshSeed();
  SCOPED_TRACE("seed " + std::to_string(msg.seed));
  for (int fd : writeFds) {
    EXPECT_EQ(write(fd, &msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
    close(fd);
  }
  // A pipe of this size never blocks the write above, and each child bounds its own waits, but
  // the parent still bounds its wait so that a stuck child cannot hang the suite.
  int64_t deadline = nowMs() + 15000;
  std::vector<int> statuses(nranks, -1);
  int remaining = nranks;
  while (remaining > 0 && nowMs() < deadline) {
    for (int rank = 0; rank < nranks; ++rank) {
      if (statuses[rank] != -1) continue;
      int status;
      if (waitpid(pids[rank], &status, WNOHANG) == pids[rank]) {
        statuses[rank] = status;
        --remaining;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int rank = 0; rank < nranks; ++rank) {
    if (statuses[rank] == -1) {
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], &statuses[rank], 0);
      ADD_FAILURE() << "rank " << rank << " (pid " << pids[rank] << ") hung and was killed";
      continue;
    }
    ASSERT_TRUE(WIFEXITED(statuses[rank])) << "rank " << rank << " died, status " << statuses[rank];
    EXPECT_EQ(WEXITSTATUS(statuses[rank]), kChildOk) << "rank " << rank;
  }
}

TEST_F(BootstrapTest, TimesOutWhenARankNeverArrives) {
  const int nranks = 4;
  tparUniqueId id = newId(kShortTimeoutMs);
  std::vector<Outcome> outcomes(nranks - 1);
  const int64_t start = nowMs();
  runThreads(nranks - 1, [&](int rank) {  // rank 3 never comes
    std::unique_ptr<Bootstrap> boot;
    outcomes[rank].code = connectBootstrap(id, rank, nranks, kShortTimeoutMs, &boot);
    outcomes[rank].elapsedMs = nowMs() - start;
    outcomes[rank].error = lastError();
  });
  for (int rank = 0; rank < nranks - 1; ++rank) {
    const Outcome& o = outcomes[rank];
    EXPECT_EQ(o.code, tparTimeout) << "rank " << rank << ": " << o.error;
    EXPECT_GE(o.elapsedMs, kShortTimeoutMs) << "rank " << rank;
    EXPECT_LT(o.elapsedMs, kShortTimeoutMs + 2000) << "rank " << rank;
    EXPECT_NE(o.error.find("rank(s) 3 of 4 did not connect"), std::string::npos) << o.error;
  }
}

TEST_F(BootstrapTest, AllGatherTimesOutNamingTheRankThatNeverCalled) {
  const int nranks = 3;
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(nranks);
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  runThreads(nranks, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    Outcome& o = outcomes[rank];
    o.code = connectBootstrap(id, rank, nranks, kShortTimeoutMs, &boot);
    int64_t start = nowMs();
    if (o.code == tparSuccess && rank == 2) {
      // Arrives only after the others gave up: the session has been failed by then.
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::seconds(10), [&] { return finished == 2; });
      lock.unlock();
      o.code = boot->barrier();
    } else if (o.code == tparSuccess) {
      uint64_t blobs[nranks] = {};
      o.code = boot->allGather(blobs, sizeof(uint64_t));
    }
    o.elapsedMs = nowMs() - start;
    o.error = lastError();
    std::lock_guard<std::mutex> lock(mu);
    ++finished;
    cv.notify_all();
  });
  for (int rank = 0; rank < 2; ++rank) {
    const Outcome& o = outcomes[rank];
    EXPECT_EQ(o.code, tparTimeout) << "rank " << rank << ": " << o.error;
    EXPECT_LT(o.elapsedMs, kShortTimeoutMs + 2000) << "rank " << rank;
    EXPECT_NE(o.error.find("rank(s) 2 of 3 did not arrive"), std::string::npos) << o.error;
  }
  EXPECT_EQ(outcomes[2].code, tparRemoteError) << outcomes[2].error;
  EXPECT_FALSE(outcomes[2].error.empty());
}

TEST_F(BootstrapTest, AllGatherFailsFastWithRemoteErrorWhenAPeerLeaves) {
  const int nranks = 3;
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(nranks);
  runThreads(nranks, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    Outcome& o = outcomes[rank];
    o.code = connectBootstrap(id, rank, nranks, kTimeoutMs, &boot);
    if (o.code != tparSuccess) {
      o.error = lastError();
      return;
    }
    if (rank == 1) return;  // leaves (closes its connection) instead of gathering
    int64_t start = nowMs();
    uint32_t blobs[nranks] = {};
    o.code = boot->allGather(blobs, sizeof(uint32_t));
    o.elapsedMs = nowMs() - start;
    o.error = lastError();
  });
  for (int rank : {0, 2}) {
    const Outcome& o = outcomes[rank];
    EXPECT_EQ(o.code, tparRemoteError) << "rank " << rank << ": " << o.error;
    EXPECT_LT(o.elapsedMs, kTimeoutMs / 2) << "rank " << rank << " waited for the timeout";
    EXPECT_NE(o.error.find("rank(s) 1 "), std::string::npos) << o.error;
  }
}

// Runs connect (+ an optional round) on every rank; every rank must fail with `expected`, with a
// last-error text that contains `needle`.
void expectEveryRankFails(const std::vector<Outcome>& outcomes, tparResult_t expected,
                          const char* needle) {
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    const Outcome& o = outcomes[rank];
    EXPECT_EQ(o.code, expected) << "rank " << rank << ": " << o.error;
    EXPECT_NE(o.error.find(needle), std::string::npos) << "rank " << rank << ": " << o.error;
  }
}

TEST_F(BootstrapTest, DuplicateRankFailsEveryRankWithInvalidUsage) {
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(2);
  runThreads(2, [&](int i) {
    std::unique_ptr<Bootstrap> boot;
    outcomes[i].code = connectBootstrap(id, /*rank=*/0, /*nranks=*/2, kTimeoutMs, &boot);
    outcomes[i].error = lastError();
  });
  expectEveryRankFails(outcomes, tparInvalidUsage, "two ranks claim rank 0");
}

TEST_F(BootstrapTest, NranksDisagreementFailsEveryRankWithInvalidUsage) {
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(2);
  runThreads(2, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    outcomes[rank].code = connectBootstrap(id, rank, /*nranks=*/2 + rank, kTimeoutMs, &boot);
    outcomes[rank].error = lastError();
  });
  expectEveryRankFails(outcomes, tparInvalidUsage, "disagree on nranks");
}

TEST_F(BootstrapTest, MismatchedAllGatherSizesFailEveryRankWithInvalidUsage) {
  const int nranks = 3;
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(nranks);
  std::vector<tparResult_t> after(nranks);
  runThreads(nranks, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    Outcome& o = outcomes[rank];
    o.code = connectBootstrap(id, rank, nranks, kTimeoutMs, &boot);
    if (o.code == tparSuccess) {
      size_t bytes = rank == 1 ? 16 : 8;
      std::vector<char> data(bytes * nranks);
      o.code = boot->allGather(data.data(), bytes);
      after[rank] = boot->barrier();  // the session is over: no later round may succeed
    }
    o.error = lastError();
  });
  expectEveryRankFails(outcomes, tparInvalidUsage, "different sizes");
  for (int rank = 0; rank < nranks; ++rank) EXPECT_NE(after[rank], tparSuccess) << rank;
}

TEST_F(BootstrapTest, BarrierAgainstAllGatherFailsEveryRankWithInvalidUsage) {
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(2);
  runThreads(2, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    Outcome& o = outcomes[rank];
    o.code = connectBootstrap(id, rank, 2, kTimeoutMs, &boot);
    if (o.code == tparSuccess) {
      char data[2] = {};
      o.code = rank == 0 ? boot->barrier() : boot->allGather(data, 0);
    }
    o.error = lastError();
  });
  expectEveryRankFails(outcomes, tparInvalidUsage, "called barrier");
}

TEST_F(BootstrapTest, GarbageUniqueIdIsRejectedAsInvalidArgument) {
  std::mt19937_64 rng(freshSeed());
  tparUniqueId garbage;
  for (char& c : garbage.internal) c = static_cast<char>(rng());
  std::unique_ptr<Bootstrap> boot;
  EXPECT_EQ(connectBootstrap(garbage, 0, 1, kShortTimeoutMs, &boot), tparInvalidArgument);
  EXPECT_NE(lastError().find("uniqueId"), std::string::npos) << lastError();
  EXPECT_EQ(boot, nullptr);

  // A real id damaged in transit: one byte flipped anywhere is caught.
  tparUniqueId id = newId(kShortTimeoutMs);
  for (size_t i = 0; i < sizeof(id.internal); i += 13) {
    tparUniqueId damaged = id;
    damaged.internal[i] ^= 0x20;
    clearError();
    EXPECT_EQ(connectBootstrap(damaged, 0, 1, kShortTimeoutMs, &boot), tparInvalidArgument)
        << "byte " << i;
    EXPECT_NE(lastError().find("uniqueId"), std::string::npos) << lastError();
  }
  EXPECT_EQ(boot, nullptr);
}

TEST_F(BootstrapTest, RankOutOfRangeIsRejectedAsInvalidArgument) {
  tparUniqueId id = newId(kShortTimeoutMs);
  struct Case {
    int rank, nranks;
    const char* needle;
  } cases[] = {{-1, 2, "rank=-1"}, {2, 2, "rank=2"}, {0, 0, "nranks=0"}, {0, -3, "nranks=-3"}};
  for (const Case& c : cases) {
    std::unique_ptr<Bootstrap> boot;
    clearError();
    EXPECT_EQ(connectBootstrap(id, c.rank, c.nranks, kShortTimeoutMs, &boot), tparInvalidArgument)
        << c.needle;
    EXPECT_NE(lastError().find(c.needle), std::string::npos) << lastError();
    EXPECT_EQ(boot, nullptr);
  }
  EXPECT_EQ(connectBootstrap(id, 0, 1, kShortTimeoutMs, nullptr), tparInvalidArgument);
  EXPECT_FALSE(lastError().empty());
}

// Connects until the service refuses; the service ends asynchronously, so allow it a moment.
tparResult_t connectUntilRefused(const tparUniqueId& id, int64_t budgetMs) {
  int64_t deadline = nowMs() + budgetMs;
  tparResult_t res;
  do {
    std::unique_ptr<Bootstrap> boot;
    res = connectBootstrap(id, 0, 2, 100, &boot);
  } while (res != tparSystemError && nowMs() < deadline);
  return res;
}

TEST_F(BootstrapTest, ServiceEndsAfterEveryRankDisconnects) {
  tparUniqueId id = newId();
  std::vector<Outcome> outcomes(2);
  runThreads(2, [&](int rank) {
    std::unique_ptr<Bootstrap> boot;
    outcomes[rank].code = connectBootstrap(id, rank, 2, kTimeoutMs, &boot);
    if (outcomes[rank].code == tparSuccess) outcomes[rank].code = boot->barrier();
    outcomes[rank].error = lastError();
  });
  for (const Outcome& o : outcomes) ASSERT_EQ(o.code, tparSuccess) << o.error;
  EXPECT_EQ(connectUntilRefused(id, 3000), tparSystemError);
  EXPECT_NE(lastError().find("cannot reach the bootstrap service"), std::string::npos)
      << lastError();
}

TEST_F(BootstrapTest, ServiceEndsWhenNoRankConnectsWithinItsTimeout) {
  tparUniqueId id = newId(/*timeoutMs=*/100);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(connectUntilRefused(id, 3000), tparSystemError) << lastError();
  EXPECT_NE(lastError().find("cannot reach the bootstrap service"), std::string::npos)
      << lastError();
}

// ------------------------------------------------------------------------------------------
// File-descriptor passing.

TEST_F(BootstrapTest, PassedFdsReachTheSameFilesAndAreCloseOnExec) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0) << strerror(errno);
  int pipeFds[2];
  ASSERT_EQ(pipe2(pipeFds, O_CLOEXEC), 0);
  int memFd = memfd_create("tpar-bootstrap-test", MFD_CLOEXEC);
  ASSERT_GE(memFd, 0) << strerror(errno);

  int toSend[2] = {pipeFds[1], memFd};
  ASSERT_EQ(sendFds(sv[0], toSend, 2), tparSuccess) << lastError();
  int got[2] = {-1, -1};
  ASSERT_EQ(recvFds(sv[1], got, 2, kTimeoutMs), tparSuccess) << lastError();
  for (int fd : got) {
    EXPECT_NE(fd, pipeFds[1]);
    EXPECT_NE(fd, memFd);
    EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC) << "fd " << fd;
  }

  const char text[] = "written through the passed fd";
  ASSERT_EQ(write(got[0], text, sizeof(text)), static_cast<ssize_t>(sizeof(text)));
  char back[sizeof(text)] = {};
  ASSERT_EQ(read(pipeFds[0], back, sizeof(back)), static_cast<ssize_t>(sizeof(back)));
  EXPECT_STREQ(back, text);

  ASSERT_EQ(pwrite(got[1], text, sizeof(text), 4096), static_cast<ssize_t>(sizeof(text)));
  memset(back, 0, sizeof(back));
  ASSERT_EQ(pread(memFd, back, sizeof(back), 4096), static_cast<ssize_t>(sizeof(back)));
  EXPECT_STREQ(back, text);

  for (int fd : {sv[0], sv[1], pipeFds[0], pipeFds[1], memFd, got[0], got[1]}) close(fd);
}

TEST_F(BootstrapTest, RecvFdsTimesOutWhenNothingArrives) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int fd = -1;
  int64_t start = nowMs();
  EXPECT_EQ(recvFds(sv[1], &fd, 1, 100), tparTimeout);
  int64_t elapsed = nowMs() - start;
  EXPECT_GE(elapsed, 90);
  EXPECT_LT(elapsed, 2000);
  EXPECT_NE(lastError().find("recvFds"), std::string::npos) << lastError();
  EXPECT_EQ(fd, -1);
  close(sv[0]);
  close(sv[1]);
}

TEST_F(BootstrapTest, RecvFdsRejectsAnUnexpectedFdCount) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int toSend[2] = {sv[0], sv[0]};
  ASSERT_EQ(sendFds(sv[0], toSend, 2), tparSuccess) << lastError();
  int got = -1;
  EXPECT_EQ(recvFds(sv[1], &got, 1, kTimeoutMs), tparInvalidUsage);
  EXPECT_NE(lastError().find("expected 1 fd(s) but the peer sent 2"), std::string::npos)
      << lastError();
  EXPECT_EQ(got, -1);
  close(sv[0]);
  close(sv[1]);
}

TEST_F(BootstrapTest, RecvFdsReportsAClosedPeer) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  close(sv[0]);
  int got = -1;
  EXPECT_EQ(recvFds(sv[1], &got, 1, kTimeoutMs), tparRemoteError);
  EXPECT_FALSE(lastError().empty());
  close(sv[1]);
}

}  // namespace
}  // namespace tpar
