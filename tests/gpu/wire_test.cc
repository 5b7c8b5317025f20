// Compressed wire formats on the GPU (docs/WIRE.md): every rank's output against the host's
// definition of the all-reduce a format computes (tests/common/wire_reference.h), value for
// value, on both transports, 2 to 8 virtual ranks, float16 and bfloat16, odd counts, several
// launch pieces, in place, NaN and Inf; and where a format must not apply (small calls,
// float32), the lossless result.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/wire_reference.h"
#include "gpu/test_util.h"
#include "tuner/tuner.h"

namespace tpar_test {
namespace {

using tpar::kernels::WireFormat;

float toFloat(uint16_t bits, tparDataType_t dtype) {
  if (dtype == tparBfloat16) {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

uint16_t fromFloat(float x, tparDataType_t dtype) {
  if (dtype == tparBfloat16) {
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    return reinterpret_cast<const __nv_bfloat16_raw&>(b).x;
  }
  const __half h = __float2half_rn(x);
  return reinterpret_cast<const __half_raw&>(h).x;
}

struct Case {
  int n;
  size_t count;
  tparDataType_t dtype;
  tparRedOp_t op;
  bool in_place;
  bool specials;  // NaN and Inf among the inputs
};

// Runs `work(i)` for i in [0, items) on the host's cores. The host's part of these tests (the
// inputs, the reference, the comparison of every rank's output) took most of their time when
// it ran on one core.
template <class Work>
void parallelFor(size_t items, const Work& work) {
  const size_t workers =
      std::max<size_t>(1, std::min<size_t>(items, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (size_t i = w; i < items; i += workers) work(i);
    });
  for (size_t i = 0; i < items; i += workers) work(i);
  for (std::thread& t : threads) t.join();
}

// The format's reference over whole segments of its blocks (a segment that starts at a
// multiple of the block encodes the blocks the whole buffer does), segments in parallel.
std::vector<float> wireReference(WireFormat f, const std::vector<std::vector<float>>& values,
                                 tparRedOp_t op) {
  const int block = tpar::kernels::wireKernelBlock(f);
  const size_t count = values.at(0).size();
  const size_t segment = size_t{1} << 16;  // a multiple of every block
  std::vector<float> want(count);
  parallelFor((count + segment - 1) / segment, [&](size_t sg) {
    const size_t a = sg * segment, b = std::min(count, a + segment);
    std::vector<std::vector<float>> in(values.size());
    for (size_t r = 0; r < values.size(); ++r)
      in[r].assign(values[r].begin() + static_cast<std::ptrdiff_t>(a),
                   values[r].begin() + static_cast<std::ptrdiff_t>(b));
    const std::vector<float> part =
        tpar::ref::wireAllReduce(f, block, tpar::ref::WireAlgo::kTwoShot, in, op);
    std::copy(part.begin(), part.end(), want.begin() + static_cast<std::ptrdiff_t>(a));
  });
  return want;
}

// Runs one call on every rank of `g` and compares each output with the reference; returns the
// number of values that differ (a NaN matches a NaN). Each rank's inputs come from an engine
// of its own, seeded from `rng`, so that the ranks fill in parallel and a seed still gives
// the same inputs.
size_t runWire(VirtualGroup& g, WireFormat f, const Case& c, std::mt19937_64& rng) {
  const int n = g.size();
  std::vector<std::vector<uint16_t>> bits(n, std::vector<uint16_t>(c.count));
  std::vector<std::vector<float>> values(n, std::vector<float>(c.count));
  std::vector<uint64_t> seeds(n);
  for (int r = 0; r < n; ++r) seeds[r] = rng();
  parallelFor(static_cast<size_t>(n), [&](size_t r) {
    std::mt19937_64 e(seeds[r]);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (size_t i = 0; i < c.count; ++i) {
      float v = normal(e);
      if (i % 997 == 13) v *= 60.0f;  // outlier channels
      if (c.specials && e() % 4001 == 0) {
        const int kind = static_cast<int>(e() % 3);
        v = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
      }
      bits[r][i] = fromFloat(v, c.dtype);
      values[r][i] = toFloat(bits[r][i], c.dtype);
    }
  });
  const std::vector<float> want = wireReference(f, values, c.op);
  Buffers b;
  EXPECT_EQ(cudaSuccess, b.alloc(n, c.count * 2));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(cudaSuccess, cudaMemcpy(b.in[r], bits[r].data(), c.count * 2, cudaMemcpyHostToDevice));
    if (!c.in_place) EXPECT_EQ(cudaSuccess, cudaMemset(b.out[r], 0xFF, c.count * 2));
  }
  for (int r = 0; r < n; ++r) {
    void* out = c.in_place ? b.in[r] : b.out[r];
    EXPECT_EQ(tparSuccess, tparAllReduce(b.in[r], out, c.count, c.dtype, c.op, g.comm(r),
                                         g.stream(r)))
        << tparGetLastError(g.comm(r));
  }
  std::vector<std::vector<uint16_t>> got(n, std::vector<uint16_t>(c.count));
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(g.stream(r)));
    const void* out = c.in_place ? b.in[r] : b.out[r];
    EXPECT_EQ(cudaSuccess, cudaMemcpy(got[r].data(), out, c.count * 2, cudaMemcpyDeviceToHost));
  }
  // The want rounded to the output's type: a NaN matches any NaN, any other value must equal it.
  std::vector<size_t> wrong_of(n, 0), first(n, c.count);
  parallelFor(static_cast<size_t>(n), [&](size_t r) {
    for (size_t i = 0; i < c.count; ++i) {
      const float w = toFloat(fromFloat(want[i], c.dtype), c.dtype);
      const float v = toFloat(got[r][i], c.dtype);
      if (!((std::isnan(w) && std::isnan(v)) || w == v)) {
        if (wrong_of[r]++ == 0) first[r] = i;
      }
    }
  });
  size_t wrong = 0;
  for (int r = 0; r < n; ++r) {
    if (wrong_of[r] > 0 && wrong < 5) {
      const size_t i = first[r];
      ADD_FAILURE() << "rank " << r << " value " << i << ": " << toFloat(got[r][i], c.dtype)
                    << ", want " << toFloat(fromFloat(want[i], c.dtype), c.dtype) << " ("
                    << wrong_of[r] << " values of this rank differ)";
    }
    wrong += wrong_of[r];
  }
  return wrong;
}

class WireFormats : public ::testing::TestWithParam<int> {};

TEST_P(WireFormats, EveryRankGetsTheFormatsAllReduce) {
  TPAR_REQUIRE_GPU();
  std::mt19937_64 rng(freshSeed());
  const struct {
    const char* name;
    int wire;
    WireFormat f;
  } formats[] = {{"fp8", tparWireFp8, WireFormat::kFp8},
                 {"int8", tparWireInt8, WireFormat::kInt8},
                 {"int4", tparWireInt4, WireFormat::kInt4}};
  for (const auto& fmt : formats) {
    for (int n : {2, 3, 8}) {
      tparConfig_t cfg = sharedDeviceConfig();
      cfg.transport = GetParam();
      cfg.wire = fmt.wire;
      // In GPU memory a format runs only under a forced pipelined schedule (wirePlan).
      if (GetParam() != kTransportHost) cfg.algorithm = tparAlgoPipelined;
      // Pieces of 2 MiB lossless, so that on the host transport 3 MiB is one launch of more
      // than a lossless piece, its codes and scales nearly filling the area (NOTE [wire pieces
      // by the bytes that travel]), and 9 MiB several launches of 2 MiB.
      cfg.maxBytesPerCall = size_t{2} << 20;
      VirtualGroup g;
      ASSERT_EQ("", g.init(n, cfg));
      if (GetParam() == kTransportHost) {
        // Two ranks sharing the GPU on the host get the wide grid with a format (NOTE [wire
        // grid for two ranks on one GPU]); more ranks keep the grid they have without one.
        tparConfig_t lossless = cfg;
        lossless.wire = tparWireNone;
        VirtualGroup plain;
        ASSERT_EQ("", plain.init(n, lossless));
        tparCommInfo_t with_format, without;
        TPAR_OK(tparCommQuery(g.comm(0), &with_format));
        TPAR_OK(tparCommQuery(plain.comm(0), &without));
        int device = 0, sms = 0;
        ASSERT_EQ(cudaSuccess, cudaGetDevice(&device));
        ASSERT_EQ(cudaSuccess,
                  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        if (n == 2 && sms >= 2 * tpar::kSharedGpuGridBlocks)
          EXPECT_EQ(tpar::kSharedGpuGridBlocks, with_format.blocksPerRank);
        if (n > 2) EXPECT_EQ(without.blocksPerRank, with_format.blocksPerRank);
        EXPECT_GE(with_format.blocksPerRank, without.blocksPerRank);
      }
      // The smallest size a format carries and odd counts above it; 3 MiB runs in one launch
      // and 9 MiB in five on the host transport (both in more in GPU memory, whose pull areas
      // are smaller).
      const size_t min = tpar::defaultWireMinBytes(n) / 2;
      const Case cases[] = {{n, min, tparBfloat16, tparSum, false, false},
                            {n, min + 37, tparFloat16, tparSum, true, false},
                            {n, (size_t{3} << 19) + 3, tparFloat16, tparSum, false, false},
                            {n, (size_t{9} << 19) + 3, tparBfloat16, tparSum, false, true},
                            {n, min + 1001, tparBfloat16, tparMax, false, false}};
      for (const Case& c : cases) {
        SCOPED_TRACE(std::string(fmt.name) + ", " + std::to_string(n) + " ranks, count " +
                     std::to_string(c.count));
        EXPECT_EQ(0u, runWire(g, fmt.f, c, rng));
        if (HasFailure()) return;
      }
      // Where the format does not apply the call stays lossless: below its smallest size, and
      // float32 at any size.
      runAndCheck(g, tpar::defaultWireMinBytes(n) / 2 - 8, tparBfloat16, tparSum, false);
      runAndCheck(g, tpar::defaultWireMinBytes(n) / 4, tparFloat32, tparSum, false);
      if (HasFailure()) return;
      if (GetParam() != kTransportHost) {
        // Not forced, GPU memory keeps every call lossless even with a format set.
        cfg.algorithm = tparAlgoAuto;
        VirtualGroup plain;
        ASSERT_EQ("", plain.init(n, cfg));
        runAndCheck(plain, tpar::defaultWireMinBytes(n) / 2, tparBfloat16, tparSum, false);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, WireFormats,
                         ::testing::Values(kTransportDefault, kTransportHost),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return transportLabel(info.param);
                         });

}  // namespace
}  // namespace tpar_test
