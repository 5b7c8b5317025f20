// All-reduce implementations the CLI can measure side by side, each driven for every rank of
// the process from one thread (like nccl-tests -g N).
#ifndef TPAR_TOOLS_BACKEND_H_
#define TPAR_TOOLS_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace tpar_cli {

class Backend {
 public:
  virtual ~Backend() = default;
  // As given to --backends: "tpar", "tpar:oneshot", "tpar:twoshot", "nccl".
  virtual std::string name() const = 0;
  // Creates one rank per entry of `devs` (a device may repeat only where the backend allows
  // virtual ranks). Returns "" or why it cannot run here.
  virtual std::string init(const std::vector<int>& devs) = 0;
  // Enqueues one all-reduce on every rank: rank r on streams[r]. May be captured.
  virtual std::string allReduce(const std::vector<const void*>& send,
                                const std::vector<void*>& recv, size_t count,
                                tparDataType_t dtype, tparRedOp_t op,
                                const std::vector<cudaStream_t>& streams) = 0;
  // Enqueues one fused all-reduce + residual add + RMSNorm on every rank (rank r: input[r],
  // args[r], streams[r]); "" or why not (backends without a fused call say so).
  virtual std::string allReduceAddRmsNorm(const std::vector<const void*>& input,
                                          const std::vector<tparAddRmsNormArgs_t>& args,
                                          tparDataType_t dtype,
                                          const std::vector<cudaStream_t>& streams) {
    return name() + " has no fused all-reduce + RMSNorm";
  }
  // Registers each rank's buffers (bufs[r] of `bytes`) with the backend until it is destroyed
  // (nccl-tests' -R 1). tpar needs no registration: "" without doing anything.
  virtual std::string registerBuffers(const std::vector<std::vector<void*>>& bufs, size_t bytes) {
    return "";
  }
  // One rank of `nranks`, each in its own process, joined through `id_hex` (a unique id from
  // newUniqueId for this backend), on GPU `dev`.
  virtual std::string initRank(int nranks, int rank, const std::string& id_hex, int dev) = 0;
  // "" when no rank recorded an asynchronous error.
  virtual std::string asyncError() = 0;
  // The algorithm this backend picks for `bytes` ("" when it does not say).
  virtual std::string chosen(size_t bytes) { return ""; }
  // Where its receive regions live, as tparTransportName says ("" when it does not say).
  virtual std::string transport() { return ""; }
  // When its forced algorithm cannot run on this group: what runs instead and why, as
  // "twoshot (one island)"; "" when it runs (or none is forced).
  virtual std::string fallback() { return ""; }
  // The wire variant ("pipelined+fp8", docs/WIRE.md) a call of `bytes` of `dtype` runs, ""
  // when it is lossless (every backend but tpar with a format).
  virtual std::string wireVariant(size_t bytes, tparDataType_t dtype) { return ""; }
  // tparCommQuery of its first rank; false when it has none (not tpar, not initialized).
  virtual bool info(tparCommInfo_t* out) { return false; }
};

// tparAlgoAuto for "tpar"; a forced algorithm otherwise. `transport` is
// tparConfig_t::transport (0 auto, 1 host memory, 2 GPU memory; -1: TPAR_TRANSPORT);
// `timeout_ms` its timeoutMs (0: TPAR_TIMEOUT_MS); `topo_file` an hwloc XML file whose first
// GPUs the ranks take as their topology, as TPAR_TOPO_FILE does ("": the machine's); `wire`
// its tparConfig_t::wire (-1: TPAR_WIRE; set, the name carries it: "tpar+fp8").
std::unique_ptr<Backend> makeTparBackend(tparAlgo_t algo, int transport = TPAR_CONFIG_UNDEF_INT,
                                         int64_t timeout_ms = 0, const std::string& topo_file = "",
                                         int wire = TPAR_CONFIG_UNDEF_INT);
// nullptr with `why` filled when NCCL cannot be loaded.
std::unique_ptr<Backend> makeNcclBackend(std::string* why);

// A fresh unique id for `backend` ("tpar..." or "nccl"), hex-encoded. Its rendezvous service
// lives in this process until the ranks have joined.
std::string newUniqueId(const std::string& backend, std::string* id_hex);
// Decodes such an id into `n` bytes; false unless `hex` is exactly 2n lowercase hex digits.
bool fromHex(const std::string& hex, char* bytes, size_t n);

// The backends makeBackend knows, in order: "tpar", "tpar:<algorithm>" for every algorithm a
// caller can force (tparAlgoName), "nccl"; and the same as one comma-separated string.
const std::vector<std::string>& backendNames();
std::string backendNameList();

// A tpar backend's name with a wire format after '+' ("tpar+fp8", "tpar:pipelined+int4"):
// the name before it in `base` and the format (tpar::wireFromName) in `wire`. False when `name`
// has no '+', or what follows it is no format.
bool splitWireSuffix(const std::string& name, std::string* base, int* wire);

// Parses one --backends entry; nullptr with `why` for unknown names. A tpar backend may carry a
// wire format after '+' ("tpar+int8"), which its communicators take as tparConfig_t::wire. NCCL variants that need
// their own environment ("nccl:p2p-sys", "nccl:shm") are parsed by the caller. tpar backends
// get `tpar_transport` as their tparConfig_t::transport.
std::unique_ptr<Backend> makeBackend(const std::string& name, std::string* why,
                                     int tpar_transport = TPAR_CONFIG_UNDEF_INT,
                                     int64_t tpar_timeout_ms = 0);

}  // namespace tpar_cli

#endif  // TPAR_TOOLS_BACKEND_H_
