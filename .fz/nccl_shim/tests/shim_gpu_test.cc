// The shim with the real NCCL on real GPUs, in one process (one thread per rank, as NCCL
// allows): small all-reduces go through tpar and are exact and bitwise equal on every rank,
// also inside a CUDA graph; large ones, grouped ones and those tpar cannot run go to NCCL and
// are right too; ncclCommInitAll and ncclCommSplit get tpar communicators; tpar's errors come
// back as NCCL results with text; TPAR_SHIM_DISABLE=1 makes none.
//
// Needs a GPU and a real NCCL the shim can find (TPAR_NCCL_LIBRARY, or the usual places); the
// group tests need two GPUs. Each skips with the reason otherwise.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "gpu/test_util.h"
#include "nccl_api_gates.h"
#include "tpar_nccl_shim.h"

namespace tpar_shim_gpu_test {
namespace {

using tpar_test::CheckResult;

// The shim's functions, found with dlsym as a program would find NCCL's.
struct Shim {
  void* handle = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) initRank = nullptr;
  decltype(&ncclCommInitAll) initAll = nullptr;
  decltype(&ncclCommSplit) split = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclGroupStart) groupStart = nullptr;
  decltype(&ncclGroupEnd) groupEnd = nullptr;
  decltype(&ncclGetLastError) lastError = nullptr;
  int (*stats)(void*, tparShimStats_t*) = nullptr;
  const char* (*ncclPath)() = nullptr;

  // "" when usable, else why not.
  std::string load() {
    handle = dlopen(TPAR_SHIM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return std::string("dlopen: ") + dlerror();
    bind(&getUniqueId, "ncclGetUniqueId");
    bind(&initRank, "ncclCommInitRank");
    bind(&initAll, "ncclCommInitAll");
    bind(&split, "ncclCommSplit");
    bind(&destroy, "ncclCommDestroy");
    bind(&allReduce, "ncclAllReduce");
    bind(&groupStart, "ncclGroupStart");
    bind(&groupEnd, "ncclGroupEnd");
    bind(&lastError, "ncclGetLastError");
    bind(&stats, "tparShimGetStats");
    bind(&ncclPath, "tparShimNcclPath");
    if (ncclPath() == nullptr) return lastError(nullptr);
    return "";
  }
  template <typename F>
  void bind(F* f, const char* name) {
    *f = reinterpret_cast<F>(dlsym(handle, name));
  }
  tparShimStats_t total() {
    tparShimStats_t s;
    std::memset(&s, 0, sizeof(s));
    stats(nullptr, &s);
    return s;
  }
};

Shim& shim() {
  static Shim s;
  return s;
}

#define REQUIRE_SHIM_AND_GPUS(n)                                                       \
  do {                                                                                 \
    TPAR_REQUIRE_GPU();                                                                \
    static const std::string why_ = shim().load();                                     \
    if (!why_.empty()) GTEST_SKIP() << "the shim found no real NCCL: " << why_;        \
    int gpus_ = 0;                                                                     \
    cudaGetDeviceCount(&gpus_);                                                        \
    if (gpus_ < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, found " << gpus_;      \
  } while (0)

// ncclGetLastError's text for a failed call (the shim's own, or NCCL's).
std::string ncclText(ncclResult_t rc) {
  return rc == ncclSuccess ? "" : shim().lastError(nullptr);
}
std::string ncclText() { return shim().lastError(nullptr); }

// Runs f(rank) on one thread per rank, each on its GPU.
template <typename F>
void perRank(int n, F f) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      f(r);
    });
  }
  for (auto& t : threads) t.join();
}

// One rank's buffers and stream on its GPU.
struct RankBuffers {
  int device = 0;
  void* in = nullptr;
  void* out = nullptr;
  cudaStream_t stream = nullptr;
  size_t bytes = 0;
  void alloc(int dev, size_t b) {
    device = dev;
    bytes = b;
    cudaSetDevice(dev);
    cudaMalloc(&in, b);
    cudaMalloc(&out, b);
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  ~RankBuffers() {
    if (in == nullptr) return;
    cudaSetDevice(device);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
  }
};

tparDataType_t tparTypeOf(ncclDataType_t t) {
  return t == ncclFloat32 ? tparFloat32 : t == ncclFloat16 ? tparFloat16 : tparBfloat16;
}
tparRedOp_t tparOpOf(ncclRedOp_t op) {
  return op == ncclMax ? tparMax : op == ncclMin ? tparMin : tparSum;
}
size_t elemBytes(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }

// Copies every rank's input and output to GPU 0 and checks them there (tpar's checker:
// bitwise equal across ranks, fp32 in rank order, within tolerance of float64).
void expectExact(std::vector<RankBuffers>& b, size_t count, ncclDataType_t type, ncclRedOp_t op,
                 const std::string& what) {
  const size_t bytes = count * elemBytes(type);
  cudaSetDevice(0);
  std::vector<void*> copies;
  std::vector<const void*> ins, outs;
  for (RankBuffers& r : b) {
    void* in = nullptr;
    void* out = nullptr;
    ASSERT_EQ(cudaSuccess, cudaMalloc(&in, bytes));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&out, bytes));
    ASSERT_EQ(cudaSuccess, cudaMemcpyPeer(in, 0, r.in, r.device, bytes));
    ASSERT_EQ(cudaSuccess, cudaMemcpyPeer(out, 0, r.out, r.device, bytes));
    copies.push_back(in);
    copies.push_back(out);
    ins.push_back(in);
    outs.push_back(out);
  }
  CheckResult res;
  ASSERT_EQ(cudaSuccess,
            tpar_test::checkOutputs(ins, outs, count, tparTypeOf(type), tparOpOf(op), &res));
  EXPECT_EQ(0u, res.wrong) << what << ": first bad element " << res.first_bad;
  EXPECT_EQ(0u, res.off_ref) << what;
  EXPECT_EQ(0u, res.disagree) << what;
  for (void* p : copies) cudaFree(p);
}

// One all-reduce on every rank through the shim; returns the routes it took (counter deltas).
tparShimStats_t allReduceOnAll(const std::vector<ncclComm_t>& comms, std::vector<RankBuffers>& b,
                               size_t count, ncclDataType_t type, ncclRedOp_t op, bool grouped) {
  const tparShimStats_t before = shim().total();
  const uint64_t seed = tpar_test::freshSeed();
  perRank(static_cast<int>(comms.size()), [&](int r) {
    ASSERT_EQ(cudaSuccess, tpar_test::fillRandom(b[r].in, count, tparTypeOf(type), seed + r,
                                                 b[r].stream));
    ASSERT_EQ(cudaSuccess, tpar_test::poison(b[r].out, count * elemBytes(type), b[r].stream));
    if (grouped) ASSERT_EQ(ncclSuccess, shim().groupStart());
    const ncclResult_t rc =
        shim().allReduce(b[r].in, b[r].out, count, type, op, comms[r], b[r].stream);
    EXPECT_EQ(ncclSuccess, rc) << ncclText(rc);
    if (grouped) ASSERT_EQ(ncclSuccess, shim().groupEnd());
    ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(b[r].stream));
  });
  tparShimStats_t d = shim().total();
  for (int i = 0; i < tparShimNumRoutes; ++i) d.calls[i] -= before.calls[i];
  return d;
}

std::vector<ncclComm_t> initRanks(int n) {
  ncclUniqueId id;
  EXPECT_EQ(ncclSuccess, shim().getUniqueId(&id));
  std::vector<ncclComm_t> comms(n, nullptr);
  perRank(n, [&](int r) {
    const ncclResult_t rc = shim().initRank(&comms[r], n, id, r);
    EXPECT_EQ(ncclSuccess, rc) << "rank " << r << ": " << ncclText(rc);
  });
  return comms;
}

void destroyAll(const std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms)
    if (c != nullptr) EXPECT_EQ(ncclSuccess, shim().destroy(c));
}

bool hasTpar(ncclComm_t c) {
  tparShimStats_t s;
  return shim().stats(c, &s) == 0 && s.commsWithTpar == 1;
}

TEST(ShimGpu, OneRankCommunicatorPassesThroughAndIsExact) {
  REQUIRE_SHIM_AND_GPUS(1);
  ncclComm_t comm = nullptr;
  const int dev = 0;
  ASSERT_EQ(ncclSuccess, shim().initAll(&comm, 1, &dev)) << ncclText();
  EXPECT_FALSE(hasTpar(comm));
  std::vector<RankBuffers> b(1);
  b[0].alloc(0, 1 << 20);
  const tparShimStats_t d = allReduceOnAll({comm}, b, 4096, ncclBfloat16, ncclSum, false);
  EXPECT_EQ(1u, d.calls[tparShimRouteNoTparComm]);
  expectExact(b, 4096, ncclBfloat16, ncclSum, "one rank");
  destroyAll({comm});
}

TEST(ShimGpu, TwoRanksTakeSmallCallsThroughTparAndTheRestThroughNccl) {
  REQUIRE_SHIM_AND_GPUS(2);
  const std::vector<ncclComm_t> comms = initRanks(2);
  ASSERT_TRUE(comms[0] != nullptr && comms[1] != nullptr);
  ASSERT_TRUE(hasTpar(comms[0]) && hasTpar(comms[1]))
      << "no tpar communicator was made; run with TPAR_DEBUG=info to see why";
  const size_t max_count = (8u << 20) / 2 + 64;  // past the default TPAR_SHIM_MAX_BYTES in bf16
  std::vector<RankBuffers> b(2);
  for (int r = 0; r < 2; ++r) b[r].alloc(r, max_count * 4);

  for (ncclDataType_t type : {ncclBfloat16, ncclFloat16, ncclFloat32}) {
    for (ncclRedOp_t op : {ncclSum, ncclMax, ncclMin}) {
      for (size_t count : {size_t(1), size_t(3), size_t(1000), size_t(65536 + 3),
                           (size_t(8) << 20) / elemBytes(type)}) {
        const std::string what = "type " + std::to_string(type) + " op " + std::to_string(op) +
                                 " count " + std::to_string(count);
        const tparShimStats_t d = allReduceOnAll(comms, b, count, type, op, false);
        EXPECT_EQ(2u, d.calls[tparShimRouteTpar]) << what;
        expectExact(b, count, type, op, what);
      }
    }
  }
  // Past the limit: NCCL (with two ranks every order of additions gives the same bits).
  tparShimStats_t d = allReduceOnAll(comms, b, max_count, ncclBfloat16, ncclSum, false);
  EXPECT_EQ(2u, d.calls[tparShimRouteTooLarge]);
  expectExact(b, max_count, ncclBfloat16, ncclSum, "above the limit");
  // In a group: NCCL.
  d = allReduceOnAll(comms, b, 4096, ncclBfloat16, ncclSum, true);
  EXPECT_EQ(2u, d.calls[tparShimRouteInGroup]);
  expectExact(b, 4096, ncclBfloat16, ncclSum, "grouped");

  // A datatype and an op tpar does not run: NCCL, checked on the host.
  {
    const tparShimStats_t before = shim().total();
    const int n = 1000;
    std::vector<int32_t> got(2 * n);
    std::vector<float> fgot(2 * n);
    perRank(2, [&](int r) {
      std::vector<int32_t> v(n);
      std::vector<float> f(n);
      for (int i = 0; i < n; ++i) {
        v[i] = (r + 1) * i - 7;
        f[i] = r == 0 ? 1.5f : float(i % 7);
      }
      cudaMemcpy(b[r].in, v.data(), n * 4, cudaMemcpyHostToDevice);
      ASSERT_EQ(ncclSuccess, shim().allReduce(b[r].in, b[r].out, n, ncclInt32, ncclSum,
                                              comms[r], b[r].stream));
      cudaStreamSynchronize(b[r].stream);
      cudaMemcpy(got.data() + r * n, b[r].out, n * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(b[r].in, f.data(), n * 4, cudaMemcpyHostToDevice);
      ASSERT_EQ(ncclSuccess, shim().allReduce(b[r].in, b[r].out, n, ncclFloat32, ncclProd,
                                              comms[r], b[r].stream));
      cudaStreamSynchronize(b[r].stream);
      cudaMemcpy(fgot.data() + r * n, b[r].out, n * 4, cudaMemcpyDeviceToHost);
    });
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(3 * i - 14, got[r * n + i]) << "int32 sum, rank " << r << " element " << i;
        ASSERT_EQ(1.5f * float(i % 7), fgot[r * n + i]) << "prod, rank " << r << " element " << i;
      }
    }
    const tparShimStats_t after = shim().total();
    EXPECT_EQ(2u, after.calls[tparShimRouteDatatype] - before.calls[tparShimRouteDatatype]);
    EXPECT_EQ(2u, after.calls[tparShimRouteOp] - before.calls[tparShimRouteOp]);
  }

  // Captured into a CUDA graph: counted once, replayed with fresh inputs.
  {
    const size_t count = 12288;
    std::vector<cudaGraphExec_t> execs(2, nullptr);
    const tparShimStats_t before = shim().total();
    perRank(2, [&](int r) {
      cudaGraph_t graph;
      ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(b[r].stream, cudaStreamCaptureModeThreadLocal));
      const ncclResult_t rc =
          shim().allReduce(b[r].in, b[r].out, count, ncclBfloat16, ncclSum, comms[r], b[r].stream);
      ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(b[r].stream, &graph));
      ASSERT_EQ(ncclSuccess, rc) << ncclText(rc);
      ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&execs[r], graph, 0));
      cudaGraphDestroy(graph);
    });
    EXPECT_EQ(2u, shim().total().calls[tparShimRouteTpar] - before.calls[tparShimRouteTpar]);
    for (int replay = 0; replay < 3; ++replay) {
      const uint64_t seed = tpar_test::freshSeed();
      perRank(2, [&](int r) {
        tpar_test::fillRandom(b[r].in, count, tparBfloat16, seed + r, b[r].stream);
        tpar_test::poison(b[r].out, count * 2, b[r].stream);
        ASSERT_EQ(cudaSuccess, cudaGraphLaunch(execs[r], b[r].stream));
        ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(b[r].stream));
      });
      expectExact(b, count, ncclBfloat16, ncclSum, "graph replay " + std::to_string(replay));
    }
    for (int r = 0; r < 2; ++r) cudaGraphExecDestroy(execs[r]);
  }

  // tpar refuses a misaligned buffer on both ranks: NCCL's result code with tpar's text.
  perRank(2, [&](int r) {
    const ncclResult_t rc =
        shim().allReduce(static_cast<char*>(b[r].in) + 1, b[r].out, 64, ncclBfloat16, ncclSum,
                         comms[r], b[r].stream);
    EXPECT_EQ(ncclInvalidArgument, rc);
    const std::string text = shim().lastError(comms[r]);
    EXPECT_NE(std::string::npos, text.find("not aligned")) << text;
  });
  destroyAll(comms);
}

TEST(ShimGpu, InitAllAndSplitGetTparCommunicators) {
  REQUIRE_SHIM_AND_GPUS(2);
  std::vector<ncclComm_t> all(2, nullptr);
  const int devs[2] = {0, 1};
  ASSERT_EQ(ncclSuccess, shim().initAll(all.data(), 2, devs)) << ncclText();
  EXPECT_TRUE(hasTpar(all[0]) && hasTpar(all[1])) << "run with TPAR_DEBUG=info to see why";
  std::vector<RankBuffers> b(2);
  for (int r = 0; r < 2; ++r) b[r].alloc(r, 1 << 20);
  tparShimStats_t d = allReduceOnAll(all, b, 50000, ncclFloat16, ncclSum, false);
  EXPECT_EQ(2u, d.calls[tparShimRouteTpar]);
  expectExact(b, 50000, ncclFloat16, ncclSum, "ncclCommInitAll");

  std::vector<ncclComm_t> sub(2, nullptr);
  perRank(2, [&](int r) {
    const ncclResult_t rc = shim().split(all[r], 0, 1 - r, &sub[r], nullptr);  // ranks swapped
    EXPECT_EQ(ncclSuccess, rc) << ncclText(rc);
  });
  ASSERT_TRUE(sub[0] != nullptr && sub[1] != nullptr);
  EXPECT_TRUE(hasTpar(sub[0]) && hasTpar(sub[1]));
  d = allReduceOnAll(sub, b, 777, ncclBfloat16, ncclMax, false);
  EXPECT_EQ(2u, d.calls[tparShimRouteTpar]);
  expectExact(b, 777, ncclBfloat16, ncclMax, "ncclCommSplit");
  destroyAll(sub);
  destroyAll(all);
}

// Run in a child with TPAR_SHIM_DISABLE=1 (below).
TEST(ShimGpuChild, DISABLED_DisabledMakesNoTparCommunicator) {
  REQUIRE_SHIM_AND_GPUS(2);
  const std::vector<ncclComm_t> comms = initRanks(2);
  ASSERT_TRUE(comms[0] != nullptr && comms[1] != nullptr);
  std::vector<RankBuffers> b(2);
  for (int r = 0; r < 2; ++r) b[r].alloc(r, 1 << 20);
  const tparShimStats_t d = allReduceOnAll(comms, b, 4096, ncclBfloat16, ncclSum, false);
  for (int i = 0; i < tparShimNumRoutes; ++i) EXPECT_EQ(0u, d.calls[i]) << "nothing is counted";
  expectExact(b, 4096, ncclBfloat16, ncclSum, "disabled");
  const tparShimStats_t t = shim().total();
  EXPECT_EQ(0u, t.commsWithTpar + t.commsPassThrough) << "nothing is registered";
  destroyAll(comms);
}

// Run in a child with TPAR_ALGO=nccl (below): tpar's plan names NCCL for every size, so the
// shim hands every call to NCCL itself, through the communicator it attached.
TEST(ShimGpuChild, DISABLED_PlanNamingNcclSendsCallsToNccl) {
  REQUIRE_SHIM_AND_GPUS(2);
  const std::vector<ncclComm_t> comms = initRanks(2);
  ASSERT_TRUE(hasTpar(comms[0]) && hasTpar(comms[1]));
  std::vector<RankBuffers> b(2);
  for (int r = 0; r < 2; ++r) b[r].alloc(r, 1 << 20);
  for (size_t count : {size_t(1), size_t(4096), size_t(100000)}) {
    const tparShimStats_t d = allReduceOnAll(comms, b, count, ncclBfloat16, ncclSum, false);
    EXPECT_EQ(2u, d.calls[tparShimRouteTunedNccl]) << count;
    expectExact(b, count, ncclBfloat16, ncclSum, "planned NCCL");
  }
  destroyAll(comms);
}

// Runs ShimGpuChild.DISABLED_<name> in a child process with `env` added.
void expectChildPasses(const std::string& name, const std::string& env) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  std::string out;
  const int rc = tpar_test::runProcess(
      {exe, "--gtest_filter=ShimGpuChild.DISABLED_" + name, "--gtest_also_run_disabled_tests"},
      {env}, 300, &out);
  EXPECT_EQ(0, rc) << out;
  EXPECT_NE(std::string::npos, out.find("[  PASSED  ] 1 test")) << out;
}

TEST(ShimGpu, DisabledMakesNoTparCommunicator) {
  REQUIRE_SHIM_AND_GPUS(2);
  expectChildPasses("DisabledMakesNoTparCommunicator", "TPAR_SHIM_DISABLE=1");
}

TEST(ShimGpu, PlanNamingNcclSendsCallsToNccl) {
  REQUIRE_SHIM_AND_GPUS(2);
  expectChildPasses("PlanNamingNcclSendsCallsToNccl", "TPAR_ALGO=nccl");
}

}  // namespace
}  // namespace tpar_shim_gpu_test
