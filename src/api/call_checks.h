// The checks of tparAllReduce that need no GPU, apart from the entry point so that the host
// cost of a call can be timed in pieces (bench/experiments/host_cost_cpu.cc).
#ifndef TPAR_API_CALL_CHECKS_H_
#define TPAR_API_CALL_CHECKS_H_

#include <cstddef>

#include "tpar/tpar.h"

namespace tpar {

// tparAllReduce's argument checks on a live communicator (tpar.h), in its order: datatype, op,
// an earlier asynchronous failure, then (count > 0 only) count, buffers, alignment, overlap.
// Sets the last error and returns its code; tparSuccess when the call may go on (count == 0:
// nothing to do).
tparResult_t checkAllReduceArgs(tparComm_t comm, const void* sendbuff, void* recvbuff,
                                size_t count, tparDataType_t datatype, tparRedOp_t op);

}  // namespace tpar

#endif  // TPAR_API_CALL_CHECKS_H_
