// extern "C" entry points: argument checks, error mapping, last-error text. No exception
// crosses this boundary.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "api/api_guard.h"
#include "api/api_log.h"
#include "api/call_checks.h"
#include "api/init_internal.h"
#include "bootstrap/bootstrap.h"
#include "registry/algorithms.h"
#include "comm/comm.h"
#include "base/config.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"

using namespace tpar;

namespace {

// Records a failure on the communicator too, so tparGetLastError(comm) finds it.
tparResult_t finish(tparComm* comm, tparResult_t res) {
  if (res != tparSuccess && comm != nullptr) comm->last_error = lastError();
  return res;
}

tparResult_t checkComm(tparComm* comm) {
  if (comm == nullptr) return setError(tparInvalidArgument, "comm is NULL");
  if (!isLiveComm(comm)) {
    return setError(tparInvalidArgument,
                    "comm %p is not a live communicator (destroyed, or never created)",
                    static_cast<void*>(comm));
  }
  return tparSuccess;
}

bool overlaps(const void* a, const void* b, size_t bytes) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a);
  const uintptr_t y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

tparResult_t tpar::checkAllReduceArgs(tparComm* comm, const void* sendbuff, void* recvbuff,
                                      size_t count, const tparDataType_t& datatype,
                                      const tparRedOp_t& op) {
  if (enumValue(datatype) < 0 || enumValue(datatype) >= tparNumDataTypes) {
    return setError(tparInvalidArgument, "datatype %d is not a tparDataType_t",
                    enumValue(datatype));
  }
  if (enumValue(op) < 0 || enumValue(op) >= tparNumOps) {
    return setError(tparInvalidArgument, "op %d is not a tparRedOp_t", enumValue(op));
  }
  const uint32_t async = reinterpret_cast<volatile uint32_t*>(&comm->host_state->error)[0];
  if (async != 0) {
    logAsyncError(comm, async);
    return setError(static_cast<tparResult_t>(async),
                    "the communicator failed earlier (%s); destroy or abort it",
                    tparGetErrorString(static_cast<tparResult_t>(async)));
  }
  if (count == 0) return tparSuccess;
  const size_t esize = elementBytes(datatype);
  if (count > SIZE_MAX / esize) {
    return setError(tparInvalidArgument, "count %zu overflows the byte size", count);
  }
  if (sendbuff == nullptr) return setError(tparInvalidArgument, "sendbuff is NULL");
  if (recvbuff == nullptr) return setError(tparInvalidArgument, "recvbuff is NULL");
  if (reinterpret_cast<uintptr_t>(sendbuff) % esize != 0) {
    return setError(tparInvalidArgument, "sendbuff %p is not aligned to its %zu-byte elements",
                    sendbuff, esize);
  }
  if (reinterpret_cast<uintptr_t>(recvbuff) % esize != 0) {
    return setError(tparInvalidArgument, "recvbuff %p is not aligned to its %zu-byte elements",
                    recvbuff, esize);
  }
  const size_t bytes = count * esize;
  if (sendbuff != recvbuff && overlaps(sendbuff, recvbuff, bytes)) {
    return setError(tparInvalidArgument,
                    "sendbuff and recvbuff overlap without being equal (in place needs "
                    "sendbuff == recvbuff)");
  }
  return tparSuccess;
}

// The stream of a call: a valid stream of the communicator's GPU.
// NOTE [checked stream]
// The two queries of this check cost about a tenth of a microsecond per eager call
// (docs/PERFORMANCE.md, "Host cost of one call"), so the last stream that passed is
// remembered and passes again without them: a stream keeps its device for its whole life, and
// a destroyed stream is no valid argument anyway (CUDA's own calls do not promise to detect it
// either). The default streams are not remembered: which GPU they mean follows the caller's
// current device.
tparResult_t checkStream(tparComm* comm, cudaStream_t stream) {
  const bool named = stream != nullptr && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
  if (named && stream == comm->checked_stream) return tparSuccess;
  // cudaStreamGetDevice is not allowed while a stream captures (it would invalidate the
  // capture); the check runs on eager calls, and a graph inherits the stream it captured on.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(stream, &capture);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(tparInvalidArgument, "stream is not a valid CUDA stream (%s)",
                    cudaGetErrorString(err));
  }
  if (capture == cudaStreamCaptureStatusNone) {
    int stream_device = -1;
    err = cudaStreamGetDevice(stream, &stream_device);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return setError(tparInvalidArgument, "stream is not a valid CUDA stream (%s)",
                      cudaGetErrorString(err));
    }
    if (stream_device != comm->device) {
      return setError(tparInvalidArgument,
                      "stream belongs to GPU %d but the communicator to GPU %d", stream_device,
                      comm->device);
    }
    if (named) comm->checked_stream = stream;
  }
  return tparSuccess;
}

// tparAllReduceAddRmsNorm's checks (tpar.h), each naming the argument; tparSuccess when the
// call may go on.
tparResult_t checkAddRmsNormArgs(tparComm* comm, const void* input,
                                 const tparAddRmsNormArgs_t* args,
                                 const tparDataType_t& datatype) {
  if (args == nullptr) return setError(tparInvalidArgument, "args is NULL");
  if (args->size != sizeof(tparAddRmsNormArgs_t)) {
    return setError(tparInvalidArgument,
                    "args->size is %zu, not sizeof(tparAddRmsNormArgs_t) = %zu (initialize "
                    "args with TPAR_ADD_RMS_NORM_ARGS_INITIALIZER)",
                    args->size, sizeof(tparAddRmsNormArgs_t));
  }
  // The checks of a plain all-reduce of the same bytes: datatype, an earlier failure.
  const tparRedOp_t sum = tparSum;
  TPAR_TRY(checkAllReduceArgs(comm, input, args->out, 0, datatype, sum));
  if (args->tokens == 0) return tparSuccess;
  if (args->hidden == 0 || args->hidden % 8 != 0 || args->hidden > 16384) {
    return setError(tparInvalidArgument,
                    "args->hidden %zu is not a multiple of 8 in 8..16384", args->hidden);
  }
  if (!(args->eps >= 0.0f) || !std::isfinite(args->eps)) {
    return setError(tparInvalidArgument, "args->eps %g is not a finite value >= 0",
                    static_cast<double>(args->eps));
  }
  const size_t esize = elementBytes(datatype);
  if (args->tokens > SIZE_MAX / esize / args->hidden) {
    return setError(tparInvalidArgument, "args->tokens %zu x args->hidden %zu overflows",
                    args->tokens, args->hidden);
  }
  const size_t bytes = args->tokens * args->hidden * esize;
  const int quant = args->quant;
  if (quant < 0 || quant >= tparNumNormQuants) {
    return setError(tparInvalidArgument, "args->quant %d is not a tparNormQuant_t", quant);
  }
  const bool fp4 = quant == tparNormQuantNvfp4;
  if (quant != tparNormQuantNone) {
    if (datatype != tparFloat16 && datatype != tparBfloat16) {
      return setError(tparInvalidArgument,
                      "args->quant %d needs a float16 or bfloat16 datatype, not %s", quant,
                      tparDataTypeName(datatype));
    }
    if (fp4 && args->hidden % 16 != 0) {
      return setError(tparInvalidArgument,
                      "args->hidden %zu: NVFP4 output (args->quant) needs a multiple of 16",
                      args->hidden);
    }
  }
  const size_t blocks = args->hidden / 16;
  const size_t scale_bytes =
      quant == tparNormQuantFp8PerToken ? args->tokens * sizeof(float) : sizeof(float);
  // vLLM's swizzled layout: rows padded to 128, blocks to 4 (tpar.h).
  const size_t block_scale_bytes = (args->tokens + 127) / 128 * 128 * ((blocks + 3) / 4) * 4;
  struct Buf {
    const char* name;
    const void* p;
    size_t bytes;
    size_t align;
    bool required;
  };
  const bool quantized = quant != tparNormQuantNone;
  // r waits for its norm in residual_out, the residual or out: one of them must be there.
  if (quantized && args->out == nullptr && args->residual == nullptr &&
      args->residual_out == nullptr) {
    return setError(tparInvalidArgument,
                    "args->out is NULL: with a quantized output it may be NULL only when "
                    "args->residual or args->residual_out is given");
  }
  const Buf bufs[] = {
      {"input", input, bytes, esize, true},
      {"args->out", args->out, bytes, esize, !quantized},
      {"args->weight", args->weight, args->hidden * esize, esize, true},
      {"args->residual", args->residual, bytes, esize, false},
      {"args->residual_out", args->residual_out, bytes, esize, false},
      {"args->quant_out", quantized ? args->quant_out : nullptr,
       fp4 ? bytes / esize / 2 : bytes / esize, 1, quantized},
      {"args->scale", quantized ? args->scale : nullptr, scale_bytes, sizeof(float), quantized},
      {"args->block_scale", fp4 ? args->block_scale : nullptr, block_scale_bytes, 1, fp4}};
  constexpr size_t kInput = 0, kOut = 1, kResidual = 3, kResidualOut = 4;  // bufs[] order
  constexpr size_t kBufs = sizeof(bufs) / sizeof(bufs[0]);
  for (size_t i = 0; i < kBufs; ++i) {
    const Buf& b = bufs[i];
    if (b.p == nullptr) {
      if (!b.required) continue;
      return setError(tparInvalidArgument, "%s is NULL%s", b.name,
                      i == kOut ? " (it may be NULL only with a quantized output, args->quant)"
                                : "");
    }
    if (reinterpret_cast<uintptr_t>(b.p) % b.align != 0) {
      return setError(tparInvalidArgument, "%s %p is not aligned to its %zu-byte elements",
                      b.name, b.p, b.align);
    }
  }
  // Identical pointers that the kernel allows: every vector of the input, the residual and
  // residual_out is read by the thread that later writes its outputs, before it writes them.
  // Any other overlap would read values the call already replaced (or write the weight).
  auto same_allowed = [&](size_t i, size_t j) {
    if (i == kInput) return j == kOut || j == kResidual || j == kResidualOut;
    return i == kResidual && j == kResidualOut;
  };
  for (size_t i = 0; i < kBufs; ++i) {
    for (size_t j = i + 1; j < kBufs; ++j) {
      const Buf& a = bufs[i];
      const Buf& b = bufs[j];
      if (a.p == nullptr || b.p == nullptr) continue;
      const uintptr_t x = reinterpret_cast<uintptr_t>(a.p), y = reinterpret_cast<uintptr_t>(b.p);
      if (!(a.p == b.p && same_allowed(i, j)) && x < y + b.bytes && y < x + a.bytes) {
        return setError(tparInvalidArgument, "%s and %s overlap%s", a.name, b.name,
                        i == kInput && j <= kResidualOut
                            ? " (the input may only be the residual, residual_out or the output)"
                        : i == kResidual && j == kResidualOut
                            ? " (residual_out may only be the residual itself)"
                            : "");
      }
    }
  }
  return tparSuccess;
}

extern "C" {

const char* tparGetErrorString(tparResult_t result) {
  switch (result) {
    case tparSuccess: return "no error";
    case tparUnhandledCudaError: return "unhandled CUDA error";
    case tparSystemError: return "system error";
    case tparInternalError: return "internal error";
    case tparInvalidArgument: return "invalid argument";
    case tparInvalidUsage: return "invalid usage";
    case tparRemoteError: return "remote process or rank failed";
    case tparInProgress: return "operation in progress";
    case tparTimeout: return "timed out waiting for peers";
    default: return "unknown result code";
  }
}

const char* tparGetLastError(tparComm_t comm) {
  if (comm != nullptr && isLiveComm(comm)) return comm->last_error.c_str();
  return lastError().c_str();
}

tparResult_t tparGetVersion(int* version) {
  return guarded([&] {
    if (version == nullptr) return setError(tparInvalidArgument, "version is NULL");
    *version = TPAR_VERSION_CODE;
    return tparSuccess;
  });
}

tparResult_t tparGetUniqueId(tparUniqueId* uniqueId) {
  return guarded([&] {
    if (uniqueId == nullptr) return setError(tparInvalidArgument, "uniqueId is NULL");
    const Env* env = nullptr;
    TPAR_TRY(processEnv(&env));
    BootstrapPeers peers;
    peers.allow_other_users = env->bootstrap_allow_other_users;
    return createUniqueId(uniqueId, env->bootstrap_timeout_ms, peers);
  });
}

tparResult_t tparCommInitRank(tparComm_t* comm, int nranks, tparUniqueId uniqueId, int rank) {
  return initRankLogged("tparCommInitRank", comm, nranks, uniqueId, rank, nullptr);
}

tparResult_t tparCommInitRankConfig(tparComm_t* comm, int nranks, tparUniqueId uniqueId, int rank,
                                    const tparConfig_t* config) {
  return initRankLogged("tparCommInitRankConfig", comm, nranks, uniqueId, rank, config);
}

tparResult_t tparCommInitAll(tparComm_t* comms, int ndev, const int* devlist) {
  return initAllLogged("tparCommInitAll", comms, ndev, devlist, nullptr);
}

tparResult_t tparCommInitAllConfig(tparComm_t* comms, int ndev, const int* devlist,
                                   const tparConfig_t* config) {
  return initAllLogged("tparCommInitAllConfig", comms, ndev, devlist, config);
}

tparResult_t tparCommDestroy(tparComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return tparSuccess;
    TPAR_TRY(checkComm(comm));
    logCommEnd(comm, /*abort=*/false);
    unregisterComm(comm);
    destroyComm(comm);
    return tparSuccess;
  });
}

tparResult_t tparCommAbort(tparComm_t comm) {
  return guarded([&] {
    if (comm == nullptr) return tparSuccess;
    TPAR_TRY(checkComm(comm));
    logCommEnd(comm, /*abort=*/true);
    unregisterComm(comm);
    return abortComm(comm);  // NOTE [bounded abort]
  });
}

tparResult_t tparCommGetAsyncError(tparComm_t comm, tparResult_t* asyncError) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (asyncError == nullptr) return finish(comm, setError(tparInvalidArgument, "asyncError is NULL"));
    const uint32_t code = reinterpret_cast<volatile uint32_t*>(&comm->host_state->error)[0];
    logAsyncError(comm, code);
    *asyncError = static_cast<tparResult_t>(code);
    return tparSuccess;
  });
}

tparResult_t tparCommGetKernelCount(tparComm_t comm, uint64_t* kernels) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (kernels == nullptr) return finish(comm, setError(tparInvalidArgument, "kernels is NULL"));
    // Block 0's epoch: every block of every launch advances its copy by one at its end
    // (NOTE [epochs and parity]), starting from the configured epoch_start.
    int prev = -1;
    TPAR_CUDA_TRY(cudaGetDevice(&prev));
    TPAR_CUDA_TRY(cudaSetDevice(comm->device));
    cudaStream_t s = nullptr;
    uint32_t epoch = 0;
    cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (err == cudaSuccess)
      err = cudaMemcpyAsync(&epoch, comm->block_epochs, sizeof(epoch), cudaMemcpyDeviceToHost, s);
    if (err == cudaSuccess) err = cudaStreamSynchronize(s);
    if (s != nullptr) cudaStreamDestroy(s);
    cudaSetDevice(prev);
    if (err != cudaSuccess)
      return finish(comm, cudaFailure(err, "reading the kernel count", __FILE__, __LINE__));
    *kernels = static_cast<uint32_t>(epoch - comm->cfg.epoch_start);
    return tparSuccess;
  });
}

tparResult_t tparCommCount(tparComm_t comm, int* count) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (count == nullptr) return finish(comm, setError(tparInvalidArgument, "count is NULL"));
    *count = comm->nranks;
    return tparSuccess;
  });
}

tparResult_t tparCommUserRank(tparComm_t comm, int* rank) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (rank == nullptr) return finish(comm, setError(tparInvalidArgument, "rank is NULL"));
    *rank = comm->rank;
    return tparSuccess;
  });
}

tparResult_t tparCommCuDevice(tparComm_t comm, int* device) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (device == nullptr) return finish(comm, setError(tparInvalidArgument, "device is NULL"));
    *device = comm->device;
    return tparSuccess;
  });
}

tparResult_t tparAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           tparDataType_t datatype, tparRedOp_t op, tparComm_t comm,
                           cudaStream_t stream) {
  return guarded([&]() -> tparResult_t {
    TPAR_TRY(checkComm(comm));
    auto bad = [&](tparResult_t code) { return finish(comm, code); };
    const tparResult_t checked = checkAllReduceArgs(comm, sendbuff, recvbuff, count, datatype, op);
    if (checked != tparSuccess) return bad(checked);
    if (count == 0) return tparSuccess;
    const tparResult_t on_device = checkStream(comm, stream);
    if (on_device != tparSuccess) return bad(on_device);
    logAllReduce(comm, sendbuff, recvbuff, count, datatype, op, stream);
    return bad(allReduce(comm, sendbuff, recvbuff, count, datatype, op, stream));
  });
}

tparResult_t tparAllReduceAddRmsNorm(const void* input, const tparAddRmsNormArgs_t* args,
                                     tparDataType_t datatype, tparComm_t comm,
                                     cudaStream_t stream) {
  return guarded([&]() -> tparResult_t {
    TPAR_TRY(checkComm(comm));
    auto bad = [&](tparResult_t code) { return finish(comm, code); };
    const tparResult_t checked = checkAddRmsNormArgs(comm, input, args, datatype);
    if (checked != tparSuccess) return bad(checked);
    if (args->tokens == 0) return tparSuccess;
    const tparResult_t on_device = checkStream(comm, stream);
    if (on_device != tparSuccess) return bad(on_device);
    logAllReduce(comm, input, args->out, args->tokens * args->hidden, datatype, tparSum, stream);
    return bad(allReduceAddRmsNorm(comm, input, *args, datatype, stream));
  });
}

tparResult_t tparCommQuery(tparComm_t comm, tparCommInfo_t* info) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (info == nullptr) return finish(comm, setError(tparInvalidArgument, "info is NULL"));
    tparCommInfo_t out;
    std::memset(&out, 0, sizeof(out));
    out.rank = comm->rank;
    out.nranks = comm->nranks;
    out.cudaDevice = comm->device;
    out.transport = comm->transport;
    out.maxBytesPerCall = comm->cfg.max_bytes_per_call;
    out.deviceMemoryBytes = (comm->host_transport ? kernels::WorkspaceLayout::kDataOffset
                                                  : comm->layout.totalBytes()) +
                            kFusedScratchBytes;
    out.hostMemoryBytes = sizeof(kernels::HostState) + comm->host_region.bytes;
    out.timeoutMs = comm->cfg.timeout_ms;
    out.forcedAlgorithm = comm->cfg.forced_algo;
    // From the plan the calls follow (transport, tuning table, forced algorithm), never a
    // constant: a report repeating it says what runs.
    const uint64_t one_shot =
        oneShotLimit(tparBfloat16, comm->tuner_ctx, comm->has_tuning ? &comm->tuning : nullptr,
                     comm->cfg.forced_algo, comm->cfg.one_shot_max_bytes);
    out.oneShotMaxBytes = one_shot >= SIZE_MAX ? SIZE_MAX : static_cast<size_t>(one_shot);
    out.blocksPerRank = comm->max_blocks;
    out.threadsPerBlock = comm->threads;
    out.islands = static_cast<int>(comm->topology.islands.size());
    for (size_t i = 0; i < comm->topology.islands.size(); ++i)
      for (int r : comm->topology.islands[i]) out.islandOfRank[r] = static_cast<int>(i);
    std::snprintf(out.topologySignature, sizeof(out.topologySignature), "%s",
                  comm->topology.signature.c_str());
    out.tuningTableLoaded = comm->has_tuning ? 1 : 0;
    out.ncclAttached = comm->nccl.comm != nullptr ? 1 : 0;
    *info = out;
    return tparSuccess;
  });
}

tparResult_t tparCommSetNcclComm(tparComm_t comm, void* ncclComm) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    return finish(comm, attachNcclComm(comm, ncclComm));
  });
}

tparResult_t tparCommSelectAlgorithm(tparComm_t comm, size_t bytes, tparAlgo_t* algo) {
  return tparCommSelectAlgorithmForType(comm, bytes, tparBfloat16, algo);
}

tparResult_t tparCommSelectAlgorithmForType(tparComm_t comm, size_t bytes,
                                            tparDataType_t datatype, tparAlgo_t* algo) {
  return guarded([&] {
    TPAR_TRY(checkComm(comm));
    if (enumValue(datatype) < 0 || enumValue(datatype) >= tparNumDataTypes) {
      return finish(comm, setError(tparInvalidArgument, "datatype %d is not a tparDataType_t",
                                   enumValue(datatype)));
    }
    if (algo == nullptr) return finish(comm, setError(tparInvalidArgument, "algo is NULL"));
    const Plan plan = planFor(comm, bytes, datatype);
    *algo = plan.nccl ? tparAlgoNccl : publicAlgoOf(plan.algo);
    return tparSuccess;
  });
}

const char* tparAlgoName(tparAlgo_t algo) { return tpar::publicAlgoName(algo); }

const char* tparTransportName(tparTransport_t transport) {
  switch (transport) {
    case tparTransportSameDevice: return "same-device";
    case tparTransportPeerAccess: return "peer-access";
    case tparTransportCudaIpc: return "cuda-ipc";
    case tparTransportMixed: return "mixed";
    case tparTransportHost: return "host";
    default: return "unknown";
  }
}

const char* tparDataTypeName(tparDataType_t datatype) {
  switch (datatype) {
    case tparFloat32: return "float32";
    case tparFloat16: return "float16";
    case tparBfloat16: return "bfloat16";
    default: return "unknown";
  }
}

const char* tparRedOpName(tparRedOp_t op) {
  switch (op) {
    case tparSum: return "sum";
    case tparMax: return "max";
    case tparMin: return "min";
    default: return "unknown";
  }
}

}  // extern "C"
