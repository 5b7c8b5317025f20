// What the tpar command and the tests may ask of a communicator beyond the C API, without its
// struct: the struct (comm/comm.h) stays the library's own, and a field it renames or moves
// changes this file's functions, not every caller.
#ifndef TPAR_COMM_COMM_ACCESS_H_
#define TPAR_COMM_COMM_ACCESS_H_

#include <cstdint>

#include "tpar/tpar.h"
#include "tuner/tuner.h"

namespace tpar {

// The tuner's view of the group: topology signature, link classes, ranks, transport.
const TunerContext& tunerContextOf(const tparComm* comm);

// TPAR_ONESHOT_MAX_BYTES as resolved for this communicator; -1: the built-in default.
int64_t oneShotMaxBytesOf(const tparComm* comm);

// Makes every later call of `comm` take `plan`, as a one-entry tuning table: the path a saved
// table takes (selectPlan), so a plan measured this way is exactly what a table gives. Calls
// of `comm` must not run concurrently with it.
void usePlan(tparComm* comm, const Plan& plan);
// The smallest call its wire format carries from now on (TPAR_WIRE_MIN_BYTES's value).
void setWireMinBytes(tparComm* comm, int64_t bytes);

// What runs instead of the algorithm forced on this communicator, when that one cannot run on
// its group (tuner.h); why == nullptr when nothing falls back.
Fallback forcedFallback(const tparComm* comm);

// The name of the wire variant ("pipelined+fp8") a plain all-reduce of `bytes` of `dtype`
// runs on this communicator, or null when the call is lossless (no format set, below the
// size where the format applies, another datatype, or routed to NCCL).
const char* wireVariantName(const tparComm* comm, uint64_t bytes, tparDataType_t dtype);

}  // namespace tpar

#endif  // TPAR_COMM_COMM_ACCESS_H_
