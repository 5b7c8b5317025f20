// The real NCCL behind libtpar_nccl.so: where it is looked for, how it is loaded (never the
// shim itself), and its functions by row of nccl_api.def.
#ifndef TPAR_NCCL_SHIM_REAL_NCCL_H_
#define TPAR_NCCL_SHIM_REAL_NCCL_H_

#include <string>
#include <vector>

#include "nccl_api_gates.h"

namespace tpar {
namespace shim {

// One index per row of nccl_api.def.
enum class Api : int {
#define TPAR_NCCL_FORWARD(ret, name, params, args) k_##name,
#define TPAR_NCCL_OWN(ret, name, params, args) k_##name,
#include "nccl_api.def"
#undef TPAR_NCCL_FORWARD
#undef TPAR_NCCL_OWN
  kCount
};
constexpr int kApiCount = static_cast<int>(Api::kCount);

// The row's function name ("ncclAllReduce").
const char* apiName(Api api);

struct Candidate {
  std::string path;  // a file, or a bare name for the dynamic loader's own search
  std::string how;   // where it came from, for the log and the error text
};

// Where the real NCCL is looked for, in order (NOTE [finding NCCL]). `configured` is
// TPAR_NCCL_LIBRARY; `loaded` the files of the objects this process has loaded; `loader_dirs`
// the dynamic loader's search path (LD_LIBRARY_PATH first); `system_dirs` the usual library
// directories and those of CUDA installations. Pure: the tests give it made-up inputs.
std::vector<Candidate> ncclCandidates(const std::string& configured,
                                      const std::vector<std::string>& loaded,
                                      const std::vector<std::string>& loader_dirs,
                                      const std::vector<std::string>& system_dirs);

// NOTE [unknown NCCL functions]
// The shim exports the functions of the NCCL it was built for; a newer real NCCL may export more.
// A program that looks one of those up in the shim (vLLM's pynccl wrapper does so with ctypes, and
// switches pynccl off when one is missing) would then run on a half-loaded library. So the shim
// reads the real NCCL's exports when it loads it: NCCL's API is every exported function nccl<X>
// whose profiling alias pnccl<X> is exported too (NCCL's other exported symbols are internal and
// have no alias). An API function without a row in nccl_api.def stops the process with a message
// naming it, unless TPAR_SHIM_ALLOW_UNKNOWN_NCCL=1 (then a warning). This happens when the shim
// itself is loaded if the process already holds an NCCL (an engine opening the shim through
// VLLM_NCCL_SO_PATH after PyTorch loaded its own), else at the first call that needs NCCL.

// The defined, exported functions of the ELF shared object at `path` (its dynamic symbol
// table). False, with `error` set, when the file cannot be read as one.
bool exportedFunctions(const std::string& path, std::vector<std::string>* out, std::string* error);

// NCCL's API among `exported`: every nccl<X> with pnccl<X> also there, sorted. Pure.
std::vector<std::string> ncclApiOf(const std::vector<std::string>& exported);

// The names of `api` that no row of nccl_api.def has, sorted. Pure.
std::vector<std::string> unknownToShim(const std::vector<std::string>& api);

struct RealNccl {
  void* handle = nullptr;  // null: none was found (`error` says why)
  std::string path;        // the file loaded
  std::string how;         // Candidate::how of it
  int version = 0;         // ncclGetVersion's answer
  std::string error;
  std::vector<std::string> unknown;  // its API functions the shim has no row for (run anyway)
  void* fns[kApiCount] = {};  // null where the library lacks the row's function
};

// Loaded on first use, once per process; logged at TPAR_DEBUG=info (or a warning when none).
const RealNccl& realNccl();

// The real function of a row, or null (no NCCL, or this NCCL lacks it).
inline void* realFunction(Api api) { return realNccl().fns[static_cast<int>(api)]; }

// The real `name`, typed as nccl.h declares it.
#define TPAR_REAL(name) \
  reinterpret_cast<decltype(&::name)>(::tpar::shim::realFunction(::tpar::shim::Api::k_##name))

}  // namespace shim
}  // namespace tpar

#endif  // TPAR_NCCL_SHIM_REAL_NCCL_H_
