// tpar._C: a thin binding of the C API (include/tpar/tpar.h). Tensors never cross this
// boundary: Python passes device pointers, element counts, enum values and the raw CUDA stream
// handle as integers, so the extension does not link PyTorch and works with any torch build of
// the same CUDA major version. Communicators are opaque integers (the tparComm_t value).
//
// Every function returns the tparResult_t of the call it wraps (with its outputs in a tuple);
// python/tpar/_errors.py turns a failure into tpar.TparError with tparGetLastError's text, read
// on the same thread right after the call.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "tpar/tpar.h"

namespace nb = nanobind;

namespace {

tparComm_t asComm(uintptr_t handle) { return reinterpret_cast<tparComm_t>(handle); }

// The fields of tparConfig_t that Python may set; -1 (or 0 for the sizes) keeps the default,
// exactly as TPAR_CONFIG_INITIALIZER leaves them.
struct ConfigArgs {
  uint64_t max_bytes_per_call = 0;
  int64_t timeout_ms = 0;
  int algorithm = TPAR_CONFIG_UNDEF_INT;
  int allow_shared_device = TPAR_CONFIG_UNDEF_INT;
  int transport = TPAR_CONFIG_UNDEF_INT;
  int wire = TPAR_CONFIG_UNDEF_INT;
};

tparConfig_t makeConfig(const ConfigArgs& a) {
  tparConfig_t cfg = TPAR_CONFIG_INITIALIZER;
  cfg.maxBytesPerCall = a.max_bytes_per_call;
  cfg.timeoutMs = a.timeout_ms;
  cfg.algorithm = a.algorithm;
  cfg.allowSharedDevice = a.allow_shared_device;
  cfg.transport = a.transport;
  cfg.wire = a.wire;
  return cfg;
}

// Makes `device` current for the duration of a call that uses the current device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) {
      (void)cudaGetLastError();
      prev_ = -1;
    }
    if (device >= 0 && device != prev_) {
      err_ = cudaSetDevice(device);
      if (err_ != cudaSuccess) (void)cudaGetLastError();
    }
  }
  ~DeviceGuard() {
    int now = -1;
    if (prev_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != prev_) cudaSetDevice(prev_);
  }
  cudaError_t error() const { return err_; }

 private:
  int prev_ = -1;
  cudaError_t err_ = cudaSuccess;
};

nb::dict queryDict(const tparCommInfo_t& info) {
  nb::dict d;
  d["rank"] = info.rank;
  d["nranks"] = info.nranks;
  d["cuda_device"] = info.cudaDevice;
  d["transport"] = std::string(tparTransportName(info.transport));
  d["max_bytes_per_call"] = info.maxBytesPerCall;
  d["device_memory_bytes"] = info.deviceMemoryBytes;
  d["host_memory_bytes"] = info.hostMemoryBytes;
  d["timeout_ms"] = info.timeoutMs;
  d["forced_algorithm"] = std::string(tparAlgoName(static_cast<tparAlgo_t>(info.forcedAlgorithm)));
  d["one_shot_max_bytes"] = info.oneShotMaxBytes;
  d["blocks_per_rank"] = info.blocksPerRank;
  d["threads_per_block"] = info.threadsPerBlock;
  d["islands"] = info.islands;
  nb::list island_of;
  for (int r = 0; r < info.nranks && r < TPAR_MAX_RANKS; ++r) island_of.append(info.islandOfRank[r]);
  d["island_of_rank"] = island_of;
  d["topology_signature"] = std::string(info.topologySignature);
  d["tuning_table_loaded"] = info.tuningTableLoaded != 0;
  d["nccl_attached"] = info.ncclAttached != 0;
  return d;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "Binding of tpar's C API (pointers and stream handles as integers).";
  m.attr("MAX_RANKS") = TPAR_MAX_RANKS;
  m.attr("UNIQUE_ID_BYTES") = TPAR_UNIQUE_ID_BYTES;
  m.attr("HEADER_VERSION") = TPAR_VERSION_CODE;

  m.def("get_version", [] {
    int v = 0;
    const tparResult_t rc = tparGetVersion(&v);
    return std::make_tuple(static_cast<int>(rc), v);
  });
  m.def("error_string", [](int rc) {
    return std::string(tparGetErrorString(static_cast<tparResult_t>(rc)));
  });
  m.def("last_error", [](uintptr_t comm) { return std::string(tparGetLastError(asComm(comm))); },
        nb::arg("comm") = 0);
  m.def("algo_name", [](int a) { return std::string(tparAlgoName(static_cast<tparAlgo_t>(a))); });

  m.def("get_unique_id", [] {
    tparUniqueId id;
    std::memset(&id, 0, sizeof(id));
    tparResult_t rc;
    {
      nb::gil_scoped_release release;
      rc = tparGetUniqueId(&id);
    }
    return std::make_tuple(static_cast<int>(rc), nb::bytes(id.internal, sizeof(id.internal)));
  });

  // Blocks until every rank has arrived (or the bootstrap timeout): the GIL is released.
  m.def(
      "comm_init_rank",
      [](int nranks, nb::bytes uid, int rank, int device, uint64_t max_bytes_per_call,
         int64_t timeout_ms, int algorithm, int allow_shared_device, int transport, int wire) {
        tparUniqueId id;
        std::memset(&id, 0, sizeof(id));
        if (uid.size() != sizeof(id.internal)) {
          return std::make_tuple(static_cast<int>(tparInvalidArgument), uintptr_t{0});
        }
        std::memcpy(id.internal, uid.c_str(), sizeof(id.internal));
        const tparConfig_t cfg =
            makeConfig({max_bytes_per_call, timeout_ms, algorithm, allow_shared_device, transport,
                        wire});
        tparComm_t comm = nullptr;
        tparResult_t rc;
        {
          nb::gil_scoped_release release;
          DeviceGuard guard(device);
          rc = guard.error() != cudaSuccess ? tparUnhandledCudaError
                                            : tparCommInitRankConfig(&comm, nranks, id, rank, &cfg);
        }
        return std::make_tuple(static_cast<int>(rc), reinterpret_cast<uintptr_t>(comm));
      },
      nb::arg("nranks"), nb::arg("unique_id"), nb::arg("rank"), nb::arg("device"),
      nb::arg("max_bytes_per_call") = 0, nb::arg("timeout_ms") = 0,
      nb::arg("algorithm") = TPAR_CONFIG_UNDEF_INT,
      nb::arg("allow_shared_device") = TPAR_CONFIG_UNDEF_INT,
      nb::arg("transport") = TPAR_CONFIG_UNDEF_INT, nb::arg("wire") = TPAR_CONFIG_UNDEF_INT);

  m.def(
      "comm_init_all",
      [](std::vector<int> devices, uint64_t max_bytes_per_call, int64_t timeout_ms, int algorithm,
         int allow_shared_device, int transport, int wire) {
        const tparConfig_t cfg =
            makeConfig({max_bytes_per_call, timeout_ms, algorithm, allow_shared_device, transport,
                        wire});
        std::vector<tparComm_t> comms(devices.size(), nullptr);
        tparResult_t rc;
        {
          nb::gil_scoped_release release;
          rc = tparCommInitAllConfig(comms.data(), static_cast<int>(devices.size()),
                                     devices.data(), &cfg);
        }
        std::vector<uintptr_t> out;
        if (rc == tparSuccess) {
          for (tparComm_t c : comms) out.push_back(reinterpret_cast<uintptr_t>(c));
        }
        return std::make_tuple(static_cast<int>(rc), out);
      },
      nb::arg("devices"), nb::arg("max_bytes_per_call") = 0, nb::arg("timeout_ms") = 0,
      nb::arg("algorithm") = TPAR_CONFIG_UNDEF_INT,
      nb::arg("allow_shared_device") = TPAR_CONFIG_UNDEF_INT,
      nb::arg("transport") = TPAR_CONFIG_UNDEF_INT, nb::arg("wire") = TPAR_CONFIG_UNDEF_INT);

  m.def("comm_destroy", [](uintptr_t comm) {
    nb::gil_scoped_release release;
    return static_cast<int>(tparCommDestroy(asComm(comm)));
  });
  m.def("comm_abort", [](uintptr_t comm) {
    nb::gil_scoped_release release;
    return static_cast<int>(tparCommAbort(asComm(comm)));
  });
  m.def("comm_get_async_error", [](uintptr_t comm) {
    tparResult_t err = tparSuccess;
    const tparResult_t rc = tparCommGetAsyncError(asComm(comm), &err);
    return std::make_tuple(static_cast<int>(rc), static_cast<int>(err));
  });
  m.def("comm_get_kernel_count", [](uintptr_t comm) {
    uint64_t kernels = 0;
    tparResult_t rc;
    {
      nb::gil_scoped_release release;  // waits for a 4-byte copy from the GPU
      rc = tparCommGetKernelCount(asComm(comm), &kernels);
    }
    return std::make_tuple(static_cast<int>(rc), kernels);
  });
  m.def("comm_query", [](uintptr_t comm) {
    tparCommInfo_t info;
    std::memset(&info, 0, sizeof(info));
    const tparResult_t rc = tparCommQuery(asComm(comm), &info);
    return std::make_tuple(static_cast<int>(rc), rc == tparSuccess ? queryDict(info) : nb::dict());
  });
  m.def("comm_set_nccl_comm", [](uintptr_t comm, uintptr_t nccl) {
    return static_cast<int>(tparCommSetNcclComm(asComm(comm), reinterpret_cast<void*>(nccl)));
  });
  m.def("comm_select_algorithm", [](uintptr_t comm, uint64_t bytes, int dtype) {
    tparAlgo_t algo = tparAlgoAuto;
    const tparResult_t rc = tparCommSelectAlgorithmForType(
        asComm(comm), bytes, static_cast<tparDataType_t>(dtype), &algo);
    return std::make_tuple(static_cast<int>(rc), std::string(tparAlgoName(algo)));
  });

  // The hot path: no GIL release (a launch takes a few microseconds; releasing and re-taking
  // the GIL would add to it), no allocation, integers in and one integer out.
  m.def("all_reduce", [](uintptr_t comm, uintptr_t send, uintptr_t recv, uint64_t count,
                         int dtype, int op, uintptr_t stream) {
    return static_cast<int>(tparAllReduce(reinterpret_cast<const void*>(send),
                                          reinterpret_cast<void*>(recv), count,
                                          static_cast<tparDataType_t>(dtype),
                                          static_cast<tparRedOp_t>(op), asComm(comm),
                                          reinterpret_cast<cudaStream_t>(stream)));
  });

  // The fused all-reduce + residual add + RMSNorm, as hot as all_reduce: pointers as integers
  // (0: none), the argument block filled here.
  m.def("all_reduce_add_rms_norm",
        [](uintptr_t comm, uintptr_t input, uintptr_t residual, uintptr_t weight, uintptr_t out,
           uintptr_t residual_out, uint64_t tokens, uint64_t hidden, float eps, int dtype,
           uintptr_t stream, int quant, uintptr_t quant_out, uintptr_t scale,
           uintptr_t block_scale) {
          tparAddRmsNormArgs_t args = TPAR_ADD_RMS_NORM_ARGS_INITIALIZER;
          args.tokens = tokens;
          args.hidden = hidden;
          args.residual = reinterpret_cast<void*>(residual);
          args.weight = reinterpret_cast<const void*>(weight);
          args.out = reinterpret_cast<void*>(out);
          args.eps = eps;
          args.residual_out = reinterpret_cast<void*>(residual_out);
          args.quant = quant;
          args.quant_out = reinterpret_cast<void*>(quant_out);
          args.scale = reinterpret_cast<float*>(scale);
          args.block_scale = reinterpret_cast<void*>(block_scale);
          return static_cast<int>(tparAllReduceAddRmsNorm(
              reinterpret_cast<const void*>(input), &args, static_cast<tparDataType_t>(dtype),
              asComm(comm), reinterpret_cast<cudaStream_t>(stream)));
        },
        nb::arg("comm"), nb::arg("input"), nb::arg("residual"), nb::arg("weight"), nb::arg("out"),
        nb::arg("residual_out"), nb::arg("tokens"), nb::arg("hidden"), nb::arg("eps"),
        nb::arg("dtype"), nb::arg("stream"), nb::arg("quant") = 0, nb::arg("quant_out") = 0,
        nb::arg("scale") = 0, nb::arg("block_scale") = 0);

  // Host cost of the C call on its own, for the Python-overhead measurement: `calls` calls of
  // tparAllReduce back to back from C++, timed with a steady clock. Returns (result of the last
  // call, nanoseconds in all).
  m.def("time_c_calls", [](uintptr_t comm, uintptr_t send, uintptr_t recv, uint64_t count,
                           int dtype, int op, uintptr_t stream, int calls) {
    tparResult_t rc = tparSuccess;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls && rc == tparSuccess; ++i) {
      rc = tparAllReduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count,
                         static_cast<tparDataType_t>(dtype), static_cast<tparRedOp_t>(op),
                         asComm(comm), reinterpret_cast<cudaStream_t>(stream));
    }
    const auto t1 = std::chrono::steady_clock::now();
    return std::make_tuple(
        static_cast<int>(rc),
        static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
  });

  m.def("cuda_device_count", [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return std::make_tuple(0, std::string(cudaGetErrorString(err)));
    }
    return std::make_tuple(n, std::string());
  });
}
