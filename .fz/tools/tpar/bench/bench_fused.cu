// `tpar bench --fused`: the fused all-reduce + residual add + RMSNorm against what it replaces,
// in one run, per (ranks, hidden, tokens): tpar's plain all-reduce of the same bytes, tpar's
// all-reduce followed by the separate residual + RMSNorm kernel (add_rms_norm.h), NCCL followed
// by that kernel where NCCL can run (one rank per GPU), and the fused call. Every variant is
// timed from CUDA-graph replays (timeIt), and the fused call's outputs are checked against the
// unfused sequence's before anything is timed (docs/FUSED.md, docs/CLI.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "tools/tpar/bench/add_rms_norm.h"
#include "tools/tpar/bench/bench.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/common/cli_options.h"
#include "tools/tpar/common/exit_codes.h"
#include "tools/tpar/common/measure.h"
#include "tools/tpar/common/report.h"

namespace tpar_cli {
namespace {

// One rank's buffers of a fused run: the layer's input, a reduced copy (the unfused sequence's
// all-reduce output), the residual (and a copy to restore it), the norm's output, the weight.
struct FusedBufs {
  void* input = nullptr;
  void* reduced = nullptr;
  void* residual = nullptr;
  void* out = nullptr;
  void* weight = nullptr;
  void* quant_out = nullptr;    // FP8 or NVFP4 values
  float* scale = nullptr;       // per-token scales [tokens] (FP8), the global scale [1] (NVFP4)
  void* block_scale = nullptr;  // NVFP4's e4m3 block scales, rows padded to 128
};

struct FusedRow {
  int ranks = 0;
  bool virtual_ranks = false;
  std::string transport;
  size_t hidden = 0, tokens = 0;
  double us_ar = 0, us_ar_norm = 0, us_fused = 0, us_norm = 0;
  double us_nccl_norm = -1;  // -1: NCCL did not run
  double us_fp8 = -1, us_nvfp4 = -1;  // quantized outputs only (out NULL); -1: not measured
  // Elements of out further than 2 units from the unfused sequence's, of the residual further
  // than 1, and the largest distances (units in the last place).
  long long mismatched = 0;
  long long max_units_out = 0, max_units_residual = 0;
};

float halfBits(uint16_t h, tparDataType_t dt) {
  if (dt == tparBfloat16) {
    uint32_t w = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &w, 4);
    return f;
  }
  __half x;
  std::memcpy(&x, &h, 2);
  return __half2float(x);
}

// Units in the last place between a and b (`count` elements of `dt`): the elements more than
// `tol` apart, and the largest distance into *max_units.
long long farApart(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t count,
                   tparDataType_t dt, int tol, long long* max_units) {
  long long bad = 0;
  for (size_t i = 0; i < count; ++i) {
    long long d;
    if (dt == tparFloat32) {
      int32_t x, y;
      std::memcpy(&x, &a[i * 4], 4);
      std::memcpy(&y, &b[i * 4], 4);
      const int64_t sx = x < 0 ? -(int64_t(x) & 0x7FFFFFFF) : x;
      const int64_t sy = y < 0 ? -(int64_t(y) & 0x7FFFFFFF) : y;
      d = std::llabs(sx - sy);
    } else {
      uint16_t x, y;
      std::memcpy(&x, &a[i * 2], 2);
      std::memcpy(&y, &b[i * 2], 2);
      const int sx = x & 0x8000 ? -(x & 0x7FFF) : x, sy = y & 0x8000 ? -(y & 0x7FFF) : y;
      d = halfBits(x, dt) == halfBits(y, dt) ? 0 : std::abs(sx - sy);  // +0 and -0 agree
    }
    if (d > *max_units) *max_units = d;
    if (d > tol) ++bad;
  }
  return bad;
}

std::string fillRandom(void* p, size_t count, tparDataType_t dt, float scale, float offset,
                       std::mt19937* rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t es = dt == tparFloat32 ? 4 : 2;
  std::vector<uint8_t> bytes(count * es);
  for (size_t i = 0; i < count; ++i) {
    const float v = offset + scale * dist(*rng);
    if (dt == tparFloat32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else if (dt == tparBfloat16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    } else {
      const __half h = __float2half_rn(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  TPAR_CLI_CUDA(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return "";
}

class FusedRun {
 public:
  FusedRun(const BenchOptions& opt, std::vector<int> devs) : opt_(opt), devs_(std::move(devs)) {}
  ~FusedRun() {
    for (FusedBufs& b : bufs_)
      for (void* p : {b.input, b.reduced, b.residual, b.out, b.weight, b.quant_out,
                      static_cast<void*>(b.scale), b.block_scale})
        if (p != nullptr) cudaFree(p);
    for (void* p : saved_residual_)
      if (p != nullptr) cudaFree(p);
  }

  std::string init(size_t max_elems, size_t max_hidden, size_t max_tokens) {
    std::string why;
    tpar_ = makeBackend("tpar", &why, opt_.transport, int64_t(opt_.timeout_s) * 1000);
    if (!tpar_) return why;
    if (std::string e = tpar_->init(devs_); !e.empty()) return e;
    bool shared = false;
    for (size_t i = 0; i < devs_.size(); ++i)
      for (size_t j = i + 1; j < devs_.size(); ++j) shared |= devs_[i] == devs_[j];
    if (!shared) {
      nccl_ = makeNcclBackend(&why);
      if (nccl_ && !nccl_->init(devs_).empty()) nccl_.reset();
    }
    if (std::string e = rk_.alloc(devs_, 16); !e.empty()) return e;
    const size_t es = 4;  // room for float32
    bufs_.resize(devs_.size());
    saved_residual_.assign(devs_.size(), nullptr);
    for (size_t r = 0; r < devs_.size(); ++r) {
      TPAR_CLI_CUDA(setDevice(devs_[r]));
      FusedBufs& b = bufs_[r];
      for (void** p : {&b.input, &b.reduced, &b.residual, &b.out})
        TPAR_CLI_CUDA(cudaMalloc(p, max_elems * es));
      TPAR_CLI_CUDA(cudaMalloc(&saved_residual_[r], max_elems * es));
      TPAR_CLI_CUDA(cudaMalloc(&b.weight, max_hidden * es));
      // The quantized outputs: one byte per element at most; the scales of every row, the
      // block scales of rows padded to 128 (vLLM's swizzled layout, docs/FUSED.md).
      TPAR_CLI_CUDA(cudaMalloc(&b.quant_out, max_elems));
      TPAR_CLI_CUDA(cudaMalloc(&b.scale, std::max<size_t>(max_tokens, 1) * sizeof(float)));
      const size_t padded_rows = (max_tokens + 127) / 128 * 128;
      TPAR_CLI_CUDA(cudaMalloc(&b.block_scale, padded_rows * ((max_hidden / 16 + 3) / 4 * 4)));
    }
    return "";
  }

  std::string measure(size_t hidden, size_t tokens, tparDataType_t dt, FusedRow* row) {
    const size_t n = devs_.size(), count = hidden * tokens;
    const size_t es = dt == tparFloat32 ? 4 : 2, bytes = count * es;
    const float eps = 1e-6f;
    std::random_device seeds;
    std::mt19937 rng(seeds());
    // Inputs: fresh values per rank; one residual and one weight, the same on every rank.
    for (size_t r = 0; r < n; ++r) {
      TPAR_CLI_CUDA(setDevice(devs_[r]));
      if (std::string e = fillRandom(bufs_[r].input, count, dt, 1.0f, 0.0f, &rng); !e.empty())
        return e;
    }
    std::mt19937 shared(seeds());
    for (size_t r = 0; r < n; ++r) {
      std::mt19937 same = shared;
      TPAR_CLI_CUDA(setDevice(devs_[r]));
      if (std::string e = fillRandom(saved_residual_[r], count, dt, 4.0f, 0.0f, &same); !e.empty())
        return e;
      if (std::string e = fillRandom(bufs_[r].weight, hidden, dt, 0.25f, 1.0f, &same); !e.empty())
        return e;
    }
    auto restore = [&]() -> std::string {
      for (size_t r = 0; r < n; ++r) {
        TPAR_CLI_CUDA(setDevice(devs_[r]));
        TPAR_CLI_CUDA(cudaMemcpy(bufs_[r].residual, saved_residual_[r], bytes,
                                 cudaMemcpyDeviceToDevice));
      }
      return "";
    };
    std::vector<const void*> in(n);
    std::vector<void*> reduced(n);
    std::vector<tparAddRmsNormArgs_t> args(n);
    for (size_t r = 0; r < n; ++r) {
      in[r] = bufs_[r].input;
      reduced[r] = bufs_[r].reduced;
      args[r] = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
      args[r].tokens = tokens;
      args[r].hidden = hidden;
      args[r].residual = bufs_[r].residual;
      args[r].weight = bufs_[r].weight;
      args[r].out = bufs_[r].out;
      args[r].eps = eps;
    }
    auto norm = [&]() -> std::string {
      for (size_t r = 0; r < n; ++r) {
        TPAR_CLI_CUDA(setDevice(devs_[r]));
        TPAR_CLI_CUDA(launchAddRmsNorm(bufs_[r].reduced, bufs_[r].residual, bufs_[r].weight,
                                       bufs_[r].out, tokens, hidden, eps, dt, rk_.streams[r]));
      }
      return "";
    };
    auto ar = [&]() { return tpar_->allReduce(in, reduced, count, dt, tparSum, rk_.streams); };
    auto ar_norm = [&]() -> std::string {
      if (std::string e = ar(); !e.empty()) return e;
      return norm();
    };
    auto fused = [&]() { return tpar_->allReduceAddRmsNorm(in, args, dt, rk_.streams); };
    // The quantized variants as an engine calls them before a quantized GEMM: the quantized
    // copy and the residual, no unquantized out.
    auto quantArgs = [&](int quant) {
      std::vector<tparAddRmsNormArgs_t> q = args;
      for (size_t r = 0; r < n; ++r) {
        q[r].out = nullptr;
        q[r].quant = quant;
        q[r].quant_out = bufs_[r].quant_out;
        q[r].scale = bufs_[r].scale;
        q[r].block_scale = quant == tparNormQuantNvfp4 ? bufs_[r].block_scale : nullptr;
      }
      return q;
    };
    const std::vector<tparAddRmsNormArgs_t> fp8_args = quantArgs(tparNormQuantFp8PerToken);
    const std::vector<tparAddRmsNormArgs_t> nvfp4_args = quantArgs(tparNormQuantNvfp4);
    auto fused_fp8 = [&]() { return tpar_->allReduceAddRmsNorm(in, fp8_args, dt, rk_.streams); };
    auto fused_nvfp4 = [&]() {
      return tpar_->allReduceAddRmsNorm(in, nvfp4_args, dt, rk_.streams);
    };

    // The check: the unfused sequence, then the fused call, from the same residual.
    std::vector<std::vector<uint8_t>> want_out(n), want_res(n);
    if (std::string e = restore(); !e.empty()) return e;
    if (std::string e = ar_norm(); !e.empty()) return e;
    if (std::string e = rk_.sync(); !e.empty()) return e;
    for (size_t r = 0; r < n; ++r) {
      want_out[r].resize(bytes);
      want_res[r].resize(bytes);
      TPAR_CLI_CUDA(cudaMemcpy(want_out[r].data(), bufs_[r].out, bytes, cudaMemcpyDeviceToHost));
      TPAR_CLI_CUDA(cudaMemcpy(want_res[r].data(), bufs_[r].residual, bytes,
                               cudaMemcpyDeviceToHost));
      TPAR_CLI_CUDA(cudaMemset(bufs_[r].out, 0xFF, bytes));  // poisoned: NaN in every type
    }
    if (std::string e = restore(); !e.empty()) return e;
    if (std::string e = fused(); !e.empty()) return e;
    if (std::string e = rk_.sync(); !e.empty()) return e;
    if (std::string e = tpar_->asyncError(); !e.empty()) return e;
    for (size_t r = 0; r < n; ++r) {
      std::vector<uint8_t> got(bytes);
      TPAR_CLI_CUDA(cudaMemcpy(got.data(), bufs_[r].out, bytes, cudaMemcpyDeviceToHost));
      // out: the two kernels sum the row's squares in different orders, so inv may differ in
      // its last bits; round(r * inv) then moves by one unit, and the weight's multiply can
      // make that two where the product crosses a power of two. The residual (the same sum
      // plus the same residual) differs by a unit at most where the all-reduce adds in
      // another order (hierarchical).
      row->mismatched += farApart(got, want_out[r], count, dt, 2, &row->max_units_out);
      TPAR_CLI_CUDA(cudaMemcpy(got.data(), bufs_[r].residual, bytes, cudaMemcpyDeviceToHost));
      row->mismatched += farApart(got, want_res[r], count, dt, 1, &row->max_units_residual);
    }

    // The timings (the residual grows by the sum at every call; its values stay finite).
    if (std::string e = restore(); !e.empty()) return e;
    const bool graph = opt_.graph_launches > 0;
    if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, ar, &row->us_ar); !e.empty())
      return e;
    if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, norm, &row->us_norm);
        !e.empty())
      return e;
    if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, ar_norm, &row->us_ar_norm);
        !e.empty())
      return e;
    if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, fused, &row->us_fused);
        !e.empty())
      return e;
    if (dt != tparFloat32) {
      // NVFP4's global scale is an input: 1 keeps the block scales in e4m3's range for these
      // values (|out| stays well below 6 * 448).
      const float one = 1.0f;
      if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, fused_fp8, &row->us_fp8);
          !e.empty())
        return e;
      if (hidden % 16 == 0) {
        for (size_t r = 0; r < n; ++r) {
          TPAR_CLI_CUDA(setDevice(devs_[r]));
          TPAR_CLI_CUDA(cudaMemcpy(bufs_[r].scale, &one, sizeof(one), cudaMemcpyHostToDevice));
        }
        if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, fused_nvfp4,
                                   &row->us_nvfp4);
            !e.empty())
          return e;
      }
      if (std::string e = tpar_->asyncError(); !e.empty()) return e;
    }
    if (nccl_) {
      auto nccl_norm = [&]() -> std::string {
        if (std::string e = nccl_->allReduce(in, reduced, count, dt, tparSum, rk_.streams);
            !e.empty())
          return e;
        return norm();
      };
      if (std::string e = timeIt(rk_, opt_.iters, opt_.warmup, graph, nccl_norm,
                                 &row->us_nccl_norm);
          !e.empty())
        return e;
    }
    if (std::string e = restore(); !e.empty()) return e;
    return tpar_->asyncError();
  }

  std::string transport() { return tpar_ ? tpar_->transport() : ""; }

 private:
  const BenchOptions& opt_;
  std::vector<int> devs_;
  std::unique_ptr<Backend> tpar_, nccl_;
  Ranks rk_;
  std::vector<FusedBufs> bufs_;
  std::vector<void*> saved_residual_;
};

nlohmann::json fusedRowJson(const FusedRow& r) {
  nlohmann::json j = {{"ranks", r.ranks},
                      {"virtual_ranks", r.virtual_ranks},
                      {"transport", r.transport},
                      {"hidden", r.hidden},
                      {"tokens", r.tokens},
                      {"us_allreduce", r.us_ar},
                      {"us_norm_kernel", r.us_norm},
                      {"us_allreduce_then_norm", r.us_ar_norm},
                      {"us_fused", r.us_fused},
                      {"fused_over_allreduce", r.us_fused / r.us_ar},
                      {"fused_over_allreduce_then_norm", r.us_fused / r.us_ar_norm},
                      {"mismatched", r.mismatched},
                      {"max_units_out", r.max_units_out},
                      {"max_units_residual", r.max_units_residual}};
  if (r.us_fp8 >= 0) {
    j["us_fused_fp8"] = r.us_fp8;
    j["fused_fp8_over_allreduce"] = r.us_fp8 / r.us_ar;
  }
  if (r.us_nvfp4 >= 0) {
    j["us_fused_nvfp4"] = r.us_nvfp4;
    j["fused_nvfp4_over_allreduce"] = r.us_nvfp4 / r.us_ar;
  }
  if (r.us_nccl_norm >= 0) {
    j["us_nccl_then_norm"] = r.us_nccl_norm;
    j["fused_over_nccl_then_norm"] = r.us_fused / r.us_nccl_norm;
  }
  return j;
}

}  // namespace

int runFusedBench(const BenchOptions& opt) {
  auto fail = [&](const std::string& msg, int code = kExitRunError) {
    std::fprintf(stderr, "tpar bench --fused: %s\n", msg.c_str());
    return code;
  };
  if (!opt.json_path.empty()) {
    if (std::string e = checkOutputPath(opt.json_path); !e.empty())
      return fail("--json: " + e, kExitUsage);
  }
  std::string why;
  const auto gpus = listGpus(&why);
  if (gpus.empty()) return fail(why + "; nothing to measure", kExitNoGpu);
  const int ngpus = static_cast<int>(gpus.size());
  const tparDataType_t dt = opt.dtypes.empty() ? tparBfloat16 : opt.dtypes.front();
  size_t max_hidden = 0, max_tokens = 0;
  for (size_t h : opt.fused_hidden) max_hidden = std::max(max_hidden, h);
  for (size_t t : opt.fused_tokens) max_tokens = std::max(max_tokens, t);
  std::vector<FusedRow> rows;
  std::printf("# tpar bench --fused: all-reduce (sum, %s) + residual add + RMSNorm, CUDA-graph "
              "replays of %d calls\n#  ar: tpar's all-reduce alone; norm: the separate residual "
              "+ RMSNorm kernel alone;\n#  ar+norm: the two in turn; fused: "
              "tparAllReduceAddRmsNorm; nccl+norm: NCCL then the same kernel;\n#  fp8, nvfp4: the fused call "
              "writing only FP8 per-token / NVFP4 output (and the residual); x/ar: over ar\n",
              ncclTestsTypeName(dt), opt.iters);
  std::printf("# %5s %6s %6s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %6s\n", "ranks", "hidden",
              "tokens", "ar(us)", "norm(us)", "ar+norm", "fused", "fp8", "nvfp4", "nccl+norm",
              "fused/ar", "fused/a+n", "fp8/ar", "nvfp4/ar", "wrong");
  for (int n : benchRankCounts(opt, ngpus)) {
    const bool virt = n > ngpus;
    std::vector<int> devs(n);
    for (int r = 0; r < n; ++r) devs[r] = virt ? 0 : r;
    FusedRun run(opt, devs);
    if (std::string e = run.init(max_hidden * max_tokens, max_hidden, max_tokens); !e.empty())
      return fail(e);
    for (size_t hidden : opt.fused_hidden) {
      for (size_t tokens : opt.fused_tokens) {
        FusedRow row;
        row.ranks = n;
        row.virtual_ranks = virt;
        row.hidden = hidden;
        row.tokens = tokens;
        row.transport = run.transport();
        if (std::string e = run.measure(hidden, tokens, dt, &row); !e.empty()) return fail(e);
        auto cell = [](double v, double scale_by) {
          char s[32] = "-";
          if (v >= 0) std::snprintf(s, sizeof(s), "%.*f", scale_by > 0 ? 3 : 2,
                                    scale_by > 0 ? v / scale_by : v);
          return std::string(s);
        };
        std::printf("  %5d %6zu %6zu %9.2f %9.2f %9.2f %9.2f %9s %9s %9s %9.3f %9.3f %9s %9s "
                    "%6lld\n",
                    n, hidden, tokens, row.us_ar, row.us_norm, row.us_ar_norm, row.us_fused,
                    cell(row.us_fp8, 0).c_str(), cell(row.us_nvfp4, 0).c_str(),
                    cell(row.us_nccl_norm, 0).c_str(), row.us_fused / row.us_ar,
                    row.us_fused / row.us_ar_norm, cell(row.us_fp8, row.us_ar).c_str(),
                    cell(row.us_nvfp4, row.us_ar).c_str(), row.mismatched);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }
  long long wrong = 0;
  for (const FusedRow& r : rows) wrong += r.mismatched;
  if (!opt.json_path.empty()) {
    nlohmann::json j = machineReport("tpar bench --fused", opt.command_line);
    j["dtype"] = ncclTestsTypeName(dt);
    j["timing"] = opt.graph_launches > 0 ? "graph" : "eager";
    j["iters"] = opt.iters;
    j["warmup"] = opt.warmup;
    j["transport_option"] = transportOptionName(opt.transport);
    j["rows"] = nlohmann::json::array();
    for (const FusedRow& r : rows) j["rows"].push_back(fusedRowJson(r));
    if (std::string e = writeOutputFile(opt.json_path, j.dump(2) + "\n"); !e.empty())
      return fail("--json: " + e);
    std::printf("# wrote %s\n", opt.json_path.c_str());
  }
  if (wrong) {
    std::printf("# %lld elements of the fused outputs are further from the unfused sequence's "
                "than allowed (out: 2 units, residual: 1)\n", wrong);
    return kExitCheckFailed;
  }
  return kExitOk;
}

}  // namespace tpar_cli
