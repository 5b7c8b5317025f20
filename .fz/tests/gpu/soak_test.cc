// Soak: one million all-reduces of random sizes, datatypes, ops, offsets and in-place use,
// replayed from CUDA graphs on virtual ranks. Before every replay of 1,000 calls the inputs are
// refilled from a fresh seed and the outputs poisoned; after it one call picked at random is
// checked on the host against a reference computed from the inputs the GPU actually read. No
// error, no wrong element, no write past an output, no growth of memory or descriptors, and no
// slowdown between the first and the last replays.
//
// Disabled by default (it takes a minute or more); scripts/gpu-check.sh --soak runs it:
//   tpar_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*Soak.DISABLED_*'
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/test_util.h"
#include "multiprocess/resource_check.h"

namespace tpar_test {
namespace {

constexpr int kAutoTransport = 0;  // tparConfig_t::transport
constexpr int kHostTransport = 1;

constexpr int kRanks = 4;
constexpr int kCallsPerGraph = 1000;
constexpr int kGraphs = 8;      // different random schedules, replayed in turn
constexpr int kReplays = 1000;  // kReplays * kCallsPerGraph = 1,000,000 all-reduces
constexpr size_t kMaxCallBytes = size_t(1) << 20;
constexpr size_t kGuardBytes = 64;  // after every output: must stay poisoned
constexpr unsigned char kPoison = 0xA7;

struct Call {
  size_t count;
  tparDataType_t dtype;
  tparRedOp_t op;
  bool in_place;
  size_t offset;  // bytes, the same in the input and the output buffer
};

// Values are read from whatever bits the input buffer holds: it is filled as bfloat16 in
// [-1, 1), which read as float16 or float32 are finite numbers of magnitude below 2.
float loadAsFloat(const unsigned char* p, size_t i, tparDataType_t dt) {
  if (dt == tparFloat32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  if (dt == tparFloat16) {
    __half_raw raw;
    raw.x = b;
    return __half2float(__half(raw));
  }
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t roundedBits(float x, tparDataType_t dt) {
  if (dt == tparFloat32) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
  }
  if (dt == tparFloat16) return __half_raw(__float2half_rn(x)).x;
  return __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
}

uint32_t bitsAt(const unsigned char* p, size_t i, tparDataType_t dt) {
  if (dt == tparFloat32) {
    uint32_t u;
    std::memcpy(&u, p + 4 * i, 4);
    return u;
  }
  uint16_t b;
  std::memcpy(&b, p + 2 * i, 2);
  return b;
}

double valueOfBits(uint32_t bits, tparDataType_t dt) {
  if (dt == tparFloat32) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const uint16_t b = static_cast<uint16_t>(bits);
  return loadAsFloat(reinterpret_cast<const unsigned char*>(&b), 0, dt);
}

// The reference of docs/DESIGN.md principle 6, on the host: float32 accumulation in rank order,
// rounded once; every rank's bits must equal it, and it must lie within the datatype's rounding
// of the float64 result. Returns a description of the first problem, or "".
std::string checkOnHost(const Call& c, const std::vector<std::vector<unsigned char>>& in,
                        const std::vector<std::vector<unsigned char>>& out) {
  const int n = static_cast<int>(in.size());
  const double tol = c.dtype == tparFloat32 ? 1e-6 : (c.dtype == tparFloat16 ? 2e-3 : 1e-2);
  const size_t bytes = c.count * tpar::elementBytes(c.dtype);
  for (size_t i = 0; i < c.count; ++i) {
    float acc = 0.f;
    double ref = 0.0, mag = 0.0;
    for (int r = 0; r < n; ++r) {
      const float x = loadAsFloat(in[r].data(), i, c.dtype);
      if (r == 0) {
        acc = x;
        ref = x;
      } else if (c.op == tparSum) {
        acc = acc + x;
        ref += double(x);
      } else if (c.op == tparMax) {
        acc = std::fmax(acc, x);
        ref = std::fmax(ref, double(x));
      } else {
        acc = std::fmin(acc, x);
        ref = std::fmin(ref, double(x));
      }
      mag += std::fabs(double(x));
    }
    const uint32_t want = roundedBits(acc, c.dtype);
    for (int r = 0; r < n; ++r) {
      const uint32_t got = bitsAt(out[r].data(), i, c.dtype);
      const double v = valueOfBits(got, c.dtype);
      if (got != want || !(std::fabs(v - ref) <= tol * std::max(mag, 1e-30) + 1e-30)) {
        char buf[200];
        std::snprintf(buf, sizeof(buf),
                      "rank %d element %zu: bits 0x%x, expected 0x%x (float64 reference %.9g)", r,
                      i, got, want, ref);
        return buf;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    for (size_t k = 0; k < kGuardBytes; ++k) {
      if (out[r][bytes + k] != kPoison)
        return "rank " + std::to_string(r) + " wrote " + std::to_string(k + 1) +
               " or more bytes past its output";
    }
  }
  return "";
}

std::vector<Call> randomSchedule(std::mt19937_64& rng, size_t* total_bytes) {
  std::vector<Call> calls(kCallsPerGraph);
  size_t at = 0;
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (Call& c : calls) {
    const double pick = unit(rng);
    c.dtype = pick < 0.5 ? tparBfloat16 : (pick < 0.75 ? tparFloat16 : tparFloat32);
    const double op = unit(rng);
    c.op = op < 0.8 ? tparSum : (op < 0.9 ? tparMax : tparMin);
    const size_t es = tpar::elementBytes(c.dtype);
    // Log-uniform counts: as many tiny calls as large ones, from one element to 1 MiB.
    const double max_count = double(kMaxCallBytes / es);
    c.count = std::max<size_t>(1, static_cast<size_t>(std::exp(unit(rng) * std::log(max_count))));
    c.in_place = unit(rng) < 0.25;
    // A quarter of the calls start a few elements past a 256-byte boundary (not vector-aligned).
    const size_t shift = unit(rng) < 0.25 ? es * (1 + rng() % 7) : 0;
    c.offset = at + shift;
    at = (c.offset + c.count * es + kGuardBytes + 255) / 256 * 256;
  }
  *total_bytes = at;
  return calls;
}

class Soak : public ::testing::TestWithParam<int> {};

TEST_P(Soak, DISABLED_MillionGraphReplayedCallsOfRandomSizesStayExactWithFlatMemory) {
  TPAR_REQUIRE_GPU();
  tparConfig_t cfg = sharedDeviceConfig();
  cfg.transport = GetParam();
  VirtualGroup g;
  ASSERT_EQ("", g.init(kRanks, cfg));
  tparCommInfo_t info;
  TPAR_OK(tparCommQuery(g.comm(0), &info));
  if (GetParam() == kHostTransport) ASSERT_EQ(tparTransportHost, info.transport);

  const uint64_t schedule_seed = freshSeed();
  std::mt19937_64 rng(schedule_seed);
  std::vector<std::vector<Call>> schedules(kGraphs);
  size_t total = 0;
  for (auto& s : schedules) {
    size_t bytes = 0;
    s = randomSchedule(rng, &bytes);
    total = std::max(total, bytes);
  }
  total = (total + 255) / 256 * 256;
  Buffers b;
  CUDA_OK(b.alloc(kRanks, total));

  // One graph per schedule and rank, captured rank after rank from this thread (relaxed mode:
  // the library's calls during capture are not the capturing thread's business).
  std::vector<std::vector<cudaGraphExec_t>> exec(kGraphs, std::vector<cudaGraphExec_t>(kRanks));
  for (int s = 0; s < kGraphs; ++s) {
    for (int r = 0; r < kRanks; ++r) {
      cudaStream_t st = g.stream(r);
      CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
      for (const Call& c : schedules[s]) {
        const char* in = static_cast<const char*>(b.in[r]) + c.offset;
        char* out = static_cast<char*>(b.out[r]) + c.offset;
        const size_t bytes = c.count * tpar::elementBytes(c.dtype);
        if (c.in_place) {
          CUDA_OK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, st));
          in = out;
        }
        ASSERT_EQ(tparSuccess, tparAllReduce(in, out, c.count, c.dtype, c.op, g.comm(r), st))
            << tparGetLastError(g.comm(r));
      }
      cudaGraph_t graph;
      CUDA_OK(cudaStreamEndCapture(st, &graph));
      CUDA_OK(cudaGraphInstantiate(&exec[s][r], graph, 0));
      CUDA_OK(cudaGraphDestroy(graph));
    }
  }

  ResourceSnapshot warm;
  std::vector<double> replay_ms;
  std::vector<std::vector<unsigned char>> hin(kRanks), hout(kRanks);
  const auto t_start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < kReplays; ++rep) {
    const int s = rep % kGraphs;
    const uint64_t seed = freshSeed();
    for (int r = 0; r < kRanks; ++r) {
      CUDA_OK(fillRandom(b.in[r], total / 2, tparBfloat16, seed + 7919 * r, g.stream(r)));
      CUDA_OK(poison(b.out[r], total, g.stream(r)));
    }
    for (int r = 0; r < kRanks; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < kRanks; ++r) CUDA_OK(cudaGraphLaunch(exec[s][r], g.stream(r)));
    for (int r = 0; r < kRanks; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
    replay_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (int r = 0; r < kRanks; ++r) {
      tparResult_t async = tparSuccess;
      TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
      ASSERT_EQ(tparSuccess, async)
          << "rank " << r << ", replay " << rep << ": " << tparGetErrorString(async);
    }
    const Call& c = schedules[s][rng() % kCallsPerGraph];
    const size_t bytes = c.count * tpar::elementBytes(c.dtype);
    for (int r = 0; r < kRanks; ++r) {
      hin[r].resize(bytes);
      hout[r].resize(bytes + kGuardBytes);
      CUDA_OK(cudaMemcpy(hin[r].data(), static_cast<char*>(b.in[r]) + c.offset, bytes,
                         cudaMemcpyDeviceToHost));
      CUDA_OK(cudaMemcpy(hout[r].data(), static_cast<char*>(b.out[r]) + c.offset,
                         bytes + kGuardBytes, cudaMemcpyDeviceToHost));
    }
    const std::string bad = checkOnHost(c, hin, hout);
    ASSERT_EQ("", bad) << "replay " << rep << " (schedule " << s << ", seed " << seed
                       << ", schedule seed " << schedule_seed << "): " << c.count << " x "
                       << tparDataTypeName(c.dtype) << " " << tparRedOpName(c.op)
                       << (c.in_place ? " in place" : "") << " at offset " << c.offset;
    if (rep == kGraphs - 1) warm = takeSnapshot(/*with_device=*/true);
    if ((rep + 1) % 100 == 0) {
      std::printf(
          "soak: %d of %d replays (%d all-reduces), last replay %.2f ms, %.0f s so far\n", rep + 1,
          kReplays, (rep + 1) * kCallsPerGraph, replay_ms.back(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());
      std::fflush(stdout);
    }
  }
  const ResourceSnapshot end = takeSnapshot(true);
  EXPECT_EQ("", leaksSince(warm, end))
      << "after the first replays: " << describe(warm) << "\nat the end: " << describe(end);
  // Each window holds every schedule equally often: the first and last tenth are comparable.
  const size_t tenth = replay_ms.size() / 10;
  auto mean = [&](size_t from) {
    double sum = 0;
    for (size_t i = from; i < from + tenth; ++i) sum += replay_ms[i];
    return sum / tenth;
  };
  const double first = mean(0), last = mean(replay_ms.size() - tenth);
  std::printf(
      "soak: %d all-reduces on %d ranks (%s transport) in %.0f s; mean replay of %d "
      "calls %.2f ms in the first tenth, %.2f ms in the last\n",
      kReplays * kCallsPerGraph, kRanks, tparTransportName(info.transport),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
      kCallsPerGraph, first, last);
  EXPECT_LT(last, 2.0 * first + 1.0) << "replays got slower over the run";
  for (auto& per : exec)
    for (cudaGraphExec_t e : per) cudaGraphExecDestroy(e);
}

INSTANTIATE_TEST_SUITE_P(Transports, Soak, ::testing::Values(kAutoTransport, kHostTransport),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(info.param == kHostTransport ? "host" : "default");
                         });

}  // namespace
}  // namespace tpar_test
