#include "gpu/test_util.h"

#include "common/child_process.h"
#include "gpu/elem_device.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace tpar_test {

std::vector<tparAlgo_t> forcedAlgos(bool with_islands, bool with_auto) {
  std::vector<tparAlgo_t> out;
  for (const tpar::Algorithm& a : tpar::algorithms())
    if (with_islands || !a.needs_islands) out.push_back(a.pub);
  if (with_auto) out.push_back(tparAlgoAuto);
  return out;
}

bool gpuAvailable(std::string* why) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return false;
  }
  if (n == 0) {
    *why = "cudaGetDeviceCount found 0 devices";
    return false;
  }
  return true;
}


int gpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string idHex(const tparUniqueId& id) { return bytesHex(id.internal, sizeof(id.internal)); }

std::string bytesHex(const void* data, size_t n) {
  std::string hex;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", static_cast<const unsigned char*>(data)[i]);
    hex += buf;
  }
  return hex;
}

bool parseHex(const std::string& hex, void* out, size_t n) {
  if (hex.size() != 2 * n ||
      hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return false;
  for (size_t i = 0; i < n; ++i)
    static_cast<unsigned char*>(out)[i] =
        static_cast<unsigned char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return true;
}

std::map<std::string, std::string> parseResult(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

uint64_t freshSeed() {
  static std::mt19937_64 gen(std::random_device{}() ^
                             static_cast<uint64_t>(
                                 std::chrono::steady_clock::now().time_since_epoch().count()));
  return gen();
}

namespace {

__global__ void fillKernel(void* buf, size_t count, int dtype, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t r = mix(seed ^ mix(i + 0x1234567ull));
    const float f = static_cast<float>(static_cast<int64_t>(r >> 40) - (1ll << 23)) / float(1 << 23);
    storeFromFloat(buf, i, dtype, f);
  }
}

constexpr int kMaxCheckRanks = 16;
struct CheckArgs {
  const void* in[kMaxCheckRanks];
  const void* out[kMaxCheckRanks];
  int n;
  size_t count;
  int dtype;
  int op;
  double tol;
  int islands;  // 0: flat rank order
  int island_of[kMaxCheckRanks];
};

__global__ void checkKernel(CheckArgs a, CheckResult* res) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < a.count;
       i += size_t(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    double ref = 0.0, mag = 0.0;
    for (int r = 0; r < a.n; ++r) {
      const float x = loadAsFloat(a.in[r], i, a.dtype);
      if (r == 0) {
        acc = x;
        ref = x;
      } else if (a.op == tparSum) {
        acc = __fadd_rn(acc, x);
        ref += double(x);
      } else if (a.op == tparMax) {
        acc = fmaxf(acc, x);
        ref = fmax(ref, double(x));
      } else {
        acc = fminf(acc, x);
        ref = fmin(ref, double(x));
      }
      mag += fabs(double(x));
    }
    if (a.islands > 0) {
      // Hierarchical order: each island in rank order, then the islands in order.
      float total = 0.f;
      for (int isl = 0; isl < a.islands; ++isl) {
        float part = 0.f;
        bool first = true;
        for (int r = 0; r < a.n; ++r) {
          if (a.island_of[r] != isl) continue;
          const float x = loadAsFloat(a.in[r], i, a.dtype);
          part = first ? x : combine(part, x, a.op);
          first = false;
        }
        total = isl == 0 ? part : combine(total, part, a.op);
      }
      acc = total;
    }
    const uint32_t want = roundBits(acc, a.dtype);
    const uint32_t got0 = bitsOf(a.out[0], i, a.dtype);
    bool bad = false;
    for (int r = 0; r < a.n; ++r) {
      const uint32_t got = bitsOf(a.out[r], i, a.dtype);
      if (got != got0) {
        atomicAdd(&res->disagree, 1ull);
        bad = true;
      }
      if (got != want) {
        atomicAdd(&res->wrong, 1ull);
        bad = true;
      }
      const double v = bitsToFloat(got, a.dtype);
      // |v - ref| within the rounding of the output plus fp32 accumulation; NaN fails.
      if (!(fabs(v - ref) <= a.tol * fmax(mag, 1e-30) + 1e-30)) {
        atomicAdd(&res->off_ref, 1ull);
        bad = true;
      }
    }
    if (bad) atomicMin(&res->first_bad, static_cast<unsigned long long>(i));
  }
}

__global__ void mismatchKernel(const uint8_t* got, const uint8_t* want, size_t bytes,
                               unsigned long long* counter) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < bytes;
       i += size_t(gridDim.x) * blockDim.x) {
    local += got[i] != want[i];
  }
  if (local) atomicAdd(counter, local);
}

}  // namespace

cudaError_t countMismatches(const void* got, const void* want, size_t bytes,
                            unsigned long long* counter, cudaStream_t stream) {
  const int blocks = static_cast<int>(std::min<size_t>((bytes + 255) / 256, 64));
  mismatchKernel<<<blocks, 256, 0, stream>>>(static_cast<const uint8_t*>(got),
                                             static_cast<const uint8_t*>(want), bytes, counter);
  return cudaGetLastError();
}

cudaError_t fillRandom(void* buf, size_t count, tparDataType_t dtype, uint64_t seed,
                       cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 1024));
  fillKernel<<<blocks, 256, 0, stream>>>(buf, count, dtype, seed);
  return cudaGetLastError();
}

cudaError_t poison(void* buf, size_t bytes, cudaStream_t stream) {
  return cudaMemsetAsync(buf, 0xA7, bytes, stream);
}

cudaError_t checkOutputs(const std::vector<const void*>& inputs,
                         const std::vector<const void*>& outputs, size_t count,
                         tparDataType_t dtype, tparRedOp_t op, CheckResult* result,
                         const std::vector<int>& island_of) {
  CheckArgs a{};
  a.n = static_cast<int>(inputs.size());
  for (int r = 0; r < a.n; ++r) {
    a.in[r] = inputs[r];
    a.out[r] = outputs[r];
  }
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.tol = dtype == tparFloat32 ? 1e-6 : (dtype == tparFloat16 ? 2e-3 : 1e-2);
  a.islands = 0;
  for (size_t r = 0; r < island_of.size() && r < kMaxCheckRanks; ++r) {
    a.island_of[r] = island_of[r];
    a.islands = std::max(a.islands, island_of[r] + 1);
  }
  CheckResult* dres = nullptr;
  cudaError_t err = cudaMalloc(&dres, sizeof(CheckResult));
  if (err != cudaSuccess) return err;
  CheckResult init;
  cudaMemcpy(dres, &init, sizeof(init), cudaMemcpyHostToDevice);
  if (count > 0) {
    const int blocks = static_cast<int>(std::min<size_t>((count + 255) / 256, 1024));
    checkKernel<<<blocks, 256>>>(a, dres);
  }
  err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaMemcpy(result, dres, sizeof(CheckResult), cudaMemcpyDeviceToHost);
  cudaFree(dres);
  return err;
}

int runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               int timeout_s, std::string* output) {
  return runChild(argv, env, timeout_s, output);
}

int runSelfChild(const std::string& filter, const std::vector<std::string>& env, int timeout_s,
                 std::string* output) {
  return runProcess({TPAR_GPU_TEST_BINARY, "--gtest_filter=" + filter,
                     "--gtest_also_run_disabled_tests"},
                    env, timeout_s, output);
}

tparConfig_t sharedDeviceConfig(int64_t timeout_ms) {
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.allowSharedDevice = 1;
  cfg.timeoutMs = timeout_ms;
  return cfg;
}

std::string transportParamName(const ::testing::TestParamInfo<const char*>& info) {
  return std::string(info.param) == "auto" ? std::string("default") : std::string(info.param);
}

std::string transportLabel(int transport) {
  return transport == kTransportHost ? "host" : "default";
}

std::string testNamePart(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  return out;
}

VirtualGroup::~VirtualGroup() { release(); }

void VirtualGroup::release() {
  for (tparComm_t c : comms_) tparCommDestroy(c);
  comms_.clear();
  for (cudaStream_t s : streams_) cudaStreamDestroy(s);
  streams_.clear();
}

cudaError_t preloadTestKernels() {
  // NOTE [preload] applies to the tests' own kernels too: under lazy loading, the first launch
  // of a test kernel behind a spinning all-reduce on another stream waits for the device to go
  // idle, which it never does while the all-reduce waits for that stream.
  static cudaError_t result = [] {
    void* buf = nullptr;
    unsigned long long* counter = nullptr;
    cudaError_t err = cudaMalloc(&buf, 256);
    if (err != cudaSuccess) return err;
    err = cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(*counter));
    if (err == cudaSuccess) err = fillRandom(buf, 8, tparBfloat16, 1, nullptr);
    if (err == cudaSuccess) err = poison(buf, 256, nullptr);
    if (err == cudaSuccess) err = countMismatches(buf, buf, 16, counter, nullptr);
    CheckResult r;
    if (err == cudaSuccess) err = checkOutputs({buf}, {buf}, 1, tparBfloat16, tparSum, &r);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    cudaFree(buf);
    cudaFree(counter);
    return err;
  }();
  return result;
}

std::string VirtualGroup::init(int nranks, tparConfig_t config) {
  release();
  if (preloadTestKernels() != cudaSuccess) return "preloading the test kernels failed";
  std::vector<int> devs(nranks, 0);
  comms_.assign(nranks, nullptr);
  if (tparCommInitAllConfig(comms_.data(), nranks, devs.data(), &config) != tparSuccess) {
    comms_.clear();
    return std::string("tparCommInitAllConfig: ") + tparGetLastError(nullptr);
  }
  for (int r = 0; r < nranks; ++r) {
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return "stream";
    streams_.push_back(s);
  }
  return "";
}

Buffers::~Buffers() {
  for (void* p : in) cudaFree(p);
  for (void* p : out) cudaFree(p);
}

cudaError_t Buffers::alloc(int nranks, size_t bytes_each) {
  bytes = bytes_each;
  for (int r = 0; r < nranks; ++r) {
    void* a = nullptr;
    void* b = nullptr;
    cudaError_t err = cudaMalloc(&a, bytes_each + 64);
    if (err != cudaSuccess) return err;
    in.push_back(a);
    err = cudaMalloc(&b, bytes_each + 64);
    if (err != cudaSuccess) return err;
    out.push_back(b);
  }
  return cudaSuccess;
}

// Runs one all-reduce on every rank of `g` and checks it. `offset_elems` shifts the buffers
// (misalignment); in place when `in_place`.
void runAndCheck(VirtualGroup& g, size_t count, tparDataType_t dtype, tparRedOp_t op,
                 bool in_place, size_t send_off, size_t recv_off,
                 const std::vector<int>& island_of) {
  const int n = g.size();
  const size_t es = tpar::elementBytes(dtype);
  Buffers b;
  CUDA_OK(b.alloc(n, (count + 8) * es));
  const uint64_t seed = freshSeed();
  std::vector<const void*> ins, outs;
  std::vector<void*> inputs_copy(n, nullptr);
  for (int r = 0; r < n; ++r) {
    char* in = static_cast<char*>(b.in[r]) + send_off * es;
    char* out = in_place ? in : static_cast<char*>(b.out[r]) + recv_off * es;
    CUDA_OK(poison(b.out[r], b.bytes, g.stream(r)));
    CUDA_OK(fillRandom(in, count, dtype, seed + r, g.stream(r)));
    if (in_place) {
      // The reference needs the inputs after the call overwrote them: keep a copy.
      CUDA_OK(cudaMalloc(&inputs_copy[r], count * es + 16));
      CUDA_OK(cudaMemcpyAsync(inputs_copy[r], in, count * es, cudaMemcpyDeviceToDevice, g.stream(r)));
      ins.push_back(inputs_copy[r]);
    } else {
      ins.push_back(in);
    }
    outs.push_back(out);
  }
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
  for (int r = 0; r < n; ++r) {
    const void* send = in_place ? outs[r] : ins[r];
    ASSERT_EQ(tparSuccess, tparAllReduce(send, const_cast<void*>(outs[r]), count, dtype, op,
                                         g.comm(r), g.stream(r)))
        << tparGetLastError(g.comm(r));
  }
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamSynchronize(g.stream(r)));
  for (int r = 0; r < n; ++r) {
    tparResult_t async = tparSuccess;
    TPAR_OK(tparCommGetAsyncError(g.comm(r), &async));
    ASSERT_EQ(tparSuccess, async) << "rank " << r;
  }
  CheckResult res;
  CUDA_OK(checkOutputs(ins, outs, count, dtype, op, &res, island_of));
  EXPECT_EQ(0ull, res.wrong) << "count " << count << " seed " << seed << " first bad " << res.first_bad;
  EXPECT_EQ(0ull, res.off_ref) << "count " << count << " seed " << seed;
  EXPECT_EQ(0ull, res.disagree) << "count " << count << " seed " << seed;
  for (void* p : inputs_copy) cudaFree(p);
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t freeBytes(int device) {
  size_t free_b = 0, total = 0;
  cudaSetDevice(device);
  cudaMemGetInfo(&free_b, &total);
  return free_b;
}

bool memoryReturns(int device, size_t baseline) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    if (freeBytes(device) + (4u << 20) >= baseline) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

void expectTimeoutWhenPeerNeverArrives(const tparConfig_t& cfg) {
  ASSERT_EQ(300, cfg.timeoutMs);
  VirtualGroup g;
  ASSERT_EQ("", g.init(2, cfg));
  Buffers b;
  CUDA_OK(b.alloc(2, 1 << 20));
  const auto t0 = std::chrono::steady_clock::now();
  // Rank 1 never calls.
  TPAR_OK(tparAllReduce(b.in[0], b.out[0], 100000, tparBfloat16, tparSum, g.comm(0), g.stream(0)));
  CUDA_OK(cudaStreamSynchronize(g.stream(0)));
  const double elapsed = secondsSince(t0);
  tparResult_t async = tparSuccess;
  TPAR_OK(tparCommGetAsyncError(g.comm(0), &async));
  EXPECT_EQ(tparTimeout, async);
  EXPECT_GE(elapsed, 0.25);
  EXPECT_LT(elapsed, 5.0);
  // The error is sticky and reported by the next call.
  EXPECT_EQ(tparTimeout, tparAllReduce(b.in[0], b.out[0], 10, tparBfloat16, tparSum, g.comm(0),
                                       g.stream(0)));
  EXPECT_NE(std::string::npos, std::string(tparGetLastError(g.comm(0))).find("failed earlier"));
}

}  // namespace tpar_test
