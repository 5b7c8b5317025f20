// tparAllReduce's stream checks on every call, however much of a call is reused from earlier
// ones (NOTE [call template], NOTE [live handle cache]): a stream of another GPU is refused
// each time, also where a destroyed stream's handle comes back on another GPU, and a call
// inside a stream capture is recorded and replays.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using tpar_test::gpuCount;

struct OneRank {
  tparComm_t comm = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  size_t count = 4096;
  ~OneRank() {
    if (comm != nullptr) tparCommDestroy(comm);
    cudaSetDevice(0);
    cudaFree(send);
    cudaFree(recv);
  }
};

void initOnGpu0(OneRank* r) {
  int dev = 0;
  TPAR_OK(tparCommInitAll(&r->comm, 1, &dev));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMalloc(&r->send, r->count * 2));
  CUDA_OK(cudaMalloc(&r->recv, r->count * 2));
}

TEST(CallStreamChecks, StreamOfAnotherGpuIsRefusedOnEveryCall) {
  TPAR_REQUIRE_GPU();
  if (gpuCount() < 2) GTEST_SKIP() << "needs 2 GPUs, " << gpuCount() << " visible";
  OneRank r;
  ASSERT_NO_FATAL_FAILURE(initOnGpu0(&r));
  for (int round = 0; round < 3; ++round) {
    cudaStream_t own = nullptr, other = nullptr;
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    EXPECT_EQ(tparSuccess, tparAllReduce(r.send, r.recv, r.count, tparBfloat16, tparSum, r.comm, own))
        << tparGetLastError(r.comm);
    CUDA_OK(cudaStreamSynchronize(own));
    // The handle of a destroyed stream may come back for the next stream, on GPU 1.
    CUDA_OK(cudaStreamDestroy(own));
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CUDA_OK(cudaSetDevice(0));
    EXPECT_EQ(tparInvalidArgument,
              tparAllReduce(r.send, r.recv, r.count, tparBfloat16, tparSum, r.comm, other));
    EXPECT_NE(std::string::npos, std::string(tparGetLastError(r.comm))
                                     .find("stream belongs to GPU 1 but the communicator to GPU 0"))
        << tparGetLastError(r.comm);
    CUDA_OK(cudaSetDevice(1));
    CUDA_OK(cudaStreamDestroy(other));
  }
}

TEST(CallStreamChecks, CallInsideACaptureIsRecordedAndReplays) {
  TPAR_REQUIRE_GPU();
  OneRank r;
  ASSERT_NO_FATAL_FAILURE(initOnGpu0(&r));
  cudaStream_t s = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const uint64_t seed = tpar_test::freshSeed();
  CUDA_OK(tpar_test::fillRandom(r.send, r.count, tparBfloat16, seed, s));
  // Eager first, so that whatever a call remembers was made outside a capture.
  ASSERT_EQ(tparSuccess, tparAllReduce(r.send, r.recv, r.count, tparBfloat16, tparSum, r.comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  const tparResult_t captured =
      tparAllReduce(r.send, r.recv, r.count, tparBfloat16, tparSum, r.comm, s);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  ASSERT_EQ(tparSuccess, captured) << tparGetLastError(r.comm);
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(tpar_test::poison(r.recv, r.count * 2, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  // One rank: the sum is the input itself, bit for bit.
  std::vector<uint16_t> in(r.count), out(r.count);
  CUDA_OK(cudaMemcpy(in.data(), r.send, r.count * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out.data(), r.recv, r.count * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(in, out) << "seed " << seed;
  // Eager again on the same stream after the capture ended.
  EXPECT_EQ(tparSuccess, tparAllReduce(r.send, r.recv, r.count, tparBfloat16, tparSum, r.comm, s));
  CUDA_OK(cudaStreamSynchronize(s));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace
