// Where one ncclAllReduce goes: tpar or the real NCCL. A pure function of the call and of
// settings, so that the tests can pin every rule down without a GPU.
#ifndef TPAR_NCCL_SHIM_ROUTE_H_
#define TPAR_NCCL_SHIM_ROUTE_H_

#include <cstddef>
#include <cstdint>

#include "api/internal.h"
#include "tpar/tpar.h"

namespace tpar {
namespace shim {

// The outcome of one call; every value but kTpar names why NCCL got it. The values are those of
// tparShimRoute_t (tpar_nccl_shim.h), in the order the rules are checked.
enum class Route : int {
  kTpar = 0,
  kDisabled = 1,     // TPAR_SHIM_DISABLE=1
  kInGroup = 2,      // between ncclGroupStart and ncclGroupEnd
  kNoTparComm = 3,   // the communicator has no tpar communicator (multi-node, non-blocking, ...)
  kDatatype = 4,     // not float16, bfloat16 or float32
  kOp = 5,           // not sum, max or min (prod, avg, pre-multiplied sums)
  kEmpty = 6,        // count 0: NCCL's own no-op
  kTooLarge = 7,     // above TPAR_SHIM_MAX_BYTES
  kTunedNccl = 8,    // tpar's plan for the size is NCCL (a tuning table, or TPAR_ALGO=nccl)
  kCount = 9
};

// "tpar", "disabled", "in-group", "no-tpar-comm", "datatype", "op", "empty", "too-large",
// "tuned-nccl"; "unknown" out of range.
const char* routeName(Route route);

struct RoutePolicy {
  bool disabled = false;
  uint64_t max_bytes = 8ull << 20;
};

struct AllReduceCall {
  int nccl_datatype = 0;  // ncclDataType_t
  int nccl_op = 0;        // ncclRedOp_t
  size_t count = 0;
  bool in_group = false;  // this thread is inside ncclGroupStart/End
  bool has_tpar = false;  // the communicator has a tpar communicator
};

// tpar's datatype and op for NCCL's values, by name (the enums differ: never cast). False for
// what tpar does not run: integer types, float64, fp8, prod, avg, and the ops that
// ncclRedOpCreatePreMulSum makes (values from ncclNumOps on).
bool tparDataTypeOfNccl(int nccl_datatype, tparDataType_t* out);
bool tparRedOpOfNccl(int nccl_op, tparRedOp_t* out);

// NOTE [shim routing]
// Every rank must send a call to the same place: a rank that runs tpar's kernel while another
// enters NCCL leaves both waiting (the tpar rank times out). So the route is a function of
// values that NCCL already requires to be identical on every rank of a call (count, datatype,
// op), of per-communicator state that every rank agreed on at creation (has_tpar: NOTE
// [shim setup]), of the program's structure (group depth), of settings every rank must share
// (TPAR_SHIM_*, the tuning table), and never of pointers, timing or load.
//
// `plan_says_nccl(bytes, dtype)` is tpar's plan for the size (tparCommSelectAlgorithmForType's
// answer for the call's datatype); it is asked last, only for calls tpar could take.
template <typename PlanSaysNccl>
Route decideRoute(const RoutePolicy& policy, const AllReduceCall& call,
                  PlanSaysNccl plan_says_nccl) {
  if (policy.disabled) return Route::kDisabled;
  if (call.in_group) return Route::kInGroup;
  if (!call.has_tpar) return Route::kNoTparComm;
  tparDataType_t dtype;
  if (!tparDataTypeOfNccl(call.nccl_datatype, &dtype)) return Route::kDatatype;
  tparRedOp_t op;
  if (!tparRedOpOfNccl(call.nccl_op, &op)) return Route::kOp;
  if (call.count == 0) return Route::kEmpty;
  const size_t esize = elementBytes(dtype);
  if (call.count > policy.max_bytes / esize) return Route::kTooLarge;
  if (plan_says_nccl(static_cast<uint64_t>(call.count) * esize, dtype)) return Route::kTunedNccl;
  return Route::kTpar;
}

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_ROUTE_H_
