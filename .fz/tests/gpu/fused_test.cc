// tparAllReduceAddRmsNorm with virtual ranks on one GPU, both transports: every rank the same
// bits, every element within the bound derived below of the float64 unfused sequence
// (tests/common/fused_reference.h), in place and out of place, with and without a residual,
// inside a CUDA graph, ranks that disagree on the shape, and the argument checks.
//
// The bound. With u the unit roundoff of the datatype (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) and
// e = 2^-24 fp32's: the kernel sums the n inputs in fp32 (error <= (n-1) e sum|x_k|), rounds the
// sum to the datatype (u |s|), adds the residual in fp32 (e |z|) and rounds z (u |z|): so
// |r - z64| <= R = u |s64| + u |z64| + n e sum|x_k| + e |z64|, to first order. The norm's
// mean square comes from the fp32 z: relative error at most about 2 u (through R over the row;
// bounded by 2 u + hidden e) plus rsqrt's 2^-22 (inv's relative error I = u + hidden e + 2^-21).
// Then y = round(round(r inv) w): |y - y64| <= |w| inv64 R + |y64| (I + 2 u) to first order.
// The test takes twice that (second-order terms and the mean square's own rounding).
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/fused_reference.h"
#include "gpu/test_util.h"

namespace tpar_test {
namespace {

float unitRoundoff(tparDataType_t dt) {
  return dt == tparBfloat16 ? std::ldexp(1.0f, -8)
         : dt == tparFloat16 ? std::ldexp(1.0f, -11)
                             : std::ldexp(1.0f, -24);
}

// Host values of the datatype: float in, the nearest representable value out, and its bits.
float roundTo(tparDataType_t dt, float x) {
  if (dt == tparBfloat16) return __bfloat162float(__float2bfloat16_rn(x));
  if (dt == tparFloat16) return __half2float(__float2half_rn(x));
  return x;
}
void storeAs(tparDataType_t dt, const std::vector<float>& v, std::vector<uint8_t>* bytes) {
  const size_t es = tpar::elementBytes(dt);
  bytes->resize(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == tparBfloat16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v[i]);
      std::memcpy(bytes->data() + i * 2, &h, 2);
    } else if (dt == tparFloat16) {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(bytes->data() + i * 2, &h, 2);
    } else {
      std::memcpy(bytes->data() + i * 4, &v[i], 4);
    }
  }
}
std::vector<float> loadAs(tparDataType_t dt, const std::vector<uint8_t>& bytes) {
  const size_t es = tpar::elementBytes(dt);
  std::vector<float> v(bytes.size() / es);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == tparBfloat16) {
      __nv_bfloat16 h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      v[i] = __bfloat162float(h);
    } else if (dt == tparFloat16) {
      __half h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      v[i] = __half2float(h);
    } else {
      std::memcpy(&v[i], bytes.data() + i * 4, 4);
    }
  }
  return v;
}

enum class Place { kOutOfPlace, kInputIsOut, kInputIsResidual, kInputIsResidualOut };

struct Case {
  size_t tokens, hidden;
  tparDataType_t dtype;
  bool residual;
  Place place;
  bool residual_out = false;  // r to a buffer of its own (the input with kInputIsResidualOut)
};

std::string describe(const Case& c) {
  return std::to_string(c.tokens) + "x" + std::to_string(c.hidden) + " " +
         tparDataTypeName(c.dtype) + (c.residual ? " residual" : " no residual") +
         (c.place == Place::kInputIsOut        ? " input=out"
          : c.place == Place::kInputIsResidual    ? " input=residual"
          : c.place == Place::kInputIsResidualOut ? " input=residual_out"
                                                  : "") +
         (c.residual_out ? " residual_out" : "");
}

// Device buffers of one rank.
struct RankBufs {
  void* input = nullptr;
  void* residual = nullptr;
  void* out = nullptr;
  void* weight = nullptr;
  void* residual_out = nullptr;
  ~RankBufs() {
    for (void* p : {input, residual, out, weight, residual_out})
      if (p != nullptr) cudaFree(p);
  }
};

// Every rank of `g` recorded no error in its kernels.
void expectNoAsyncError(VirtualGroup& g) {
  for (int r = 0; r < g.size(); ++r) {
    tparResult_t async = tparSuccess;
    ASSERT_EQ(tparSuccess, tparCommGetAsyncError(g.comm(r), &async));
    ASSERT_EQ(tparSuccess, async) << "rank " << r;
  }
}

// Runs `c` on every rank of `g` (fresh random inputs, poisoned outputs; inside a CUDA graph
// when `graph`) and checks it.
void runCase(VirtualGroup& g, const Case& c, bool graph = false) {
  SCOPED_TRACE(describe(c));
  const int n = g.size();
  const size_t es = tpar::elementBytes(c.dtype);
  const size_t elems = c.tokens * c.hidden;
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::vector<float>> in(n, std::vector<float>(elems));
  std::vector<float> res(elems), w(c.hidden);
  for (auto& v : in)
    for (float& x : v) x = roundTo(c.dtype, dist(rng));
  for (float& x : res) x = roundTo(c.dtype, 4.0f * dist(rng));
  for (float& x : w) x = roundTo(c.dtype, 1.0f + 0.25f * dist(rng));
  const float eps = 1e-6f;

  std::vector<RankBufs> bufs(n);
  std::vector<uint8_t> bytes, wbytes, rbytes;
  storeAs(c.dtype, w, &wbytes);
  storeAs(c.dtype, res, &rbytes);
  for (int r = 0; r < n; ++r) {
    RankBufs& b = bufs[r];
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b.input, elems * es));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b.weight, c.hidden * es));
    storeAs(c.dtype, in[r], &bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(b.input, bytes.data(), elems * es, cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMemcpy(b.weight, wbytes.data(), c.hidden * es,
                                      cudaMemcpyHostToDevice));
    if (c.place != Place::kInputIsOut) {
      ASSERT_EQ(cudaSuccess, cudaMalloc(&b.out, elems * es));
      ASSERT_EQ(cudaSuccess, poison(b.out, elems * es, nullptr));
    }
    if (c.residual && c.place != Place::kInputIsResidual) {
      ASSERT_EQ(cudaSuccess, cudaMalloc(&b.residual, elems * es));
    }
    if (c.residual_out && c.place != Place::kInputIsResidualOut) {
      ASSERT_EQ(cudaSuccess, cudaMalloc(&b.residual_out, elems * es));
      ASSERT_EQ(cudaSuccess, poison(b.residual_out, elems * es, nullptr));
    }
  }
  // The residual is the same on every rank (it is replicated in tensor parallelism); with
  // input = residual each rank's input is its residual, so the ranks' residuals differ: the
  // reference takes rank 0's and the bitwise check compares the outputs only.
  std::vector<std::vector<float>> resid(n, res);
  for (int r = 0; r < n; ++r) {
    RankBufs& b = bufs[r];
    if (!c.residual) continue;
    if (c.place == Place::kInputIsResidual) {
      resid[r] = in[r];
    } else {
      ASSERT_EQ(cudaSuccess, cudaMemcpy(b.residual, rbytes.data(), elems * es,
                                        cudaMemcpyHostToDevice));
    }
  }
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());

  // Rank r's arguments: out and residual where the case puts them.
  auto argsOf = [&](int r) {
    RankBufs& b = bufs[r];
    tparAddRmsNormArgs_t args = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
    args.tokens = c.tokens;
    args.hidden = c.hidden;
    args.weight = b.weight;
    args.eps = eps;
    args.out = c.place == Place::kInputIsOut ? b.input : b.out;
    args.residual = !c.residual ? nullptr
                    : c.place == Place::kInputIsResidual ? b.input
                                                         : b.residual;
    args.residual_out = !c.residual_out ? nullptr
                        : c.place == Place::kInputIsResidualOut ? b.input
                                                                : b.residual_out;
    return args;
  };
  if (graph) {
    // One graph per rank, captured in turn, replayed together.
    std::vector<cudaGraphExec_t> execs(n);
    for (int r = 0; r < n; ++r) {
      const tparAddRmsNormArgs_t args = argsOf(r);
      cudaGraph_t gr;
      ASSERT_EQ(cudaSuccess, cudaStreamBeginCapture(g.stream(r), cudaStreamCaptureModeThreadLocal));
      ASSERT_EQ(tparSuccess, tparAllReduceAddRmsNorm(bufs[r].input, &args, c.dtype, g.comm(r),
                                                     g.stream(r)));
      ASSERT_EQ(cudaSuccess, cudaStreamEndCapture(g.stream(r), &gr));
      ASSERT_EQ(cudaSuccess, cudaGraphInstantiate(&execs[r], gr, 0));
      cudaGraphDestroy(gr);
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(cudaSuccess, cudaGraphLaunch(execs[r], g.stream(r)));
    for (int r = 0; r < n; ++r) ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(g.stream(r)));
    for (auto e : execs) cudaGraphExecDestroy(e);
  } else {
    for (int r = 0; r < n; ++r) {
      const tparAddRmsNormArgs_t args = argsOf(r);
      ASSERT_EQ(tparSuccess, tparAllReduceAddRmsNorm(bufs[r].input, &args, c.dtype, g.comm(r),
                                                     g.stream(r)))
          << tparGetLastError(g.comm(r));
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(g.stream(r)));
  }
  expectNoAsyncError(g);
  if (::testing::Test::HasFatalFailure()) return;

  // Where r went: residual_out, else the residual in place; nowhere without either.
  const bool has_r = c.residual || c.residual_out;
  auto rBuffer = [&](RankBufs& b) -> void* {
    if (c.residual_out) return c.place == Place::kInputIsResidualOut ? b.input : b.residual_out;
    return c.place == Place::kInputIsResidual ? b.input : b.residual;
  };
  // Every rank the same bits.
  std::vector<std::vector<uint8_t>> outs(n), resids(n);
  for (int r = 0; r < n; ++r) {
    RankBufs& b = bufs[r];
    outs[r].resize(elems * es);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(outs[r].data(), c.place == Place::kInputIsOut ? b.input : b.out,
                                      elems * es, cudaMemcpyDeviceToHost));
    if (has_r) {
      resids[r].resize(elems * es);
      ASSERT_EQ(cudaSuccess,
                cudaMemcpy(resids[r].data(), rBuffer(b), elems * es, cudaMemcpyDeviceToHost));
    }
    // With residual_out the residual is only read: its bytes are the ones stored.
    if (c.residual && c.residual_out && c.place != Place::kInputIsResidual) {
      std::vector<uint8_t> kept(elems * es);
      ASSERT_EQ(cudaSuccess, cudaMemcpy(kept.data(), b.residual, elems * es,
                                        cudaMemcpyDeviceToHost));
      ASSERT_EQ(0, std::memcmp(kept.data(), rbytes.data(), elems * es))
          << "rank " << r << ": the residual changed although residual_out was given";
    }
  }
  for (int r = 1; r < n; ++r) {
    if (c.place != Place::kInputIsResidual) {
      ASSERT_EQ(0, std::memcmp(outs[0].data(), outs[r].data(), elems * es)) << "rank " << r;
      if (has_r) {
        ASSERT_EQ(0, std::memcmp(resids[0].data(), resids[r].data(), elems * es)) << "rank " << r;
      }
    }
  }

  // Against the float64 sequence, rank 0's view, row by row.
  const double u = unitRoundoff(c.dtype), e = std::ldexp(1.0, -24);
  const std::vector<float> y = loadAs(c.dtype, outs[0]);
  const std::vector<float> rgot = has_r ? loadAs(c.dtype, resids[0]) : std::vector<float>();
  size_t bad = 0;
  for (size_t t = 0; t < c.tokens && bad < 5; ++t) {
    std::vector<std::vector<float>> rows(n);
    for (int r = 0; r < n; ++r)
      rows[r].assign(in[r].begin() + t * c.hidden, in[r].begin() + (t + 1) * c.hidden);
    const float* rrow = c.residual ? resid[0].data() + t * c.hidden : nullptr;
    const tpar::ref::RowResult want = tpar::ref::addRmsNorm(rows, rrow, w.data(), eps, c.hidden);
    double ms = 0;
    for (double z : want.residual) ms += z * z;
    const double inv = 1.0 / std::sqrt(ms / c.hidden + eps);
    const double rel_inv = u + c.hidden * e + std::ldexp(1.0, -21);
    for (size_t i = 0; i < c.hidden; ++i) {
      double s = 0, abs_sum = 0;
      for (int r = 0; r < n; ++r) {
        s += rows[r][i];
        abs_sum += std::fabs(rows[r][i]);
      }
      const double z = want.residual[i];
      const double R = u * std::fabs(s) + u * std::fabs(z) + n * e * abs_sum + e * std::fabs(z);
      const double ybound = 2 * (std::fabs(w[i]) * inv * R + std::fabs(want.out[i]) * (rel_inv + 2 * u));
      const size_t k = t * c.hidden + i;
      if (std::fabs(y[k] - want.out[i]) > ybound) {
        ADD_FAILURE() << "out[" << t << "," << i << "] = " << y[k] << ", float64 " << want.out[i]
                      << ", bound " << ybound;
        if (++bad >= 5) break;
      }
      const bool r_checked = has_r && (c.residual_out || c.place != Place::kInputIsResidual);
      if (r_checked && std::fabs(rgot[k] - z) > 2 * R) {
        ADD_FAILURE() << "residual[" << t << "," << i << "] = " << rgot[k] << ", float64 " << z
                      << ", bound " << 2 * R;
        if (++bad >= 5) break;
      }
    }
  }
}

tparConfig_t fusedConfig(int transport) {
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = transport;
  return cfg;
}

// transport, ranks
using Param = std::tuple<int, int>;
class FusedAddRmsNorm : public ::testing::TestWithParam<Param> {};

TEST_P(FusedAddRmsNorm, EveryShapeMatchesTheFloat64SequenceAndRanksAgree) {
  TPAR_REQUIRE_GPU();
  const auto [transport, n] = GetParam();
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, fusedConfig(transport)));
  for (size_t hidden : {2048, 4096, 5120, 7168, 8192, 16384}) {
    for (size_t tokens : {1, 3, 8, 64}) {
      for (bool residual : {true, false}) {
        runCase(g, {tokens, hidden, tparBfloat16, residual, Place::kOutOfPlace});
        if (HasFailure()) return;
      }
    }
  }
  runCase(g, {8, 4096, tparFloat16, true, Place::kOutOfPlace});
  runCase(g, {3, 1024, tparFloat32, true, Place::kOutOfPlace});
  runCase(g, {8, 4096, tparBfloat16, true, Place::kInputIsOut});
  runCase(g, {8, 4096, tparBfloat16, false, Place::kInputIsOut});
  runCase(g, {8, 4096, tparBfloat16, true, Place::kInputIsResidual});
  // residual_out: the residual only read; without a residual it receives the plain sum.
  runCase(g, {8, 4096, tparBfloat16, true, Place::kOutOfPlace, true});
  runCase(g, {8, 4096, tparBfloat16, false, Place::kOutOfPlace, true});
  runCase(g, {8, 4096, tparBfloat16, true, Place::kInputIsResidualOut, true});
  runCase(g, {8, 4096, tparBfloat16, true, Place::kInputIsResidual, true});
  runCase(g, {8, 24, tparBfloat16, true, Place::kOutOfPlace});  // rows shorter than a warp
  // More rows than one launch carries: split by whole rows.
  runCase(g, {1200, 4096, tparBfloat16, true, Place::kOutOfPlace});
}

TEST_P(FusedAddRmsNorm, InsideACudaGraph) {
  TPAR_REQUIRE_GPU();
  const auto [transport, n] = GetParam();
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, fusedConfig(transport)));
  runCase(g, {8, 7168, tparBfloat16, true, Place::kOutOfPlace}, /*graph=*/true);
}

// The quantized copy of out (tparNormQuant_t) on every rank of `g`: the call runs twice from the
// same inputs (the residual only read: residual_out), once with out and once without it. The
// first call's out is the y the quantizer saw, so the quantized bytes and scales are compared
// exactly with the reference quantizer of tests/common/fused_reference.h applied to that y; the
// second call must give the same quantized bytes; every rank the same bytes; NVFP4's block
// scales at their swizzled places and nothing written in the padding rows.
void runQuantCase(VirtualGroup& g, size_t tokens, size_t hidden, tparNormQuant_t quant) {
  SCOPED_TRACE(std::to_string(tokens) + "x" + std::to_string(hidden) + " quant " +
               std::to_string(quant));
  const int n = g.size();
  const size_t elems = tokens * hidden, es = 2;
  const bool fp4 = quant == tparNormQuantNvfp4;
  const size_t q_bytes = fp4 ? elems / 2 : elems;
  const int blocks = static_cast<int>(hidden / 16);
  const size_t bs_bytes = tpar::ref::nvfp4ScaleBytes(static_cast<int>(tokens), blocks);
  const size_t scales = quant == tparNormQuantFp8PerToken ? tokens : 1;
  // The given scale: static FP8 y / scale within e4m3's range; NVFP4's global scale as vLLM
  // derives it from the tensor's maximum (448 * 6 / max|y|, max|y| about 8 here).
  const float given = quant == tparNormQuantFp8Static ? 0.02f : 448.0f * 6.0f / 8.0f;
  std::mt19937 rng(static_cast<uint32_t>(freshSeed()));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint8_t> bytes;
  struct Bufs {
    void* input = nullptr;
    void* residual = nullptr;
    void* residual_out = nullptr;
    void* out = nullptr;
    void* weight = nullptr;
    void* q[2] = {nullptr, nullptr};
    void* block_scale[2] = {nullptr, nullptr};
    float* scale[2] = {nullptr, nullptr};
    ~Bufs() {
      for (void* p : {input, residual, residual_out, out, weight, q[0], q[1], block_scale[0],
                      block_scale[1], static_cast<void*>(scale[0]), static_cast<void*>(scale[1])})
        if (p != nullptr) cudaFree(p);
    }
  };
  std::vector<Bufs> b(n);
  std::vector<float> res(elems), w(hidden);
  for (float& x : res) x = roundTo(tparBfloat16, 4.0f * dist(rng));
  for (float& x : w) x = roundTo(tparBfloat16, 1.0f + 0.25f * dist(rng));
  for (int r = 0; r < n; ++r) {
    std::vector<float> in(elems);
    for (float& x : in) x = roundTo(tparBfloat16, dist(rng));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].input, elems * es));
    storeAs(tparBfloat16, in, &bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(b[r].input, bytes.data(), elems * es, cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].residual, elems * es));
    storeAs(tparBfloat16, res, &bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(b[r].residual, bytes.data(), elems * es,
                                      cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].weight, hidden * es));
    storeAs(tparBfloat16, w, &bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(b[r].weight, bytes.data(), hidden * es,
                                      cudaMemcpyHostToDevice));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].residual_out, elems * es));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].out, elems * es));
    ASSERT_EQ(cudaSuccess, poison(b[r].out, elems * es, nullptr));
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].q[k], q_bytes));
      ASSERT_EQ(cudaSuccess, cudaMemset(b[r].q[k], 0xEE, q_bytes));
      ASSERT_EQ(cudaSuccess, cudaMalloc(reinterpret_cast<void**>(&b[r].scale[k]),
                                        scales * sizeof(float)));
      if (quant == tparNormQuantFp8PerToken) {
        ASSERT_EQ(cudaSuccess, poison(b[r].scale[k], scales * sizeof(float), nullptr));
      } else {
        ASSERT_EQ(cudaSuccess, cudaMemcpy(b[r].scale[k], &given, sizeof(float),
                                          cudaMemcpyHostToDevice));
      }
      if (fp4) {
        ASSERT_EQ(cudaSuccess, cudaMalloc(&b[r].block_scale[k], bs_bytes));
        ASSERT_EQ(cudaSuccess, cudaMemset(b[r].block_scale[k], 0xEE, bs_bytes));
      }
    }
  }
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  for (int k = 0; k < 2; ++k) {
    for (int r = 0; r < n; ++r) {
      tparAddRmsNormArgs_t a = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
      a.tokens = tokens;
      a.hidden = hidden;
      a.residual = b[r].residual;
      a.residual_out = b[r].residual_out;
      a.weight = b[r].weight;
      a.out = k == 0 ? b[r].out : nullptr;
      a.quant = quant;
      a.quant_out = b[r].q[k];
      a.scale = b[r].scale[k];
      a.block_scale = b[r].block_scale[k];
      ASSERT_EQ(tparSuccess,
                tparAllReduceAddRmsNorm(b[r].input, &a, tparBfloat16, g.comm(r), g.stream(r)))
          << tparGetLastError(g.comm(r));
    }
    for (int r = 0; r < n; ++r) ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(g.stream(r)));
  }
  expectNoAsyncError(g);
  if (::testing::Test::HasFatalFailure()) return;
  auto fetch = [](const void* p, size_t n_bytes) {
    std::vector<uint8_t> v(n_bytes);
    EXPECT_EQ(cudaSuccess, cudaMemcpy(v.data(), p, n_bytes, cudaMemcpyDeviceToHost));
    return v;
  };
  const std::vector<uint8_t> q0 = fetch(b[0].q[0], q_bytes);
  const std::vector<float> y = loadAs(tparBfloat16, fetch(b[0].out, elems * es));
  const std::vector<uint8_t> sc0 = fetch(b[0].scale[0], scales * sizeof(float));
  const std::vector<uint8_t> bs0 = fp4 ? fetch(b[0].block_scale[0], bs_bytes) : std::vector<uint8_t>();
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < 2; ++k) {
      if (r == 0 && k == 0) continue;
      EXPECT_EQ(q0, fetch(b[r].q[k], q_bytes)) << "rank " << r << " call " << k;
      EXPECT_EQ(sc0, fetch(b[r].scale[k], scales * sizeof(float))) << "rank " << r;
      if (fp4) EXPECT_EQ(bs0, fetch(b[r].block_scale[k], bs_bytes)) << "rank " << r;
    }
  }
  // Against the reference quantizer, row by row, from the y the kernel wrote.
  size_t bad = 0;
  for (size_t t = 0; t < tokens && bad < 5; ++t) {
    const std::vector<float> row(y.begin() + t * hidden, y.begin() + (t + 1) * hidden);
    const uint8_t* got = q0.data() + t * (fp4 ? hidden / 2 : hidden);
    if (quant == tparNormQuantFp8PerToken) {
      const tpar::ref::Fp8Row want = tpar::ref::quantizeFp8Dynamic(row);
      float scale;
      std::memcpy(&scale, sc0.data() + t * sizeof(float), sizeof(float));
      if (scale != want.scale) {
        ADD_FAILURE() << "row " << t << " scale " << scale << ", reference " << want.scale;
        ++bad;
      }
      if (std::memcmp(got, want.bytes.data(), hidden) != 0) {
        ADD_FAILURE() << "row " << t << ": FP8 bytes differ from the reference quantizer's";
        ++bad;
      }
    } else if (quant == tparNormQuantFp8Static) {
      const std::vector<uint8_t> want = tpar::ref::quantizeFp8Static(row, given);
      if (std::memcmp(got, want.data(), hidden) != 0) {
        ADD_FAILURE() << "row " << t << ": FP8 bytes differ from the reference quantizer's";
        ++bad;
      }
    } else {
      const tpar::ref::Fp4Row want = tpar::ref::quantizeNvfp4(row, given);
      if (std::memcmp(got, want.packed.data(), hidden / 2) != 0) {
        ADD_FAILURE() << "row " << t << ": NVFP4 values differ from the reference quantizer's";
        ++bad;
      }
      for (int k = 0; k < blocks; ++k) {
        const size_t at = tpar::ref::nvfp4ScaleOffset(static_cast<int>(t), k, blocks);
        if (bs0[at] != want.block_scale[k]) {
          ADD_FAILURE() << "row " << t << " block " << k << " scale " << int(bs0[at])
                        << ", reference " << int(want.block_scale[k]);
          ++bad;
          break;
        }
      }
    }
  }
  if (fp4) {
    // The padding rows (up to a multiple of 128) keep their poison.
    for (size_t t = tokens; t < (tokens + 127) / 128 * 128; ++t) {
      for (int k = 0; k < blocks; ++k) {
        const size_t at = tpar::ref::nvfp4ScaleOffset(static_cast<int>(t), k, blocks);
        if (bs0[at] != 0xEE) {
          ADD_FAILURE() << "padding row " << t << " block " << k << " was written";
          return;
        }
      }
    }
  }
}

TEST_P(FusedAddRmsNorm, QuantizedOutputsMatchTheReferenceQuantizer) {
  TPAR_REQUIRE_GPU();
  const auto [transport, n] = GetParam();
  VirtualGroup g;
  ASSERT_EQ("", g.init(n, fusedConfig(transport)));
  for (tparNormQuant_t q : {tparNormQuantFp8PerToken, tparNormQuantFp8Static, tparNormQuantNvfp4}) {
    // 130 rows cross a 128-row tile of the NVFP4 scale layout; 1200 are split over launches.
    for (size_t tokens : {1, 3, 130}) {
      for (size_t hidden : {4096, 7168}) {
        runQuantCase(g, tokens, hidden, q);
        if (HasFailure()) return;
      }
    }
    runQuantCase(g, 1200, 2048, q);
  }
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  return transportLabel(std::get<0>(info.param)) + "_n" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Transports, FusedAddRmsNorm,
                         ::testing::Combine(::testing::Values(kTransportDefault, kTransportHost),
                                            ::testing::Values(2, 3, 4, 8)),
                         paramName);

TEST(FusedAddRmsNormArguments, BadArgumentsAreNamedAndNothingIsWritten) {
  TPAR_REQUIRE_GPU();
  VirtualGroup g;
  ASSERT_EQ("", g.init(1, fusedConfig(kTransportDefault)));
  const size_t hidden = 64, tokens = 2;
  RankBufs b;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b.input, 4 * tokens * hidden * 2));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b.weight, hidden * 2));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b.out, tokens * hidden * 2));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b.residual, 2 * tokens * hidden * 2));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b.residual_out, tokens * hidden * 2));
  // Every buffer a call could write, poisoned: a refused call leaves these bytes as they are.
  struct Watched {
    void* p;
    size_t bytes;
  };
  const Watched watched[] = {{b.input, 4 * tokens * hidden * 2},
                             {b.out, tokens * hidden * 2},
                             {b.residual, 2 * tokens * hidden * 2},
                             {b.residual_out, tokens * hidden * 2}};
  std::vector<std::vector<uint8_t>> before;
  for (const Watched& w : watched) {
    ASSERT_EQ(cudaSuccess, poison(w.p, w.bytes, nullptr));
    before.emplace_back(w.bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(before.back().data(), w.p, w.bytes, cudaMemcpyDeviceToHost));
  }
  auto good = [&] {
    tparAddRmsNormArgs_t a = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
    a.tokens = tokens;
    a.hidden = hidden;
    a.weight = b.weight;
    a.out = b.out;
    a.residual = b.residual;
    return a;
  };
  auto expectBad = [&](const void* input, const tparAddRmsNormArgs_t* a, tparDataType_t dt,
                       const char* named) {
    ASSERT_EQ(tparInvalidArgument, tparAllReduceAddRmsNorm(input, a, dt, g.comm(0), g.stream(0)))
        << named;
    EXPECT_NE(std::string::npos, std::string(tparGetLastError(g.comm(0))).find(named))
        << tparGetLastError(g.comm(0));
  };
  expectBad(b.input, nullptr, tparBfloat16, "args is NULL");
  tparAddRmsNormArgs_t a = good();
  a.size = 8;
  expectBad(b.input, &a, tparBfloat16, "args->size");
  a = good();
  for (size_t h : {size_t(0), size_t(12), size_t(16392)}) {
    a.hidden = h;
    expectBad(b.input, &a, tparBfloat16, "args->hidden");
  }
  a = good();
  a.weight = nullptr;
  expectBad(b.input, &a, tparBfloat16, "args->weight");
  a = good();
  a.out = nullptr;
  expectBad(b.input, &a, tparBfloat16, "args->out");
  a = good();
  expectBad(nullptr, &a, tparBfloat16, "input");
  a = good();
  a.out = a.residual;
  expectBad(b.input, &a, tparBfloat16, "args->out and args->residual overlap");
  a = good();
  a.eps = -1.0f;
  expectBad(b.input, &a, tparBfloat16, "args->eps");
  a.eps = std::nanf("");
  expectBad(b.input, &a, tparBfloat16, "args->eps");
  a = good();
  expectBad(b.input, &a, static_cast<tparDataType_t>(7), "datatype");
  a = good();
  a.weight = static_cast<char*>(b.weight) + 1;
  expectBad(b.input, &a, tparBfloat16, "args->weight");
  a = good();
  a.out = static_cast<char*>(b.input) + 2;  // inside the input, not equal to it
  expectBad(b.input, &a, tparBfloat16, "overlap");
  a = good();
  a.residual_out = b.out;
  expectBad(b.input, &a, tparBfloat16, "args->out and args->residual_out overlap");
  a = good();
  a.residual_out = static_cast<char*>(b.residual) + 2;  // inside the residual, not equal to it
  expectBad(b.input, &a, tparBfloat16, "residual_out may only be the residual itself");
  a = good();
  a.residual_out = static_cast<char*>(b.residual_out) + 1;
  expectBad(b.input, &a, tparBfloat16, "args->residual_out");
  a = good();
  a.residual_out = b.weight;
  expectBad(b.input, &a, tparBfloat16, "args->weight and args->residual_out overlap");
  a = good();
  a.quant = 9;
  expectBad(b.input, &a, tparBfloat16, "args->quant 9");
  a = good();
  a.quant = tparNormQuantFp8PerToken;
  expectBad(b.input, &a, tparBfloat16, "args->quant_out is NULL");
  a.quant_out = b.residual_out;
  expectBad(b.input, &a, tparBfloat16, "args->scale is NULL");
  a.quant = tparNormQuantNvfp4;
  a.scale = static_cast<float*>(b.residual_out) + 64;
  expectBad(b.input, &a, tparBfloat16, "args->block_scale is NULL");
  a = good();
  a.quant = tparNormQuantFp8Static;
  a.quant_out = b.residual_out;
  a.scale = static_cast<float*>(b.residual_out);  // inside quant_out
  expectBad(b.input, &a, tparBfloat16, "args->quant_out and args->scale overlap");
  a = good();
  a.quant = tparNormQuantFp8Static;
  a.quant_out = b.residual_out;
  a.scale = static_cast<float*>(b.residual_out) + 64;
  a.residual = nullptr;
  a.out = nullptr;
  expectBad(b.input, &a, tparBfloat16, "args->out is NULL");
  // No call ran: nothing was written, the communicator is healthy and a good call works.
  ASSERT_EQ(cudaSuccess, cudaDeviceSynchronize());
  for (size_t i = 0; i < before.size(); ++i) {
    std::vector<uint8_t> now(watched[i].bytes);
    ASSERT_EQ(cudaSuccess, cudaMemcpy(now.data(), watched[i].p, now.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(0, std::memcmp(before[i].data(), now.data(), now.size())) << "buffer " << i;
  }
  tparResult_t async = tparSuccess;
  ASSERT_EQ(tparSuccess, tparCommGetAsyncError(g.comm(0), &async));
  EXPECT_EQ(tparSuccess, async);
  a = good();
  a.tokens = 0;
  EXPECT_EQ(tparSuccess, tparAllReduceAddRmsNorm(b.input, &a, tparBfloat16, g.comm(0), g.stream(0)));
}

TEST(FusedAddRmsNormMismatch, RanksWithAnotherHiddenGetInvalidUsage) {
  TPAR_REQUIRE_GPU();
  VirtualGroup g;
  tparConfig_t cfg = fusedConfig(kTransportDefault);
  cfg.timeoutMs = 3000;
  ASSERT_EQ("", g.init(2, cfg));
  // Same element count, other rows: 4 x 1024 against 2 x 2048.
  std::vector<RankBufs> b(2);
  for (auto& x : b) {
    ASSERT_EQ(cudaSuccess, cudaMalloc(&x.input, 4096 * 2));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&x.out, 4096 * 2));
    ASSERT_EQ(cudaSuccess, cudaMalloc(&x.weight, 2048 * 2));
    ASSERT_EQ(cudaSuccess, cudaMemset(x.input, 0, 4096 * 2));
    ASSERT_EQ(cudaSuccess, cudaMemset(x.weight, 0, 2048 * 2));
  }
  for (int r = 0; r < 2; ++r) {
    tparAddRmsNormArgs_t a = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
    a.tokens = r == 0 ? 4 : 2;
    a.hidden = r == 0 ? 1024 : 2048;
    a.weight = b[r].weight;
    a.out = b[r].out;
    ASSERT_EQ(tparSuccess, tparAllReduceAddRmsNorm(b[r].input, &a, tparBfloat16, g.comm(r),
                                                   g.stream(r)));
  }
  for (int r = 0; r < 2; ++r) cudaStreamSynchronize(g.stream(r));
  for (int r = 0; r < 2; ++r) {
    tparResult_t async = tparSuccess;
    ASSERT_EQ(tparSuccess, tparCommGetAsyncError(g.comm(r), &async));
    EXPECT_EQ(tparInvalidUsage, async) << "rank " << r;
  }
}

}  // namespace
}  // namespace tpar_test
