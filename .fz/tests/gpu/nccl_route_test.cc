// Calls routed to an attached NCCL communicator (tparCommSetNcclComm): forced by the config or
// TPAR_ALGO, or by a tuning table for a range of sizes. One rank on one GPU runs anywhere NCCL
// does (NCCL accepts a one-rank communicator); the group tests need two GPUs or more. The
// counter in the communicator proves that a call went through NCCL and not through tpar's
// kernels (which would give the same sums).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm.h"
#include "comm/nccl_route.h"
#include "gpu/test_util.h"
#include "tuner/tuner.h"

namespace tpar_test {
namespace {

// NCCL communicators of the test, destroyed after the tpar communicators that use them (declare
// it before the VirtualGroup).
struct NcclGroup {
  const tpar::NcclLib* lib = nullptr;
  std::vector<tpar::NcclComm> comms;
  ~NcclGroup() {
    for (tpar::NcclComm c : comms) lib->commDestroy(c);
  }
  std::string init(const tpar::NcclLib* l, const std::vector<int>& devs) {
    lib = l;
    comms.assign(devs.size(), nullptr);
    const int rc = lib->commInitAll(comms.data(), static_cast<int>(devs.size()), devs.data());
    if (rc != 0) {
      comms.clear();
      return std::string("ncclCommInitAll: ") + lib->getErrorString(rc);
    }
    return "";
  }
};

#define REQUIRE_NCCL(lib)                                                    \
  const tpar::NcclLib* lib = nullptr;                                        \
  do {                                                                       \
    std::string why_;                                                        \
    lib = tpar::loadNccl(&why_);                                             \
    if (lib == nullptr) GTEST_SKIP() << "NCCL cannot be loaded: " << why_;   \
  } while (0)

uint64_t ncclCalls(tparComm_t comm) { return comm->nccl.calls; }

// One rank, algorithm forced to NCCL: refused without an NCCL communicator, exact with one,
// through NCCL for every datatype and op, in and out of place.
void checkForcedRoute(VirtualGroup& g, NcclGroup& nccl) {
  tparComm_t comm = g.comm(0);
  tparAlgo_t chosen = tparAlgoAuto;
  TPAR_OK(tparCommSelectAlgorithm(comm, 4096, &chosen));
  EXPECT_EQ(tparAlgoNccl, chosen);

  // Forced, nothing attached: the call fails and says what is missing.
  Buffers b;
  CUDA_OK(b.alloc(1, 4096));
  EXPECT_EQ(tparInvalidUsage, tparAllReduce(b.in[0], b.out[0], 16, tparFloat32, tparSum, comm,
                                            g.stream(0)));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(comm)).find("tparCommSetNcclComm"))
      << tparGetLastError(comm);
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(comm, &info));
  EXPECT_EQ(0, info.ncclAttached);

  TPAR_OK(tparCommSetNcclComm(comm, nccl.comms[0]));
  TPAR_OK(tparCommQuery(comm, &info));
  EXPECT_EQ(1, info.ncclAttached);
  uint64_t expected = ncclCalls(comm);
  for (tparDataType_t dt : {tparFloat32, tparFloat16, tparBfloat16}) {
    for (tparRedOp_t op : {tparSum, tparMax, tparMin}) {
      for (size_t count : {size_t(1), size_t(1001), size_t(300007)}) {
        SCOPED_TRACE(std::string(tparDataTypeName(dt)) + " " + tparRedOpName(op) + " count " +
                     std::to_string(count));
        runAndCheck(g, count, dt, op, /*in_place=*/false);
        runAndCheck(g, count, dt, op, /*in_place=*/true);
        expected += 2;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  EXPECT_EQ(expected, ncclCalls(comm)) << "every call must have gone through NCCL";

  // Detached again: refused again.
  TPAR_OK(tparCommSetNcclComm(comm, nullptr));
  EXPECT_EQ(tparInvalidUsage, tparAllReduce(b.in[0], b.out[0], 16, tparFloat32, tparSum, comm,
                                            g.stream(0)));
}

TEST(NcclRoute, ForcedByConfigGoesThroughTheAttachedNcclCommunicator) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, {0}));
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.algorithm = tparAlgoNccl;
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, cfg));
  checkForcedRoute(g, nccl);
}

TEST(DISABLED_NcclRouteChild, ForcedByEnvironment) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  ASSERT_STREQ("nccl", std::getenv("TPAR_ALGO"));
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, {0}));
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, sharedDeviceConfig()));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  EXPECT_EQ(tparAlgoNccl, info.forcedAlgorithm);
  checkForcedRoute(g, nccl);
}

TEST(NcclRoute, ForcedByEnvironmentGoesThroughTheAttachedNcclCommunicator) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  std::string out;
  const int rc = runSelfChild("DISABLED_NcclRouteChild.ForcedByEnvironment", {"TPAR_ALGO=nccl"},
                              300, &out);
  EXPECT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

TEST(NcclRoute, CapturedCallReplaysThroughNccl) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, {0}));
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.algorithm = tparAlgoNccl;
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, cfg));
  tparComm_t comm = g.comm(0);
  TPAR_OK(tparCommSetNcclComm(comm, nccl.comms[0]));
  const size_t count = 100003;
  Buffers b;
  CUDA_OK(b.alloc(1, count * 4));
  cudaStream_t s = g.stream(0);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const tparResult_t captured =
      tparAllReduce(b.in[0], b.out[0], count, tparFloat32, tparSum, comm, s);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  ASSERT_EQ(tparSuccess, captured) << tparGetLastError(comm);
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(1u, ncclCalls(comm)) << "captured once";
  std::vector<float> want(count), got(count);
  for (int replay = 0; replay < 3; ++replay) {
    const uint64_t seed = freshSeed();
    CUDA_OK(fillRandom(b.in[0], count, tparFloat32, seed, s));
    CUDA_OK(poison(b.out[0], count * 4, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaMemcpy(want.data(), b.in[0], count * 4, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.data(), b.out[0], count * 4, cudaMemcpyDeviceToHost));
    // One rank: the sum is the input, bit for bit.
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), count * 4)) << "replay " << replay
                                                                  << " seed " << seed;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(NcclRoute, AttachingAnNcclCommunicatorOfAnotherSizeIsRefusedNamingTheCounts) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, {0}));
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, sharedDeviceConfig()));  // 2 virtual ranks; NCCL has 1
  EXPECT_EQ(tparInvalidArgument, tparCommSetNcclComm(g.comm(0), nccl.comms[0]));
  const std::string err = tparGetLastError(g.comm(0));
  EXPECT_NE(std::string::npos, err.find("ncclComm has 1 ranks")) << err;
  EXPECT_NE(std::string::npos, err.find("has 2")) << err;
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  EXPECT_EQ(0, info.ncclAttached);
}

// The child of TableRoutesOneSizeRangeToNccl: TPAR_TUNING_FILE names a table whose bfloat16
// entries send 4 KiB < size <= 64 KiB to NCCL, and everything else to one-shot.
TEST(DISABLED_NcclRouteChild, TableRoutesOneSizeRange) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  ASSERT_NE(nullptr, std::getenv("TPAR_TUNING_FILE"));
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, {0}));
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, sharedDeviceConfig()));
  tparComm_t comm = g.comm(0);
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(comm, &info));
  ASSERT_EQ(1, info.tuningTableLoaded) << "the table was not loaded";

  auto algoFor = [&](size_t bytes) {
    tparAlgo_t a = tparAlgoAuto;
    EXPECT_EQ(tparSuccess, tparCommSelectAlgorithm(comm, bytes, &a));
    return a;
  };
  // Nothing attached: the table's NCCL range takes tpar's own choice, and runs there.
  EXPECT_EQ(tparAlgoOneShot, algoFor(32 << 10));
  runAndCheck(g, (32 << 10) / 2, tparBfloat16, tparSum, false);
  EXPECT_EQ(0u, ncclCalls(comm));

  TPAR_OK(tparCommSetNcclComm(comm, nccl.comms[0]));
  EXPECT_EQ(tparAlgoOneShot, algoFor(4 << 10));
  EXPECT_EQ(tparAlgoNccl, algoFor((4 << 10) + 2));
  EXPECT_EQ(tparAlgoNccl, algoFor(64 << 10));
  EXPECT_EQ(tparAlgoOneShot, algoFor((64 << 10) + 2));
  EXPECT_EQ(tparAlgoOneShot, algoFor(8 << 20));

  runAndCheck(g, (2 << 10) / 2, tparBfloat16, tparSum, false);  // 2 KiB: tpar
  EXPECT_EQ(0u, ncclCalls(comm));
  runAndCheck(g, (32 << 10) / 2, tparBfloat16, tparSum, false);  // 32 KiB: NCCL
  runAndCheck(g, (64 << 10) / 2, tparBfloat16, tparMax, true);   // 64 KiB: NCCL
  EXPECT_EQ(2u, ncclCalls(comm));
  runAndCheck(g, (1 << 20) / 2, tparBfloat16, tparSum, false);  // 1 MiB: tpar
  // The table has no float32 entries: float32 keeps the defaults whatever its size.
  runAndCheck(g, (32 << 10) / 4, tparFloat32, tparSum, false);
  EXPECT_EQ(2u, ncclCalls(comm));

  TPAR_OK(tparCommSetNcclComm(comm, nullptr));
  EXPECT_EQ(tparAlgoOneShot, algoFor(32 << 10));
}

TEST(NcclRoute, TableRoutesOneSizeRangeToNccl) {
  TPAR_REQUIRE_GPU();
  REQUIRE_NCCL(lib);
  // The table must carry the signature of the child's group: the same one rank on GPU 0.
  std::string signature;
  {
    VirtualGroup g;
    ASSERT_EQ("", g.init(1, sharedDeviceConfig()));
    tparCommInfo_t info;
    TPAR_OK(tparCommQuery(g.comm(0), &info));
    signature = info.topologySignature;
  }
  tpar::TuningTable t;
  t.signature = signature;
  t.nranks = 1;
  tpar::Plan oneshot;
  oneshot.algo = tpar::kernels::Algo::kOneShot;
  tpar::Plan nccl;
  nccl.nccl = true;
  t.entries = {{4u << 10, tparBfloat16, oneshot, 0},
               {64u << 10, tparBfloat16, nccl, 0},
               {1u << 30, tparBfloat16, oneshot, 0}};
  char dir[] = "/tmp/tpar_nccl_route_XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(dir));
  const std::string path = std::string(dir) + "/tuning.json";
  ASSERT_EQ(tparSuccess, tpar::saveTuningFile(path, t)) << tparGetLastError(nullptr);
  std::string out;
  const int rc = runSelfChild("DISABLED_NcclRouteChild.TableRoutesOneSizeRange",
                              {"TPAR_TUNING_FILE=" + path}, 300, &out);
  unlink(path.c_str());
  rmdir(dir);
  EXPECT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

// Several GPUs, one thread: each rank's tpar communicator gets its NCCL peer; a mismatched
// pairing is refused naming the field; routed calls are grouped as NCCL requires and give
// exact sums (small integers, so NCCL's order of additions cannot matter).
TEST(NcclRouteGroup, EveryRankRoutesThroughItsOwnNcclCommunicator) {
  TPAR_REQUIRE_GPU();
  const int ngpus = gpuCount();
  if (ngpus < 2) GTEST_SKIP() << "needs 2 GPUs or more; this machine has " << ngpus;
  REQUIRE_NCCL(lib);
  const int n = std::min(ngpus, 8);
  std::vector<int> devs(n);
  for (int r = 0; r < n; ++r) devs[r] = r;
  NcclGroup nccl;
  ASSERT_EQ("", nccl.init(lib, devs));

  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.algorithm = tparAlgoNccl;
  cfg.timeoutMs = 20000;
  std::vector<tparComm_t> comms(n, nullptr);
  TPAR_OK(tparCommInitAllConfig(comms.data(), n, devs.data(), &cfg));
  struct Destroy {
    std::vector<tparComm_t>* c;
    ~Destroy() {
      for (tparComm_t x : *c) tparCommDestroy(x);
    }
  } destroy{&comms};

  // Rank 1's NCCL communicator on rank 0: the ranks differ.
  EXPECT_EQ(tparInvalidArgument, tparCommSetNcclComm(comms[0], nccl.comms[1]));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(comms[0])).find("rank"))
      << tparGetLastError(comms[0]);
  {
    // Same rank, another GPU: tpar's rank 0 on GPU 1 against NCCL's rank 0 on GPU 0.
    std::vector<int> swapped = devs;
    std::swap(swapped[0], swapped[1]);
    std::vector<tparComm_t> other(n, nullptr);
    TPAR_OK(tparCommInitAllConfig(other.data(), n, swapped.data(), &cfg));
    EXPECT_EQ(tparInvalidArgument, tparCommSetNcclComm(other[0], nccl.comms[0]));
    EXPECT_NE(std::string::npos, std::string(tparGetLastError(other[0])).find("device"))
        << tparGetLastError(other[0]);
    for (tparComm_t c : other) tparCommDestroy(c);
  }
  for (int r = 0; r < n; ++r) TPAR_OK(tparCommSetNcclComm(comms[r], nccl.comms[r]));

  const size_t count = 262147;
  std::vector<void*> in(n), out(n);
  std::vector<cudaStream_t> streams(n);
  std::vector<float> host(count);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaMalloc(&in[r], count * 4));
    CUDA_OK(cudaMalloc(&out[r], count * 4));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(i % 13 + r);
    CUDA_OK(cudaMemcpy(in[r], host.data(), count * 4, cudaMemcpyHostToDevice));
    CUDA_OK(poison(out[r], count * 4, streams[r]));
  }
  lib->groupStart();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(tparSuccess,
              tparAllReduce(in[r], out[r], count, tparFloat32, tparSum, comms[r], streams[r]))
        << tparGetLastError(comms[r]);
  }
  ASSERT_EQ(0, lib->groupEnd());
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaSetDevice(devs[r]));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    CUDA_OK(cudaMemcpy(host.data(), out[r], count * 4, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const float want = static_cast<float>(n * (i % 13) + n * (n - 1) / 2);
      wrong += host[i] != want;
    }
    EXPECT_EQ(0u, wrong) << "rank " << r;
    EXPECT_EQ(1u, ncclCalls(comms[r])) << "rank " << r;
    cudaFree(in[r]);
    cudaFree(out[r]);
    cudaStreamDestroy(streams[r]);
  }
  CUDA_OK(cudaSetDevice(0));
}

}  // namespace
}  // namespace tpar_test
