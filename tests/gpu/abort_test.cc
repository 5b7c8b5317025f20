// tparCommAbort while other work keeps the GPU busy (NOTE [bounded abort]), and NCCL attachment
// carried in the call header (NOTE [agreement]). The NCCL cases need two GPUs and NCCL.
#include <dlfcn.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "core/nccl_route.h"
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

size_t freeBytes(int device) {
  size_t free_b = 0, total = 0;
  cudaSetDevice(device);
  cudaMemGetInfo(&free_b, &total);
  return free_b;
}

// Waits until the GPU's free memory is back to `baseline` (within 4 MiB) or 15 s passed.
bool memoryReturns(int device, size_t baseline) {
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < deadline) {
    if (freeBytes(device) + (4u << 20) >= baseline) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

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

using NcclAbort = int (*)(tpar::NcclComm);

NcclAbort ncclAbortOf(const tpar::NcclLib* lib) {
  void* h = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return h != nullptr ? reinterpret_cast<NcclAbort>(dlsym(h, "ncclCommAbort")) : nullptr;
}

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

// A call routed to NCCL on rank 0 only waits inside NCCL for rank 1, which never comes;
// tparCommAbort must still return within the timeout, and the memory come back once the NCCL
// call is aborted.
// Disabled: one thread drives both NCCL ranks here (ncclCommInitAll), and NCCL's enqueue of a
// call that only one of them makes blocks on the host (seen on 2 H200s: tparAllReduce never
// returned), so the premise, an NCCL kernel waiting on the GPU, never arises in one process. It
// needs one process per rank; BoundedAbort.ReturnsWithinTheTimeoutWhileOtherWorkKeepsTheGpuBusy
// covers the bound with a kernel that never ends standing in for the stuck NCCL call.
TEST(NcclAttachment, DISABLED_AbortReturnsWithinTheTimeoutWhileNcclWaitsForAPeer) {
  REQUIRE_TWO_GPUS_AND_NCCL(lib);
  const NcclAbort ncclAbort = ncclAbortOf(lib);
  ASSERT_NE(nullptr, ncclAbort) << "ncclCommAbort not found in " << lib->path;
  std::vector<tpar::NcclComm> nccl(2, nullptr);
  const int devs[2] = {0, 1};
  ASSERT_EQ(0, lib->commInitAll(nccl.data(), 2, devs));
  const size_t baseline = freeBytes(0);
  constexpr int64_t kTimeoutMs = 1000;
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.timeoutMs = kTimeoutMs;
  cfg.algorithm = tparAlgoNccl;
  tparComm_t comms[2] = {nullptr, nullptr};
  TPAR_OK(tparCommInitAllConfig(comms, 2, devs, &cfg));
  TPAR_OK(tparCommSetNcclComm(comms[0], nccl[0]));
  Buffers b;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(b.alloc(1, 1 << 20));
  cudaStream_t s0;
  CUDA_OK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  TPAR_OK(tparAllReduce(b.in[0], b.out[0], 1 << 18, tparFloat32, tparSum, comms[0], s0));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaErrorNotReady, cudaStreamQuery(s0)) << "NCCL finished without its peer?";
  const auto t0 = Clock::now();
  const tparResult_t res = tparCommAbort(comms[0]);
  const double took = secondsSince(t0);
  EXPECT_EQ(tparTimeout, res) << tparGetLastError(nullptr);
  EXPECT_LT(took, kTimeoutMs / 1000.0 + 3.0) << "abort waited " << took << " s";
  EXPECT_EQ(0, ncclAbort(nccl[0]));  // what tpar cannot do: end the NCCL call
  (void)cudaStreamSynchronize(s0);
  (void)cudaGetLastError();
  TPAR_OK(tparCommAbort(comms[1]));
  EXPECT_TRUE(memoryReturns(0, baseline)) << "the aborted communicator's memory was not freed";
  EXPECT_EQ(0, ncclAbort(nccl[1]));  // its peer is gone: no destroy that might wait for it
  cudaStreamDestroy(s0);
}

}  // namespace
}  // namespace tpar_test
