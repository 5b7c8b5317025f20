// The smallest complete use of tpar: one process, every local GPU as one rank (or, on a machine
// with one GPU, four "virtual ranks" sharing it), one bf16 all-reduce, eager and inside a CUDA
// graph, checked on the host.
//
//   build/examples/tpar_example_allreduce
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <tpar/tpar.h>

#include <cstdio>
#include <vector>

#define CHECK_TPAR(call)                                                               \
  do {                                                                                 \
    tparResult_t r_ = (call);                                                          \
    if (r_ != tparSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s: %s\n", #call, tparGetErrorString(r_),              \
                   tparGetLastError(nullptr));                                         \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)
#define CHECK_CUDA(call)                                                               \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                 \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

int main() {
  int ngpus = 0;
  if (cudaGetDeviceCount(&ngpus) != cudaSuccess || ngpus == 0) {
    std::printf("no CUDA GPU here: nothing to run\n");
    return 0;
  }
  const bool virtual_ranks = ngpus == 1;
  const int nranks = virtual_ranks ? 4 : ngpus;
  std::vector<int> devs(nranks);
  for (int r = 0; r < nranks; ++r) devs[r] = virtual_ranks ? 0 : r;

  tparConfig_t config = TPAR_CONFIG_INITIALIZER;
  config.allowSharedDevice = virtual_ranks ? 1 : 0;
  std::vector<tparComm_t> comms(nranks);
  CHECK_TPAR(tparCommInitAllConfig(comms.data(), nranks, devs.data(), &config));

  // Rank r contributes r + 1 in every element, so every output element is n(n+1)/2.
  const size_t count = 7168 * 8;  // 8 tokens of a 7168-wide hidden state: 112 KiB of bf16
  std::vector<cudaStream_t> streams(nranks);
  std::vector<__nv_bfloat16*> buf(nranks);
  for (int r = 0; r < nranks; ++r) {
    CHECK_CUDA(cudaSetDevice(devs[r]));
    CHECK_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    CHECK_CUDA(cudaMalloc(&buf[r], count * sizeof(__nv_bfloat16)));
    std::vector<__nv_bfloat16> host(count, __float2bfloat16(float(r + 1)));
    CHECK_CUDA(cudaMemcpy(buf[r], host.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice));
  }

  // Eager, in place. One thread drives every rank: tparAllReduce only enqueues work.
  for (int r = 0; r < nranks; ++r)
    CHECK_TPAR(tparAllReduce(buf[r], buf[r], count, tparBfloat16, tparSum, comms[r], streams[r]));

  // The same call captured in a graph per rank, replayed twice: the values keep growing.
  std::vector<cudaGraphExec_t> graphs(nranks);
  for (int r = 0; r < nranks; ++r) {
    CHECK_CUDA(cudaSetDevice(devs[r]));
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal));
    CHECK_TPAR(tparAllReduce(buf[r], buf[r], count, tparBfloat16, tparSum, comms[r], streams[r]));
    CHECK_CUDA(cudaStreamEndCapture(streams[r], &g));
    CHECK_CUDA(cudaGraphInstantiate(&graphs[r], g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  }
  for (int replay = 0; replay < 2; ++replay)
    for (int r = 0; r < nranks; ++r) CHECK_CUDA(cudaGraphLaunch(graphs[r], streams[r]));

  // After three all-reduces: n(n+1)/2 * n^2.
  const float want = nranks * (nranks + 1) / 2.0f * nranks * nranks;
  int bad = 0;
  for (int r = 0; r < nranks; ++r) {
    CHECK_CUDA(cudaSetDevice(devs[r]));
    CHECK_CUDA(cudaStreamSynchronize(streams[r]));
    tparResult_t async;
    CHECK_TPAR(tparCommGetAsyncError(comms[r], &async));
    if (async != tparSuccess) {
      std::fprintf(stderr, "rank %d: %s\n", r, tparGetErrorString(async));
      return 1;
    }
    std::vector<__nv_bfloat16> host(count);
    CHECK_CUDA(cudaMemcpy(host.data(), buf[r], count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < count; ++i) bad += __bfloat162float(host[i]) != want;
  }
  tparCommInfo_t info;
  CHECK_TPAR(tparCommQuery(comms[0], &info));
  std::printf("%d %s ranks, transport %s, %zu bytes of GPU memory per rank: %s (expected %.0f)\n",
              nranks, virtual_ranks ? "virtual" : "GPU", tparTransportName(info.transport),
              info.deviceMemoryBytes, bad ? "WRONG" : "correct", want);
  for (int r = 0; r < nranks; ++r) {
    cudaGraphExecDestroy(graphs[r]);
    cudaFree(buf[r]);
    cudaStreamDestroy(streams[r]);
    CHECK_TPAR(tparCommDestroy(comms[r]));
  }
  return bad ? 1 : 0;
}
