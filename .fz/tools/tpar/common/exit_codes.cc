#include "tools/tpar/common/exit_codes.h"

#include <dlfcn.h>

#include <cuda_runtime_api.h>

namespace tpar_cli {

const std::vector<ExitCodeInfo>& exitCodes() {
  static const std::vector<ExitCodeInfo> kCodes = {
      {kExitOk, "ok", "done; every check passed"},
      {kExitCheckFailed, "check failed", "a result was wrong (wrong elements, failed self-test)"},
      {kExitUsage, "usage", "bad option, argument, output path or TPAR_* variable; nothing ran"},
      {kExitNoGpu, "no GPU", "no NVIDIA driver or no usable CUDA GPU; nothing to run on"},
      {kExitRunError, "run error",
       "a CUDA, NCCL or tpar call failed, a wait timed out, or output could not be written"},
  };
  return kCodes;
}

std::string exitCodeHelp() {
  std::string s = "Exit status:";
  for (const ExitCodeInfo& e : exitCodes())
    s += "\n  " + std::to_string(e.code) + "  " + e.name + ": " + e.meaning;
  return s;
}

std::string whyNoGpu(int* gpu_count, const char* driver_library) {
  if (gpu_count) *gpu_count = 0;
  // Without the driver's library the runtime says "CUDA driver version is insufficient for
  // CUDA runtime version", which sends users to update a driver they do not have.
  void* libcuda = dlopen(driver_library, RTLD_NOW | RTLD_NOLOAD);
  if (libcuda == nullptr) libcuda = dlopen(driver_library, RTLD_NOW | RTLD_LOCAL);
  if (libcuda == nullptr) {
    const char* err = dlerror();  // names the library and why
    return std::string("no NVIDIA driver found (") +
           (err ? err : std::string(driver_library) + ": cannot be loaded") + ")";
  }
  dlclose(libcuda);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorInsufficientDriver) {
      int driver = 0, runtime = 0;
      cudaDriverGetVersion(&driver);
      cudaRuntimeGetVersion(&runtime);
      if (driver == 0) return "no NVIDIA driver found (the CUDA driver reports no version)";
      return "the NVIDIA driver supports CUDA " + std::to_string(driver / 1000) + "." +
             std::to_string(driver % 1000 / 10) + ", this build of tpar needs CUDA " +
             std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10) +
             " or newer: update the driver";
    }
    if (e == cudaErrorNoDevice) return "no CUDA GPU visible (driver loaded; check CUDA_VISIBLE_DEVICES)";
    return std::string("CUDA cannot start: ") + cudaGetErrorString(e);
  }
  if (n == 0) return "no CUDA GPU visible (driver loaded; check CUDA_VISIBLE_DEVICES)";
  if (gpu_count) *gpu_count = n;
  return "";
}

}  // namespace tpar_cli
