// The GPU side of `tpar verify`: the verify forward pass of a tensor-parallel transformer, per
// rank on its own stream, captured as one CUDA graph per rank and timed with every rank
// launched together.
//
// Every phase is issued for all ranks before the next begins (each rank's GEMMs, then every
// rank's all-reduce, ...): a cuBLAS call that waits for the device then waits only for
// all-reduces whose peers are all launched (tpar.h, "Virtual ranks and other work"). On
// virtual ranks each all-reduce that follows compute waits behind a rank gate (NOTE [rank
// gate] in common/rank_gate.cu), so that no all-reduce holds SMs while another rank's GEMMs
// still need them.
//
// Per layer and rank: attention-output GEMM on the rank's hidden/tp slice, all-reduce, residual
// add + RMSNorm, gate+up GEMM, SiLU*mul, down GEMM, all-reduce, residual add + RMSNorm. The
// attention itself is not modelled: the attention-output GEMM reads its input straight from the
// rank's slice of the normed hidden state, which keeps the data dependence from layer to layer.
#ifndef TPAR_TOOLS_MODEL_PASS_H_
#define TPAR_TOOLS_MODEL_PASS_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/rank_gate.h"
#include "tools/tpar/verify/verify.h"

namespace tpar_cli {

enum class PassKind {
  kFull,           // the whole pass
  kComputeOnly,    // the same without the all-reduces (each rank adds its own partial sum)
  kAllReduceOnly,  // the 2 x layers all-reduces alone, back to back
  // tpar verify --fused: the whole pass with each all-reduce + residual add + RMSNorm one
  // tparAllReduceAddRmsNorm call (the backend's allReduceAddRmsNorm), those calls alone, and
  // the 2 x layers separate residual add + RMSNorm kernels alone (what the fused pass removes).
  kFused,
  kFusedOnly,
  kNormsOnly,
};
constexpr int kNumPassKinds = 6;

// "" or why `shape` does not fit beside what the devices already hold (ranks share a device
// when `devs` repeats it).
std::string checkDeviceMemory(const ModelShape& shape, const std::vector<int>& devs);

class ModelPass {
 public:
  ModelPass() = default;
  ModelPass(const ModelPass&) = delete;
  ModelPass& operator=(const ModelPass&) = delete;
  ~ModelPass();

  // Rank r on devs[r]: stream, cuBLAS handle with its own workspace, weights and activations.
  // Weights are random per rank (each rank holds a different shard); the initial hidden state
  // and the norm weight are the same on every rank, as in a real replica.
  std::string init(const ModelShape& shape, const std::vector<int>& devs);

  // Issues one pass eagerly and waits for it (warm-up: loads kernels, lets the backend set up).
  // `ar` may be null for kComputeOnly.
  std::string runEager(PassKind kind, Backend* ar);
  // Captures one graph per rank (replacing an earlier one of this kind).
  std::string capture(PassKind kind, Backend* ar);
  // Replays the captured graphs `warmup` times, then `iters` times, each replay timed from an
  // event before every rank's launch to the join of all ranks' streams; samples in ms.
  std::string time(PassKind kind, int warmup, int iters, std::vector<double>* samples_ms);
  // One replay of every rank's graph, waited for.
  std::string replay(PassKind kind);
  // Fills every rank's all-reduce output with NaN so that an all-reduce that writes nothing
  // cannot pass the checks.
  std::string poisonAllReduceOutputs();
  // Rank r's final residual stream and normed hidden state (bf16 bits).
  std::string finalState(int rank, std::vector<uint16_t>* x, std::vector<uint16_t>* normed);
  // Destroys the captured graphs (they hold a backend's buffers: drop them before it goes).
  void dropGraphs();

  int ranks() const { return static_cast<int>(ranks_.size()); }

 private:
  struct Rank {
    int dev = 0;
    cudaStream_t stream = nullptr;
    cublasHandle_t blas = nullptr;
    void* workspace = nullptr;
    // One layer's weight shard, reused by every layer (see verify.cu, "one set of weights").
    uint16_t* w_attn_out = nullptr;  // [hidden/tp x hidden]
    uint16_t* w_gate_up = nullptr;   // [hidden x 2*intermediate/tp]: gate columns, then up
    uint16_t* w_down = nullptr;      // [intermediate/tp x hidden]
    uint16_t* gamma = nullptr;       // [hidden], RMSNorm weight
    uint16_t* x0 = nullptr;          // [tokens x hidden], the pass's input
    uint16_t* x = nullptr;           // residual stream
    uint16_t* normed = nullptr;      // RMSNorm(x): the next GEMM's input
    uint16_t* partial = nullptr;     // this rank's GEMM output, all-reduce input
    uint16_t* reduced = nullptr;     // all-reduce output
    uint16_t* gate_up = nullptr;     // [tokens x 2*intermediate/tp]
    uint16_t* act = nullptr;         // [tokens x intermediate/tp]
    std::array<cudaGraphExec_t, kNumPassKinds> graphs{};
    std::vector<void*> owned;  // every cudaMalloc above, freed by ~ModelPass
  };

  std::string enqueue(PassKind kind, Backend* ar);
  std::string enqueueStart(Rank& rk);
  std::string enqueueNorm(Rank& rk, const uint16_t* add);
  // `after_compute`: the pass's compute precedes it (the rank gate applies).
  std::string enqueueAllReduce(Backend* ar, bool after_compute);
  // The fused call in place of the all-reduce and the norm after it: the rank's partial sum
  // reduced, added into x, normalized into normed.
  std::string enqueueFused(Backend* ar, bool after_compute);
  std::string enqueueGemm(Rank& rk, const GemmShape& g, const uint16_t* a, int64_t lda,
                          const uint16_t* b, uint16_t* c);
  std::string enqueueSiluMul(Rank& rk);
  std::string launchAll(PassKind kind);
  std::string syncAll();

  ModelShape shape_;
  std::vector<Rank> ranks_;
  bool gated_ = false;  // virtual ranks: every rank on one GPU
  RankGate gate_;
};

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_MODEL_PASS_H_
