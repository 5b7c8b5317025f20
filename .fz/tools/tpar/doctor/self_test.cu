// The doctor's self-test (every forced algorithm of tpar, each output element checked against
// an exact sum, on the machine's GPUs and on a topology fixture with islands) and its timing of
// tpar against NCCL.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>

#include "api/internal.h"
#include "tools/tpar/common/backend.h"
#include "tools/tpar/doctor/probe_util.h"
#include "tools/tpar/doctor/probes.h"
#include "tpar/tpar.h"

namespace tpar_cli {

// The topology fixture compiled into the command (tools/tpar/CMakeLists.txt).
extern const char kDoctorFixtureName[];
extern const char kDoctorFixtureXml[];

namespace {

// Self-test inputs: integers in [-7, 7], so any sum over up to 16 ranks (|sum| <= 112) is
// exact in bf16, fp16 and fp32 whatever the order of additions, and every output element has
// exactly one right answer.
__device__ inline float testValue(size_t i, int rank, unsigned salt) {
  unsigned h =
      static_cast<unsigned>(i) * 2654435761u ^ (static_cast<unsigned>(rank) * 40503u + salt);
  h ^= h >> 13;
  return static_cast<float>(static_cast<int>(h % 15u) - 7);
}

__global__ void fillTest(void* buf, size_t count, int dtype, int rank, unsigned salt) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    const float v = testValue(i, rank, salt);
    if (dtype == tparFloat32)
      static_cast<float*>(buf)[i] = v;
    else
      static_cast<__nv_bfloat16*>(buf)[i] = __float2bfloat16_rn(v);
  }
}

// Counts output elements that differ from the exact sum; the poisoned (NaN) outputs of an
// element nobody wrote never compare equal.
__global__ void checkTest(const void* out, size_t count, int dtype, int nranks, unsigned salt,
                          unsigned long long* wrong) {
  unsigned long long bad = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    float want = 0.f;
    for (int r = 0; r < nranks; ++r) want += testValue(i, r, salt);
    const float got = dtype == tparFloat32
                          ? static_cast<const float*>(out)[i]
                          : __bfloat162float(static_cast<const __nv_bfloat16*>(out)[i]);
    bad += !(got == want);
  }
  if (bad) atomicAdd(wrong, bad);
}

std::string syncAll(const std::vector<int>& devs) {
  for (int d : std::set<int>(devs.begin(), devs.end())) {
    PROBE_CUDA(cudaSetDevice(d));
    PROBE_CUDA(cudaDeviceSynchronize());
  }
  return "";
}

// Per rank: input, output and a wrong-element counter on the rank's GPU, and its stream.
struct RankBuffers {
  std::vector<int> devs;
  std::vector<void*> in, out;
  std::vector<unsigned long long*> wrong;
  std::vector<cudaStream_t> streams;
  ~RankBuffers() {
    for (size_t r = 0; r < devs.size(); ++r) {
      cudaSetDevice(devs[r]);
      if (in[r]) cudaFree(in[r]);
      if (out[r]) cudaFree(out[r]);
      if (wrong[r]) cudaFree(wrong[r]);
      if (streams[r]) cudaStreamDestroy(streams[r]);
    }
  }
  std::string alloc(const std::vector<int>& d, size_t bytes) {
    devs = d;
    in.assign(d.size(), nullptr);
    out.assign(d.size(), nullptr);
    wrong.assign(d.size(), nullptr);
    streams.assign(d.size(), nullptr);
    for (size_t r = 0; r < d.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(d[r]));
      PROBE_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      PROBE_CUDA(cudaMalloc(&in[r], bytes));
      PROBE_CUDA(cudaMalloc(&out[r], bytes));
      PROBE_CUDA(cudaMalloc(&wrong[r], sizeof(unsigned long long)));
    }
    return "";
  }
  // Fills every rank's input (or, in place, its output) with its share of a known sum.
  std::string fill(size_t count, tparDataType_t dtype, unsigned salt, bool in_place) {
    const size_t bytes = count * tpar::elementBytes(dtype);
    for (size_t r = 0; r < devs.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(devs[r]));
      fillTest<<<128, 256, 0, streams[r]>>>(in_place ? out[r] : in[r], count, dtype,
                                            static_cast<int>(r), salt);
      if (!in_place) PROBE_CUDA(cudaMemsetAsync(out[r], 0xff, bytes, streams[r]));  // NaN
      PROBE_CUDA(cudaGetLastError());
    }
    return syncAll(devs);
  }
  // Wrong elements over every rank's output.
  std::string check(size_t count, tparDataType_t dtype, unsigned salt, unsigned long long* bad) {
    for (size_t r = 0; r < devs.size(); ++r) {
      PROBE_CUDA(cudaSetDevice(devs[r]));
      PROBE_CUDA(cudaMemsetAsync(wrong[r], 0, sizeof(unsigned long long), streams[r]));
      checkTest<<<128, 256, 0, streams[r]>>>(out[r], count, dtype, static_cast<int>(devs.size()),
                                             salt, wrong[r]);
      PROBE_CUDA(cudaGetLastError());
    }
    *bad = 0;
    for (size_t r = 0; r < devs.size(); ++r) {
      unsigned long long w = 0;
      PROBE_CUDA(cudaSetDevice(devs[r]));
      PROBE_CUDA(cudaMemcpy(&w, wrong[r], sizeof(w), cudaMemcpyDeviceToHost));
      *bad += w;
    }
    return "";
  }
};

std::string selfTestOne(Backend& be, const std::vector<int>& devs, int* checks) {
  if (std::string e = be.init(devs); !e.empty()) return "init: " + e;
  // Odd counts leave partial vectors and uneven per-rank slices; the largest crosses
  // several blocks and, in fp32, the default 8 MiB per-launch split.
  const size_t counts[] = {1, 1031, 32771, 262147, 2097155};
  const size_t max_bytes = 2097155 * 4;
  RankBuffers buf;
  if (std::string e = buf.alloc(devs, max_bytes); !e.empty()) return e;
  static unsigned salt = 0;
  for (tparDataType_t dtype : {tparBfloat16, tparFloat32}) {
    for (size_t count : counts) {
      for (bool in_place : {false, true}) {
        ++salt;
        if (std::string e = buf.fill(count, dtype, salt, in_place); !e.empty()) return e;
        std::vector<const void*> send(devs.size());
        for (size_t r = 0; r < devs.size(); ++r) send[r] = in_place ? buf.out[r] : buf.in[r];
        if (std::string e = be.allReduce(send, buf.out, count, dtype, tparSum, buf.streams);
            !e.empty())
          return e;
        unsigned long long bad = 0;
        if (std::string e = buf.check(count, dtype, salt, &bad); !e.empty()) return e;
        if (std::string e = be.asyncError(); !e.empty()) return e;
        const std::string what = std::to_string(count) + " x " + tparDataTypeName(dtype) +
                                 (in_place ? " in place" : " out of place");
        if (bad) return std::to_string(bad) + " wrong elements (" + what + ")";
        ++*checks;
      }
    }
  }
  return "";
}

// Each rank's `iters` calls are captured in one graph per rank, all graphs launched together,
// timed from an event before the first to the join of every rank's stream.
std::string timeGraphs(Backend& be, RankBuffers& buf, size_t count, int iters, double* us) {
  const size_t n = buf.devs.size();
  std::vector<const void*> send(buf.in.begin(), buf.in.end());
  std::string err;
  for (int i = 0; i < 5 && err.empty(); ++i)
    err = be.allReduce(send, buf.out, count, tparBfloat16, tparSum, buf.streams);
  if (err.empty()) err = syncAll(buf.devs);
  std::vector<cudaGraph_t> graphs(n, nullptr);
  std::vector<cudaGraphExec_t> execs(n, nullptr);
  std::vector<cudaEvent_t> done(n, nullptr);
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<bool> capturing(n, false);
  for (size_t r = 0; r < n; ++r) {
    PROBE_STEP(cudaStreamBeginCapture(buf.streams[r], cudaStreamCaptureModeThreadLocal));
    capturing[r] = err.empty();
  }
  for (int i = 0; i < iters && err.empty(); ++i)
    err = be.allReduce(send, buf.out, count, tparBfloat16, tparSum, buf.streams);
  // Every capture ends, even after a failure, and before any graph is instantiated:
  // instantiating is not permitted while another stream of this thread is still capturing.
  for (size_t r = 0; r < n; ++r)
    if (capturing[r]) cudaStreamEndCapture(buf.streams[r], &graphs[r]);
  for (size_t r = 0; r < n; ++r) {
    PROBE_STEP(graphs[r] ? cudaSuccess : cudaErrorStreamCaptureInvalidated);
    PROBE_STEP(cudaSetDevice(buf.devs[r]));
    PROBE_STEP(cudaGraphInstantiate(&execs[r], graphs[r], 0));
    PROBE_STEP(cudaEventCreateWithFlags(&done[r], cudaEventDisableTiming));
  }
  PROBE_STEP(cudaSetDevice(buf.devs[0]));
  PROBE_STEP(cudaEventCreate(&start));
  PROBE_STEP(cudaEventCreate(&stop));
  for (int timed = 0; timed < 2; ++timed) {  // the untimed launch uploads the graphs
    PROBE_STEP(cudaSetDevice(buf.devs[0]));
    if (timed) PROBE_STEP(cudaEventRecord(start, buf.streams[0]));
    for (size_t r = 0; r < n; ++r) {
      PROBE_STEP(cudaSetDevice(buf.devs[r]));
      if (timed) PROBE_STEP(cudaStreamWaitEvent(buf.streams[r], start, 0));
      PROBE_STEP(cudaGraphLaunch(execs[r], buf.streams[r]));
      PROBE_STEP(cudaEventRecord(done[r], buf.streams[r]));
    }
    PROBE_STEP(cudaSetDevice(buf.devs[0]));
    for (size_t r = 1; r < n; ++r) PROBE_STEP(cudaStreamWaitEvent(buf.streams[0], done[r], 0));
    PROBE_STEP(cudaEventRecord(stop, buf.streams[0]));
    PROBE_STEP(cudaEventSynchronize(stop));
    if (err.empty()) err = syncAll(buf.devs);
  }
  float ms = 0;
  PROBE_STEP(cudaEventElapsedTime(&ms, start, stop));
  if (err.empty()) *us = 1000.0 * ms / iters;
  for (size_t r = 0; r < n; ++r) {
    if (graphs[r]) cudaGraphDestroy(graphs[r]);
    if (execs[r]) cudaGraphExecDestroy(execs[r]);
    if (done[r]) cudaEventDestroy(done[r]);
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  (void)cudaGetLastError();
  return err;
}

std::string timeBackend(Backend& be, const std::vector<int>& devs, size_t bytes, int iters,
                        double* us) {
  const size_t count = bytes / 2;
  RankBuffers buf;
  if (std::string e = buf.alloc(devs, bytes); !e.empty()) return e;
  const unsigned salt = 0x7a11;
  if (std::string e = buf.fill(count, tparBfloat16, salt, false); !e.empty()) return e;
  if (std::string e = timeGraphs(be, buf, count, iters, us); !e.empty()) return e;
  // Out of place, so the last replay's output is still the plain sum: check it.
  unsigned long long bad = 0;
  if (std::string e = buf.check(count, tparBfloat16, salt, &bad); !e.empty()) return e;
  if (std::string e = be.asyncError(); !e.empty()) return e;
  if (bad) return std::to_string(bad) + " wrong elements after the timed replays";
  return "";
}

// The fixture as a file for the communicator to read (TPAR_TOPO_FILE's path, given directly);
// removed again when this goes away.
class FixtureFile {
 public:
  FixtureFile() {
    const char* dir = std::getenv("TMPDIR");
    std::string path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") +
                       "/tpar-doctor-topology-XXXXXX";
    std::vector<char> buf(path.begin(), path.end());
    buf.push_back('\0');
    const int fd = mkstemp(buf.data());
    if (fd < 0) return;
    const std::string xml = kDoctorFixtureXml;
    const bool ok = write(fd, xml.data(), xml.size()) == static_cast<ssize_t>(xml.size());
    close(fd);
    if (ok) path_ = buf.data();
    else unlink(buf.data());
  }
  ~FixtureFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "{0-3} {4-7}" from tparCommQuery's islands.
std::string islandText(const tparCommInfo_t& info) {
  std::string s;
  for (int i = 0; i < info.islands; ++i) {
    int lo = -1, hi = -1;
    for (int r = 0; r < info.nranks; ++r) {
      if (info.islandOfRank[r] != i) continue;
      if (lo < 0) lo = r;
      hi = r;
    }
    s += (s.empty() ? "{" : " {") + std::to_string(lo) + (hi > lo ? "-" + std::to_string(hi) : "") + "}";
  }
  return s;
}

// One self-test: `be` forced to `name`, checked on `devs`. A forced algorithm that cannot run
// on the group is reported as the fallback it is, never as a pass of itself.
SelfTestResult selfTest(const std::string& name, Backend* be, const std::vector<int>& devs,
                        const std::string& where) {
  SelfTestResult t;
  t.backend = name;
  t.where = where;
  int checks = 0;
  const std::string err = selfTestOne(*be, devs, &checks);
  t.passed = err.empty();
  t.fallback = be->fallback();
  t.ran = t.fallback.empty() ? name.substr(name.find(':') + 1)
                             : t.fallback.substr(0, t.fallback.find(' '));
  t.detail = !t.passed ? err
                       : std::to_string(checks) + " all-reduces" +
                             (t.fallback.empty() ? "" : " of " + t.ran) +
                             " checked element by element";
  return t;
}

}  // namespace

std::vector<const void*> selfTestKernels() {
  return {(const void*)fillTest, (const void*)checkTest};
}

void runSelfTests(DoctorResults* r) {
  const std::vector<int>& devs = r->devices;
  for (const char* name : {"tpar:oneshot", "tpar:twoshot", "tpar:staged", "tpar:hier"}) {
    progress(std::string("self-test of ") + name);
    std::string why;
    std::unique_ptr<Backend> be = makeBackend(name, &why);
    if (be == nullptr) {
      r->self_tests.push_back({name, false, why});
      continue;
    }
    r->self_tests.push_back(selfTest(name, be.get(), devs, ""));
  }
  // The hierarchical kernel needs islands, which one GPU (or one switch) does not have: it also
  // runs on kFixtureRanks virtual ranks of the first GPU that take the islands of a two-socket
  // server from a topology fixture, so that it is checked on every machine.
  progress(std::string("self-test of tpar:hier on the topology fixture ") + kDoctorFixtureName);
  const std::vector<int> fixture_devs(kFixtureRanks, devs.empty() ? 0 : devs[0]);
  std::string where = std::to_string(kFixtureRanks) + " virtual ranks on GPU " +
                      std::to_string(fixture_devs[0]) + " with the islands of topology fixture " +
                      kDoctorFixtureName;
  FixtureFile file;
  if (file.path().empty()) {
    r->self_tests.push_back({"tpar:hier", false,
                             "cannot write the topology fixture to a temporary file", "", "", where});
    return;
  }
  std::unique_ptr<Backend> be =
      makeTparBackend(tparAlgoHierarchical, TPAR_CONFIG_UNDEF_INT, 0, file.path());
  SelfTestResult t = selfTest("tpar:hier", be.get(), fixture_devs, where);
  tparCommInfo_t info;
  if (be->info(&info)) t.where += ": islands " + islandText(info);
  if (t.passed && !t.fallback.empty()) {
    t.passed = false;
    t.detail = "the fixture gave this group no islands to run the hierarchical kernel on; " +
               t.detail;
  }
  r->self_tests.push_back(t);
}

void runTimings(const ProbePlan& plan, DoctorResults* r) {
  r->timing_iterations = plan.timing_iterations;
  const bool tested =
      !r->self_tests.empty() && std::all_of(r->self_tests.begin(), r->self_tests.end(),
                                            [](const SelfTestResult& t) { return t.passed; });
  r->timings = {TimingResult{kSmallMessageBytes}, TimingResult{kLargeMessageBytes}};
  std::string why;
  if (!tested) {
    for (TimingResult& t : r->timings) t.tpar_error = "not timed: the self-test failed";
  } else {
    progress("timing tpar");
    std::unique_ptr<Backend> be = makeBackend("tpar", &why);
    const std::string init = be->init(r->devices);
    for (TimingResult& t : r->timings) {
      t.tpar_algo = be->chosen(t.bytes);
      t.tpar_error = init.empty()
                         ? timeBackend(*be, r->devices, t.bytes, plan.timing_iterations, &t.tpar_us)
                         : "init: " + init;
      if (!t.tpar_error.empty()) t.tpar_us = 0;
    }
  }
  std::string nccl_skip;
  if (!r->nccl_requested)
    nccl_skip = "not measured (--no-nccl)";
  else if (usesVirtualRanks(r->devices))
    nccl_skip = "NCCL cannot run two ranks on one GPU";
  else if (r->nccl_version.empty())
    nccl_skip = "no NCCL: " + r->nccl_error;
  if (!nccl_skip.empty()) {
    for (TimingResult& t : r->timings) t.nccl_error = nccl_skip;
    return;
  }
  progress("timing NCCL");
  std::unique_ptr<Backend> nccl = makeBackend("nccl", &why);
  const std::string init = nccl ? nccl->init(r->devices) : why;
  for (TimingResult& t : r->timings) {
    t.nccl_error = init.empty()
                       ? timeBackend(*nccl, r->devices, t.bytes, plan.timing_iterations, &t.nccl_us)
                       : "init: " + init;
    if (!t.nccl_error.empty()) t.nccl_us = 0;
  }
}

}  // namespace tpar_cli
