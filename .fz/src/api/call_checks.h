// The checks of tparAllReduce that need no GPU, apart from the entry point so that the host
// cost of a call can be timed in pieces (bench/experiments/host_cost_cpu.cc).
#ifndef TPAR_API_CALL_CHECKS_H_
#define TPAR_API_CALL_CHECKS_H_

#include <cstddef>
#include <cstring>

#include "tpar/tpar.h"

namespace tpar {

// The value a C caller passed for an enum argument, read as the int it is: in C++ a value
// outside the enumerators' range may not even be loaded as the enum type (UBSan: "not a valid
// value for type"), and a C caller can pass any int.
template <typename E>
inline int enumValue(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "C enums are ints");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// tparAllReduce's argument checks on a live communicator (tpar.h), in its order: datatype, op,
// an earlier asynchronous failure, then (count > 0 only) count, buffers, alignment, overlap.
// Sets the last error and returns its code; tparSuccess when the call may go on (count == 0:
// nothing to do).
tparResult_t checkAllReduceArgs(tparComm_t comm, const void* sendbuff, void* recvbuff,
                                size_t count, const tparDataType_t& datatype,
                                const tparRedOp_t& op);

}  // namespace tpar

#endif  // TPAR_API_CALL_CHECKS_H_
