#include "comm/nccl_route.h"

#include <dlfcn.h>
#include <glob.h>

#include <mutex>
#include <vector>

#include "comm/comm.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "base/user_file.h"

namespace tpar {
namespace {

std::vector<std::string> candidates(const std::string& configured) {
  // A library the user named is the one: falling back to another copy could drive their
  // communicator with a library that did not create it.
  if (!configured.empty()) return {configured};
  std::vector<std::string> out = {"libnccl.so.2", "libnccl.so"};
  const char* patterns[] = {
      "/usr/local/cuda/lib64/libnccl.so*",
      "/usr/lib/x86_64-linux-gnu/libnccl.so*",
      "/usr/lib/aarch64-linux-gnu/libnccl.so*",
      "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so*",
      "/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so*",
      "/opt/*/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so*",
      "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so*",
  };
  for (const char* p : patterns) {
    glob_t g;
    if (glob(p, 0, nullptr, &g) == 0) {
      for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
  }
  return out;
}

template <typename F>
bool bind(void* h, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(h, name));
  return *fn != nullptr;
}

bool bindAll(void* h, NcclLib* lib) {
  return bind(h, "ncclGetVersion", &lib->getVersion) &&
         bind(h, "ncclGetErrorString", &lib->getErrorString) &&
         bind(h, "ncclGetUniqueId", &lib->getUniqueId) &&
         bind(h, "ncclCommInitAll", &lib->commInitAll) &&
         bind(h, "ncclCommInitRank", &lib->commInitRank) &&
         bind(h, "ncclCommDestroy", &lib->commDestroy) &&
         bind(h, "ncclCommGetAsyncError", &lib->commGetAsyncError) &&
         bind(h, "ncclCommCount", &lib->commCount) &&
         bind(h, "ncclCommUserRank", &lib->commUserRank) &&
         bind(h, "ncclCommCuDevice", &lib->commCuDevice) &&
         bind(h, "ncclAllReduce", &lib->allReduce) &&
         bind(h, "ncclGroupStart", &lib->groupStart) &&
         bind(h, "ncclGroupEnd", &lib->groupEnd);
}

// NOTE [shim recursion]
// In a process where libtpar_nccl.so stands in for NCCL (LD_PRELOAD, or an engine's
// VLLM_NCCL_SO_PATH / SGLANG_NCCL_SO_PATH), opening "libnccl.so.2" returns the shim (the
// dynamic loader matches its soname), and so does a path to it. The shim's ncclAllReduce may
// hand a call to tpar, which may route it to NCCL: bound to the shim, that call would come back
// into the shim. So a library that exports tparShimRealNccl is asked for the real NCCL it
// forwards to (which is never the shim itself), and that library is bound instead.
// nccl_shim/tests (ShimChild.CoreRoutesToTheRealNccl) keeps a routed call from re-entering it.
// Returns false, with the reason in `tried`, for a shim that found no real NCCL.
bool resolveShim(void** handle, std::string* path, std::string* tried) {
  using RealNccl = void* (*)(const char**);
  auto real = reinterpret_cast<RealNccl>(dlsym(*handle, "tparShimRealNccl"));
  if (real == nullptr) return true;
  const char* text = nullptr;
  void* real_handle = real(&text);
  const std::string shim = *path;
  dlclose(*handle);
  if (real_handle == nullptr || text == nullptr) {
    *tried += " " + shim + " (libtpar_nccl.so, without a real NCCL: " +
              (text != nullptr ? text : "?") + ")";
    return false;
  }
  // A reference of our own: the shim keeps its, whatever becomes of ours.
  void* own = dlopen(text, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (own != real_handle) {
    if (own != nullptr) dlclose(own);
    *tried += " " + shim + " (libtpar_nccl.so: its NCCL " + text + " is not loaded)";
    return false;
  }
  *handle = own;
  *path = text;
  return true;
}

const char* ncclText(const NcclLib* lib, int rc) {
  const char* s = lib->getErrorString(rc);
  return s != nullptr ? s : "unknown NCCL error";
}

}  // namespace

std::string ncclVersionString(int code) {
  if (code <= 0) return "none";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

const NcclLib* loadNccl(std::string* why) {
  static std::once_flag once;
  static NcclLib lib;
  static bool ok = false;
  static std::string error;
  std::call_once(once, [] {
    const Env* env = nullptr;
    const std::string saved = lastError();
    if (processEnv(&env) != tparSuccess) {
      error = "cannot read the environment: " + lastError();
      setError(tparSuccess, "%s", saved.c_str());
      return;
    }
    std::string tried;
    for (const std::string& path : candidates(env->nccl_library)) {
      // NOTE [user files]: dlopen of a FIFO waits for a writer, forever. A missing file is left
      // to dlopen, whose message says so.
      if (path.find('/') != std::string::npos) {
        const std::string before = lastError();
        const bool refused = checkUserFile(path, "NCCL library") == tparInvalidArgument;
        setError(tparSuccess, "%s", before.c_str());
        if (refused) {
          tried += " " + path + " (not a regular file)";
          continue;
        }
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        tried += " " + path;
        continue;
      }
      std::string loaded = path;
      if (!resolveShim(&h, &loaded, &tried)) continue;
      NcclLib found;
      if (!bindAll(h, &found)) {
        tried += " " + loaded + " (symbols missing)";
        dlclose(h);
        continue;
      }
      found.getVersion(&found.version);
      found.path = loaded;
      lib = found;
      ok = true;
      return;
    }
    error = env->nccl_library.empty()
                ? "no loadable NCCL (tried" + tried + "); set TPAR_NCCL_LIBRARY to its path"
                : "TPAR_NCCL_LIBRARY=" + env->nccl_library + " does not load as NCCL (" +
                      (tried.empty() ? std::string("?") : tried.substr(1)) + ")";
  });
  if (!ok) {
    if (why != nullptr) *why = error;
    return nullptr;
  }
  return &lib;
}

int ncclDataTypeOf(tparDataType_t dtype) {
  switch (dtype) {
    case tparFloat32: return kNcclFloat32;
    case tparFloat16: return kNcclFloat16;
    case tparBfloat16: return kNcclBfloat16;
    default: return -1;
  }
}

int ncclRedOpOf(tparRedOp_t op) {
  switch (op) {
    case tparSum: return kNcclSum;
    case tparMax: return kNcclMax;
    case tparMin: return kNcclMin;
    default: return -1;
  }
}

tparResult_t resultOfNccl(int nccl_result) {
  if (nccl_result == kNcclSuccess) return tparSuccess;
  if (nccl_result >= 1 && nccl_result <= 7) return static_cast<tparResult_t>(nccl_result);
  return tparInternalError;
}

tparResult_t attachNcclComm(tparComm* comm, void* nccl_comm) {
  if (nccl_comm == nullptr) {
    comm->nccl.comm = nullptr;
    comm->tuner_ctx.nccl = false;
    refreshCallLimits(comm);  // NOTE [fused limits cached]
    return tparSuccess;
  }
  std::string why;
  const NcclLib* lib = loadNccl(&why);
  if (lib == nullptr) {
    return setError(tparInvalidUsage, "ncclComm given, but NCCL cannot be loaded: %s",
                    why.c_str());
  }
  NcclComm nc = static_cast<NcclComm>(nccl_comm);
  // NCCL checks the handle's magic words: a pointer that is no communicator fails here
  // instead of later inside a collective.
  int async = 0;
  int rc = lib->commGetAsyncError(nc, &async);
  if (rc != kNcclSuccess) {
    return setError(tparInvalidArgument,
                    "ncclComm is not a usable NCCL communicator of %s: ncclCommGetAsyncError "
                    "says %s",
                    lib->path.c_str(), ncclText(lib, rc));
  }
  if (async == kNcclInProgress) {
    return setError(tparInvalidArgument,
                    "ncclComm is still initializing (non-blocking): attach it once "
                    "ncclCommGetAsyncError reports ncclSuccess");
  }
  if (async != kNcclSuccess) {
    return setError(tparInvalidArgument, "ncclComm has failed already: %s",
                    ncclText(lib, async));
  }
  int count = 0, rank = 0, device = 0;
  rc = lib->commCount(nc, &count);
  if (rc == kNcclSuccess) rc = lib->commUserRank(nc, &rank);
  if (rc == kNcclSuccess) rc = lib->commCuDevice(nc, &device);
  if (rc != kNcclSuccess) {
    return setError(tparInvalidArgument, "ncclComm cannot be queried: %s", ncclText(lib, rc));
  }
  if (count != comm->nranks) {
    return setError(tparInvalidArgument,
                    "ncclComm has %d ranks; the tpar communicator has %d (they must be the same "
                    "ranks in the same order)",
                    count, comm->nranks);
  }
  if (rank != comm->rank) {
    return setError(tparInvalidArgument,
                    "ncclComm is rank %d; the tpar communicator is rank %d (they must be the "
                    "same ranks in the same order)",
                    rank, comm->rank);
  }
  if (device != comm->device) {
    return setError(tparInvalidArgument,
                    "ncclComm runs on CUDA device %d; the tpar communicator on device %d",
                    device, comm->device);
  }
  comm->nccl.lib = lib;
  comm->nccl.comm = nc;
  comm->tuner_ctx.nccl = true;
  refreshCallLimits(comm);  // NOTE [fused limits cached]
  TPAR_INFO(kLogNccl, "rank %d: NCCL %s (%s) attached", comm->rank,
            ncclVersionString(lib->version).c_str(), lib->path.c_str());
  return tparSuccess;
}

tparResult_t ncclRouteAllReduce(tparComm* comm, const void* send, void* recv, size_t count,
                                tparDataType_t dtype, tparRedOp_t op, cudaStream_t stream) {
  if (comm->nccl.comm == nullptr) {
    return setError(tparInvalidUsage,
                    "the algorithm is forced to nccl (TPAR_ALGO or config->algorithm) but no "
                    "NCCL communicator is attached: call tparCommSetNcclComm first");
  }
  const NcclLib* lib = comm->nccl.lib;
  int prev = -1;
  TPAR_CUDA_TRY(cudaGetDevice(&prev));
  if (prev != comm->device) TPAR_CUDA_TRY(cudaSetDevice(comm->device));
  const int rc = lib->allReduce(send, recv, count, ncclDataTypeOf(dtype), ncclRedOpOf(op),
                                comm->nccl.comm, stream);
  if (prev != comm->device) cudaSetDevice(prev);
  // A non-blocking NCCL communicator may still be enqueueing; its errors surface through
  // ncclCommGetAsyncError, as NCCL documents.
  if (rc != kNcclSuccess && rc != kNcclInProgress) {
    return setError(resultOfNccl(rc), "ncclAllReduce of %zu elements failed: %s", count,
                    ncclText(lib, rc));
  }
  ++comm->nccl.calls;
  return tparSuccess;
}

bool wantsNccl(const tparComm* comm) {
  if (comm->cfg.forced_algo != tparAlgoAuto) return comm->cfg.forced_algo == tparAlgoNccl;
  if (!comm->has_tuning) return false;
  for (const TuningEntry& e : comm->tuning.entries)
    if (e.plan.nccl) return true;
  return false;
}

}  // namespace tpar
