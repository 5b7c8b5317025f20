// NCCL at run time: one loader for the library and the `tpar` command, and the route of
// all-reduce calls to an NCCL communicator the user attached (tparCommSetNcclComm).
//
// tpar never links NCCL at build time: it runs where there is none, and it must drive the very
// copy of NCCL that created the user's communicator (a serving engine's, often a Python
// wheel's). Calls through NCCL carry NCCL's stable C ABI, declared here with its values.
#ifndef TPAR_COMM_NCCL_ROUTE_H_
#define TPAR_COMM_NCCL_ROUTE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace tpar {

// The NCCL types and values used here (nccl.h; a unit test compares them where nccl.h exists).
using NcclComm = struct ncclComm*;
struct NcclUniqueId {
  char internal[128];
};
enum NcclDataType { kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclBfloat16 = 9 };
enum NcclRedOp { kNcclSum = 0, kNcclMax = 2, kNcclMin = 3 };
constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;  // a non-blocking communicator is still working

struct NcclLib {
  int (*getVersion)(int*) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  int (*getUniqueId)(NcclUniqueId*) = nullptr;
  int (*commInitAll)(NcclComm*, int, const int*) = nullptr;
  int (*commInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*commDestroy)(NcclComm) = nullptr;
  int (*commGetAsyncError)(NcclComm, int*) = nullptr;
  int (*commCount)(NcclComm, int*) = nullptr;
  int (*commUserRank)(NcclComm, int*) = nullptr;
  int (*commCuDevice)(NcclComm, int*) = nullptr;
  int (*allReduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
  int version = 0;   // e.g. 22809
  std::string path;  // the name or file that was loaded
};

// Loads NCCL once per process. TPAR_NCCL_LIBRARY, when set, is the only candidate. Otherwise
// libnccl.so.2 (which is the copy already loaded in the process, when there is one: the
// dynamic loader matches its soname), then libnccl.so, then the copies that CUDA and PyTorch
// installations carry. A candidate that is libtpar_nccl.so (the NCCL drop-in) is replaced by the
// real NCCL it forwards to (NOTE [shim recursion]). nullptr with `why` filled when none loads.
const NcclLib* loadNccl(std::string* why);

// "2.28.9" for 22809.
std::string ncclVersionString(int code);

// NCCL's values for tpar's datatypes and reduction ops.
int ncclDataTypeOf(tparDataType_t dtype);
int ncclRedOpOf(tparRedOp_t op);

// tparResult_t for an ncclResult_t: the codes 1..7 of both enums mean the same.
tparResult_t resultOfNccl(int nccl_result);

// A communicator's NCCL route: the attached communicator (not owned) and the calls routed to
// it (host calls, so a captured call counts once however often its graph replays).
struct NcclRoute {
  const NcclLib* lib = nullptr;
  NcclComm comm = nullptr;
  uint64_t calls = 0;
};

// tparCommSetNcclComm after the handle check: loads NCCL, checks that `nccl_comm` has the
// communicator's rank count, its rank and its CUDA device, and attaches it (nullptr detaches).
// On failure the previous attachment stays.
tparResult_t attachNcclComm(tparComm* comm, void* nccl_comm);

// One all-reduce through the attached NCCL communicator on `stream` (capturable). A plan that
// names NCCL on a communicator without one only comes from a forced algorithm (the tuner
// falls back otherwise): tparInvalidUsage.
tparResult_t ncclRouteAllReduce(tparComm* comm, const void* send, void* recv, size_t count,
                                tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream);

// True when the communicator's tuning table or forced algorithm names NCCL for some size, so
// that attaching an NCCL communicator would change what calls do.
bool wantsNccl(const tparComm* comm);

}  // namespace tpar

#endif  // TPAR_COMM_NCCL_ROUTE_H_
