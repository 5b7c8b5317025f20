// tparCommAbort while other work keeps the GPU busy (NOTE [bounded abort]), and NCCL attachment
// carried in the call header (NOTE [agreement]). The NCCL cases need two GPUs and NCCL; the
// abort of a stuck NCCL call runs a worker process per rank (tests/multiprocess/mp_worker_nccl.cc).
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/child_process.h"
#include "comm/nccl_route.h"
#include "gpu/busy_kernel.h"
#include "gpu/test_util.h"

namespace tpar_test {
namespace {

using Clock = std::chrono::steady_clock;

// A release flag in pinned host memory that a kernel polls.
struct ReleaseFlag {
  uint32_t* host = nullptr;
  uint32_t* dev = nullptr;
  cudaError_t alloc() {
    cudaError_t err = cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(uint32_t),
                                    cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) return err;
    *host = 0;
    return cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0);
  }
  void release() { reinterpret_cast<volatile uint32_t*>(host)[0] = 1; }
  ~ReleaseFlag() {
    if (host != nullptr) {
      release();
      cudaDeviceSynchronize();
      cudaFreeHost(host);
    }
  }
};

// Attack row (second half): a size routed to NCCL on one rank only hung inside NCCL, and
// tparCommAbort then hung in cudaDeviceSynchronize. Here a kernel that never ends stands in for
// the stuck NCCL call: abort must return within the timeout, say why, and free the memory once
// the GPU is idle.
TEST(BoundedAbort, ReturnsWithinTheTimeoutWhileOtherWorkKeepsTheGpuBusy) {
  TPAR_REQUIRE_GPU();
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(preloadBusyKernel());
  constexpr int64_t kTimeoutMs = 1000;
  ReleaseFlag flag;
  CUDA_OK(flag.alloc());
  cudaStream_t busy, s0;
  CUDA_OK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  Buffers b;
  CUDA_OK(b.alloc(1, 1 << 16));
  CUDA_OK(cudaDeviceSynchronize());
  const size_t baseline = freeBytes(0);

  tparConfig_t cfg = sharedDeviceConfig(kTimeoutMs);
  tparComm_t comms[2] = {nullptr, nullptr};
  const int devs[2] = {0, 0};
  TPAR_OK(tparCommInitAllConfig(comms, 2, devs, &cfg));
  CUDA_OK(launchBusyKernel(flag.dev, 60000, busy));
  // Rank 0 waits for rank 1, which never calls: its kernel gives up at the abort.
  TPAR_OK(tparAllReduce(b.in[0], b.out[0], 4096, tparBfloat16, tparSum, comms[0], s0));
  for (int r = 0; r < 2; ++r) {
    const auto t0 = Clock::now();
    const tparResult_t res = tparCommAbort(comms[r]);
    const double took = secondsSince(t0);
    EXPECT_EQ(tparTimeout, res) << "rank " << r << ": " << tparGetLastError(nullptr);
    EXPECT_NE(std::string::npos, std::string(tparGetLastError(nullptr)).find("did not become idle"))
        << tparGetLastError(nullptr);
    EXPECT_LT(took, kTimeoutMs / 1000.0 + 3.0) << "rank " << r << ": abort waited " << took << " s";
    // The handle is gone whatever the result.
    tparResult_t async;
    EXPECT_EQ(tparInvalidArgument, tparCommGetAsyncError(comms[r], &async));
  }
  flag.release();
  CUDA_OK(cudaStreamSynchronize(busy));
  EXPECT_TRUE(memoryReturns(0, baseline)) << "the aborted communicators' memory was not freed";
  cudaStreamDestroy(busy);
  cudaStreamDestroy(s0);
}

// With nothing else on the GPU, abort frees at once and succeeds.
TEST(BoundedAbort, SucceedsAtOnceWhenOnlyItsOwnKernelsWait) {
  TPAR_REQUIRE_GPU();
  CUDA_OK(cudaSetDevice(0));
  Buffers b;
  CUDA_OK(b.alloc(1, 1 << 16));
  cudaStream_t s0;
  CUDA_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  tparConfig_t cfg = sharedDeviceConfig(60000);
  tparComm_t comms[2] = {nullptr, nullptr};
  const int devs[2] = {0, 0};
  TPAR_OK(tparCommInitAllConfig(comms, 2, devs, &cfg));
  TPAR_OK(tparAllReduce(b.in[0], b.out[0], 4096, tparBfloat16, tparSum, comms[0], s0));
  const auto t0 = Clock::now();
  TPAR_OK(tparCommAbort(comms[0]));
  EXPECT_LT(secondsSince(t0), 5.0);
  TPAR_OK(tparCommAbort(comms[1]));
  cudaStreamDestroy(s0);
}

// ------------------------------------------------------------------------------------------
// NCCL (two GPUs).

#define REQUIRE_TWO_GPUS_AND_NCCL(lib)                                              \
  TPAR_REQUIRE_GPU();                                                               \
  if (gpuCount() < 2) GTEST_SKIP() << "needs two GPUs (found " << gpuCount() << ")"; \
  std::string nccl_why_;                                                            \
  const tpar::NcclLib* lib = tpar::loadNccl(&nccl_why_);                            \
  if (lib == nullptr) GTEST_SKIP() << "NCCL cannot be loaded: " << nccl_why_

// Attack row: a rank that attached an NCCL communicator and one that did not. A call both run
// through tpar's kernels must fail on both with tparInvalidUsage (the attachment is in the call
// header), not return a result.
TEST(NcclAttachment, RanksThatAttachedDifferentlyGetInvalidUsageFromTheirNextCall) {
  REQUIRE_TWO_GPUS_AND_NCCL(lib);
  std::vector<tpar::NcclComm> nccl(2, nullptr);
  const int devs[2] = {0, 1};
  ASSERT_EQ(0, lib->commInitAll(nccl.data(), 2, devs));
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.timeoutMs = 3000;
  tparComm_t comms[2] = {nullptr, nullptr};
  TPAR_OK(tparCommInitAllConfig(comms, 2, devs, &cfg));
  TPAR_OK(tparCommSetNcclComm(comms[0], nccl[0]));  // rank 1 does not attach
  tparAlgo_t algo;
  TPAR_OK(tparCommSelectAlgorithm(comms[0], 4096, &algo));
  ASSERT_NE(tparAlgoNccl, algo) << "the size must run through tpar's kernels on both ranks";
  Buffers b[2];
  std::vector<cudaStream_t> streams(2);
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(b[r].alloc(1, 4096));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
  }
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    TPAR_OK(tparAllReduce(b[r].in[0], b[r].out[0], 2048, tparBfloat16, tparSum, comms[r],
                          streams[r]));
  }
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaSetDevice(r));
    CUDA_OK(cudaStreamSynchronize(streams[r]));
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(comms[r], &async));
    EXPECT_EQ(tparInvalidUsage, async) << "rank " << r;
  }
  for (int r = 0; r < 2; ++r) {
    TPAR_OK(tparCommDestroy(comms[r]));
    cudaStreamDestroy(streams[r]);
    lib->commDestroy(nccl[r]);
  }
}

// A call routed to NCCL on rank 0 waits inside NCCL for rank 1, which never joins it;
// tparCommAbort must still return tparTimeout within the timeout, and tpar's memory be freed once
// ncclCommAbort (what tpar cannot do) has ended the NCCL call. One process per rank and GPU
// (tpar_mp_worker nccl-abort): when one thread drives both NCCL ranks (ncclCommInitAll), NCCL's
// enqueue of a call that only one of them makes blocks on the host (seen on 2 H200s), so NCCL's
// kernel never gets to wait on the GPU. The BoundedAbort tests above cover the same bound on one
// GPU, with a kernel that never ends in place of the stuck NCCL call.
TEST(NcclAttachment, AbortReturnsWithinTheTimeoutWhileNcclWaitsForAPeer) {
  REQUIRE_TWO_GPUS_AND_NCCL(lib);
  tparUniqueId id;
  TPAR_OK(tparGetUniqueId(&id));
  char dir_template[] = "/tmp/tpar_nccl_abort_XXXXXX";
  ASSERT_NE(nullptr, mkdtemp(dir_template));
  const std::string dir = dir_template;
  // The workers load the NCCL this process found (the loader's search otherwise).
  const std::vector<std::string> env = {"TPAR_NCCL_LIBRARY=" + lib->path};
  ChildProcess ranks[2];
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE(ranks[r].start({TPAR_MP_WORKER, "nccl-abort", idHex(id), std::to_string(r), dir},
                               env));
  const int rc0 = ranks[0].wait(180);
  std::ofstream(dir + "/release") << "\n";  // rank 1 ends even when rank 0 failed early
  const int rc1 = ranks[1].wait(150);
  const std::string outputs =
      "rank 0:\n" + ranks[0].output() + "rank 1:\n" + ranks[1].output();
  EXPECT_EQ(0, rc0) << outputs;  // -1: still running at the deadline (then killed)
  EXPECT_EQ(0, rc1) << outputs;
  const auto res = parseResult(readFile(dir + "/rank0.result"));
  for (const char* f : {"/nccl-id", "/release", "/released", "/rank0.result"})
    unlink((dir + f).c_str());
  rmdir(dir.c_str());
  ASSERT_FALSE(res.empty()) << "rank 0 wrote no result\n" << outputs;
  EXPECT_EQ("1", res.at("stream_busy")) << "NCCL's call finished without its peer?\n" << outputs;
  EXPECT_EQ(std::to_string(tparTimeout), res.at("abort")) << res.at("abort_text");
  EXPECT_NE(std::string::npos, res.at("abort_text").find("did not become idle"))
      << res.at("abort_text");
  const double abort_s = std::atof(res.at("abort_s").c_str());
  const double timeout_s = std::atof(res.at("timeout_s").c_str());
  EXPECT_LT(abort_s, timeout_s + 3.0) << "abort waited " << abort_s << " s";
  EXPECT_EQ("0", res.at("nccl_abort")) << outputs;
  EXPECT_EQ("cudaSuccess", res.at("stream_after")) << "after ncclCommAbort";
  EXPECT_EQ("1", res.at("peer_released")) << outputs;
  EXPECT_EQ("1", res.at("workspace_freed")) << "tpar's device memory was not freed";
  EXPECT_EQ("1", res.at("host_state_freed")) << "tpar's pinned host memory was not freed";
  EXPECT_EQ("1", res.at("memory_back")) << "GPU 0's free memory stayed below its baseline";
  std::printf("NCCL waiting for a peer: tparCommAbort gave %s after %.2f s (timeout %.1f s); "
              "ncclCommAbort %s in %s s; stream %s; tpar's memory freed %s/%s\n",
              res.at("abort_name").c_str(), abort_s, timeout_s, res.at("nccl_abort").c_str(),
              res.at("nccl_abort_s").c_str(), res.at("stream_after").c_str(),
              res.at("workspace_freed").c_str(), res.at("host_state_freed").c_str());
}

}  // namespace
}  // namespace tpar_test
