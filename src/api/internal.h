// What the `tpar` command (tools/) and the NCCL drop-in (nccl_shim/) may use of the library
// beyond the C API (include/tpar/tpar.h). They include this header and no other of src/
// (scripts/check-interface.py keeps it so), and link the static library (tpar_internal), since
// libtpar.so exports the C API only. What a user of the C API would want too belongs there
// instead (tparCommSelectAlgorithmForType: the shim's routing question).
//
// Re-exported whole, because the tools work with their types and values themselves:
//   base/env.h           the environment registry and its parsers (`tpar env`, option values),
//                        Env; with it base/log.h, the log (TPAR_WARN, TPAR_INFO, logEnabled)
//   base/user_file.h     opening files whose path a user gives (NOTE [user files])
//   base/hash.h          FNV-1a, for names that must agree between processes
//   tuner/tuner.h        Plan, TunerContext, tuning tables and files (`tpar tune`); with it
//                        registry/algorithms.h, the algorithm rows and their byte models, and
//                        the kernel key and launch arguments that a Plan names (kernels/launch.h)
//   topology/topology.h  the machine's topology (`tpar doctor`)
//   comm/nccl_route.h    the NCCL loader and NCCL's ABI values (`tpar bench`, `tune`, the shim)
// Everything else of src/ (the communicator's struct, init, the C API's log, process identity,
// PCIe and NVML, the launcher, the thread's last error) is reached through the functions
// below, defined in internal.cc.
#ifndef TPAR_API_INTERNAL_H_
#define TPAR_API_INTERNAL_H_

#include <cstdint>
#include <string>

#include "base/env.h"
#include "base/hash.h"
#include "base/user_file.h"
#include "comm/nccl_route.h"
#include "topology/topology.h"
#include "tpar/tpar.h"
#include "tuner/tuner.h"

namespace tpar {

// ---- Communicators: handles of the C API, live ones only.

// tparCommInitAllConfig with the topology read from the hwloc XML file `topo_file` (its first
// ndev GPUs), as TPAR_TOPO_FILE gives it, without touching the environment, which is read once
// per process: `tpar doctor` checks the hierarchical kernel on a fixture with islands.
tparResult_t commInitAllWithTopology(tparComm_t* comms, int ndev, const int* devlist,
                                     const tparConfig_t* config, const std::string& topo_file);

// The tuner's view of the group: topology signature, link classes, ranks, transport.
const TunerContext& commTunerContext(tparComm_t comm);

// The plan the built-in defaults give a call of `bytes` bytes of `dtype` on this group (with
// its TPAR_ONESHOT_MAX_BYTES), ignoring a tuning table and a forced algorithm: the baseline
// that `tpar tune` measures first.
Plan commDefaultPlan(tparComm_t comm, uint64_t bytes, tparDataType_t dtype);

// The plan a call of `bytes` bytes of `dtype` runs on this group when `algo` is forced
// (TPAR_ALGO, tparConfig_t::forcedAlgorithm), in the shape the forced algorithm gets here:
// what a user who forces it by hand measures, and so a candidate `tpar tune` measures too.
Plan commForcedPlan(tparComm_t comm, uint64_t bytes, tparDataType_t dtype, tparAlgo_t algo);

// Makes every later call of `comm` take `plan`, as a one-entry tuning table: the path a saved
// table takes, so that a plan measured this way is what a table gives. Calls of `comm` must
// not run concurrently with it.
void commUsePlan(tparComm_t comm, const Plan& plan);

// Makes `comm`'s wire format carry every float16/bfloat16 call from `bytes` on (as
// TPAR_WIRE_MIN_BYTES would at init): how `tpar tune --wire` measures a format below its
// default threshold. Every rank of the group must set the same value, between calls.
void commSetWireMinBytes(tparComm_t comm, int64_t bytes);

// What runs instead of the algorithm forced on `comm` when that one cannot run on its group;
// why == nullptr when nothing falls back (tuner.h, forcedFallback).
Fallback commForcedFallback(tparComm_t comm);

// The wire variant ("pipelined+fp8") a plain all-reduce of `bytes` of `dtype` runs on `comm`,
// or null when that call is lossless (docs/WIRE.md: where a format applies).
const char* commWireVariant(tparComm_t comm, uint64_t bytes, tparDataType_t dtype);

// "256 B-32 KiB oneshot, 64 KiB-64 MiB twoshot": the algorithm per bfloat16 size, as the init
// log prints it.
std::string commAlgorithmTable(tparComm_t comm);

// ---- This process and this machine.

// Whether a communicator on CUDA device `device` launches with programmatic stream
// serialization under this process's settings (TPAR_LAUNCH_OVERLAP, compute capability 9.0 or
// newer: NOTE [launch overlap]), for tools that mimic its launches.
bool launchOverlapOnDevice(int device);

// This machine boot, as ranks tell hosts apart (NOTE [identity]). tparSystemError, with the
// reason as the last error, when the boot id cannot be read.
tparResult_t thisHostIdentity(uint64_t* out);

// Keeps this thread's last error (tparGetLastError(NULL)) as it was when the scope began, for
// code that calls the library only to ask something (a value's parse, a file's check) while
// its caller may still read the error of an earlier call.
class KeepLastError {
 public:
  KeepLastError();
  ~KeepLastError();
  KeepLastError(const KeepLastError&) = delete;
  KeepLastError& operator=(const KeepLastError&) = delete;

 private:
  std::string saved_;
};

// ---- PCI and NVML, for `tpar doctor`.

// A PCI bus id from CUDA's ("0000:1A:00.0"), NVML's or hwloc's form in the form tpar stores
// ("0000:1a:00.0"); "" when malformed.
std::string canonicalBusId(const std::string& bus_id);

// NVML as the library loads it (the loader its NVLink discovery uses), initialized once per
// process; GPUs by PCI bus id in any of the forms above. Where the driver's NVML is missing
// (containers that mount only the CUDA driver) or does not answer, each query says so and the
// caller carries on without it.
bool nvmlReady(std::string* why);  // loaded, and nvmlInit succeeded
struct NvmlPcieLink {
  int gen = 0, width = 0;          // now
  int gen_max = 0, width_max = 0;  // what the GPU and slot can do; 0: unknown
};
bool nvmlPcieLinkOf(const std::string& bus_id, NvmlPcieLink* out, std::string* why);
// nvmlGpuTopologyLevel_t of the two GPUs' common ancestor; -1 when unknown.
int nvmlCommonAncestorOf(const std::string& bus_a, const std::string& bus_b);
// Active NVLinks joining two GPUs, directly or, through NVSwitches, the narrower GPU's switch
// links; 0 when none or unknown.
int nvmlNvLinksBetween(const std::string& bus_a, const std::string& bus_b);
// nvmlGpuP2PStatus_t of peer writes from a to b (0: supported); -1 when NVML cannot say.
int nvmlP2pWriteStatus(const std::string& bus_a, const std::string& bus_b);

}  // namespace tpar

#endif  // TPAR_API_INTERNAL_H_
