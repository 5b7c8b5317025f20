#include "tools/tpar/verify/model_pass.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "api/internal.h"

namespace tpar_cli {
namespace {

#define PASS_CUDA(call)                                                               \
  do {                                                                                \
    const cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) return std::string(#call) + ": " + cudaGetErrorString(e_); \
  } while (0)

#define PASS_BLAS(call)                                                                            \
  do {                                                                                             \
    const cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) return std::string(#call) + ": " + cublasGetStatusString(s_); \
  } while (0)

#define PASS_TRY(expr)          \
  do {                          \
    std::string e_ = (expr);    \
    if (!e_.empty()) return e_; \
  } while (0)

using bf16 = __nv_bfloat16;

constexpr int kNormThreads = 256;
constexpr float kRmsEps = 1e-6f;
constexpr int kElementwiseThreads = 256;
constexpr int kMaxElementwiseBlocks = 1024;

inline bf16* asBf16(uint16_t* p) { return reinterpret_cast<bf16*>(p); }
inline const bf16* asBf16(const uint16_t* p) { return reinterpret_cast<const bf16*>(p); }

// Values uniform in [offset - scale, offset + scale), a pure function of (seed, index).
__global__ void fillUniform(bf16* p, size_t n, uint64_t seed, float offset, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
    p[i] = __float2bfloat16_rn(offset + scale * (2.0f * u - 1.0f));
  }
}

// One block per token: x += add (rounded to bf16, as an engine stores the residual), then
// normed = x / rms(x) * gamma. fp32 accumulation in a fixed order, so every rank that holds the
// same x and add computes the same bits.
__global__ void __launch_bounds__(kNormThreads)
    addRmsNorm(bf16* x, const bf16* add, const bf16* gamma, bf16* normed, int hidden) {
  const size_t row = blockIdx.x * size_t(hidden);
  float sum_sq = 0.f;
  for (int j = threadIdx.x; j < hidden; j += kNormThreads) {
    float v = __bfloat162float(x[row + j]);
    if (add != nullptr) {
      const bf16 r = __float2bfloat16_rn(v + __bfloat162float(add[row + j]));
      x[row + j] = r;
      v = __bfloat162float(r);
    }
    sum_sq += v * v;
  }
  __shared__ float warp_sums[kNormThreads / 32];
  __shared__ float inv_rms;
  for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum_sq;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < kNormThreads / 32 ? warp_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) inv_rms = rsqrtf(t / static_cast<float>(hidden) + kRmsEps);
  }
  __syncthreads();
  // Each thread reads back only the elements it wrote itself above.
  for (int j = threadIdx.x; j < hidden; j += kNormThreads) {
    const float v = __bfloat162float(x[row + j]) * inv_rms * __bfloat162float(gamma[j]);
    normed[row + j] = __float2bfloat16_rn(v);
  }
}

// act[t][j] = silu(gate[t][j]) * up[t][j]; a row of gate_up holds the gate columns, then up.
__global__ void siluMul(const bf16* gate_up, bf16* act, int tokens, int width) {
  const size_t n = size_t(tokens) * width;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const size_t t = i / width, j = i % width;
    const float g = __bfloat162float(gate_up[t * 2 * width + j]);
    const float u = __bfloat162float(gate_up[t * 2 * width + width + j]);
    act[i] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
  }
}

int elementwiseBlocks(size_t n) {
  const size_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<int>(blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks);
}

// Events of several devices, destroyed on their own device.
class EventSet {
 public:
  ~EventSet() {
    for (auto& [dev, ev] : events_) {
      cudaSetDevice(dev);
      cudaEventDestroy(ev);
    }
  }
  std::string make(int dev, unsigned flags, cudaEvent_t* ev) {
    PASS_CUDA(cudaSetDevice(dev));
    PASS_CUDA(cudaEventCreateWithFlags(ev, flags));
    events_.emplace_back(dev, *ev);
    return "";
  }

 private:
  std::vector<std::pair<int, cudaEvent_t>> events_;
};

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

std::string checkDeviceMemory(const ModelShape& shape, const std::vector<int>& devs) {
  std::map<int, int> ranks_on;
  for (int d : devs) ++ranks_on[d];
  for (const auto& [dev, n] : ranks_on) {
    size_t free_bytes = 0, total_bytes = 0;
    PASS_CUDA(cudaSetDevice(dev));
    PASS_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t need = deviceMemoryBytes(shape, n);
    if (need > free_bytes) {
      char msg[512];
      std::snprintf(msg, sizeof(msg),
                    "GPU %d needs about %.0f MiB (%d rank(s) x %.0f MiB: weights %.0f MiB, "
                    "activations, cuBLAS workspace and communicator; plus %.0f MiB reserve) but "
                    "has %.0f MiB free of %.0f MiB; lower --tp, --tokens, --hidden or "
                    "--intermediate",
                    dev, need / kMiB, n, rankMemoryBytes(shape) / kMiB,
                    weightBytesPerRank(shape) / kMiB, kDeviceReserveBytes / kMiB, free_bytes / kMiB,
                    total_bytes / kMiB);
      return msg;
    }
  }
  return "";
}

ModelPass::~ModelPass() {
  dropGraphs();
  for (Rank& rk : ranks_) {
    cudaSetDevice(rk.dev);
    if (rk.stream) cudaStreamSynchronize(rk.stream);
    if (rk.blas) cublasDestroy(rk.blas);
    for (void* p : rk.owned) cudaFree(p);
    if (rk.stream) cudaStreamDestroy(rk.stream);
  }
}

void ModelPass::dropGraphs() {
  for (Rank& rk : ranks_) {
    cudaSetDevice(rk.dev);
    for (cudaGraphExec_t& g : rk.graphs) {
      if (g) cudaGraphExecDestroy(g);
      g = nullptr;
    }
  }
}

std::string ModelPass::init(const ModelShape& shape, const std::vector<int>& devs) {
  shape_ = shape;
  const auto gemms = layerGemms(shape);
  const size_t th = static_cast<size_t>(shape.tokens * shape.hidden);
  const size_t i_shard = static_cast<size_t>(shape.intermediate / shape.tp);
  ranks_.resize(devs.size());
  for (size_t r = 0; r < devs.size(); ++r) {
    Rank& rk = ranks_[r];
    rk.dev = devs[r];
    PASS_CUDA(cudaSetDevice(rk.dev));
    PASS_CUDA(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
    // NOTE [preload] (src/registry/launcher.cc) holds for our kernels too: load them now, not
    // behind another rank's spinning all-reduce.
    cudaFuncAttributes attr;
    PASS_CUDA(cudaFuncGetAttributes(&attr, fillUniform));
    PASS_CUDA(cudaFuncGetAttributes(&attr, addRmsNorm));
    PASS_CUDA(cudaFuncGetAttributes(&attr, siluMul));

    auto alloc = [&rk](size_t elems, uint16_t** p) -> std::string {
      void* v = nullptr;
      PASS_CUDA(cudaMalloc(&v, elems * sizeof(uint16_t)));
      rk.owned.push_back(v);
      *p = static_cast<uint16_t*>(v);
      return "";
    };
    PASS_TRY(alloc(static_cast<size_t>(gemms[0].k * gemms[0].n), &rk.w_attn_out));
    PASS_TRY(alloc(static_cast<size_t>(gemms[1].k * gemms[1].n), &rk.w_gate_up));
    PASS_TRY(alloc(static_cast<size_t>(gemms[2].k * gemms[2].n), &rk.w_down));
    PASS_TRY(alloc(static_cast<size_t>(shape.hidden), &rk.gamma));
    for (uint16_t** p : {&rk.x0, &rk.x, &rk.normed, &rk.partial, &rk.reduced})
      PASS_TRY(alloc(th, p));
    PASS_TRY(alloc(static_cast<size_t>(shape.tokens) * 2 * i_shard, &rk.gate_up));
    PASS_TRY(alloc(static_cast<size_t>(shape.tokens) * i_shard, &rk.act));

    // A workspace of our own: cuBLAS must not allocate while a stream is being captured.
    // cublasSetStream resets the workspace, so it comes first.
    PASS_BLAS(cublasCreate(&rk.blas));
    PASS_BLAS(cublasSetStream(rk.blas, rk.stream));
    PASS_CUDA(cudaMalloc(&rk.workspace, kCublasWorkspaceBytes));
    rk.owned.push_back(rk.workspace);
    PASS_BLAS(cublasSetWorkspace(rk.blas, rk.workspace, kCublasWorkspaceBytes));

    // Uniform weights scaled by 1/sqrt(fan-in) of the whole (unsharded) matrix keep every
    // activation near unit size through any number of layers: no overflow, no NaN by design.
    struct Fill {
      uint16_t* p;
      size_t n;
      uint64_t seed;
      float offset, scale;
    };
    const uint64_t rank_seed = 0x7470617200000000ull + 1000 * (r + 1);
    const float s_hidden = std::sqrt(3.0f / static_cast<float>(shape.hidden));
    const float s_inter = std::sqrt(3.0f / static_cast<float>(shape.intermediate));
    const Fill fills[] = {
        {rk.w_attn_out, static_cast<size_t>(gemms[0].k * gemms[0].n), rank_seed + 1, 0.f, s_hidden},
        {rk.w_gate_up, static_cast<size_t>(gemms[1].k * gemms[1].n), rank_seed + 2, 0.f, s_hidden},
        {rk.w_down, static_cast<size_t>(gemms[2].k * gemms[2].n), rank_seed + 3, 0.f, s_inter},
        // Replicated on every rank: same seed everywhere.
        {rk.gamma, static_cast<size_t>(shape.hidden), 11, 1.f, 0.5f},
        {rk.x0, th, 7, 0.f, 1.f},
    };
    for (const Fill& f : fills) {
      fillUniform<<<elementwiseBlocks(f.n), kElementwiseThreads, 0, rk.stream>>>(
          asBf16(f.p), f.n, f.seed, f.offset, f.scale);
      PASS_CUDA(cudaGetLastError());
    }
    PASS_CUDA(cudaMemsetAsync(rk.partial, 0, th * sizeof(uint16_t), rk.stream));
    PASS_CUDA(cudaMemsetAsync(rk.reduced, 0, th * sizeof(uint16_t), rk.stream));
  }
  // Virtual ranks (NOTE [rank gate]): all on one GPU, whose bound on a wait is tpar's.
  gated_ = devs.size() > 1;
  for (int d : devs) gated_ = gated_ && d == devs[0];
  if (gated_) {
    const tpar::Env* env = nullptr;
    const int64_t timeout_ms = tpar::processEnv(&env) == tparSuccess ? env->timeout_ms : 30000;
    PASS_CUDA(cudaSetDevice(devs[0]));
    PASS_TRY(gate_.init(static_cast<int>(devs.size()), timeout_ms));
  }
  return syncAll();
}

std::string ModelPass::syncAll() {
  for (Rank& rk : ranks_) {
    PASS_CUDA(cudaSetDevice(rk.dev));
    PASS_CUDA(cudaStreamSynchronize(rk.stream));
  }
  return gated_ ? gate_.check() : "";
}

// The pass starts from the same input on every replay, so replays are repeatable and the
// final state of the checked replay does not depend on how many timed ones came before.
std::string ModelPass::enqueueStart(Rank& rk) {
  PASS_CUDA(cudaSetDevice(rk.dev));
  PASS_CUDA(
      cudaMemcpyAsync(rk.x, rk.x0, allReduceBytes(shape_), cudaMemcpyDeviceToDevice, rk.stream));
  return enqueueNorm(rk, nullptr);  // the first layer's input norm
}

std::string ModelPass::enqueueNorm(Rank& rk, const uint16_t* add) {
  PASS_CUDA(cudaSetDevice(rk.dev));
  addRmsNorm<<<static_cast<unsigned>(shape_.tokens), kNormThreads, 0, rk.stream>>>(
      asBf16(rk.x), asBf16(add), asBf16(rk.gamma), asBf16(rk.normed),
      static_cast<int>(shape_.hidden));
  PASS_CUDA(cudaGetLastError());
  return "";
}

std::string ModelPass::enqueueSiluMul(Rank& rk) {
  PASS_CUDA(cudaSetDevice(rk.dev));
  const int width = static_cast<int>(shape_.intermediate / shape_.tp);
  siluMul<<<elementwiseBlocks(size_t(shape_.tokens) * width), kElementwiseThreads, 0, rk.stream>>>(
      asBf16(rk.gate_up), asBf16(rk.act), static_cast<int>(shape_.tokens), width);
  PASS_CUDA(cudaGetLastError());
  return "";
}

// Row-major C[m x n] = A[m x k] B[k x n] (A with leading dimension lda) is, to column-major
// cuBLAS, C^T = B^T A^T: the same buffers with the operands swapped.
std::string ModelPass::enqueueGemm(Rank& rk, const GemmShape& g, const uint16_t* a, int64_t lda,
                                   const uint16_t* b, uint16_t* c) {
  PASS_CUDA(cudaSetDevice(rk.dev));
  const float one = 1.f, zero = 0.f;
  PASS_BLAS(cublasGemmEx(rk.blas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(g.n),
                         static_cast<int>(g.m), static_cast<int>(g.k), &one, b, CUDA_R_16BF,
                         static_cast<int>(g.n), a, CUDA_R_16BF, static_cast<int>(lda), &zero, c,
                         CUDA_R_16BF, static_cast<int>(g.n), CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT));
  return "";
}

std::string ModelPass::enqueueAllReduce(Backend* ar, bool after_compute) {
  if (gated_ && after_compute) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      PASS_CUDA(cudaSetDevice(ranks_[r].dev));
      PASS_CUDA(gate_.launch(static_cast<int>(r), ranks_[r].stream));
    }
  }
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<cudaStream_t> streams;
  for (Rank& rk : ranks_) {
    send.push_back(rk.partial);
    recv.push_back(rk.reduced);
    streams.push_back(rk.stream);
  }
  std::string e =
      ar->allReduce(send, recv, allReduceCount(shape_), tparBfloat16, tparSum, streams);
  return e.empty() ? "" : ar->name() + ": " + e;
}

std::string ModelPass::enqueueFused(Backend* ar, bool after_compute) {
  if (gated_ && after_compute) {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      PASS_CUDA(cudaSetDevice(ranks_[r].dev));
      PASS_CUDA(gate_.launch(static_cast<int>(r), ranks_[r].stream));
    }
  }
  std::vector<const void*> input;
  std::vector<tparAddRmsNormArgs_t> args;
  std::vector<cudaStream_t> streams;
  for (Rank& rk : ranks_) {
    input.push_back(rk.partial);
    tparAddRmsNormArgs_t a = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
    a.tokens = static_cast<size_t>(shape_.tokens);
    a.hidden = static_cast<size_t>(shape_.hidden);
    a.residual = rk.x;
    a.weight = rk.gamma;
    a.out = rk.normed;
    a.eps = kRmsEps;
    args.push_back(a);
    streams.push_back(rk.stream);
  }
  std::string e = ar->allReduceAddRmsNorm(input, args, tparBfloat16, streams);
  return e.empty() ? "" : ar->name() + ": " + e;
}

std::string ModelPass::enqueue(PassKind kind, Backend* ar) {
  if (kind == PassKind::kNormsOnly) {
    for (int64_t layer = 0; layer < 2 * shape_.layers; ++layer)
      for (Rank& rk : ranks_) PASS_TRY(enqueueNorm(rk, rk.partial));
    return "";
  }
  const bool fused = kind == PassKind::kFused || kind == PassKind::kFusedOnly;
  const bool compute =
      kind == PassKind::kFull || kind == PassKind::kComputeOnly || kind == PassKind::kFused;
  const bool reduce = kind != PassKind::kComputeOnly;
  if (reduce && ar == nullptr) return "internal: a pass with all-reduces needs a backend";
  // The all-reduce, or the fused call that also does the norm after it.
  auto reduceStep = [&]() -> std::string {
    if (fused) return enqueueFused(ar, compute);
    return reduce ? enqueueAllReduce(ar, compute) : "";
  };
  const auto gemms = layerGemms(shape_);
  const int64_t h_shard = shape_.hidden / shape_.tp;
  const int64_t i_shard = shape_.intermediate / shape_.tp;
  // Without the all-reduce each rank adds its own partial sum: same kernels, same bytes.
  auto normInput = [&](Rank& rk) -> const uint16_t* { return reduce ? rk.reduced : rk.partial; };
  if (compute)
    for (Rank& rk : ranks_) PASS_TRY(enqueueStart(rk));
  for (int64_t layer = 0; layer < shape_.layers; ++layer) {
    if (compute) {
      for (size_t r = 0; r < ranks_.size(); ++r) {
        Rank& rk = ranks_[r];
        // This rank's heads: columns [r*h_shard, (r+1)*h_shard) of the normed state.
        PASS_TRY(enqueueGemm(rk, gemms[0], rk.normed + r * h_shard, shape_.hidden, rk.w_attn_out,
                             rk.partial));
      }
    }
    PASS_TRY(reduceStep());
    if (compute) {
      for (Rank& rk : ranks_) {
        if (!fused) PASS_TRY(enqueueNorm(rk, normInput(rk)));
        PASS_TRY(enqueueGemm(rk, gemms[1], rk.normed, shape_.hidden, rk.w_gate_up, rk.gate_up));
        PASS_TRY(enqueueSiluMul(rk));
        PASS_TRY(enqueueGemm(rk, gemms[2], rk.act, i_shard, rk.w_down, rk.partial));
      }
    }
    PASS_TRY(reduceStep());
    if (compute && !fused)
      for (Rank& rk : ranks_) PASS_TRY(enqueueNorm(rk, normInput(rk)));
  }
  return "";
}

std::string ModelPass::runEager(PassKind kind, Backend* ar) {
  PASS_TRY(enqueue(kind, ar));
  return syncAll();
}

std::string ModelPass::capture(PassKind kind, Backend* ar) {
  const int k = static_cast<int>(kind);
  std::vector<cudaGraph_t> graphs(ranks_.size(), nullptr);
  std::vector<bool> capturing(ranks_.size(), false);
  std::string err;
  for (size_t r = 0; r < ranks_.size() && err.empty(); ++r) {
    Rank& rk = ranks_[r];
    if (rk.graphs[k]) {
      cudaSetDevice(rk.dev);
      cudaGraphExecDestroy(rk.graphs[k]);
      rk.graphs[k] = nullptr;
    }
    cudaError_t e = cudaSetDevice(rk.dev);
    // Relaxed: every rank's stream of this thread captures at once, and the enqueue switches the
    // current device between them (thread-local mode refused that in tpar bench).
    if (e == cudaSuccess) e = cudaStreamBeginCapture(rk.stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) err = std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
    capturing[r] = e == cudaSuccess;
  }
  // Every rank's stream is capturing: the backend issues each call for all ranks at once.
  if (err.empty()) err = enqueue(kind, ar);
  // End every capture that began, even after a failure, so that the streams stay usable.
  for (size_t r = 0; r < ranks_.size(); ++r) {
    if (!capturing[r]) continue;
    cudaSetDevice(ranks_[r].dev);
    const cudaError_t e = cudaStreamEndCapture(ranks_[r].stream, &graphs[r]);
    if (e != cudaSuccess && err.empty())
      err = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
  }
  for (size_t r = 0; r < ranks_.size() && err.empty(); ++r) {
    cudaSetDevice(ranks_[r].dev);
    cudaError_t e = cudaGraphInstantiate(&ranks_[r].graphs[k], graphs[r], 0);
    if (e != cudaSuccess) {
      ranks_[r].graphs[k] = nullptr;
      err = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
      break;
    }
    // A graph's first launch uploads it, and the upload may wait for the device: done then,
    // behind rank 0's spinning all-reduce, it would keep rank 1 from launching (tpar.h,
    // "Virtual ranks and other work"). Upload every rank's graph now, while nothing spins.
    e = cudaGraphUpload(ranks_[r].graphs[k], ranks_[r].stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ranks_[r].stream);
    if (e != cudaSuccess) err = std::string("cudaGraphUpload: ") + cudaGetErrorString(e);
  }
  for (cudaGraph_t g : graphs)
    if (g) cudaGraphDestroy(g);
  if (!err.empty()) (void)cudaGetLastError();  // capture errors are not sticky; clear them
  return err;
}

std::string ModelPass::launchAll(PassKind kind) {
  for (Rank& rk : ranks_) {
    cudaGraphExec_t g = rk.graphs[static_cast<int>(kind)];
    if (g == nullptr) return "internal: launching a graph that was not captured";
    PASS_CUDA(cudaSetDevice(rk.dev));
    PASS_CUDA(cudaGraphLaunch(g, rk.stream));
  }
  return "";
}

std::string ModelPass::replay(PassKind kind) {
  PASS_TRY(launchAll(kind));
  return syncAll();
}

std::string ModelPass::time(PassKind kind, int warmup, int iters, std::vector<double>* samples_ms) {
  samples_ms->clear();
  for (int i = 0; i < warmup; ++i) PASS_TRY(replay(kind));
  // The start event is on rank 0's device; each done[r] on rank r's (an event can only be
  // recorded on a stream of its own device).
  EventSet events;
  Rank& first = ranks_[0];
  cudaEvent_t start = nullptr, stop = nullptr;
  PASS_TRY(events.make(first.dev, cudaEventDefault, &start));
  PASS_TRY(events.make(first.dev, cudaEventDefault, &stop));
  std::vector<cudaEvent_t> done(ranks_.size());
  for (size_t r = 0; r < ranks_.size(); ++r)
    PASS_TRY(events.make(ranks_[r].dev, cudaEventDisableTiming, &done[r]));
  for (int i = 0; i < iters; ++i) {
    PASS_CUDA(cudaSetDevice(first.dev));
    PASS_CUDA(cudaEventRecord(start, first.stream));
    for (size_t r = 1; r < ranks_.size(); ++r) {
      PASS_CUDA(cudaSetDevice(ranks_[r].dev));
      PASS_CUDA(cudaStreamWaitEvent(ranks_[r].stream, start, 0));
    }
    PASS_TRY(launchAll(kind));
    for (size_t r = 0; r < ranks_.size(); ++r) {
      PASS_CUDA(cudaSetDevice(ranks_[r].dev));
      PASS_CUDA(cudaEventRecord(done[r], ranks_[r].stream));
    }
    PASS_CUDA(cudaSetDevice(first.dev));
    for (size_t r = 1; r < ranks_.size(); ++r)
      PASS_CUDA(cudaStreamWaitEvent(first.stream, done[r], 0));
    PASS_CUDA(cudaEventRecord(stop, first.stream));
    PASS_CUDA(cudaEventSynchronize(stop));
    float ms = 0.f;
    PASS_CUDA(cudaEventElapsedTime(&ms, start, stop));
    samples_ms->push_back(ms);
  }
  return syncAll();
}

std::string ModelPass::poisonAllReduceOutputs() {
  for (Rank& rk : ranks_) {
    PASS_CUDA(cudaSetDevice(rk.dev));
    // 0xFFFF is a bf16 NaN.
    PASS_CUDA(cudaMemsetAsync(rk.reduced, 0xFF, allReduceBytes(shape_), rk.stream));
  }
  return syncAll();
}

std::string ModelPass::finalState(int rank, std::vector<uint16_t>* x,
                                  std::vector<uint16_t>* normed) {
  PASS_TRY(syncAll());
  Rank& rk = ranks_.at(rank);
  x->resize(allReduceCount(shape_));
  normed->resize(allReduceCount(shape_));
  PASS_CUDA(cudaSetDevice(rk.dev));
  PASS_CUDA(cudaMemcpy(x->data(), rk.x, allReduceBytes(shape_), cudaMemcpyDeviceToHost));
  PASS_CUDA(cudaMemcpy(normed->data(), rk.normed, allReduceBytes(shape_), cudaMemcpyDeviceToHost));
  return "";
}

}  // namespace tpar_cli
