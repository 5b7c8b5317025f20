// What the C API logs (docs/LOGGING.md): init, the transport and algorithm choices, destroy and
// abort, asynchronous errors (timeouts, mismatched calls) when the host first sees them, and
// every call at trace. Kept apart from tpar_api.cc, whose entry points only call these.
#ifndef TPAR_API_API_LOG_H_
#define TPAR_API_API_LOG_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "base/log.h"
#include "tpar/tpar.h"

namespace tpar {

// Before a communicator init. The first one of the process also logs the version (when
// TPAR_DEBUG asks for logs) and the TPAR_* variables that are set (info, ENV).
void logInitStart(const char* call, int rank, int nranks);
// After it: success (the comm's rank, GPU, how long init took, the topology, the transport and
// why, its algorithm table, a forced algorithm that cannot run and what runs instead) or the
// failure with the last error's text, as a warning.
void logInitDone(tparComm_t comm, double ms);
void logInitFailed(const char* call, tparResult_t result, int rank, int nranks);
// A communicator's asynchronous error, seen by the host (tparCommGetAsyncError or the next
// call): a warning naming what happened, once per communicator.
void logAsyncError(tparComm_t comm, uint32_t code);
// tparCommDestroy (info) and tparCommAbort (warning: the peers' waits give up).
void logCommEnd(tparComm_t comm, bool abort);
// "256 B-32 KiB oneshot, 64 KiB-64 MiB twoshot": the algorithm tparAllReduce runs for bfloat16
// messages of 256 B to 64 MiB on this communicator (the log, `tpar doctor`).
std::string algorithmTable(tparComm_t comm);
// One call, at trace (COLL). Inline: one load when tracing is off (traceEnabled).
void logAllReduceCall(tparComm_t comm, const void* send, void* recv, size_t count,
                      tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream);
inline void logAllReduce(tparComm_t comm, const void* send, void* recv, size_t count,
                         tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream) {
  if (traceEnabled(kLogColl)) logAllReduceCall(comm, send, recv, count, dtype, op, stream);
}

}  // namespace tpar

#endif  // TPAR_API_API_LOG_H_
