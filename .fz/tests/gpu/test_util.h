// Helpers for the GPU tests: random inputs made on the device, poisoned outputs, and a checker
// that compares every rank's output with the reference on the device.
#ifndef TPAR_TESTS_GPU_TEST_UTIL_H_
#define TPAR_TESTS_GPU_TEST_UTIL_H_

#include <cstdint>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "registry/algorithms.h"
#include "tpar/tpar.h"

namespace tpar_test {

// Every algorithm a caller can force, from the registry (src/registry/algorithms.h), so that a new
// algorithm is tested without touching the tests: `hier` only with `with_islands` (on a flat
// topology it runs two-shot), tparAlgoAuto last with `with_auto`.
std::vector<tparAlgo_t> forcedAlgos(bool with_islands = false, bool with_auto = false);

// True when a CUDA GPU is usable; otherwise `why` says what was found.
bool gpuAvailable(std::string* why);

#define TPAR_REQUIRE_GPU()                                          \
  do {                                                              \
    std::string tpar_why_;                                          \
    if (!::tpar_test::gpuAvailable(&tpar_why_))                     \
      GTEST_SKIP() << "no usable CUDA GPU: " << tpar_why_;          \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ(cudaSuccess, (call)) << #call
#define TPAR_OK(call) ASSERT_EQ(tparSuccess, (call)) << #call << ": " << tparGetLastError(nullptr)


// CUDA devices of this process (0 when CUDA cannot say).
int gpuCount();

// A unique id as hex text (how the multi-process tests pass it to workers).
std::string idHex(const tparUniqueId& id);

// `n` bytes as hex text, and back: false unless `hex` is exactly 2n hex digits.
std::string bytesHex(const void* data, size_t n);
bool parseHex(const std::string& hex, void* out, size_t n);

// "key value" lines (the result files of the multi-process workers) as a map.
std::map<std::string, std::string> parseResult(const std::string& text);

// A whole file ("" when it cannot be read).
std::string readFile(const std::string& path);

// A seed nobody chose: fresh for every check (printed by the tests on failure).
uint64_t freshSeed();

// Fills `count` elements with values uniform in [-1, 1) made from (seed, index), exactly
// representable in `dtype`.
cudaError_t fillRandom(void* buf, size_t count, tparDataType_t dtype, uint64_t seed,
                       cudaStream_t stream);

// Poisons `bytes` bytes (0xA7 pattern: a value no correct output of random inputs takes).
cudaError_t poison(void* buf, size_t bytes, cudaStream_t stream);

struct CheckResult {
  unsigned long long wrong = 0;       // elements that differ from the rank-ordered fp32 result
  unsigned long long off_ref = 0;     // elements farther than tolerance from the float64 sum
  unsigned long long disagree = 0;    // elements where ranks' outputs differ bitwise
  unsigned long long first_bad = ~0ull;
};

// Checks every rank's output against the inputs of all ranks (all on the current device or
// mapped into it): the bits must equal the fp32 sum in rank order rounded once, lie within
// tolerance of the float64 sum, and be identical on every rank.
// `island_of` (optional, one entry per rank): the expected bits are those of the hierarchical
// order instead: each island summed in rank order, then the islands in order.
cudaError_t checkOutputs(const std::vector<const void*>& inputs,
                         const std::vector<const void*>& outputs, size_t count,
                         tparDataType_t dtype, tparRedOp_t op, CheckResult* result,
                         const std::vector<int>& island_of = {});

// Adds to *counter the number of bytes where got and want differ (stream-ordered).
cudaError_t countMismatches(const void* got, const void* want, size_t bytes,
                            unsigned long long* counter, cudaStream_t stream);

// Runs this test binary again in a child process with `filter` (disabled tests included) and
// extra NAME=value environment entries; returns its exit status (-1 when it had to be killed
// after timeout_s) and its combined output.
int runSelfChild(const std::string& filter, const std::vector<std::string>& env, int timeout_s,
                 std::string* output);

// Spawns `argv` with extra environment entries, output to a file; same contract as above.
int runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               int timeout_s, std::string* output);

// Runs one all-reduce on every rank of `g` (fresh random inputs, poisoned outputs) and checks
// it with checkOutputs. `send_off`/`recv_off` shift the buffers by elements (misalignment); in
// place when `in_place`; `island_of` as for checkOutputs.
class VirtualGroup;
void runAndCheck(VirtualGroup& g, size_t count, tparDataType_t dtype, tparRedOp_t op,
                 bool in_place, size_t send_off = 0, size_t recv_off = 0,
                 const std::vector<int>& island_of = {});

// N ranks as N streams on one GPU ("virtual ranks").
class VirtualGroup {
 public:
  ~VirtualGroup();
  // Returns a failure text, or "" on success.
  std::string init(int nranks, tparConfig_t config);
  int size() const { return static_cast<int>(comms_.size()); }
  tparComm_t comm(int r) const { return comms_[r]; }
  cudaStream_t stream(int r) const { return streams_[r]; }
  void release();  // destroys now (idempotent)

 private:
  std::vector<tparComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

tparConfig_t sharedDeviceConfig(int64_t timeout_ms = 20000);

// Values of tparConfig_t::transport the tests run under: 0 lets the communicator choose
// (virtual ranks: receive regions in the GPU's memory), 1 forces pinned host memory.
constexpr int kTransportDefault = 0;
constexpr int kTransportHost = 1;
// "default" / "host": the part of a test's name that says its transport.
std::string transportLabel(int transport);
// The same for tests parameterized by a TPAR_TRANSPORT value ("auto" is "default").
std::string transportParamName(const ::testing::TestParamInfo<const char*>& info);

// `name` with every character GoogleTest refuses in a test name ("oneshot-pull") made '_'.
std::string testNamePart(const std::string& name);

// Device buffers for one test case: per rank an input and an output.
struct Buffers {
  std::vector<void*> in, out;
  size_t bytes = 0;
  ~Buffers();
  cudaError_t alloc(int nranks, size_t bytes_each);
};

double secondsSince(std::chrono::steady_clock::time_point t0);

// Free memory of `device` as the driver reports it (the device becomes current).
size_t freeBytes(int device);

// Waits until the GPU's free memory is back to `baseline` (within 4 MiB) or 15 s passed.
bool memoryReturns(int device, size_t baseline);

// Two virtual ranks made with `cfg` (whose timeout must be 300 ms): rank 0 calls, rank 1 never
// does. Rank 0's kernel must record tparTimeout after 0.25 s and before 5 s, and the error must
// stick: the next call returns it and says the communicator failed earlier.
void expectTimeoutWhenPeerNeverArrives(const tparConfig_t& cfg);

}  // namespace tpar_test

#endif  // TPAR_TESTS_GPU_TEST_UTIL_H_
