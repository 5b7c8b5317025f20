// One rank of a multi-process test (one process per rank, all on GPU 0 except nccl-abort). Modes:
//
//   tpar_mp_worker check <id hex> <rank> <nranks> <seed> <result file>
//     Joins the group, runs several all-reduces, checks them against a reference it computes
//     from every rank's inputs (derived from the shared seed; in the hierarchical order where
//     the hierarchical algorithm ran), and writes a hash of each output and the algorithm that
//     ran so that the parent can compare the ranks bitwise and see what ran.
//
//   tpar_mp_worker survivor <id hex> <seed> <dir> <timeout ms>
//     Rank 0 of two groups. Group 1 runs the checked calls with a partner (`check` mode, rank 1)
//     so that every one-time cost of CUDA IPC and of the library is paid; once the parent says
//     the partner is gone (<dir>/phase1-peer-gone), it records what this process holds
//     (descriptors, threads, mappings, GPU memory) and says so (<dir>/baseline). Group 2 (its id
//     in <dir>/group2-id, made by the parent only then, so that no rendezvous waits through
//     group 1) runs all-reduces back to back with `victim` until the parent kills the victim: the
//     survivor must see tparTimeout within the timeout, destroy cleanly, and once the parent says
//     the victim is gone (<dir>/victim-dead) hold exactly what it held at the baseline. Writes
//     <dir>/survivor.result ("key value" lines) and exits 0 only when all of that held.
//
//   tpar_mp_worker victim <id hex> <dir> <timeout ms>
//     Rank 1 of group 2: all-reduces back to back; after three it writes its pid to
//     <dir>/victim-running and goes on until it is killed.
//
//   tpar_mp_worker init <id hex> <rank> <nranks> <seed> <result file>
//     Like `check`, but a failed init is an outcome, not a failure: writes "init <code>" and
//     "error <text>" to the result file, and exits 0 once it has (tests/multiprocess/
//     agreement_test.cc: ranks configured differently must all fail init, naming the setting).
//
//   tpar_mp_worker nccl-abort <id hex> <rank> <dir>
//     Rank <rank> of two, on GPU <rank>, with an NCCL communicator of its own (rank 0 makes the
//     NCCL id and writes it to <dir>/nccl-id) attached to a tpar communicator that routes every
//     call to NCCL (timeout 1 s). Rank 0 calls an all-reduce that rank 1 never joins, times
//     tparCommAbort while NCCL's kernel waits for the peer, ends the NCCL call with ncclCommAbort,
//     writes <dir>/release, waits for <dir>/released and checks that tpar freed its memory;
//     results in <dir>/rank0.result. Rank 1 waits for <dir>/release (rank 0 or the parent
//     writes it), aborts its communicators and writes <dir>/released.
//
// Environment: TPAR_TRANSPORT=host makes every group use the host transport, checked through
// tparCommQuery (otherwise two processes must use CUDA IPC). In `check` mode the timeout is
// TPAR_TIMEOUT_MS when set (runs under compute-sanitizer), else 120 s.
// TPAR_TEST_LEAKS_REPORT_ONLY=1 (set under compute-sanitizer): leaks are printed, not failed.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/hash.h"
#include "gpu/test_util.h"
#include "multiprocess/mp_worker.h"
#include "multiprocess/resource_check.h"

using namespace tpar_test;

namespace tpar_test {

int fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "mp_worker %d: %s: %s\n", static_cast<int>(getpid()), what, detail.c_str());
  return 1;
}

bool parseId(const std::string& hex, tparUniqueId* id) {
  return parseHex(hex, id->internal, sizeof(id->internal));
}

bool fileExists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

bool waitForFile(const std::string& path, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (!fileExists(path)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void writeFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace tpar_test

namespace {

using Clock = std::chrono::steady_clock;

bool hostTransportWanted() {
  const char* t = std::getenv("TPAR_TRANSPORT");
  return t != nullptr && std::string(t) == "host";
}

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

tparConfig_t workerConfig(int64_t timeout_ms) {
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.allowSharedDevice = 1;
  cfg.timeoutMs = timeout_ms;  // 0: TPAR_TIMEOUT_MS or the default
  return cfg;
}

// Creates rank `rank` of `nranks` and checks that it uses the transport this run asked for.
int joinGroup(const tparUniqueId& id, int rank, int nranks, const tparConfig_t& cfg,
              tparComm_t* comm) {
  if (tparCommInitRankConfig(comm, nranks, id, rank, &cfg) != tparSuccess) {
    return fail("tparCommInitRankConfig", tparGetLastError(nullptr));
  }
  tparCommInfo_t info;
  if (tparCommQuery(*comm, &info) != tparSuccess)
    return fail("tparCommQuery", tparGetLastError(*comm));
  const tparTransport_t want = hostTransportWanted() ? tparTransportHost : tparTransportCudaIpc;
  if (nranks > 1 && info.transport != want) {
    return fail("transport", std::string("got ") + tparTransportName(info.transport) +
                                 ", expected " + tparTransportName(want));
  }
  return 0;
}

// Several all-reduces, each checked against the reference computed from every rank's inputs;
// a hash of each output goes to `result` (may be null).
int runCheckedCalls(tparComm_t comm, int rank, int nranks, uint64_t seed, std::ostream* result) {
  const size_t counts[] = {1, 4099, 300001};
  tparCommInfo_t info;
  if (tparCommQuery(comm, &info) != tparSuccess) return fail("tparCommQuery", tparGetLastError(comm));
  for (tparDataType_t dt : {tparBfloat16, tparFloat32}) {
    for (size_t count : counts) {
      const size_t bytes = count * tpar::elementBytes(dt);
      std::vector<void*> in(nranks);
      void* out = nullptr;
      for (int r = 0; r < nranks; ++r) {
        cudaMalloc(&in[r], bytes);
        fillRandom(in[r], count, dt, seed * 31 + count * 7 + r, nullptr);
      }
      cudaMalloc(&out, bytes);
      poison(out, bytes, nullptr);
      cudaDeviceSynchronize();
      if (tparAllReduce(in[rank], out, count, dt, tparSum, comm, nullptr) != tparSuccess) {
        return fail("tparAllReduce", tparGetLastError(comm));
      }
      const cudaError_t err = cudaDeviceSynchronize();
      if (err != cudaSuccess) return fail("sync", cudaGetErrorString(err));
      tparResult_t async = tparSuccess;
      tparCommGetAsyncError(comm, &async);
      if (async != tparSuccess) return fail("async error", tparGetErrorString(async));
      // The hierarchical algorithm adds in island order (docs/ALGORITHMS.md): its reference too.
      tparAlgo_t algo = tparAlgoAuto;
      if (tparCommSelectAlgorithm(comm, bytes, &algo) != tparSuccess)
        return fail("tparCommSelectAlgorithm", tparGetLastError(comm));
      std::vector<int> island_of;
      if (algo == tparAlgoHierarchical)
        island_of.assign(info.islandOfRank, info.islandOfRank + nranks);
      CheckResult res;
      std::vector<const void*> ins(in.begin(), in.end());
      std::vector<const void*> outs(nranks, out);
      if (checkOutputs(ins, outs, count, dt, tparSum, &res, island_of) != cudaSuccess)
        return fail("check", "");
      if (res.wrong || res.off_ref) {
        std::fprintf(stderr, "mp_worker rank %d: count %zu: %llu wrong, %llu off reference\n", rank,
                     count, res.wrong, res.off_ref);
        return 1;
      }
      if (result != nullptr) {
        std::vector<char> host(bytes);
        cudaMemcpy(host.data(), out, bytes, cudaMemcpyDeviceToHost);
        *result << tparDataTypeName(dt) << " " << count << " " << std::hex
                << tpar::fnv1a(host.data(), host.size()) << std::dec << " " << tparAlgoName(algo)
                << "\n";
      }
      for (void* p : in) cudaFree(p);
      cudaFree(out);
    }
  }
  return 0;
}

// The arguments of `check` and `init`: <id hex> <rank> <nranks> <seed> <result file>.
struct RankArgs {
  tparUniqueId id;
  int rank = 0;
  int nranks = 0;
  uint64_t seed = 0;
  std::string result;
  int64_t timeout_ms = 0;
};

int parseRankArgs(int argc, char** argv, RankArgs* a) {
  if (argc != 7) {
    return fail("usage", std::string(argv[1]) + " <id hex> <rank> <nranks> <seed> <result file>");
  }
  if (!parseId(argv[2], &a->id)) return fail("id", "wrong length");
  a->rank = std::atoi(argv[3]);
  a->nranks = std::atoi(argv[4]);
  a->seed = std::strtoull(argv[5], nullptr, 10);
  a->result = argv[6];
  if (const cudaError_t err = cudaSetDevice(0); err != cudaSuccess) {
    return fail("cudaSetDevice", cudaGetErrorString(err));
  }
  // Contexts on one GPU are time-sliced: hand-offs take milliseconds.
  a->timeout_ms = std::getenv("TPAR_TIMEOUT_MS") != nullptr ? 0 : 120000;
  return 0;
}

int checkMode(int argc, char** argv) {
  RankArgs a;
  if (parseRankArgs(argc, argv, &a) != 0) return 1;
  const int rank = a.rank;
  tparComm_t comm = nullptr;
  if (joinGroup(a.id, rank, a.nranks, workerConfig(a.timeout_ms), &comm) != 0) return 1;
  std::ofstream result(a.result);
  if (runCheckedCalls(comm, rank, a.nranks, a.seed, &result) != 0) return 1;
  result.close();
  if (tparCommDestroy(comm) != tparSuccess) return fail("destroy", tparGetLastError(nullptr));
  std::printf("mp_worker rank %d: ok\n", rank);
  return 0;
}

int initMode(int argc, char** argv) {
  RankArgs a;
  if (parseRankArgs(argc, argv, &a) != 0) return 1;
  tparConfig_t cfg = workerConfig(a.timeout_ms);
  tparComm_t comm = nullptr;
  const tparResult_t res = tparCommInitRankConfig(&comm, a.nranks, a.id, a.rank, &cfg);
  std::ostringstream text;
  text << "init " << static_cast<int>(res) << "\nerror " << tparGetLastError(nullptr) << "\n";
  writeFileAtomically(a.result, text.str());
  if (res != tparSuccess) return 0;
  if (runCheckedCalls(comm, a.rank, a.nranks, a.seed, nullptr) != 0) return 1;
  if (tparCommDestroy(comm) != tparSuccess) return fail("destroy", tparGetLastError(nullptr));
  return 0;
}

// The call both ranks of group 2 repeat: 128 KiB of bfloat16, summed.
constexpr size_t kLoopCount = 65536;

struct LoopBuffers {
  void* in = nullptr;
  void* out = nullptr;
  cudaStream_t stream = nullptr;
  cudaError_t alloc(uint64_t seed) {
    cudaError_t err = cudaMalloc(&in, kLoopCount * 2);
    if (err == cudaSuccess) err = cudaMalloc(&out, kLoopCount * 2);
    if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err == cudaSuccess) err = fillRandom(in, kLoopCount, tparBfloat16, seed, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    return err;
  }
  void release() {
    cudaFree(in);
    cudaFree(out);
    if (stream != nullptr) cudaStreamDestroy(stream);
    in = out = nullptr;
    stream = nullptr;
  }
};

int victimMode(int argc, char** argv) {
  if (argc != 5) return fail("usage", "victim <id hex> <dir> <timeout ms>");
  tparUniqueId id;
  if (!parseId(argv[2], &id)) return fail("id", "wrong length");
  const std::string dir = argv[3];
  const int64_t timeout_ms = std::atoll(argv[4]);
  if (cudaSetDevice(0) != cudaSuccess) return fail("cudaSetDevice", "");
  tparComm_t comm = nullptr;
  if (joinGroup(id, 1, 2, workerConfig(timeout_ms), &comm) != 0) return 1;
  LoopBuffers b;
  if (b.alloc(2) != cudaSuccess) return fail("buffers", "");
  const auto deadline = Clock::now() + std::chrono::seconds(600);
  for (int i = 0; Clock::now() < deadline; ++i) {
    if (tparAllReduce(b.in, b.out, kLoopCount, tparBfloat16, tparSum, comm, b.stream) !=
        tparSuccess)
      return fail("tparAllReduce", tparGetLastError(comm));
    const cudaError_t err = cudaStreamSynchronize(b.stream);
    if (err != cudaSuccess) return fail("sync", cudaGetErrorString(err));
    tparResult_t async = tparSuccess;
    tparCommGetAsyncError(comm, &async);
    if (async != tparSuccess)
      return fail("async error before being killed", tparGetErrorString(async));
    if (i == 2) writeFileAtomically(dir + "/victim-running", std::to_string(getpid()) + "\n");
  }
  return fail("victim", "was not killed within 600 s");
}

int survivorMode(int argc, char** argv) {
  if (argc != 6) return fail("usage", "survivor <id hex> <seed> <dir> <timeout ms>");
  tparUniqueId id1, id2;
  if (!parseId(argv[2], &id1)) return fail("id", "wrong length");
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const std::string dir = argv[4];
  const int64_t timeout_ms = std::atoll(argv[5]);
  const tparConfig_t cfg = workerConfig(timeout_ms);
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
    return fail("CUDA context", "");

  // Every one-time cost first: a one-rank communicator (kernels, topology discovery, NVML),
  // then a real two-process group with the partner (CUDA IPC or host regions of a peer).
  {
    tparComm_t one = nullptr;
    const int dev = 0;
    if (tparCommInitAllConfig(&one, 1, &dev, &cfg) != tparSuccess)
      return fail("one-rank init", tparGetLastError(nullptr));
    if (runCheckedCalls(one, 0, 1, seed, nullptr) != 0) return 1;
    if (tparCommDestroy(one) != tparSuccess)
      return fail("one-rank destroy", tparGetLastError(nullptr));
    LoopBuffers warm;  // the stream and buffers group 2 uses, made and freed once before
    if (warm.alloc(3) != cudaSuccess) return fail("buffers", "");
    warm.release();
  }
  {
    tparComm_t comm = nullptr;
    if (joinGroup(id1, 0, 2, cfg, &comm) != 0) return 1;
    if (runCheckedCalls(comm, 0, 2, seed, nullptr) != 0) return 1;
    if (tparCommDestroy(comm) != tparSuccess)
      return fail("group 1 destroy", tparGetLastError(nullptr));
  }
  if (!waitForFile(dir + "/phase1-peer-gone", 300))
    return fail("parent", "never said the partner left");
  settledFreeDeviceMemory();
  const ResourceSnapshot before = takeSnapshot(/*with_device=*/true);
  writeFileAtomically(dir + "/baseline", describe(before) + "\n");
  if (!waitForFile(dir + "/group2-id", 300)) return fail("parent", "never gave the id of group 2");
  {
    std::ifstream f(dir + "/group2-id");
    std::string hex;
    f >> hex;
    if (!parseId(hex, &id2)) return fail("group2-id", "wrong length");
  }

  tparComm_t comm = nullptr;
  if (joinGroup(id2, 0, 2, cfg, &comm) != 0) return 1;
  LoopBuffers b;
  if (b.alloc(1) != cudaSuccess) return fail("buffers", "");
  tparResult_t error = tparSuccess;
  std::string cuda_error = "none";
  int calls = 0;
  int64_t call_start = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(600);
  for (;; ++calls) {
    if (Clock::now() > deadline)
      return fail("survivor", "no error within 600 s: the peer never died?");
    call_start = nowNs();
    const tparResult_t rc =
        tparAllReduce(b.in, b.out, kLoopCount, tparBfloat16, tparSum, comm, b.stream);
    if (rc != tparSuccess) {
      error = rc;
      break;
    }
    const cudaError_t err = cudaStreamSynchronize(b.stream);
    if (err != cudaSuccess) {
      cuda_error = cudaGetErrorString(err);
      break;
    }
    tparResult_t async = tparSuccess;
    tparCommGetAsyncError(comm, &async);
    if (async != tparSuccess) {
      error = async;
      break;
    }
  }
  const int64_t detect_ns = nowNs();
  // The next call reports the recorded error itself ("failed earlier").
  const tparResult_t next =
      tparAllReduce(b.in, b.out, kLoopCount, tparBfloat16, tparSum, comm, b.stream);
  const std::string next_text = tparGetLastError(comm);
  const auto destroy_start = Clock::now();
  const tparResult_t destroy_rc = tparCommDestroy(comm);
  const double destroy_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - destroy_start).count();
  b.release();

  // The victim's GPU memory (and, had this process kept a mapping of it, the memory behind that
  // mapping) goes back to the driver once the victim is gone.
  if (!waitForFile(dir + "/victim-dead", 300)) return fail("parent", "never said the victim died");
  ResourceSnapshot after = takeSnapshot(true);
  for (int i = 0; i < 100 && !leaksSince(before, after).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    after = takeSnapshot(true);
  }
  const std::string leaks = leaksSince(before, after);

  std::ostringstream r;
  r << "error " << static_cast<int>(error) << "\n"
    << "error_name " << tparGetErrorString(error) << "\n"
    << "calls_before_error " << calls << "\n"
    << "detect_ns " << detect_ns << "\n"
    << "wait_ms " << (detect_ns - call_start) / 1000000 << "\n"
    << "next_call " << static_cast<int>(next) << "\n"
    << "next_call_text " << next_text << "\n"
    << "destroy " << static_cast<int>(destroy_rc) << "\n"
    << "destroy_ms " << destroy_ms << "\n"
    << "cuda_error " << cuda_error << "\n"
    << "before " << describe(before) << "\n"
    << "after " << describe(after) << "\n"
    << "leaks " << (leaks.empty() ? "none" : leaks) << "\n";
  writeFileAtomically(dir + "/survivor.result", r.str());
  std::printf("%s", r.str().c_str());
  int bad = 0;
  if (cuda_error != "none") bad = fail("CUDA error after the peer died", cuda_error);
  if (error != tparTimeout) bad = fail("expected tparTimeout, got", tparGetErrorString(error));
  if (next != error) bad = fail("the next call did not report the error", next_text);
  if (destroy_rc != tparSuccess) bad = fail("destroy", tparGetLastError(nullptr));
  if (!leaks.empty()) {
    // Under compute-sanitizer the tool's own descriptors, threads and memory are in the picture.
    if (std::getenv("TPAR_TEST_LEAKS_REPORT_ONLY") == nullptr)
      bad = fail("leaked", leaks);
    else
      std::printf("(reported only, under a tool) leaked: %s\n", leaks.c_str());
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "check") return checkMode(argc, argv);
  if (mode == "init") return initMode(argc, argv);
  if (mode == "survivor") return survivorMode(argc, argv);
  if (mode == "victim") return victimMode(argc, argv);
  if (mode == "nccl-abort") return ncclAbortMode(argc, argv);
  return fail("usage", "tpar_mp_worker check|init|survivor|victim|nccl-abort ...");
}
