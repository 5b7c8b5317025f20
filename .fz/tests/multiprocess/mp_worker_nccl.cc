// Mode `nccl-abort` of the multi-process worker (usage in tests/multiprocess/mp_worker.cc):
// tparCommAbort while an all-reduce that tpar routed to NCCL waits inside NCCL for a peer that
// never joins it (NOTE [bounded abort]). One process per rank is what lets NCCL's kernel wait on
// the GPU: one thread driving both ranks blocks in NCCL's enqueue instead.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "comm/comm.h"
#include "comm/nccl_route.h"
#include "gpu/test_util.h"
#include "multiprocess/mp_worker.h"

namespace tpar_test {
namespace {

using Clock = std::chrono::steady_clock;

using NcclAbort = int (*)(tpar::NcclComm);

// ncclCommAbort of the NCCL that tpar loaded (tpar's loader leaves it out: tpar never aborts
// the user's NCCL communicator).
NcclAbort ncclAbortOf(const tpar::NcclLib* lib) {
  void* h = dlopen(lib->path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  return h != nullptr ? reinterpret_cast<NcclAbort>(dlsym(h, "ncclCommAbort")) : nullptr;
}

// Waits for `stream` at most `timeout_s` (cudaErrorNotReady when it is still busy then).
cudaError_t syncWithin(cudaStream_t stream, int timeout_s) {
  const auto deadline = Clock::now() + std::chrono::seconds(timeout_s);
  cudaError_t err;
  while ((err = cudaStreamQuery(stream)) == cudaErrorNotReady && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return err;
}

// Where a worker is, on stdout at once: a worker the parent kills shows how far it got.
void progress(int rank, const char* what) {
  std::printf("nccl-abort rank %d: %s\n", rank, what);
  std::fflush(stdout);
}

// True once `p` is no longer memory CUDA knows (freed), within 15 s.
bool freedWithin15s(const void* p) {
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  for (;;) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) == cudaSuccess &&
        attr.type == cudaMemoryTypeUnregistered)
      return true;
    (void)cudaGetLastError();
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

constexpr size_t kNcclCount = 1 << 18;  // float32: 1 MiB
constexpr int64_t kNcclAbortTimeoutMs = 1000;

}  // namespace

int ncclAbortMode(int argc, char** argv) {
  if (argc != 5) return fail("usage", "nccl-abort <id hex> <rank> <dir>");
  tparUniqueId id;
  if (!parseId(argv[2], &id)) return fail("id", "wrong length");
  const int rank = std::atoi(argv[3]);
  const std::string dir = argv[4];
  if (cudaSetDevice(rank) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
    return fail("CUDA context on GPU", std::to_string(rank));
  std::string why;
  const tpar::NcclLib* lib = tpar::loadNccl(&why);
  if (lib == nullptr) return fail("NCCL", why);
  const NcclAbort ncclAbort = ncclAbortOf(lib);
  if (ncclAbort == nullptr) return fail("ncclCommAbort not found in", lib->path);
  tpar::NcclUniqueId nccl_id;
  if (rank == 0) {
    if (lib->getUniqueId(&nccl_id) != tpar::kNcclSuccess) return fail("ncclGetUniqueId", "");
    writeFileAtomically(dir + "/nccl-id", bytesHex(&nccl_id, sizeof(nccl_id)) + "\n");
  } else {
    if (!waitForFile(dir + "/nccl-id", 120)) return fail("rank 0", "gave no NCCL id in 120 s");
    std::ifstream f(dir + "/nccl-id");
    std::string hex;
    f >> hex;
    if (!parseHex(hex, &nccl_id, sizeof(nccl_id))) return fail("nccl-id", "not 128 bytes");
  }
  tpar::NcclComm nccl = nullptr;
  if (const int rc = lib->commInitRank(&nccl, 2, nccl_id, rank); rc != tpar::kNcclSuccess)
    return fail("ncclCommInitRank", lib->getErrorString(rc));
  Buffers b;
  cudaStream_t stream;
  if (b.alloc(1, kNcclCount * 4) != cudaSuccess ||
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      fillRandom(b.in[0], kNcclCount, tparFloat32, freshSeed(), stream) != cudaSuccess)
    return fail("buffers", "");
  // One call of both ranks first: NCCL connects a communicator's peers inside its first call,
  // on the host, waiting for the peer. The call under test must find them connected, so that
  // only its kernel waits.
  if (lib->allReduce(b.in[0], b.out[0], kNcclCount, tpar::kNcclFloat32, tpar::kNcclSum, nccl,
                     stream) != tpar::kNcclSuccess ||
      syncWithin(stream, 60) != cudaSuccess)
    return fail("the first NCCL all-reduce of both ranks", "failed or took over 60 s");
  const size_t baseline = freeBytes(rank);

  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.timeoutMs = kNcclAbortTimeoutMs;
  cfg.algorithm = tparAlgoNccl;
  tparComm_t comm = nullptr;
  if (tparCommInitRankConfig(&comm, 2, id, rank, &cfg) != tparSuccess)
    return fail("tparCommInitRankConfig", tparGetLastError(nullptr));
  if (tparCommSetNcclComm(comm, nccl) != tparSuccess)
    return fail("tparCommSetNcclComm", tparGetLastError(comm));
  tparAlgo_t algo = tparAlgoAuto;
  if (tparCommSelectAlgorithm(comm, kNcclCount * 4, &algo) != tparSuccess || algo != tparAlgoNccl)
    return fail("the call is not routed to NCCL", tparAlgoName(algo));

  if (rank == 1) {
    progress(1, "attached; never calls, waits for <dir>/release");
    const bool released = waitForFile(dir + "/release", 120);
    const tparResult_t abort_rc = tparCommAbort(comm);  // nothing of it runs: at once
    const std::string abort_text = tparGetLastError(nullptr);
    const int nccl_rc = ncclAbort(nccl);
    writeFileAtomically(dir + "/released", "\n");
    if (!released) return fail("release", "never came within 120 s");
    if (abort_rc != tparSuccess) return fail("tparCommAbort", abort_text);
    if (nccl_rc != tpar::kNcclSuccess) return fail("ncclCommAbort", lib->getErrorString(nccl_rc));
    progress(1, "ok");
    return 0;
  }

  // What tpar must free, freed by a thread of its own once the GPU is idle (NOTE [bounded
  // abort]). Looked at directly: ncclCommAbort frees NCCL's buffers (allocated before the
  // baseline) in the same moments, which would hide these in the GPU's free memory.
  const void* workspace = comm->workspace;
  const void* host_state = comm->host_state;
  progress(0, "calls tparAllReduce, which rank 1 never joins");
  if (tparAllReduce(b.in[0], b.out[0], kNcclCount, tparFloat32, tparSum, comm, stream) !=
      tparSuccess)
    return fail("tparAllReduce", tparGetLastError(comm));
  progress(0, "tparAllReduce returned");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const bool busy = cudaStreamQuery(stream) == cudaErrorNotReady;
  const auto t0 = Clock::now();
  const tparResult_t abort_rc = tparCommAbort(comm);
  const double abort_s = secondsSince(t0);
  const std::string abort_text = tparGetLastError(nullptr);
  progress(0, "tparCommAbort returned; ncclCommAbort");
  const auto t1 = Clock::now();
  const int nccl_rc = ncclAbort(nccl);  // what tpar cannot do: end the NCCL call
  const double nccl_abort_s = secondsSince(t1);
  const cudaError_t after = syncWithin(stream, 30);
  (void)cudaGetLastError();
  writeFileAtomically(dir + "/release", "\n");
  const bool peer_released = waitForFile(dir + "/released", 120);
  const bool workspace_freed = freedWithin15s(workspace);
  const bool host_state_freed = freedWithin15s(host_state);
  const bool memory_back = memoryReturns(0, baseline);

  std::ostringstream r;
  r << "stream_busy " << busy << "\n"
    << "abort " << static_cast<int>(abort_rc) << "\n"
    << "abort_name " << tparGetErrorString(abort_rc) << "\n"
    << "abort_text " << abort_text << "\n"
    << "abort_s " << abort_s << "\n"
    << "timeout_s " << kNcclAbortTimeoutMs / 1000.0 << "\n"
    << "nccl_abort " << nccl_rc << "\n"
    << "nccl_abort_s " << nccl_abort_s << "\n"
    << "stream_after "
    << (after == cudaErrorNotReady ? "still busy after 30 s" : cudaGetErrorName(after)) << "\n"
    << "peer_released " << peer_released << "\n"
    << "workspace_freed " << workspace_freed << "\n"
    << "host_state_freed " << host_state_freed << "\n"
    << "memory_back " << memory_back << "\n";
  writeFileAtomically(dir + "/rank0.result", r.str());
  std::printf("%s", r.str().c_str());
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace tpar_test
