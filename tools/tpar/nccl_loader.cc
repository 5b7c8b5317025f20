#include "tools/tpar/nccl_loader.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace tpar_cli {
namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("TPAR_NCCL_LIBRARY")) out.push_back(env);
  out.push_back("libnccl.so.2");
  out.push_back("libnccl.so");
  const char* patterns[] = {
      "/usr/local/cuda/lib64/libnccl.so*",
      "/usr/lib/x86_64-linux-gnu/libnccl.so*",
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
    std::string tried;
    for (const std::string& path : candidates()) {
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        tried += " " + path;
        continue;
      }
      bool all = bind(h, "ncclGetVersion", &lib.getVersion) &&
                 bind(h, "ncclGetErrorString", &lib.getErrorString) &&
                 bind(h, "ncclGetUniqueId", &lib.getUniqueId) &&
                 bind(h, "ncclCommInitAll", &lib.commInitAll) &&
                 bind(h, "ncclCommInitRank", &lib.commInitRank) &&
                 bind(h, "ncclCommDestroy", &lib.commDestroy) &&
                 bind(h, "ncclCommGetAsyncError", &lib.commGetAsyncError) &&
                 bind(h, "ncclAllReduce", &lib.allReduce) &&
                 bind(h, "ncclGroupStart", &lib.groupStart) &&
                 bind(h, "ncclGroupEnd", &lib.groupEnd);
      if (!all) {
        tried += " " + path + "(symbols missing)";
        dlclose(h);
        continue;
      }
      lib.getVersion(&lib.version);
      lib.path = path;
      ok = true;
      return;
    }
    error = "no loadable NCCL (tried" + tried + "); set TPAR_NCCL_LIBRARY to its path";
  });
  if (!ok) {
    if (why) *why = error;
    return nullptr;
  }
  return &lib;
}

}  // namespace tpar_cli
