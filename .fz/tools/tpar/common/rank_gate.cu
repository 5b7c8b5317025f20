#include "tools/tpar/common/rank_gate.h"

namespace tpar_cli {
namespace {

// NOTE [rank gate]
// Virtual ranks share one GPU's multiprocessors. A rank's all-reduce holds its blocks while it
// waits for the others; if the others still have compute queued before their all-reduce (a
// GEMM, say), that compute runs only on what the waiting all-reduces leave free. tpar keeps at
// least one multiprocessor free of its blocks (NOTE [virtual-rank residency]), which is enough
// for a kernel that needs one multiprocessor at a time, but not for one that needs several at
// once: a kernel launched in clusters (cuBLAS's Hopper GEMMs are) needs all SMs of a cluster
// free in one GPC together, and the waiting blocks, wherever the scheduler put them, can leave
// no GPC with that many. The lagging rank then never arrives (docs/DESIGN.md, "Virtual ranks
// and other work"). The gate removes the overlap: each rank's stream runs a one-block kernel
// right before its all-reduce that returns only when every rank has reached its own gate, so
// no all-reduce starts while any rank's earlier compute is still queued. While they wait, the
// gates hold one block each.
// arrivals[r] counts the gates rank r has passed, written only by rank r's gate (in stream
// order), read by every gate; counts are compared on the circle, so replays never end. A gate
// that waits past the timeout raises arrivals[n] and returns: never a hang.
__global__ void rankGateKernel(uint32_t* arrivals, int rank, int nranks, uint64_t timeout_ns) {
  volatile uint32_t* a = arrivals;
  const uint32_t mine = a[rank] + 1;
  a[rank] = mine;
  __threadfence();
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (int p = 0; p < nranks; ++p) {
    while (static_cast<int32_t>(a[p] - mine) < 0) {
      if (a[nranks] != 0) return;  // another gate gave up: so does this one
      uint64_t now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > timeout_ns) {
        a[nranks] = 1;
        return;
      }
      __nanosleep(256);
    }
  }
}

}  // namespace

RankGate::~RankGate() {
  if (arrivals_ != nullptr) {
    cudaSetDevice(device_);
    cudaFree(arrivals_);
  }
}

std::string RankGate::init(int nranks, int64_t timeout_ms) {
  nranks_ = nranks;
  timeout_ns_ = static_cast<uint64_t>(timeout_ms > 0 ? timeout_ms : 1) * 1000000ull;
  cudaError_t e = cudaGetDevice(&device_);
  // Loaded now, not behind another rank's spinning all-reduce (NOTE [preload]).
  cudaFuncAttributes attr;
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&attr, rankGateKernel);
  if (e == cudaSuccess)
    e = cudaMalloc(reinterpret_cast<void**>(&arrivals_), sizeof(uint32_t) * (nranks + 1));
  if (e == cudaSuccess) e = cudaMemset(arrivals_, 0, sizeof(uint32_t) * (nranks + 1));
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  return e == cudaSuccess ? "" : std::string("rank gate: ") + cudaGetErrorString(e);
}

cudaError_t RankGate::launch(int rank, cudaStream_t stream) const {
  rankGateKernel<<<1, 1, 0, stream>>>(arrivals_, rank, nranks_, timeout_ns_);
  return cudaGetLastError();
}

std::string RankGate::check() const {
  uint32_t gave_up = 0;
  const cudaError_t e =
      cudaMemcpy(&gave_up, arrivals_ + nranks_, sizeof(gave_up), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return std::string("rank gate: ") + cudaGetErrorString(e);
  return gave_up ? "a rank never reached the gate before its all-reduce (NOTE [rank gate])" : "";
}

}  // namespace tpar_cli
