// The C API's argument checks and error reporting, on any machine (no GPU needed).
#include <cstring>
#include <string>

#include <gtest/gtest.h>

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
  tparCommInfo_t info;
  EXPECT_EQ(tparInvalidArgument, tparCommQuery(comm, &info));
  tparAlgo_t algo;
  EXPECT_EQ(tparInvalidArgument, tparCommSelectAlgorithm(comm, 1024, &algo));
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
      {[](tparConfig_t* c) { c->algorithm = 7; }, "algorithm"},
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
