// The C API's argument checks and error reporting, on any machine (no GPU needed).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/child_process.h"
#include "bootstrap/socket_util.h"
#include "common/dead_handle.h"
#include "base/env.h"
#include "tpar/tpar.h"

namespace {

std::string lastError() { return tparGetLastError(nullptr); }

TEST(ErrorStrings, EveryResultHasItsOwnText) {
  for (int r = 0; r < tparNumResults; ++r) {
    const char* s = tparGetErrorString(static_cast<tparResult_t>(r));
    ASSERT_NE(nullptr, s);
    EXPECT_STRNE("unknown result code", s) << r;
    for (int q = 0; q < r; ++q) EXPECT_STRNE(tparGetErrorString(static_cast<tparResult_t>(q)), s);
  }
  EXPECT_STREQ("unknown result code", tparGetErrorString(static_cast<tparResult_t>(99)));
  EXPECT_STREQ("timed out waiting for peers", tparGetErrorString(tparTimeout));
}

TEST(EnumNames, NamesAndUnknownValues) {
  EXPECT_STREQ("bfloat16", tparDataTypeName(tparBfloat16));
  EXPECT_STREQ("sum", tparRedOpName(tparSum));
  EXPECT_STREQ("twoshot", tparAlgoName(tparAlgoTwoShot));
  EXPECT_STREQ("cuda-ipc", tparTransportName(tparTransportCudaIpc));
  EXPECT_STREQ("unknown", tparDataTypeName(static_cast<tparDataType_t>(17)));
  EXPECT_STREQ("unknown", tparRedOpName(static_cast<tparRedOp_t>(-1)));
}

TEST(Version, ReportsTheHeaderVersionAndRejectsNull) {
  int v = 0;
  EXPECT_EQ(tparSuccess, tparGetVersion(&v));
  EXPECT_EQ(TPAR_VERSION_CODE, v);
  EXPECT_EQ(tparInvalidArgument, tparGetVersion(nullptr));
  EXPECT_NE(std::string::npos, lastError().find("version"));
}

TEST(AllReduceArguments, NullCommIsRejectedWithItsName) {
  int x = 0;
  EXPECT_EQ(tparInvalidArgument, tparAllReduce(&x, &x, 1, tparFloat32, tparSum, nullptr, nullptr));
  EXPECT_NE(std::string::npos, lastError().find("comm"));
}

TEST(AllReduceArguments, ForeignOrDestroyedHandleIsReportedNotDereferenced) {
  // A pointer that was never a communicator: the registry refuses it.
  alignas(64) char fake[256];
  std::memset(fake, 0x5a, sizeof(fake));
  auto comm = reinterpret_cast<tparComm_t>(fake);
  int x = 0;
  EXPECT_EQ(tparInvalidArgument, tparAllReduce(&x, &x, 1, tparFloat32, tparSum, comm, nullptr));
  EXPECT_NE(std::string::npos, lastError().find("not a live communicator"));
  EXPECT_EQ(tparInvalidArgument, tparCommDestroy(comm));
  EXPECT_EQ(tparInvalidArgument, tparCommAbort(comm));
  int v = 0;
  EXPECT_EQ(tparInvalidArgument, tparCommCount(comm, &v));
  EXPECT_EQ(tparInvalidArgument, tparCommUserRank(comm, &v));
  EXPECT_EQ(tparInvalidArgument, tparCommCuDevice(comm, &v));
  tparResult_t async;
  EXPECT_EQ(tparInvalidArgument, tparCommGetAsyncError(comm, &async));
  uint64_t kernels = 0;
  EXPECT_EQ(tparInvalidArgument, tparCommGetKernelCount(comm, &kernels));
  tparCommInfo_t info;
  EXPECT_EQ(tparInvalidArgument, tparCommQuery(comm, &info));
  tparAlgo_t algo;
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithm(comm, 1024, &algo));
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(comm, 1024, tparFloat32, &algo));
  EXPECT_NE(std::string::npos, lastError().find("not a live communicator"));
}

TEST(SelectAlgorithmArguments, NullCommIsRejectedWithItsNameAndAlgoUntouched) {
  tparAlgo_t algo = tparAlgoNccl;  // a value no failed call would write
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithm(nullptr, 1024, &algo));
  EXPECT_NE(std::string::npos, lastError().find("comm is NULL")) << lastError();
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithmForType(nullptr, 1024, tparFloat16, &algo));
  EXPECT_NE(std::string::npos, lastError().find("comm is NULL")) << lastError();
  EXPECT_EQ(tparAlgoNccl, algo);
}

TEST(Destroy, NullIsANoOp) {
  EXPECT_EQ(tparSuccess, tparCommDestroy(nullptr));
  EXPECT_EQ(tparSuccess, tparCommAbort(nullptr));
}

TEST(InitAllArguments, BadArgumentsAreNamedAndOutputUntouched) {
  tparComm_t comms[2] = {reinterpret_cast<tparComm_t>(0x1234), reinterpret_cast<tparComm_t>(0x5678)};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(nullptr, 2, nullptr));
  EXPECT_NE(std::string::npos, lastError().find("comms"));
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(comms, 0, nullptr));
  EXPECT_NE(std::string::npos, lastError().find("ndev"));
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(comms, TPAR_MAX_RANKS + 1, nullptr));
  EXPECT_EQ(reinterpret_cast<tparComm_t>(0x1234), comms[0]);
  EXPECT_EQ(reinterpret_cast<tparComm_t>(0x5678), comms[1]);
}

TEST(InitAllArguments, UninitializedConfigIsRejected) {
  tparComm_t comms[1] = {nullptr};
  tparConfig_t cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 1, nullptr, &cfg));
  EXPECT_NE(std::string::npos, lastError().find("TPAR_CONFIG_INITIALIZER"));
  EXPECT_EQ(nullptr, comms[0]);
}

TEST(InitAllArguments, OutOfRangeConfigFieldsAreNamed) {
  tparComm_t comms[1] = {nullptr};
  struct Case {
    void (*set)(tparConfig_t*);
    const char* field;
  } cases[] = {
      {[](tparConfig_t* c) { c->maxBytesPerCall = 100; }, "maxBytesPerCall"},
      {[](tparConfig_t* c) { c->maxBytesPerCall = size_t(4) << 30; }, "maxBytesPerCall"},
      {[](tparConfig_t* c) { c->timeoutMs = -5; }, "timeoutMs"},
      {[](tparConfig_t* c) { c->algorithm = tparNumAlgos; }, "algorithm"},
      {[](tparConfig_t* c) { c->allowSharedDevice = 3; }, "allowSharedDevice"},
      {[](tparConfig_t* c) { c->version = 999999; }, "version"},
  };
  for (const Case& k : cases) {
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    k.set(&cfg);
    EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 1, nullptr, &cfg)) << k.field;
    EXPECT_NE(std::string::npos, lastError().find(k.field)) << lastError();
    EXPECT_EQ(nullptr, comms[0]);
  }
}

TEST(InitRankArguments, RankAndSizeAreChecked) {
  tparUniqueId id;
  std::memset(&id, 0, sizeof(id));
  tparComm_t comm = reinterpret_cast<tparComm_t>(0x99);
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 0, id, 0));
  EXPECT_NE(std::string::npos, lastError().find("nranks"));
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 2, id, 2));
  EXPECT_NE(std::string::npos, lastError().find("rank"));
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 2, id, -1));
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(nullptr, 2, id, 0));
  EXPECT_EQ(reinterpret_cast<tparComm_t>(0x99), comm);
}

TEST(InitRankArguments, GarbageUniqueIdIsRejected) {
  tparUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(rand());
  tparComm_t comm = nullptr;
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 2, id, 0));
  EXPECT_NE(std::string::npos, lastError().find("uniqueId")) << lastError();
  EXPECT_EQ(nullptr, comm);
}

TEST(UniqueId, NullIsRejectedAndTwoIdsDiffer) {
  EXPECT_EQ(tparInvalidArgument, tparGetUniqueId(nullptr));
  tparUniqueId a, b;
  ASSERT_EQ(tparSuccess, tparGetUniqueId(&a));
  ASSERT_EQ(tparSuccess, tparGetUniqueId(&b));
  EXPECT_NE(0, std::memcmp(&a, &b, sizeof(a)));
}

TEST(ConfigInitializer, SetsSizeMagicAndVersion) {
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  EXPECT_EQ(sizeof(tparConfig_t), cfg.size);
  EXPECT_EQ(TPAR_CONFIG_MAGIC, cfg.magic);
  EXPECT_EQ(static_cast<uint32_t>(TPAR_VERSION_CODE), cfg.version);
  EXPECT_EQ(0u, cfg.maxBytesPerCall);
  EXPECT_EQ(TPAR_CONFIG_UNDEF_INT, cfg.algorithm);
  EXPECT_EQ(TPAR_CONFIG_UNDEF_INT, cfg.allowSharedDevice);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// More bad input: every case gets its own error and message, and nothing the caller
// owns changes. The cases that need a live communicator or a GPU are in tests/gpu/fault_test.cc.

namespace {

TEST(AllReduceArguments, CommIsCheckedBeforeCountZeroIsANoOp) {
  EXPECT_EQ(tparInvalidArgument,
            tparAllReduce(nullptr, nullptr, 0, tparFloat32, tparSum, nullptr, nullptr));
  EXPECT_NE(std::string::npos, lastError().find("comm")) << lastError();
}

TEST(AllReduceArguments, ForeignHandleLeavesEveryOutputUntouched) {
  alignas(64) char fake[256];
  std::memset(fake, 0x5a, sizeof(fake));
  auto comm = reinterpret_cast<tparComm_t>(fake);
  tpar_test::expectQueriesRefuseDeadHandle(comm);
  // The handle's bytes were never written either.
  for (char c : fake) ASSERT_EQ(0x5a, c);
}

TEST(InitAllArguments, TransportAndAlgorithmOutsideTheirRangesAreNamed) {
  const tparComm_t untouched = reinterpret_cast<tparComm_t>(0x4321);
  tparComm_t comms[1] = {untouched};
  struct Case {
    void (*set)(tparConfig_t*);
    const char* field;
  } cases[] = {
      {[](tparConfig_t* c) { c->transport = 3; }, "transport"},
      {[](tparConfig_t* c) { c->transport = -2; }, "transport"},
      {[](tparConfig_t* c) { c->algorithm = -2; }, "algorithm"},
      {[](tparConfig_t* c) { c->allowSharedDevice = -2; }, "allowSharedDevice"},
      {[](tparConfig_t* c) { c->maxBytesPerCall = (size_t(1) << 30) + 16; }, "maxBytesPerCall"},
      {[](tparConfig_t* c) { c->size = sizeof(tparConfig_t) - 8; }, "TPAR_CONFIG_INITIALIZER"},
      {[](tparConfig_t* c) { c->magic = 0; }, "TPAR_CONFIG_INITIALIZER"},
  };
  for (const Case& k : cases) {
    tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
    k.set(&cfg);
    const tparConfig_t copy = cfg;
    EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 1, nullptr, &cfg)) << k.field;
    EXPECT_NE(std::string::npos, lastError().find(k.field)) << lastError();
    EXPECT_EQ(untouched, comms[0]);
    EXPECT_EQ(0, std::memcmp(&copy, &cfg, sizeof(cfg))) << "the config was written";
    tparUniqueId id;
    std::memset(&id, 0, sizeof(id));
    tparComm_t comm = untouched;
    EXPECT_EQ(tparInvalidArgument, tparCommInitRankConfig(&comm, 1, id, 0, &cfg)) << k.field;
    EXPECT_NE(std::string::npos, lastError().find(k.field)) << lastError();
    EXPECT_EQ(untouched, comm);
  }
}

TEST(InitRankArguments, SizeAboveTheLimitAndNegativeSizesAreNamed) {
  tparUniqueId id;
  std::memset(&id, 0, sizeof(id));
  tparComm_t comm = reinterpret_cast<tparComm_t>(0x99);
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, TPAR_MAX_RANKS + 1, id, 0));
  EXPECT_NE(std::string::npos, lastError().find("nranks")) << lastError();
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, -1, id, 0));
  EXPECT_NE(std::string::npos, lastError().find("nranks")) << lastError();
  EXPECT_EQ(reinterpret_cast<tparComm_t>(0x99), comm);
}

TEST(InitRankArguments, DamagedUniqueIdIsRejectedAndCommIsUntouched) {
  tparUniqueId id;
  ASSERT_EQ(tparSuccess, tparGetUniqueId(&id));
  for (size_t i : {size_t(0), sizeof(id.internal) / 2, sizeof(id.internal) - 1}) {
    tparUniqueId damaged = id;
    damaged.internal[i] ^= 0x11;
    tparComm_t comm = reinterpret_cast<tparComm_t>(0x77);
    EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 2, damaged, 0)) << "byte " << i;
    EXPECT_NE(std::string::npos, lastError().find("uniqueId")) << lastError();
    EXPECT_EQ(reinterpret_cast<tparComm_t>(0x77), comm);
  }
}

// An id whose socket name has no NUL would be read past its end; the refusal says what is wrong
// with it, also when the checksum was made over the damaged name.
TEST(InitRankArguments, UniqueIdWhoseSocketNameIsNotTerminatedIsRefusedSayingSo) {
  tparUniqueId id;
  ASSERT_EQ(tparSuccess, tparGetUniqueId(&id));
  tpar::bootstrap_detail::IdLayout layout;
  static_assert(sizeof(layout) == sizeof(id.internal), "the layout fills the id");
  std::memcpy(&layout, id.internal, sizeof(layout));
  std::memset(layout.socketName, 'x', sizeof(layout.socketName));
  for (bool checksum_matches : {true, false}) {
    if (checksum_matches) layout.checksum = tpar::bootstrap_detail::idChecksum(layout);
    else layout.checksum ^= 1;
    tparUniqueId damaged;
    std::memcpy(damaged.internal, &layout, sizeof(layout));
    tparComm_t comm = reinterpret_cast<tparComm_t>(0x77);
    EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 2, damaged, 0));
    EXPECT_NE(std::string::npos, lastError().find("socket name is not terminated")) << lastError();
    EXPECT_EQ(std::string::npos, lastError().find("checksum")) << lastError();
    EXPECT_EQ(reinterpret_cast<tparComm_t>(0x77), comm);
  }
}

// Ranks that join one id with different sizes, or as the same rank, fail on every rank before
// any GPU work (the rendezvous compares them).
TEST(InitRankArguments, RanksThatDisagreeOnTheGroupFailOnEveryRank) {
  struct Case {
    int nranks[2];
    int rank[2];
  } cases[] = {{{2, 3}, {0, 1}}, {{2, 2}, {0, 0}}};
  for (const Case& c : cases) {
    tparUniqueId id;
    ASSERT_EQ(tparSuccess, tparGetUniqueId(&id));
    tparComm_t comms[2] = {reinterpret_cast<tparComm_t>(0x10), reinterpret_cast<tparComm_t>(0x20)};
    tparResult_t res[2] = {tparSuccess, tparSuccess};
    std::string text[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        res[t] = tparCommInitRank(&comms[t], c.nranks[t], id, c.rank[t]);
        text[t] = tparGetLastError(nullptr);
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < 2; ++t) {
      EXPECT_EQ(tparInvalidUsage, res[t]) << "caller " << t << ": " << text[t];
      EXPECT_FALSE(text[t].empty());
    }
    EXPECT_EQ(reinterpret_cast<tparComm_t>(0x10), comms[0]);
    EXPECT_EQ(reinterpret_cast<tparComm_t>(0x20), comms[1]);
  }
}

// An id is good for one group: once its group has formed, the rendezvous behind it is gone.
TEST(InitRankArguments, IdOfAGroupThatAlreadyFormedIsRefused) {
  tparUniqueId id;
  ASSERT_EQ(tparSuccess, tparGetUniqueId(&id));
  tparComm_t first = nullptr;
  // Without a GPU this fails after the rendezvous (no device); with one it succeeds.
  if (tparCommInitRank(&first, 1, id, 0) == tparSuccess)
    ASSERT_EQ(tparSuccess, tparCommDestroy(first));
  // The service ends asynchronously once its rank has left.
  tparResult_t res = tparSuccess;
  tparComm_t again = reinterpret_cast<tparComm_t>(0x55);
  for (int i = 0; i < 60; ++i) {
    res = tparCommInitRank(&again, 1, id, 0);
    if (res == tparSuccess) ASSERT_EQ(tparSuccess, tparCommDestroy(again));
    if (res == tparSystemError) break;
    again = reinterpret_cast<tparComm_t>(0x55);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(tparSystemError, res) << lastError();
  EXPECT_NE(std::string::npos, lastError().find("bootstrap service")) << lastError();
  EXPECT_EQ(reinterpret_cast<tparComm_t>(0x55), again);
}

// Every registered variable refuses garbage with tparInvalidArgument naming the variable and
// the value, and leaves the output alone. Strings (file paths) take any value; the files are
// checked where they are read (TuningFiles.*, TopologyFixture.*, BadEnvironment.* on a GPU).
TEST(EnvRegistry, EveryVariableRefusesGarbageNamingItAndLeavesTheOutputAlone) {
  const char* garbage[] = {"not-a-value", "12Q", "-", "0x", "1.5", "yes please"};
  int checked = 0;
  for (const tpar::EnvVarSpec& spec : tpar::envRegistry()) {
    if (spec.type == tpar::EnvType::kString) continue;
    for (const char* value : garbage) {
      if (spec.type == tpar::EnvType::kInt && std::string(value) == "0x") continue;  // hex prefix
      tpar::Env env;
      env.timeout_ms = 777;
      env.transport = 9;
      const std::string name = spec.name;
      const tparResult_t res =
          tpar::parseEnv([&](const char* n) { return name == n ? value : nullptr; }, &env);
      EXPECT_EQ(tparInvalidArgument, res) << name << "=" << value;
      EXPECT_NE(std::string::npos, lastError().find(name)) << lastError();
      EXPECT_NE(std::string::npos, lastError().find(value)) << lastError();
      EXPECT_EQ(777, env.timeout_ms) << name << "=" << value << " changed the output";
      EXPECT_EQ(9, env.transport) << name << "=" << value << " changed the output";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(EnvRegistry, TransportTakesItsThreeChoicesInAnyCaseAndNothingElse) {
  const std::pair<const char*, int> good[] = {{"auto", 0}, {"host", 1}, {"p2p", 2}, {"HOST", 1}};
  for (const auto& [text, want] : good) {
    tpar::Env env;
    ASSERT_EQ(tparSuccess, tpar::parseEnv(
                               [&](const char* n) {
                                 return std::string(n) == "TPAR_TRANSPORT" ? text : nullptr;
                               },
                               &env))
        << text;
    EXPECT_EQ(want, env.transport) << text;
  }
  for (const char* bad : {"hostt", "ipc", "nvlink", "1", " host", "host "}) {
    tpar::Env env;
    EXPECT_EQ(tparInvalidArgument,
              tpar::parseEnv(
                  [&](const char* n) { return std::string(n) == "TPAR_TRANSPORT" ? bad : nullptr; },
                  &env))
        << bad;
    EXPECT_NE(std::string::npos, lastError().find("TPAR_TRANSPORT")) << lastError();
    EXPECT_NE(std::string::npos, lastError().find("auto|host|p2p")) << lastError();
  }
}

// The C entry points with a garbage variable in the real environment. The environment is read
// once per process, so this runs in a child of this binary (started below) with it set.
TEST(DISABLED_GarbageEnvironmentChild, EveryEntryPointThatReadsTheEnvironmentNamesTheVariable) {
  const char* name = std::getenv("TPAR_TEST_BAD_VARIABLE");
  ASSERT_NE(nullptr, name);
  const char* value = std::getenv(name);
  ASSERT_NE(nullptr, value);
  tparUniqueId id;
  std::memset(&id, 0x3c, sizeof(id));
  EXPECT_EQ(tparInvalidArgument, tparGetUniqueId(&id));
  EXPECT_NE(std::string::npos, lastError().find(name)) << lastError();
  EXPECT_NE(std::string::npos, lastError().find(value)) << lastError();
  for (char c : id.internal) ASSERT_EQ(0x3c, c) << "the id was written";
  const tparComm_t untouched = reinterpret_cast<tparComm_t>(0x1234);
  tparComm_t comms[2] = {untouched, untouched};
  EXPECT_EQ(tparInvalidArgument, tparCommInitAll(comms, 2, nullptr));
  EXPECT_NE(std::string::npos, lastError().find(name)) << lastError();
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  EXPECT_EQ(tparInvalidArgument, tparCommInitAllConfig(comms, 1, nullptr, &cfg));
  EXPECT_NE(std::string::npos, lastError().find(name)) << lastError();
  EXPECT_EQ(untouched, comms[0]);
  EXPECT_EQ(untouched, comms[1]);
  tparComm_t comm = untouched;
  EXPECT_EQ(tparInvalidArgument, tparCommInitRank(&comm, 1, id, 0));
  EXPECT_NE(std::string::npos, lastError().find(name)) << lastError();
  EXPECT_EQ(untouched, comm);
}

// Runs this binary again with `env` added; returns its exit status and output.
int runSelf(const std::string& filter, const std::vector<std::string>& env, std::string* output) {
  return tpar_test::runChild({"/proc/self/exe", "--gtest_filter=" + filter,
                              "--gtest_also_run_disabled_tests"},
                             env, 300, output);
}

TEST(GarbageEnvironment, EveryEntryPointRefusesAGarbageVariableNamingIt) {
  const std::pair<const char*, const char*> cases[] = {{"TPAR_TRANSPORT", "sideways"},
                                                       {"TPAR_TIMEOUT_MS", "soon"},
                                                       {"TPAR_ALGO", "ring"},
                                                       {"TPAR_MAX_BYTES_PER_CALL", "2G"},
                                                       {"TPAR_ALLOW_SHARED_DEVICE", "perhaps"}};
  for (const auto& [name, value] : cases) {
    std::string output;
    const int rc = runSelf(
        "DISABLED_GarbageEnvironmentChild.*",
        {std::string(name) + "=" + value, std::string("TPAR_TEST_BAD_VARIABLE=") + name}, &output);
    EXPECT_EQ(0, rc) << name << "=" << value << ":\n" << output;
    EXPECT_NE(std::string::npos, output.find("[  PASSED  ] 1 test")) << output;
  }
}

}  // namespace
